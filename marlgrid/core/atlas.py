"""The tile atlas: every cell code drawn once per tile size, shared by RGB views and frames.

``tiles[type, color, state]`` is a ``(ts, ts, 3)`` uint8 picture. Shapes are drawn at three times
the tile size and averaged down, so small tiles stay legible. Agents' state is their direction
(0 east ... 3 north); the picture of an agent is a triangle pointing that way.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache

import numpy as np

from marlgrid.constants import (
    AGENT,
    BALL,
    BOX,
    COLORS_RGB,
    CYCLE_TILE,
    DOOR,
    DOOR_LOCKED,
    DOOR_OPEN,
    EMPTY,
    FLOOR,
    GOAL,
    IDX_TO_COLOR,
    KEY,
    LAVA,
    N_BASE_COLORS,
    N_COLORS,
    N_STATES,
    N_TYPES,
    PRESTIGE_LEVELS,
    UNSEEN,
    WALL,
)

SHADOW = (35, 25, 30)
GRID_LINE = (100, 100, 100)
LAVA_RGB = (255, 128, 0)
SUBDIV = 3


def build_palette() -> np.ndarray:
    """RGB of every color id: MiniGrid's six, then prestige levels from red to blue."""
    palette = np.zeros((N_COLORS, 3), dtype=np.uint8)
    for i in range(N_BASE_COLORS):
        palette[i] = COLORS_RGB[IDX_TO_COLOR[i]]
    red, blue = np.array(COLORS_RGB["red"], float), np.array(COLORS_RGB["blue"], float)
    for level in range(PRESTIGE_LEVELS):
        w = level / (PRESTIGE_LEVELS - 1)
        palette[N_BASE_COLORS + level] = np.round((1 - w) * red + w * blue)
    return palette


def prestige_rgb(prestige: float, scale: float) -> np.ndarray:
    """The exact (unquantized) drawn color ``lerp(red, blue, tanh(p / scale))``."""
    w = np.tanh(max(prestige, 0.0) / scale)
    red, blue = np.array(COLORS_RGB["red"], float), np.array(COLORS_RGB["blue"], float)
    return np.round((1 - w) * red + w * blue).astype(np.uint8)


class _Canvas:
    """A square picture with drawing in unit coordinates (x right, y down)."""

    def __init__(self, size: int, fill: tuple[int, int, int] = (0, 0, 0)) -> None:
        self.img = np.empty((size, size, 3), dtype=np.float64)
        self.img[:] = fill
        c = (np.arange(size) + 0.5) / size
        self.x, self.y = np.meshgrid(c, c)

    def fill(self, where: np.ndarray, rgb) -> None:
        self.img[where] = rgb

    def rect(self, x0, x1, y0, y1) -> np.ndarray:
        return (self.x >= x0) & (self.x <= x1) & (self.y >= y0) & (self.y <= y1)

    def circle(self, cx, cy, r) -> np.ndarray:
        return (self.x - cx) ** 2 + (self.y - cy) ** 2 <= r * r

    def triangle(self, a, b, c) -> np.ndarray:
        def side(p, q):
            return (self.x - q[0]) * (p[1] - q[1]) - (p[0] - q[0]) * (self.y - q[1])

        d1, d2, d3 = side(a, b), side(b, c), side(c, a)
        neg = (d1 < 0) | (d2 < 0) | (d3 < 0)
        pos = (d1 > 0) | (d2 > 0) | (d3 > 0)
        return ~(neg & pos)

    def line(self, x0, y0, x1, y1, r) -> np.ndarray:
        p = np.stack([self.x - x0, self.y - y0], -1)
        d = np.array([x1 - x0, y1 - y0])
        t = np.clip((p @ d) / (d @ d), 0, 1)
        closest = t[..., None] * d
        return np.linalg.norm(p - closest, axis=-1) <= r


def _agent_triangle(canvas: _Canvas, direction: int) -> np.ndarray:
    """Triangle pointing east, rotated to ``direction`` (quarter turns clockwise on screen)."""
    pts = np.array([(0.12, 0.19), (0.87, 0.50), (0.12, 0.81)])
    angle = direction * np.pi / 2
    rot = np.array([[np.cos(angle), -np.sin(angle)], [np.sin(angle), np.cos(angle)]])
    pts = (pts - 0.5) @ rot.T + 0.5
    return canvas.triangle(*pts)


