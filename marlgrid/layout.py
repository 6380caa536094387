"""Reset-time layout building: what an environment's ``generate`` writes the world with.

Clutter that must not cut the map into pieces is placed by rejection sampling (uniform random
cells, retried until connected) within a budget of about :data:`REJECTION_CELLS` cells of work,
then, if every try failed, constructively by :meth:`Layout.scatter_connected`: random leaves of a
random spanning tree of the open cells become walls, so the rest stays connected by construction.
Both run in time roughly linear in the map area; both draw only from the env's generator, so a
seed gives one layout.
"""

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

#: Cells of rejection-sampling work (tries x map area) spent before constructive placement:
#: 200 tries up to about 44x44 maps, fewer on larger ones (where random clutter is almost never
#: connected), at least one.
REJECTION_CELLS = 400_000
MAX_TRIES = 200


@njit(cache=True, inline="always")
def _is_open(t):
    """Cells a walker may cross: overlappable ones and doors, goal-cycle tiles excluded."""
    return t != CYCLE_TILE and (CAN_OVERLAP[t] or t == DOOR)


@njit(cache=True)
def _heap_push(heap, size, keys, item):
    i = size
    heap[i] = item
    while i > 0:
        parent = (i - 1) // 2
        if keys[heap[parent]] <= keys[heap[i]]:
            break
        heap[parent], heap[i] = heap[i], heap[parent]
        i = parent
    return size + 1


@njit(cache=True)
def _heap_pop(heap, size, keys):
    top = heap[0]
    size -= 1
    heap[0] = heap[size]
    i = 0
    while True:
        left, smallest = 2 * i + 1, i
        if left < size and keys[heap[left]] < keys[heap[smallest]]:
            smallest = left
        if left + 1 < size and keys[heap[left + 1]] < keys[heap[smallest]]:
            smallest = left + 1
        if smallest == i:
            break
        heap[smallest], heap[i] = heap[i], heap[smallest]
        i = smallest
    return top, size


@njit(cache=True)
def _find(parent, i):
    while parent[i] != i:
        parent[i] = parent[parent[i]]
        i = parent[i]
    return i


