"""Transfer maps (FourRooms, Maze, the 4-goal goal cycle) and the Layout helpers that draw them."""

from __future__ import annotations

import math
from collections import deque

import numpy as np
import pytest

import marlgrid
from marlgrid.config import ConfigError
from marlgrid.constants import CYCLE_TILE, EMPTY, GOAL, WALL
from marlgrid.core.layout import Layout
from marlgrid.registry import GOAL_CYCLE_CANONICAL, spec
from tests.conftest import place

TRANSFER_IDS = [
    "MarlGrid-FourRooms-v0",
    "MarlGrid-FourRooms-3Agents-v0",
    "MarlGrid-Maze-13x13-v0",
    "MarlGrid-Maze-13x13-3Agents-v0",
    "MarlGrid-GoalCycle-13x13-4Goals-3Agents-v0",
]
SEEDS = range(200)


def _layout(width: int, height: int, seed: int = 0) -> Layout:
    grid = np.zeros((width, height, 3), dtype=np.uint8)
    grid[..., 0] = EMPTY
    return Layout(
        grid,
        np.zeros_like(grid),
        np.full((width, height), -1, dtype=np.int16),
        np.ones((width, height), dtype=np.bool_),
        np.random.default_rng(seed),
    )


def _bfs(types: np.ndarray, start: tuple[int, int]) -> dict[tuple[int, int], int]:
    """Steps from ``start`` to every reachable cell; walls block, goal-cycle tiles are entered
    but not walked through (independent of the library's BFS)."""
    w, h = types.shape
    dist, queue = {start: 0}, deque([start])
    while queue:
        x, y = queue.popleft()
        for dx, dy in ((1, 0), (-1, 0), (0, 1), (0, -1)):
            nxt = (x + dx, y + dy)
            if not (0 <= nxt[0] < w and 0 <= nxt[1] < h) or nxt in dist:
                continue
            if types[nxt] == WALL:
                continue
            dist[nxt] = dist[(x, y)] + 1
            if types[nxt] != CYCLE_TILE:
                queue.append(nxt)
    return dist


def _far_half(types: np.ndarray, goal: tuple[int, int], fraction: float = 0.5) -> set:
    """The spawn rule written out: empty cells at distance >= that of the ceil(f*n)-th farthest."""
    dist = _bfs(types, goal)
    empty = {c: d for c, d in dist.items() if types[c] == EMPTY}
    ranked = sorted(empty.values(), reverse=True)
    cutoff = ranked[math.ceil(fraction * len(ranked)) - 1]
    return {c for c, d in empty.items() if d >= cutoff}


def _cells(mask: np.ndarray) -> set:
    return {(int(x), int(y)) for x, y in np.argwhere(mask)}


# -- registration ---------------------------------------------------------------------------


def test_transfer_ids_are_registered_with_their_settings():
    assert set(TRANSFER_IDS) <= set(marlgrid.REGISTRY)
    four = spec("MarlGrid-GoalCycle-13x13-4Goals-3Agents-v0").kwargs
    assert four == {**GOAL_CYCLE_CANONICAL, "n_goals": 4, "n_agents": 3}
    env = marlgrid.make("MarlGrid-GoalCycle-13x13-4Goals-3Agents-v0")
    env.reset(seed=3)
    assert sorted(env.engine.cycle_id[0][env.engine.cycle_id[0] >= 0]) == [0, 1, 2, 3]
    assert len(env.possible_agents) == 3 and env.max_steps == 250
    rooms = marlgrid.make("MarlGrid-FourRooms-3Agents-v0")
    assert (rooms.width, rooms.height, rooms.max_steps, len(rooms.possible_agents)) == (
        19,
        19,
        100,
        3,
    )
    maze = marlgrid.make("MarlGrid-Maze-13x13-v0")
    assert (maze.width, maze.max_steps, maze.extra_connections) == (13, 4 * 13 * 13, 0.05)


@pytest.mark.parametrize("env_id", TRANSFER_IDS)
def test_a_seed_gives_one_layout_and_seeds_differ(env_id):
    a, b = marlgrid.make(env_id), marlgrid.make(env_id)
    layouts = set()
    for seed in range(20):
        a.reset(seed=seed)
        b.reset(seed=seed)
        assert np.array_equal(a.engine.grid, b.engine.grid)
        assert np.array_equal(a.engine.cycle_id, b.engine.cycle_id)
        assert np.array_equal(a.engine.pos, b.engine.pos)
        assert np.array_equal(a.engine.dirs, b.engine.dirs)
        layouts.add(a.engine.grid.tobytes())
    assert len(layouts) == 20


