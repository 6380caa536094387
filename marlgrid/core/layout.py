"""Reset-time layout building: what an environment's ``generate`` writes the world with.

Clutter that must not cut the map into pieces is placed by rejection sampling (uniform random
cells, retried until connected) within a budget of about :data:`REJECTION_CELLS` cells of work,
then, if every try failed, constructively by :meth:`Layout.scatter_connected`: random leaves of a
random spanning tree of the open cells become walls, so the rest stays connected by construction.
Both run in time roughly linear in the map area; both draw only from the env's generator, so a
seed gives one layout.

Structured maps are drawn with line, rectangle, room-grid and maze helpers
(:meth:`Layout.horizontal_wall`, :meth:`Layout.wall_rect`, :meth:`Layout.room_grid`,
:meth:`Layout.maze`); :meth:`Layout.spawn_far_from` keeps agents away from a goal by path length.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable
from typing import NamedTuple

import numpy as np
from numba import njit

from marlgrid.config import ConfigError, check_float, check_int
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

#: A rectangle of cells ``(x0, y0, x1, y1)``, ends excluded.
Region = tuple[int, int, int, int]


class RoomGrid(NamedTuple):
    """What :meth:`Layout.room_grid` built: each room's inside and each doorway cell."""

    rooms: list[Region]
    doorways: list[tuple[int, int]]


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


@njit(cache=True)
def _carve_maze(grid, x0, y0, nx, ny, edge_keys, extra_keys, extra_p):
    """Open a maze of ``nx x ny`` cells at ``(x0 + 1 + 2i, y0 + 1 + 2j)`` in walled ``grid``.

    Randomised Kruskal: the walls between neighbouring cells are taken in order of
    ``edge_keys[i, j, d]`` (``d`` 0 to the east, 1 to the south) and removed when they join two
    parts, which leaves a spanning tree (a perfect maze). Then every wall still standing between
    two cells is removed when its ``extra_keys`` value is below ``extra_p``. Returns the number of
    walls removed in all.
    """
    n = nx * ny
    eu = np.empty(2 * n, dtype=np.int64)
    ev = np.empty(2 * n, dtype=np.int64)
    ek = np.empty(2 * n)
    ed = np.empty(2 * n, dtype=np.int64)
    m = 0
    for j in range(ny):
        for i in range(nx):
            grid[x0 + 1 + 2 * i, y0 + 1 + 2 * j, 0] = EMPTY
            grid[x0 + 1 + 2 * i, y0 + 1 + 2 * j, 1] = 0
            grid[x0 + 1 + 2 * i, y0 + 1 + 2 * j, 2] = 0
            if i + 1 < nx:
                eu[m], ev[m], ek[m], ed[m] = j * nx + i, j * nx + i + 1, edge_keys[i, j, 0], 0
                m += 1
            if j + 1 < ny:
                eu[m], ev[m], ek[m], ed[m] = j * nx + i, (j + 1) * nx + i, edge_keys[i, j, 1], 1
                m += 1
    parent = np.arange(n)
    carved = np.zeros(m, dtype=np.bool_)
    opened = 0
    for e in np.argsort(ek[:m]):
        a, b = _find(parent, eu[e]), _find(parent, ev[e])
        if a != b:
            parent[a] = b
            carved[e] = True
    for e in range(m):
        i, j = eu[e] % nx, eu[e] // nx
        if carved[e] or extra_keys[i, j, ed[e]] < extra_p:
            x, y = x0 + 2 + 2 * i, y0 + 1 + 2 * j
            if ed[e] == 1:
                x, y = x0 + 1 + 2 * i, y0 + 2 + 2 * j
            grid[x, y, 0] = EMPTY
            grid[x, y, 1] = 0
            grid[x, y, 2] = 0
            opened += 1
    return opened