@njit(cache=True)
def _prune_spanning_tree(
    grid, removable, count, code, n_tiles, tile_code, edge_keys, cell_keys, out, tiles_out
):
    """Write ``code`` on ``count`` removable cells, then ``tile_code`` on ``n_tiles`` more, keeping
    the open cells connected and every new tile touching them.

    Builds a random spanning tree of the open cells (Kruskal on random edge keys) and repeatedly
    removes the removable leaf with the smallest cell key; removing a leaf never disconnects the
    rest. A tile's tree neighbour is kept open from then on. Chosen cells go to ``out`` and
    ``tiles_out`` in order. Returns ``(walls, tiles)`` placed (fewer than asked when no removable
    leaf is left), or ``(-1, 0)`` when the open cells are not connected to begin with.
    """
    w, h = grid.shape[0], grid.shape[1]
    index = np.full((w, h), -1, dtype=np.int64)
    cx = np.empty(w * h, dtype=np.int64)
    cy = np.empty(w * h, dtype=np.int64)
    n = 0
    for x in range(w):
        for y in range(h):
            if _is_open(grid[x, y, 0]):
                index[x, y] = n
                cx[n], cy[n] = x, y
                n += 1
    eu = np.empty(2 * n, dtype=np.int64)
    ev = np.empty(2 * n, dtype=np.int64)
    ek = np.empty(2 * n)
    m = 0
    for i in range(n):
        x, y = cx[i], cy[i]
        if x + 1 < w and index[x + 1, y] >= 0:
            eu[m], ev[m], ek[m] = i, index[x + 1, y], edge_keys[x, y, 0]
            m += 1
        if y + 1 < h and index[x, y + 1] >= 0:
            eu[m], ev[m], ek[m] = i, index[x, y + 1], edge_keys[x, y, 1]
            m += 1
    parent = np.arange(n)
    adj = np.full((n, 4), -1, dtype=np.int64)
    deg = np.zeros(n, dtype=np.int64)
    components = n
    for e in np.argsort(ek[:m]):
        a, b = _find(parent, eu[e]), _find(parent, ev[e])
        if a == b:
            continue
        parent[a] = b
        u, v = eu[e], ev[e]
        adj[u, deg[u]] = v
        deg[u] += 1
        adj[v, deg[v]] = u
        deg[v] += 1
        components -= 1
    if components > 1:
        return -1, 0
    keys = np.empty(n)
    can_go = np.zeros(n, dtype=np.bool_)
    for i in range(n):
        keys[i] = cell_keys[cx[i], cy[i]]
        can_go[i] = removable[cx[i], cy[i]]
    heap = np.empty(n, dtype=np.int64)
    queued = np.zeros(n, dtype=np.bool_)
    removed = np.zeros(n, dtype=np.bool_)
    size = 0
    for i in range(n):
        if can_go[i] and deg[i] <= 1:
            size = _heap_push(heap, size, keys, i)
            queued[i] = True
    n_open = n
    walls, tiles = 0, 0
    while (walls < count or tiles < n_tiles) and size > 0:
        i, size = _heap_pop(heap, size, keys)
        if not can_go[i] or n_open == 1 or (walls == count and deg[i] != 1):
            continue  # pinned next to a tile, the last open cell, or a tile without a neighbour
        c = code if walls < count else tile_code
        grid[cx[i], cy[i], 0] = c[0]
        grid[cx[i], cy[i], 1] = c[1]
        grid[cx[i], cy[i], 2] = c[2]
        if walls < count:
            out[walls, 0], out[walls, 1] = cx[i], cy[i]
            walls += 1
        else:
            tiles_out[tiles, 0], tiles_out[tiles, 1] = cx[i], cy[i]
            tiles += 1
        removed[i] = True
        n_open -= 1
        for j in adj[i]:
            if j < 0 or removed[j]:
                continue
            deg[j] -= 1
            if c[0] == tile_code[0] and walls == count:
                can_go[j] = False  # the tile's way in stays open
            elif can_go[j] and deg[j] <= 1 and not queued[j]:
                size = _heap_push(heap, size, keys, j)
                queued[j] = True
    return walls, tiles


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

    def default_tries(self) -> int:
        """Rejection tries for this map: :data:`MAX_TRIES`, fewer on large maps (at least 1)."""
        return max(1, min(MAX_TRIES, REJECTION_CELLS // (self.width * self.height)))

    def retry_until_connected(
        self,
        build: Callable[[], None],
        what: str,
        tries: int | None = None,
        fallback: Callable[[], None] | None = None,
    ) -> None:
        """Run ``build`` (random placements) until :meth:`connected` holds, undoing failures.

        After ``tries`` failures (default :meth:`default_tries`) the layout is restored and
        ``fallback`` (a constructive placement, e.g. with :meth:`scatter_connected`) runs once.
        """
        tries = self.default_tries() if tries is None else tries
        saved = self.grid.copy(), self.contents.copy(), self.cycle_id.copy()
        for _ in range(tries):
            build()
            if self.connected():
                return
            self.grid[...], self.contents[...], self.cycle_id[...] = saved
        reason = f"in {tries} random tries"
        if fallback is not None:
            try:
                fallback()
            except ConfigError as err:
                reason = f"({err})"
            else:
                if self.connected():
                    return
                reason = "(constructive placement left it in pieces)"
            self.grid[...], self.contents[...], self.cycle_id[...] = saved
        raise ConfigError(
            f"could not place {what} on the {self.width}x{self.height} map without cutting it "
            f"into pieces {reason}; use less clutter"
        )

    def scatter_connected(
        self,
        obj: str,
        count: int,
        color: str | None = None,
        state: int = 0,
        region: tuple[int, int, int, int] | None = None,
        tiles: int = 0,
    ) -> np.ndarray:
        """Put ``count`` obstacles, then ``tiles`` goal-cycle tiles (ids ``0..tiles-1``), on random
        empty cells without cutting the map into pieces.

        The open cells (see :meth:`connected`) must be connected and every goal-cycle tile already
        there must touch them; afterwards they still are, by construction: the new cells are random
        leaves of a random spanning tree of the open cells, and one open neighbour of each tile is
        kept. This succeeds whenever the cells fit (short of pathological layouts) in time about
        linear in the map area. Returns the obstacles' ``(count, 2)`` cells.
        """
        obj_type = OBJECT_TO_IDX[obj]
        if CAN_OVERLAP[obj_type] or obj_type == DOOR:
            raise ValueError(f"scatter_connected places obstacles, not {obj!r}")
        x0, y0, x1, y1 = region if region is not None else (0, 0, self.width, self.height)
        types = self.grid[..., 0]
        removable = np.zeros((self.width, self.height), dtype=np.bool_)
        removable[x0:x1, y0:y1] = types[x0:x1, y0:y1] == EMPTY
        rng = self.rng
        for x, y in np.argwhere(types == CYCLE_TILE):
            near = [
                (x + dx, y + dy)
                for dx, dy in ((1, 0), (-1, 0), (0, 1), (0, -1))
                if 0 <= x + dx < self.width
                and 0 <= y + dy < self.height
                and _is_open(types[x + dx, y + dy])
            ]
            if not near:
                raise ConfigError(f"goal-cycle tile at ({x}, {y}) has no open neighbour")
            removable[near[int(rng.integers(len(near)))]] = False  # keeps the tile reachable
        color = color or DEFAULT_COLOR.get(obj, "red")
        code = np.array((obj_type, COLOR_TO_IDX[color], state), dtype=np.uint8)
        tile_code = np.array((CYCLE_TILE, COLOR_TO_IDX[DEFAULT_COLOR["cycle_tile"]], 0), np.uint8)
        out = np.empty((count, 2), dtype=np.int64)
        tiles_out = np.empty((tiles, 2), dtype=np.int64)
        edge_keys = rng.random((self.width, self.height, 2))
        cell_keys = rng.random((self.width, self.height))
        walls, placed_tiles = _prune_spanning_tree(
            self.grid,
            removable,
            count,
            code,
            tiles,
            tile_code,
            edge_keys,
            cell_keys,
            out,
            tiles_out,
        )
        if walls < 0:
            raise ConfigError(
                f"cannot scatter {obj}s: the open cells of the {self.width}x{self.height} map "
                "are already in pieces"
            )
        if walls < count or placed_tiles < tiles:
            raise ConfigError(
                f"only {walls} of {count} {obj}(s) and {placed_tiles} of {tiles} goal-cycle "
                f"tile(s) fit on the {self.width}x{self.height} map without cutting it into pieces"
            )
        for tile_id, (x, y) in enumerate(tiles_out):
            self.cycle_id[x, y] = tile_id
        return out

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