# -- reachability over many seeds -----------------------------------------------------------


@pytest.mark.parametrize("env_id", TRANSFER_IDS)
def test_every_goal_is_reachable_from_every_spawn(env_id):
    env = marlgrid.make(env_id)
    for seed in SEEDS:
        env.reset(seed=seed)
        engine = env.engine
        types = engine.grid[0, ..., 0]
        goals = _cells((types == GOAL) | (types == CYCLE_TILE))
        assert len(goals) == (4 if "4Goals" in env_id else 1)
        spawn = _cells(engine.spawn_ok[0] & (types == EMPTY))
        starts = {(int(x), int(y)) for x, y in engine.pos[0]}
        assert starts <= spawn, f"seed {seed}: an agent started off its spawn cells"
        for start in starts:
            reach = _bfs(types, start)
            assert goals <= reach.keys(), f"seed {seed}: a goal is cut off from {start}"
            assert spawn <= reach.keys(), f"seed {seed}: a spawn cell is cut off from {start}"


# -- FourRooms ------------------------------------------------------------------------------


def test_four_rooms_walls_and_doorways_for_one_seed():
    seed = 5
    env = marlgrid.make("MarlGrid-FourRooms-v0")
    env.reset(seed=seed)
    walls = env.engine.grid[0, ..., 0] == WALL
    # The generator's first draws are the doorways, room by room (east wall, then south wall):
    # top-left room: east door row in 1..8, south door column in 1..8; top-right room: south
    # door column in 10..17; bottom-left room: east door row in 10..17.
    rng = np.random.default_rng(seed)
    top_row, left_col = int(rng.integers(1, 9)), int(rng.integers(1, 9))
    right_col, bottom_row = int(rng.integers(10, 18)), int(rng.integers(10, 18))
    expected = np.zeros((19, 19), dtype=bool)
    expected[[0, 9, 18], :] = True
    expected[:, [0, 9, 18]] = True
    for door in ((9, top_row), (left_col, 9), (right_col, 9), (9, bottom_row)):
        expected[door] = False
    assert np.array_equal(walls, expected)
    # 72 border + 33 inner walls, less 4 doorways; four 8x8 rooms + 4 doorways are open.
    assert walls.sum() == 101
    assert (env.engine.grid[0, ..., 0] != WALL).sum() == 4 * 64 + 4


def test_four_rooms_has_one_doorway_per_inner_wall_segment_over_many_seeds():
    env = marlgrid.make("MarlGrid-FourRooms-v0")
    for seed in SEEDS:
        env.reset(seed=seed)
        walls = env.engine.grid[0, ..., 0] == WALL
        assert walls[[0, 18], :].all() and walls[:, [0, 18]].all()
        assert walls[9, 9]
        for segment in (walls[9, 1:9], walls[9, 10:18], walls[1:9, 9], walls[10:18, 9]):
            assert (~segment).sum() == 1, f"seed {seed}"
        assert not walls[1:9, 1:9].any() and not walls[10:18, 10:18].any()


def test_four_rooms_sizes_and_errors():
    env = marlgrid.make("MarlGrid-FourRooms-v0", size=7)
    env.reset(seed=0)
    walls = env.engine.grid[0, ..., 0] == WALL
    assert walls.sum() == 4 * 6 + 9 - 4  # border 24, inner column and row at 3, 4 doorways
    with pytest.raises(ConfigError, match="size"):
        marlgrid.make("MarlGrid-FourRooms-v0", size=4)
    with pytest.raises(ConfigError, match="n_agents"):
        marlgrid.make("MarlGrid-FourRooms-v0", size=5, n_agents=4)  # 4 room cells, 1 goal


# -- Maze -----------------------------------------------------------------------------------


def _maze_edges(types: np.ndarray) -> tuple[int, int]:
    """Cells (odd coordinates) and open passages between two cells of a maze."""
    cells = (types[1::2, 1::2] != WALL).sum()
    east = (types[2:-1:2, 1::2] != WALL).sum()
    south = (types[1::2, 2:-1:2] != WALL).sum()
    return int(cells), int(east + south)


