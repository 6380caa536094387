"""Full-map frames: the whole map, each agent's field of view, and a column of the agents' views.

``render_frame(env)`` returns a fresh ``(H, W, 3)`` uint8 picture. Everything is drawn from the tile
atlas of :mod:`marlgrid.core.atlas`, the one that RGB observations use: the map is one gather of
tiles by cell code, fields of view are tinted tile by tile, agents are stamped with the atlas's
antialiased triangle, and each agent's own view is drawn by the same ``to_rgb`` kernel as its RGB
observation. The static parts (background, labels) and the map's tiles are cached between frames.

Options (keyword arguments of :func:`render_frame`, else attributes of the env, else defaults):

* ``tile_size`` (env attribute ``render_tile_size``, default 32): pixels per map cell.
* ``agent_views`` (``render_agent_views``, default True): draw the column of agent views.
* ``highlight`` (``render_highlight``, default True): tint each agent's field of view in its color.

Colors: on the map an agent is drawn in its exact color; for ``color="prestige"`` that is
``atlas.prestige_rgb(p, scale)`` (continuous). In the agent views, agents appear as the agents
themselves observe them, i.e. with the quantized prestige palette of their symbolic encoding.

Frame size (``ts`` tile size, map ``w x h`` cells, ``K`` agents, ``v`` the largest view size)::

    pad     = max(2, ts // 8)
    label_h = 5 * max(1, ts // 16) + 4          # one line of the 3x5 pixel font, scaled
    without agent views:  H = h * ts,  W = w * ts
    with agent views, in a grid of ``cols`` columns and ``rows = ceil(K / cols)`` rows of slots,
    each slot a label strip over a ``v * s`` pixel square (``s`` pixels per view cell):
        H = max(h * ts, rows * (label_h + v * s) + (rows + 1) * pad)
        W = w * ts + cols * (v * s + pad) + pad

``cols`` and ``s``: for ``cols = 1, 2, ..., K``, ``s(cols) = min(ts, fit)`` where
``fit = (h * ts - (rows + 1) * pad - rows * label_h) // (rows * v)`` is the largest cell size whose
column is no taller than the map. The first ``cols`` with ``s(cols) >= min(ts, 8)`` is used; when
none reaches it, the ``cols`` with the largest ``s`` (the fewest columns on ties) and
``s = max(1, s)``. :func:`frame_layout` computes it; for example goal cycle 13x13 at ``ts = 32``
gives ``416 x 648`` for 1 agent, ``416 x 543`` for 3 and ``416 x 596`` for 8 (``H x W``).
"""

from __future__ import annotations

import math
import weakref
from dataclasses import dataclass
from typing import Any

import numpy as np
from numba import njit

from marlgrid.constants import AGENT, COLOR_TO_IDX, EMPTY
from marlgrid.core import kernels as K
from marlgrid.core.atlas import Atlas, get_atlas, prestige_rgb
from marlgrid.core.engine import Engine

DEFAULT_TILE_SIZE = 32
BACKGROUND = (24, 24, 28)
TEXT_RGB = (235, 235, 235)
OUT_OF_PLAY_RGB = (70, 70, 70)
#: Weight (out of 256) of the agents' color in the field-of-view tint:
#: ``new = (old * (256 - TINT_ALPHA) + round(rgb * TINT_ALPHA) + 128) >> 8`` per channel.
TINT_ALPHA = 80
#: Smallest view cell size the layout tries to keep before adding columns.
READABLE_CELL = 8

# -- a tiny 3x5 pixel font ----------------------------------------------------------------------