@njit(cache=True)
def _distances(types, sx, sy):
    """Steps from ``(sx, sy)`` to every cell over open cells (see :func:`_is_open`); -1 where
    unreachable. The start counts whatever lies on it."""
    w, h = types.shape
    dist = np.full((w, h), -1, dtype=np.int64)
    queue = np.empty((w * h, 2), dtype=np.int64)
    queue[0, 0], queue[0, 1] = sx, sy
    dist[sx, sy] = 0
    head, tail = 0, 1
    while head < tail:
        x, y = queue[head, 0], queue[head, 1]
        head += 1
        for dx, dy in ((1, 0), (-1, 0), (0, 1), (0, -1)):
            nx, ny = x + dx, y + dy
            if 0 <= nx < w and 0 <= ny < h and dist[nx, ny] < 0 and _is_open(types[nx, ny]):
                dist[nx, ny] = dist[x, y] + 1
                queue[tail, 0], queue[tail, 1] = nx, ny
                tail += 1
    return dist


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

    # -- lines, rooms and mazes ---------------------------------------------------------------

    def _code(self, obj: str, color: str | None, state: int = 0) -> tuple[int, int, int]:
        if obj not in OBJECT_TO_IDX:
            raise ConfigError(f"unknown object {obj!r}; allowed: {sorted(OBJECT_TO_IDX)}")
        color = color or DEFAULT_COLOR.get(obj, "red")
        return OBJECT_TO_IDX[obj], COLOR_TO_IDX[color], state

    def _region(self, region: Region | None, what: str, min_side: int = 1) -> Region:
        """``region`` (default: the whole map) checked to lie on the map with sides >= min_side."""
        x0, y0, x1, y1 = (0, 0, self.width, self.height) if region is None else region
        if min(x0, y0) < 0 or x1 > self.width or y1 > self.height:
            raise ConfigError(
                f"{what} region {(x0, y0, x1, y1)} leaves the {self.width}x{self.height} map"
            )
        if x1 - x0 < min_side or y1 - y0 < min_side:
            raise ConfigError(
                f"{what} region {(x0, y0, x1, y1)} needs sides of at least {min_side} cells"
            )
        return x0, y0, x1, y1

    def horizontal_wall(
        self,
        x: int,
        y: int,
        length: int | None = None,
        gaps: Iterable[int] = (),
        obj: str = "wall",
        color: str | None = None,
    ) -> None:
        """Cells ``(x .. x + length - 1, y)`` become ``obj``; the columns in ``gaps`` keep what
        they held.

        ``length`` defaults to the rest of the row (MiniGrid's ``horz_wall``).
        """
        length = self.width - x if length is None else length
        x0, y0, x1, _ = self._region((x, y, x + length, y + 1), "horizontal_wall")
        self._line(self.grid[x0:x1, y0], x0, gaps, self._code(obj, color), "horizontal_wall")

    def vertical_wall(
        self,
        x: int,
        y: int,
        length: int | None = None,
        gaps: Iterable[int] = (),
        obj: str = "wall",
        color: str | None = None,
    ) -> None:
        """Cells ``(x, y .. y + length - 1)`` become ``obj``; the rows in ``gaps`` keep what they
        held.

        ``length`` defaults to the rest of the column (MiniGrid's ``vert_wall``).
        """
        length = self.height - y if length is None else length
        x0, y0, _, y1 = self._region((x, y, x + 1, y + length), "vertical_wall")
        self._line(self.grid[x0, y0:y1], y0, gaps, self._code(obj, color), "vertical_wall")

    @staticmethod
    def _line(
        cells: np.ndarray, start: int, gaps: Iterable[int], code: tuple[int, int, int], what: str
    ) -> None:
        keep = cells.copy()
        cells[:] = code
        for g in gaps:
            if not start <= g < start + len(cells):
                raise ConfigError(
                    f"{what} gap {g} is off the line, which spans {start}..{start + len(cells) - 1}"
                )
            cells[g - start] = keep[g - start]

    def wall_rect(
        self, x: int, y: int, width: int, height: int, obj: str = "wall", color: str | None = None
    ) -> None:
        """The outline of the ``width x height`` rectangle with top-left cell ``(x, y)``."""
        self.horizontal_wall(x, y, width, obj=obj, color=color)
        self.horizontal_wall(x, y + height - 1, width, obj=obj, color=color)
        self.vertical_wall(x, y, height, obj=obj, color=color)
        self.vertical_wall(x + width - 1, y, height, obj=obj, color=color)

    def fill(
        self, region: Region | None = None, obj: str = "wall", color: str | None = None
    ) -> None:
        """Every cell of ``region = (x0, y0, x1, y1)`` (ends excluded; default the map) becomes
        ``obj``."""
        x0, y0, x1, y1 = self._region(region, "fill")
        self.grid[x0:x1, y0:y1] = self._code(obj, color)

    def room_grid(self, cols: int, rows: int, region: Region | None = None) -> RoomGrid:
        """Walls splitting ``region`` (default the map) into ``cols x rows`` rooms, one random
        doorway in each inner wall segment, so every room is reachable from every other.

        The outline of the region is walled; wall ``k`` of ``cols`` stands at column
        ``x0 + k * (x1 - x0 - 1) // cols`` (rows alike), so a 19-wide map split in two has its wall
        at column 9, as in MiniGrid's FourRooms. A segment's doorway is drawn uniformly from the
        cells strictly between the walls crossing it; rooms are visited row by row and each draws
        the doorway on its east wall, then on its south wall.
        """
        cols = check_int("cols", cols, low=1)
        rows = check_int("rows", rows, low=1)
        x0, y0, x1, y1 = self._region(region, "room_grid", min_side=3)
        xs = [x0 + k * (x1 - x0 - 1) // cols for k in range(cols + 1)]
        ys = [y0 + k * (y1 - y0 - 1) // rows for k in range(rows + 1)]
        if min(np.diff(xs)) < 2 or min(np.diff(ys)) < 2:
            raise ConfigError(
                f"a {x1 - x0}x{y1 - y0} region cannot hold {cols}x{rows} rooms: each room needs "
                f"at least one cell inside its walls (side >= {2 * cols + 1} for {cols} columns, "
                f">= {2 * rows + 1} for {rows} rows)"
            )
        for x in xs:
            self.vertical_wall(x, y0, y1 - y0)
        for y in ys:
            self.horizontal_wall(x0, y, x1 - x0)
        rooms, doorways = [], []
        for j in range(rows):
            for i in range(cols):
                rooms.append((xs[i] + 1, ys[j] + 1, xs[i + 1], ys[j + 1]))
                if i + 1 < cols:
                    doorways.append((xs[i + 1], int(self.rng.integers(ys[j] + 1, ys[j + 1]))))
                    self.grid[doorways[-1]] = (EMPTY, 0, 0)
                if j + 1 < rows:
                    doorways.append((int(self.rng.integers(xs[i] + 1, xs[i + 1])), ys[j + 1]))
                    self.grid[doorways[-1]] = (EMPTY, 0, 0)
        return RoomGrid(rooms, doorways)

    def maze(self, extra_connections: float = 0.0, region: Region | None = None) -> int:
        """Fill ``region`` (default the map; odd sides >= 3) with a random maze.

        Cells at odd offsets from the region's corner are open; the walls between neighbouring
        cells are removed by randomised Kruskal until all cells connect, which gives a perfect
        maze (one path between any two cells). Then each wall still between two cells is removed
        with probability ``extra_connections``, which adds loops (like labmaze's
        ``extra_connection_probability``). Returns the number of walls removed between cells:
        ``cells - 1`` for a perfect maze.
        """
        p = check_float("extra_connections", extra_connections, 0.0, 1.0)
        x0, y0, x1, y1 = self._region(region, "maze", min_side=3)
        if (x1 - x0) % 2 == 0 or (y1 - y0) % 2 == 0:
            raise ConfigError(
                f"a maze needs odd sides (cells at odd offsets, walls between), got a "
                f"{x1 - x0}x{y1 - y0} region"
            )
        self.fill((x0, y0, x1, y1), "wall")
        nx, ny = (x1 - x0) // 2, (y1 - y0) // 2
        edge_keys = self.rng.random((nx, ny, 2))
        extra_keys = self.rng.random((nx, ny, 2))
        return int(_carve_maze(self.grid, x0, y0, nx, ny, edge_keys, extra_keys, p))

    # -- distances and spawn regions ----------------------------------------------------------

    def distances_from(self, x: int, y: int) -> np.ndarray:
        """``(width, height)`` steps from ``(x, y)`` over open cells (doors included, goal-cycle
        tiles not walked through); -1 where unreachable."""
        self._region((x, y, x + 1, y + 1), "distances_from")
        return _distances(self.grid[..., 0], x, y)

    def spawn_far_from(self, x: int, y: int, fraction: float = 0.5) -> np.ndarray:
        """Agents (re)spawn only in the farthest ``fraction`` of the reachable empty cells by
        steps from ``(x, y)`` (see :meth:`distances_from`), among those already allowed.

        With ``n`` such cells, ``m = ceil(fraction * n)`` and ``d_m`` the distance of the
        ``m``-th farthest, the allowed cells are those at distance ``>= d_m``: the ``m`` farthest
        and any tied with the last of them. Returns the allowed ``(count, 2)`` cells.
        """
        fraction = check_float("fraction", fraction, 0.0, 1.0, low_open=True)
        dist = self.distances_from(x, y)
        free = (self.grid[..., 0] == EMPTY) & (dist >= 0) & self.spawn_ok
        n = int(free.sum())
        if n == 0:
            raise ConfigError(f"no empty spawn cell is reachable from ({x}, {y})")
        m = max(1, math.ceil(fraction * n))
        threshold = np.sort(dist[free])[n - m]
        self.spawn_ok[...] = free & (dist >= threshold)
        return np.argwhere(self.spawn_ok)