def test_a_maze_without_extra_connections_is_perfect():
    env = marlgrid.make("MarlGrid-Maze-13x13-v0", extra_connections=0.0)
    for seed in SEEDS:
        env.reset(seed=seed)
        types = env.engine.grid[0, ..., 0]
        cells, edges = _maze_edges(types)
        assert cells == 36
        assert edges == cells - 1, f"seed {seed}: {edges} passages, a tree has {cells - 1}"
        assert (types[::2, ::2] == WALL).all()  # corners between cells stay walls
        open_cells = _cells(types != WALL)
        assert len(open_cells) == cells + edges
        assert open_cells == set(_bfs(types, next(iter(open_cells)))), f"seed {seed}"


def test_extra_connections_add_loops_at_the_expected_rate():
    env = marlgrid.make("MarlGrid-Maze-13x13-v0")
    loops = []
    for seed in SEEDS:
        env.reset(seed=seed)
        cells, edges = _maze_edges(env.engine.grid[0, ..., 0])
        loops.append(edges - (cells - 1))
    # 60 inner walls, 35 carved: 25 left, each removed with p = 0.05 -> mean 1.25.
    assert min(loops) >= 0
    assert 1.0 < np.mean(loops) < 1.5
    layout = _layout(13, 13)
    assert layout.maze(1.0) == 60  # every wall between cells removed
    assert (layout.grid[1:-1:2, 1:-1, 0] == EMPTY).all()


def test_maze_agents_spawn_in_the_farthest_half():
    env = marlgrid.make("MarlGrid-Maze-13x13-3Agents-v0")
    for seed in SEEDS:
        env.reset(seed=seed)
        engine = env.engine
        types = engine.grid[0, ..., 0]
        ((gx, gy),) = np.argwhere(types == GOAL)
        far = _far_half(types, (int(gx), int(gy)))
        assert _cells(engine.spawn_ok[0]) == far, f"seed {seed}"
        n_empty = (types == EMPTY).sum()
        assert math.ceil(n_empty / 2) <= len(far) < n_empty
        assert {(int(x), int(y)) for x, y in engine.pos[0]} <= far


def test_a_maze_agent_respawns_far_from_the_goal():
    env = marlgrid.make("MarlGrid-Maze-13x13-v0", respawn=True)
    env.reset(seed=1)
    types = env.engine.grid[0, ..., 0]
    ((gx, gy),) = np.argwhere(types == GOAL)
    far = _far_half(types, (int(gx), int(gy)))
    # Stand next to the goal facing it (directions: 0 east, 1 south, 2 west, 3 north).
    for direction, (dx, dy) in enumerate(((1, 0), (0, 1), (-1, 0), (0, -1))):
        if types[gx - dx, gy - dy] == EMPTY:
            place(env, 0, int(gx - dx), int(gy - dy), direction)
            break
    _, rewards, terminated, _, _ = env.step({"agent_0": 2})
    assert rewards["agent_0"] == 1.0 and not terminated["agent_0"]
    assert tuple(int(v) for v in env.engine.pos[0, 0]) in far


def test_maze_settings_are_checked():
    for size in (12, 3):
        with pytest.raises(ConfigError, match="size"):
            marlgrid.make("MarlGrid-Maze-13x13-v0", size=size)
    with pytest.raises(ConfigError, match="extra_connections"):
        marlgrid.make("MarlGrid-Maze-13x13-v0", extra_connections=1.5)
    with pytest.raises(ConfigError, match="spawn_fraction"):
        marlgrid.make("MarlGrid-Maze-13x13-v0", spawn_fraction=0.0)
    # 5x5: 4 cells, 7 open, 6 empty after the goal, so half of them is 3 spawn cells.
    marlgrid.make("MarlGrid-Maze-13x13-v0", size=5, n_agents=3).reset(seed=0)
    with pytest.raises(ConfigError, match="n_agents"):
        marlgrid.make("MarlGrid-Maze-13x13-v0", size=5, n_agents=4)


# -- Layout helpers -------------------------------------------------------------------------