_GLYPH_ROWS: dict[str, str] = {
    "0": "### #.# #.# #.# ###",
    "1": ".#. ##. .#. .#. ###",
    "2": "### ..# ### #.. ###",
    "3": "### ..# .## ..# ###",
    "4": "#.# #.# ### ..# ..#",
    "5": "### #.. ### ..# ###",
    "6": "### #.. ### #.# ###",
    "7": "### ..# ..# .#. .#.",
    "8": "### #.# ### #.# ###",
    "9": "### #.# ### ..# ###",
    "a": ".#. #.# ### #.# #.#",
    "b": "##. #.# ##. #.# ##.",
    "c": ".## #.. #.. #.. .##",
    "d": "##. #.# #.# #.# ##.",
    "e": "### #.. ##. #.. ###",
    "f": "### #.. ##. #.. #..",
    "g": ".## #.. #.# #.# .##",
    "h": "#.# #.# ### #.# #.#",
    "i": "### .#. .#. .#. ###",
    "j": "..# ..# ..# #.# .#.",
    "k": "#.# #.# ##. #.# #.#",
    "l": "#.. #.. #.. #.. ###",
    "m": "#.# ### ### #.# #.#",
    "n": "##. #.# #.# #.# #.#",
    "o": ".#. #.# #.# #.# .#.",
    "p": "##. #.# ##. #.. #..",
    "q": ".#. #.# #.# ##. .##",
    "r": "##. #.# ##. #.# #.#",
    "s": ".## #.. .#. ..# ##.",
    "t": "### .#. .#. .#. .#.",
    "u": "#.# #.# #.# #.# ###",
    "v": "#.# #.# #.# #.# .#.",
    "w": "#.# #.# ### ### #.#",
    "x": "#.# #.# .#. #.# #.#",
    "y": "#.# #.# .#. .#. .#.",
    "z": "### ..# .#. #.. ###",
    " ": "... ... ... ... ...",
    ".": "... ... ... ... .#.",
    ",": "... ... ... .#. #..",
    ":": "... .#. ... .#. ...",
    "-": "... ... ### ... ...",
    "+": "... .#. ### .#. ...",
    "=": "... ### ... ### ...",
    "_": "... ... ... ... ###",
    "/": "..# ..# .#. #.. #..",
    "(": ".#. #.. #.. #.. .#.",
    ")": ".#. ..# ..# ..# .#.",
    ">": "#.. .#. ..# .#. #..",
    "<": "..# .#. #.. .#. ..#",
    "?": "### ..# .#. ... .#.",
    "!": ".#. .#. .#. ... .#.",
    "|": ".#. .#. .#. .#. .#.",
    "*": "#.# .#. ### .#. #.#",
    "%": "#.# ..# .#. #.. #.#",
    "'": ".#. .#. ... ... ...",
    '"': "#.# #.# ... ... ...",
    "#": "#.# ### #.# ### #.#",
}
GLYPHS: dict[str, np.ndarray] = {
    ch: np.array([[c == "#" for c in row] for row in rows.split()], dtype=np.bool_)
    for ch, rows in _GLYPH_ROWS.items()
}
GLYPH_W, GLYPH_H = 3, 5


def text_width(text: str, scale: int = 1) -> int:
    """Width in pixels of ``text`` in the 3x5 font (one blank column between characters)."""
    return max(0, len(text) * (GLYPH_W + 1) * scale - scale)


def draw_text(img: np.ndarray, x: int, y: int, text: str, rgb=TEXT_RGB, scale: int = 1) -> int:
    """Write ``text`` into ``img`` (rows, columns, 3) with its top-left at column ``x``, row ``y``.

    Upper case is drawn as lower case; unknown characters as ``?``. Text past the image edge is
    clipped. Returns the column after the last character.
    """
    h, w = img.shape[:2]
    color = np.asarray(rgb, dtype=np.uint8)
    for ch in text.lower():
        glyph = GLYPHS.get(ch, GLYPHS["?"])
        if scale > 1:
            glyph = glyph.repeat(scale, 0).repeat(scale, 1)
        gh, gw = glyph.shape
        y0, x0 = max(y, 0), max(x, 0)
        y1, x1 = min(y + gh, h), min(x + gw, w)
        if y1 > y0 and x1 > x0:
            region = img[y0:y1, x0:x1]
            region[glyph[y0 - y : y1 - y, x0 - x : x1 - x]] = color
        x += (GLYPH_W + 1) * scale
    return x


# -- layout ---------------------------------------------------------------------------------


@dataclass(frozen=True)
class FrameLayout:
    """Where everything goes in a frame; see the module docstring for the formula.

    Attributes:
        height, width: frame size in pixels.
        tile_size: pixels per map cell.
        map_h, map_w: size of the map in pixels (at the frame's top-left corner).
        cols, rows: grid of agent-view slots (0 when views are off).
        cell: pixels per view cell ``s``.
        view: cells per slot side (the largest view size).
        pad, label_h: gap between slots; height of the label strip above each view.
        font_scale: scale of the 3x5 font in labels.
        slots: ``(row, column)`` of the top-left pixel of each agent's slot (its label strip).
    """

    height: int
    width: int
    tile_size: int
    map_h: int
    map_w: int
    cols: int
    rows: int
    cell: int
    view: int
    pad: int
    label_h: int
    font_scale: int
    slots: tuple[tuple[int, int], ...]


