"""Reset-time layout building: what an environment's ``generate`` writes the world with."""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
from numba import njit

from marlgrid.config import ConfigError
from marlgrid.constants import (
    CAN_OVERLAP,
    COLOR_TO_IDX,
    CYCLE_TILE,
    DOOR,
    EMPTY,
    OBJECT_TO_IDX,
    WALL,
)

#: Default color of each object type when none is given (MiniGrid's defaults).
DEFAULT_COLOR = {
    "wall": "grey",
    "floor": "blue",
    "goal": "green",
    "lava": "red",
    "cycle_tile": "yellow",
}


@njit(cache=True)
def _place_random(grid, code, count, x0, y0, x1, y1, keys):
    """Write ``code`` on the ``count`` empty cells of the region with the smallest ``keys``.

    Returns the chosen ``(count, 2)`` cells in key order, or fewer (nothing written) when the
    region has too few empty cells.
    """
    cells = np.empty(((x1 - x0) * (y1 - y0), 2), dtype=np.int64)
    vals = np.empty((x1 - x0) * (y1 - y0))
    m = 0
    for x in range(x0, x1):
        for y in range(y0, y1):
            if grid[x, y, 0] == EMPTY:
                cells[m, 0], cells[m, 1] = x, y
                vals[m] = keys[x, y]
                m += 1
    if m < count:
        return cells[:0]
    order = np.argsort(vals[:m])[:count]
    chosen = cells[order]
    for i in range(count):
        grid[chosen[i, 0], chosen[i, 1], 0] = code[0]
        grid[chosen[i, 0], chosen[i, 1], 1] = code[1]
        grid[chosen[i, 0], chosen[i, 1], 2] = code[2]
    return chosen


@njit(cache=True)
def _connected(types):
    """All walkable cells (goal-cycle tiles excluded) form one region touching every tile."""
    w, h = types.shape
    walk = np.zeros((w, h), dtype=np.bool_)
    n_walk, sx, sy = 0, -1, -1
    for x in range(w):
        for y in range(h):
            t = types[x, y]
            if t != CYCLE_TILE and (CAN_OVERLAP[t] or t == DOOR):
                walk[x, y] = True
                n_walk += 1
                if sx < 0:
                    sx, sy = x, y
    seen = np.zeros((w, h), dtype=np.bool_)
    if n_walk > 0:
        stack = np.empty((w * h, 2), dtype=np.int64)
        stack[0, 0], stack[0, 1] = sx, sy
        seen[sx, sy] = True
        top, reached = 1, 1
        while top > 0:
            top -= 1
            x, y = stack[top, 0], stack[top, 1]
            for dx, dy in ((1, 0), (-1, 0), (0, 1), (0, -1)):
                nx, ny = x + dx, y + dy
                if 0 <= nx < w and 0 <= ny < h and walk[nx, ny] and not seen[nx, ny]:
                    seen[nx, ny] = True
                    stack[top, 0], stack[top, 1] = nx, ny
                    top += 1
                    reached += 1
        if reached != n_walk:
            return False
    for x in range(w):
        for y in range(h):
            if types[x, y] == CYCLE_TILE:
                touching = False
                for dx, dy in ((1, 0), (-1, 0), (0, 1), (0, -1)):
                    nx, ny = x + dx, y + dy
                    if 0 <= nx < w and 0 <= ny < h and seen[nx, ny]:
                        touching = True
                if not touching:
                    return False
    return True


class Layout:
    """One env's world while it is generated: grid cells, box contents, tile ids, spawn cells.

    It starts empty (every cell ``EMPTY``, no tiles, spawning allowed everywhere).

    Coordinates are ``(x, y)`` with ``x`` the column; ``rng`` is the env's seeded generator.
    """

    def __init__(
        self,
        grid: np.ndarray,
        contents: np.ndarray,
        cycle_id: np.ndarray,
        spawn_ok: np.ndarray,
        rng: np.random.Generator,
    ) -> None:
        self.grid = grid
        self.contents = contents
        self.cycle_id = cycle_id
        self.spawn_ok = spawn_ok
        self.rng = rng
        self.width, self.height = grid.shape[:2]

    def put(self, x: int, y: int, obj: str, color: str | None = None, state: int = 0) -> None:
        """Set cell ``(x, y)`` to an object by name, e.g. ``put(3, 4, "door", "yellow", 2)``."""
        color = color or DEFAULT_COLOR.get(obj, "red")
        self.grid[x, y] = (OBJECT_TO_IDX[obj], COLOR_TO_IDX[color], state)

    def walls_border(self) -> None:
        """Walls around the edge of the map."""
        for cells in (self.grid[0], self.grid[-1], self.grid[:, 0], self.grid[:, -1]):
            cells[:] = (WALL, COLOR_TO_IDX["grey"], 0)

    def empty_cells(self, region: tuple[int, int, int, int] | None = None) -> np.ndarray:
        """``(n, 2)`` empty cells, inside ``region = (x0, y0, x1, y1)`` (ends excluded) if given."""
        free = self.grid[..., 0] == EMPTY
        if region is not None:
            x0, y0, x1, y1 = region
            inside = np.zeros_like(free)
            inside[x0:x1, y0:y1] = True
            free &= inside
        return np.argwhere(free)

    def place(
        self,
        obj: str,
        color: str | None = None,
        state: int = 0,
        count: int = 1,
        region: tuple[int, int, int, int] | None = None,
    ) -> np.ndarray:
        """Put ``count`` objects on distinct random empty cells; returns their cells."""
        x0, y0, x1, y1 = region if region is not None else (0, 0, self.width, self.height)
        color = color or DEFAULT_COLOR.get(obj, "red")
        code = np.array((OBJECT_TO_IDX[obj], COLOR_TO_IDX[color], state), dtype=np.uint8)
        keys = self.rng.random((self.width, self.height))
        chosen = _place_random(self.grid, code, count, x0, y0, x1, y1, keys)
        if len(chosen) < count:
            free = len(self.empty_cells(region))
            raise ConfigError(
                f"cannot place {count} {obj}(s): only {free} empty cells are left "
                f"on the {self.width}x{self.height} map"
            )
        return chosen

    def connected(self) -> bool:
        """Whether all open cells form one region that touches every goal-cycle tile.

        Goal-cycle tiles count as obstacles for the region, so a walker can reach any tile without
        stepping on another one. Doors count as open.
        """
        return bool(_connected(self.grid[..., 0]))

    def retry_until_connected(self, build: Callable[[], None], what: str, tries: int = 200) -> None:
        """Run ``build`` (random placements) until :meth:`connected` holds, undoing failures."""
        saved = self.grid.copy(), self.contents.copy(), self.cycle_id.copy()
        for _ in range(tries):
            build()
            if self.connected():
                return
            self.grid[...], self.contents[...], self.cycle_id[...] = saved
        raise ConfigError(
            f"could not place {what} on the {self.width}x{self.height} map without cutting it "
            f"into pieces in {tries} tries; use less clutter"
        )

    def cycle_tiles(self, count: int) -> np.ndarray:
        """Place goal-cycle tiles with ids ``0..count-1`` on random empty cells."""
        cells = self.place("cycle_tile", count=count)
        for tile_id, (x, y) in enumerate(cells):
            self.cycle_id[x, y] = tile_id
        return cells

    def restrict_spawn(self, region: tuple[int, int, int, int]) -> None:
        """Agents (re)spawn only inside ``region = (x0, y0, x1, y1)``."""
        x0, y0, x1, y1 = region
        self.spawn_ok[...] = False
        self.spawn_ok[x0:x1, y0:y1] = True