def test_lines_rectangles_and_fill():
    layout = _layout(7, 6)
    layout.horizontal_wall(1, 2, 5, gaps=(3,))
    layout.vertical_wall(5, 0, gaps=(4,), obj="lava")
    walls = layout.grid[..., 0] == WALL
    assert _cells(walls) == {(1, 2), (2, 2), (4, 2)}  # (5, 2) was overwritten with lava
    assert _cells(layout.grid[..., 0] == 9) == {(5, y) for y in (0, 1, 2, 3, 5)}
    assert layout.grid[5, 0, 1] == 0  # lava is red by default
    layout = _layout(7, 6)
    layout.wall_rect(1, 1, 4, 3)
    assert _cells(layout.grid[..., 0] == WALL) == {
        (1, 1), (2, 1), (3, 1), (4, 1), (1, 2), (4, 2), (1, 3), (2, 3), (3, 3), (4, 3)
    }  # fmt: skip
    layout.fill((2, 2, 4, 3), "goal")
    assert _cells(layout.grid[..., 0] == GOAL) == {(2, 2), (3, 2)}


def test_layout_helpers_refuse_bad_geometry():
    layout = _layout(7, 7)
    with pytest.raises(ConfigError, match="gap 7 is off the line"):
        layout.horizontal_wall(0, 1, gaps=(7,))
    with pytest.raises(ConfigError, match="leaves the 7x7 map"):
        layout.vertical_wall(2, 3, 5)
    with pytest.raises(ConfigError, match="cannot hold 4x1 rooms"):
        layout.room_grid(4, 1)
    with pytest.raises(ConfigError, match="odd sides"):
        layout.maze(region=(0, 0, 6, 7))
    with pytest.raises(ConfigError, match="unknown object 'stone'"):
        layout.fill(obj="stone")


def test_room_grid_of_six_rooms_connects_them():
    layout = _layout(13, 9, seed=4)
    built = layout.room_grid(3, 2)
    # Walls at columns 0, 4, 8, 12 and rows 0, 4, 8; rooms 3x3; 7 inner segments, 7 doorways.
    assert built.rooms == [
        (1, 1, 4, 4), (5, 1, 8, 4), (9, 1, 12, 4), (1, 5, 4, 8), (5, 5, 8, 8), (9, 5, 12, 8)
    ]  # fmt: skip
    assert len(built.doorways) == 7
    types = layout.grid[..., 0]
    for x, y in built.doorways:
        assert types[x, y] == EMPTY and (x in (4, 8) or y == 4)
    assert (types == WALL).sum() == 4 * 9 + 3 * 13 - 4 * 3 - 7  # columns + rows - crossings
    open_cells = _cells(types == EMPTY)
    assert len(open_cells) == 6 * 9 + 7
    assert open_cells == set(_bfs(types, (1, 1)))


def test_spawn_far_from_counts_ties():
    # A corridor: goal at x=1, eight empty cells at distances 1..8; the farthest half is 5..8.
    layout = _layout(11, 3)
    layout.walls_border()
    layout.put(1, 1, "goal")
    cells = layout.spawn_far_from(1, 1)
    assert {tuple(c) for c in cells.tolist()} == _cells(layout.spawn_ok)
    assert _cells(layout.spawn_ok) == {(x, 1) for x in range(6, 10)}
    assert layout.distances_from(1, 1)[9, 1] == 8 and layout.distances_from(1, 1)[0, 0] == -1
    # A 3x2 room, goal in a corner: distances 1, 1, 2, 2, 3; ceil(5 / 2) = 3 farthest are
    # 3, 2, 2 -> cutoff 2, which takes both cells at distance 2.
    layout = _layout(5, 4)
    layout.walls_border()
    layout.put(1, 1, "goal")
    cells = layout.spawn_far_from(1, 1, fraction=0.5)
    assert {tuple(c) for c in cells.tolist()} == {(3, 1), (2, 2), (3, 2)}
    with pytest.raises(ConfigError, match="fraction"):
        layout.spawn_far_from(1, 1, fraction=1.5)


def test_large_mazes_generate_fast():
    import time

    env = marlgrid.make("MarlGrid-Maze-13x13-v0", size=201)
    env.reset(seed=0)
    start = time.perf_counter()
    env.reset(seed=1)
    assert time.perf_counter() - start < 2.0
    cells, edges = _maze_edges(env.engine.grid[0, ..., 0])
    assert cells == 100 * 100 and edges >= cells - 1