def draw_tile(obj: int, color: int, state: int, size: int, palette: np.ndarray) -> np.ndarray:
    """Draw one cell code at ``size`` pixels (float RGB, before averaging)."""
    rgb = palette[color].astype(float)
    cv = _Canvas(size, SHADOW if obj == UNSEEN else (0, 0, 0))
    if obj == UNSEEN:
        return cv.img
    if obj in (WALL, GOAL):
        cv.fill(cv.rect(0, 1, 0, 1), rgb)
    elif obj == CYCLE_TILE:
        cv.fill(cv.rect(0, 1, 0, 1), rgb)
        cv.fill(cv.circle(0.5, 0.5, 0.18), rgb * 0.55)
    elif obj == FLOOR:
        cv.fill(cv.rect(0.031, 1, 0.031, 1), rgb / 2)
    elif obj == LAVA:
        cv.fill(cv.rect(0, 1, 0, 1), LAVA_RGB)
        for i in range(3):
            y = 0.3 + 0.2 * i
            for x0, x1, dy in (
                (0.1, 0.3, 0.03),
                (0.3, 0.5, -0.03),
                (0.5, 0.7, 0.03),
                (0.7, 0.9, -0.03),
            ):
                cv.fill(cv.line(x0, y - dy, x1, y + dy, 0.03), (0, 0, 0))
    elif obj == DOOR:
        if state == DOOR_OPEN:
            cv.fill(cv.rect(0.88, 1.0, 0.0, 1.0), rgb)
            cv.fill(cv.rect(0.92, 0.96, 0.04, 0.96), (0, 0, 0))
        elif state == DOOR_LOCKED:
            cv.fill(cv.rect(0, 1, 0, 1), rgb)
            cv.fill(cv.rect(0.06, 0.94, 0.06, 0.94), rgb * 0.45)
            cv.fill(cv.rect(0.52, 0.75, 0.50, 0.56), rgb)
        else:
            cv.fill(cv.rect(0, 1, 0, 1), rgb)
            cv.fill(cv.rect(0.04, 0.96, 0.04, 0.96), (0, 0, 0))
            cv.fill(cv.rect(0.08, 0.92, 0.08, 0.92), rgb)
            cv.fill(cv.rect(0.12, 0.88, 0.12, 0.88), (0, 0, 0))
            cv.fill(cv.circle(0.75, 0.5, 0.08), rgb)
    elif obj == KEY:
        cv.fill(cv.rect(0.50, 0.63, 0.31, 0.88), rgb)
        cv.fill(cv.rect(0.38, 0.50, 0.59, 0.66), rgb)
        cv.fill(cv.rect(0.38, 0.50, 0.81, 0.88), rgb)
        cv.fill(cv.circle(0.56, 0.28, 0.19), rgb)
        cv.fill(cv.circle(0.56, 0.28, 0.064), (0, 0, 0))
    elif obj == BALL:
        cv.fill(cv.circle(0.5, 0.5, 0.31), rgb)
    elif obj == BOX:
        cv.fill(cv.rect(0.12, 0.88, 0.12, 0.88), rgb)
        cv.fill(cv.rect(0.18, 0.82, 0.18, 0.82), (0, 0, 0))
        cv.fill(cv.rect(0.16, 0.84, 0.47, 0.53), rgb)
    elif obj == AGENT:
        cv.fill(_agent_triangle(cv, state), rgb)
    # Grid lines on the top and left edges, as in MiniGrid.
    cv.fill(cv.rect(0, 0.031, 0, 1), GRID_LINE)
    cv.fill(cv.rect(0, 1, 0, 0.031), GRID_LINE)
    return cv.img


def _downsample(img: np.ndarray, factor: int) -> np.ndarray:
    s = img.shape[0] // factor
    return img.reshape(s, factor, s, factor, 3).mean(axis=(1, 3))


@dataclass(frozen=True)
class Atlas:
    """Pictures of every cell code at one tile size."""

    tile_size: int
    tiles: np.ndarray  # (N_TYPES, N_COLORS, N_STATES, ts, ts, 3) uint8
    palette: np.ndarray  # (N_COLORS, 3) uint8
    agent_up_mask: np.ndarray  # (ts, ts) bool: pixels of an agent pointing up


STATEFUL = (DOOR, AGENT)


@lru_cache(maxsize=16)
def get_atlas(tile_size: int) -> Atlas:
    """The atlas for ``tile_size`` pixels per cell (built once, then cached)."""
    palette = build_palette()
    big = tile_size * SUBDIV
    tiles = np.zeros((N_TYPES, N_COLORS, N_STATES, tile_size, tile_size, 3), dtype=np.uint8)
    for obj in range(N_TYPES):
        colors = range(N_COLORS) if obj not in (UNSEEN, EMPTY, LAVA) else (0,)
        for color in colors:
            states = range(N_STATES) if obj in STATEFUL else (0,)
            for state in states:
                img = _downsample(draw_tile(obj, color, state, big, palette), SUBDIV)
                tiles[obj, color, state] = np.round(img).astype(np.uint8)
            if obj not in STATEFUL:
                tiles[obj, color, 1:] = tiles[obj, color, 0]
        if obj in (UNSEEN, EMPTY, LAVA):
            tiles[obj, 1:] = tiles[obj, 0]
    cv = _Canvas(big)
    up = _downsample(_agent_triangle(cv, 3)[..., None].repeat(3, -1).astype(float), SUBDIV)
    mask = up[..., 0] >= 0.5
    tiles.setflags(write=False)
    return Atlas(tile_size, tiles, palette, mask)