def frame_layout(
    width: int,
    height: int,
    view_sizes: list[int],
    tile_size: int = DEFAULT_TILE_SIZE,
    agent_views: bool = True,
) -> FrameLayout:
    """The layout of a frame for a ``width x height`` map and agents with ``view_sizes``."""
    if tile_size < 1:
        raise ValueError(f"tile_size must be >= 1, got {tile_size}")
    ts = tile_size
    map_h, map_w = height * ts, width * ts
    pad = max(2, ts // 8)
    font_scale = max(1, ts // 16)
    label_h = 5 * font_scale + 4
    n = len(view_sizes)
    if not agent_views or n == 0:
        return FrameLayout(map_h, map_w, ts, map_h, map_w, 0, 0, 0, 0, pad, label_h, font_scale, ())
    v = max(view_sizes)
    target = min(ts, READABLE_CELL)
    best: tuple[int, int] | None = None  # (cell, cols)
    chosen: tuple[int, int] | None = None
    for cols in range(1, n + 1):
        rows = math.ceil(n / cols)
        fit = (map_h - (rows + 1) * pad - rows * label_h) // (rows * v)
        cell = min(ts, fit)
        if cell >= target:
            chosen = (cell, cols)
            break
        if best is None or cell > best[0]:
            best = (cell, cols)
    if chosen is None:
        assert best is not None
        chosen = (max(1, best[0]), best[1])
    cell, cols = chosen
    rows = math.ceil(n / cols)
    side = v * cell
    frame_h = max(map_h, rows * (label_h + side) + (rows + 1) * pad)
    frame_w = map_w + cols * (side + pad) + pad
    slots = tuple(
        (pad + (i // cols) * (label_h + side + pad), map_w + pad + (i % cols) * (side + pad))
        for i in range(n)
    )
    return FrameLayout(
        frame_h, frame_w, ts, map_h, map_w, cols, rows, cell, v, pad, label_h, font_scale, slots
    )


# -- the renderer ---------------------------------------------------------------------------


@njit(cache=True)
def _tint(img, total, count, ts, alpha):
    """Move each seen cell's pixels ``alpha / 256`` of the way to the mean color of its viewers.

    ``img`` is the map region ``(h * ts, w * ts, 3)``; ``total`` ``(w, h, 3)`` sums the viewers'
    colors and ``count`` ``(w, h)`` counts them.
    """
    w, h = count.shape
    keep = 256 - alpha
    target = np.zeros(3, dtype=np.int64)
    for x in range(w):
        for y in range(h):
            c = count[x, y]
            if c == 0:
                continue
            for ch in range(3):
                target[ch] = np.int64(total[x, y, ch] / c * alpha + 0.5) + 128
            for yy in range(y * ts, (y + 1) * ts):
                for xx in range(x * ts, (x + 1) * ts):
                    for ch in range(3):
                        img[yy, xx, ch] = (img[yy, xx, ch] * keep + target[ch]) >> 8


@njit(cache=True)
def _stamp(img, x, y, ts, coverage, rgb):
    """Draw an agent in cell ``(x, y)``: blend ``rgb`` in by ``coverage`` ``(ts, ts)`` in [0, 1]."""
    for yy in range(ts):
        for xx in range(ts):
            a = coverage[yy, xx]
            if a > 0.0:
                for ch in range(3):
                    p = img[y * ts + yy, x * ts + xx, ch]
                    img[y * ts + yy, x * ts + xx, ch] = np.uint8(p + (rgb[ch] - p) * a + 0.5)


class FrameRenderer:
    """Draws frames of env ``n`` of an engine, reusing its caches between calls.

    Use :func:`render_frame` unless you keep a renderer yourself. The renderer refers to the
    engine weakly (so that caching renderers per engine does not keep engines alive): keep the
    env that owns the engine.
    """

    def __init__(
        self,
        engine: Engine,
        tile_size: int = DEFAULT_TILE_SIZE,
        agent_views: bool = True,
        highlight: bool = True,
    ) -> None:
        self._engine_ref = weakref.ref(engine)
        self.highlight = bool(highlight)
        cfgs = engine.agents
        self.layout = frame_layout(
            engine.width, engine.height, [a.view_size for a in cfgs], tile_size, agent_views
        )
        ts = self.layout.tile_size
        self.atlas: Atlas = get_atlas(ts)
        tiles = self.atlas.tiles
        # Antialiased coverage of an agent's triangle per direction, from the atlas itself: the
        # red agent tile (pure red on black) against the empty tile (black with grid lines).
        red = tiles[AGENT, COLOR_TO_IDX["red"], :, :, :, 0].astype(np.float64)
        empty = tiles[EMPTY, 0, 0, :, :, 0].astype(np.float64)
        self._agent_alpha = np.clip((red - empty) / np.maximum(255.0 - empty, 1.0), 0.0, 1.0)
        self._fixed_rgb = [
            None if a.color == "prestige" else self.atlas.palette[COLOR_TO_IDX[a.color]]
            for a in cfgs
        ]
        self._grid_key: tuple[int, bytes] | None = None
        self._map: np.ndarray | None = None
        self._view_atlas: Atlas | None = None
        self._view_bufs: list[np.ndarray] = []
        if self.layout.cols:
            self._view_atlas = get_atlas(self.layout.cell)
            cell = self.layout.cell
            self._view_bufs = [
                np.zeros((1, a.view_size * cell, a.view_size * cell, 3), dtype=np.uint8)
                for a in cfgs
            ]
        self._background = self._draw_background()

    @property
    def engine(self) -> Engine:
        engine = self._engine_ref()
        if engine is None:
            raise ReferenceError("the engine of this renderer no longer exists")
        return engine

    # -- static parts ---------------------------------------------------------------------------

    def _label(self, k: int) -> tuple[str, int]:
        """The label text of agent ``k`` and its font scale, fitted to the slot width."""
        lay = self.layout
        room = lay.view * lay.cell - (5 * lay.font_scale + 2 * lay.font_scale)
        for text in (f"agent_{k}", f"a{k}", str(k)):
            for scale in sorted({lay.font_scale, 1}, reverse=True):
                if text_width(text, scale) <= room:
                    return text, scale
        return str(k), 1

    def _draw_background(self) -> np.ndarray:
        lay = self.layout
        img = np.empty((lay.height, lay.width, 3), dtype=np.uint8)
        img[:] = BACKGROUND
        self._swatches: list[tuple[int, int, int]] = []
        for k, (r, c) in enumerate(lay.slots):
            f = lay.font_scale
            sw = 5 * f
            top = r + (lay.label_h - sw) // 2
            self._swatches.append((top, c, sw))
            text, scale = self._label(k)
            draw_text(img, c + sw + 2 * f, r + (lay.label_h - 5 * scale) // 2, text, scale=scale)
        return img

    # -- per-frame parts ------------------------------------------------------------------------

    def agent_rgb(self, n: int, k: int) -> np.ndarray:
        """The exact color agent ``k`` of env ``n`` is drawn in on the map (uint8 RGB)."""
        fixed = self._fixed_rgb[k]
        if fixed is not None:
            return fixed
        cfg = self.engine.agents[k]
        return prestige_rgb(float(self.engine.prestige[n, k]), cfg.prestige_scale)

    def _map_tiles(self, n: int) -> np.ndarray:
        """The map without agents, ``(map_h, map_w, 3)``; redrawn only when the grid changed."""
        grid = self.engine.grid[n]
        key = (n, grid.tobytes())
        if key != self._grid_key or self._map is None:
            ts = self.layout.tile_size
            w, h = grid.shape[:2]
            cells = self.atlas.tiles[grid[..., 0], grid[..., 1], grid[..., 2]]  # (w, h, ts, ts, 3)
            self._map = np.ascontiguousarray(cells.transpose(1, 2, 0, 3, 4)).reshape(
                h * ts, w * ts, 3
            )
            self._grid_key = key
        return self._map

    def render(self, n: int = 0) -> np.ndarray:
        """A fresh frame of env ``n``."""
        engine, lay = self.engine, self.layout
        ts = lay.tile_size
        frame = self._background.copy()
        frame[: lay.map_h, : lay.map_w] = self._map_tiles(n)
        w, h = engine.width, engine.height
        img = frame[: lay.map_h, : lay.map_w]
        active = engine.status[n] == K.ACTIVE
        n_agents = len(engine.agents)
        rgbs = [self.agent_rgb(n, k) for k in range(n_agents)]
        if self.highlight and active.any():
            # One blend per cell, toward the mean color of the agents that see it.
            total = np.zeros((w, h, 3), dtype=np.float64)
            count = np.zeros((w, h), dtype=np.int64)
            for k in range(n_agents):
                if active[k]:
                    seen = engine.visible_cells(n, k)
                    total[seen] += rgbs[k]
                    count[seen] += 1
            _tint(img, total, count, ts, TINT_ALPHA)
        for k in range(n_agents - 1, -1, -1):  # the lowest index on top
            if active[k]:
                x, y = engine.pos[n, k]
                coverage = self._agent_alpha[engine.dirs[n, k]]
                _stamp(img, x, y, ts, coverage, rgbs[k].astype(np.float64))
        if lay.cols:
            self._draw_views(frame, n, active, rgbs)
        return frame

    def _draw_views(
        self, frame: np.ndarray, n: int, active: np.ndarray, rgbs: list[np.ndarray]
    ) -> None:
        engine, lay = self.engine, self.layout
        atlas = self._view_atlas
        assert atlas is not None
        colors_all = engine.update_colors()
        first = np.zeros(1, dtype=np.int64)
        sym, dirs, colors = engine.sym[n : n + 1], engine.dirs[n : n + 1], colors_all[n : n + 1]
        for k, cfg in enumerate(engine.agents):
            buf = self._view_bufs[k]
            v = cfg.view_size
            K.to_rgb(
                first,
                sym,
                k,
                v,
                v - 1 - cfg.view_offset,
                dirs,
                colors,
                atlas.tiles,
                atlas.agent_up_mask,
                atlas.palette,
                buf,
            )
            picture = buf[0]
            r, c = lay.slots[k]
            top = r + lay.label_h
            offset = (lay.view - v) * lay.cell // 2
            side = v * lay.cell
            frame[top + offset : top + offset + side, c + offset : c + offset + side] = picture
            sr, sc, sw = self._swatches[k]
            frame[sr : sr + sw, sc : sc + sw] = rgbs[k] if active[k] else OUT_OF_PLAY_RGB


_RENDERERS: weakref.WeakKeyDictionary[Any, dict[tuple, FrameRenderer]] = weakref.WeakKeyDictionary()


def engine_of(env: Any) -> Engine:
    """The engine behind a PettingZoo marlgrid env, a batched env, a wrapper or an engine."""
    for _ in range(8):
        if isinstance(env, Engine):
            return env
        inner = getattr(env, "engine", None)
        if isinstance(inner, Engine):
            return inner
        nxt = getattr(env, "env", None) or getattr(env, "unwrapped", None)
        if nxt is None or nxt is env:
            break
        env = nxt
    raise TypeError(f"cannot render {type(env).__name__}: not a marlgrid env")


def render_frame(
    env: Any,
    *,
    tile_size: int | None = None,
    agent_views: bool | None = None,
    highlight: bool | None = None,
    index: int = 0,
) -> np.ndarray:
    """A fresh ``(H, W, 3)`` uint8 frame of a marlgrid env (env ``index`` of a batch).

    ``env`` may be a PettingZoo marlgrid env, a :class:`marlgrid.vector.VectorEnv`, a wrapper
    around one, or an :class:`marlgrid.core.engine.Engine`. Options left as ``None`` come from the
    env's ``render_tile_size``, ``render_agent_views`` and ``render_highlight`` attributes, else
    the defaults (32, True, True). See the module docstring for the frame size.
    """
    engine = engine_of(env)
    if tile_size is None:
        tile_size = getattr(env, "render_tile_size", DEFAULT_TILE_SIZE)
    if agent_views is None:
        agent_views = getattr(env, "render_agent_views", True)
    if highlight is None:
        highlight = getattr(env, "render_highlight", True)
    if not 0 <= index < engine.num_envs:
        raise IndexError(f"env index {index} out of range for a batch of {engine.num_envs}")
    engine.require_started("render_frame()", index)
    key = (int(tile_size), bool(agent_views), bool(highlight))
    per_engine = _RENDERERS.setdefault(engine, {})
    renderer = per_engine.get(key)
    if renderer is None:
        renderer = per_engine[key] = FrameRenderer(engine, *key)
    return renderer.render(index)


def frame_shape(
    env: Any,
    *,
    tile_size: int | None = None,
    agent_views: bool | None = None,
) -> tuple[int, int, int]:
    """The ``(H, W, 3)`` shape of :func:`render_frame`'s frames for ``env``."""
    engine = engine_of(env)
    if tile_size is None:
        tile_size = getattr(env, "render_tile_size", DEFAULT_TILE_SIZE)
    if agent_views is None:
        agent_views = getattr(env, "render_agent_views", True)
    lay = frame_layout(
        engine.width, engine.height, [a.view_size for a in engine.agents], tile_size, agent_views
    )
    return lay.height, lay.width, 3
