"""Generated layouts: every goal reachable from every spawn cell, clutter counts as asked."""

from __future__ import annotations

import time
from collections import deque

import numpy as np
import pytest

import marlgrid
from marlgrid.constants import CYCLE_TILE, DOOR, EMPTY, GOAL, WALL


def _reachable(types: np.ndarray, start: tuple[int, int], avoid_tiles: bool) -> set:
    """Independent BFS over cells that are not walls (doors count as openable)."""
    w, h = types.shape
    seen, queue = {start}, deque([start])
    while queue:
        x, y = queue.popleft()
        for dx, dy in ((1, 0), (-1, 0), (0, 1), (0, -1)):
            nx, ny = x + dx, y + dy
            if not (0 <= nx < w and 0 <= ny < h) or (nx, ny) in seen:
                continue
            t = types[nx, ny]
            if t == WALL:
                continue
            seen.add((nx, ny))
            if t == CYCLE_TILE and avoid_tiles:
                continue  # a tile can be entered but not walked through
            queue.append((nx, ny))
    return seen


@pytest.mark.parametrize(
    "env_id",
    [
        "MarlGrid-GoalCycle-13x13-3Agents-v0",
        "MarlGrid-Cluttered-15x15-3Agents-v0",
        "MarlGrid-DoorKey-8x8-2Agents-v0",
    ],
)
def test_goals_reachable_from_every_spawn_cell(env_id):
    env = marlgrid.make(env_id)
    for seed in range(150):
        env.reset(seed=seed)
        engine = env.engine
        types = engine.grid[0, ..., 0]
        spawn = np.argwhere(engine.spawn_ok[0] & (types == EMPTY))
        goals = {tuple(c) for c in np.argwhere((types == GOAL) | (types == CYCLE_TILE))}
        assert goals
        start = tuple(int(v) for v in spawn[0])
        reach = _reachable(types, start, avoid_tiles=True)
        assert goals <= reach, f"seed {seed}: a goal is cut off"
        assert {tuple(c) for c in spawn} <= reach, f"seed {seed}: a spawn cell is cut off"
        for x, y in engine.pos[0]:
            assert (int(x), int(y)) in reach
        if env_id.startswith("MarlGrid-DoorKey"):
            assert (types == DOOR).sum() == 1


def test_clutter_count_and_density():
    env = marlgrid.make("MarlGrid-Cluttered-11x11-v0", n_clutter=20)
    env.reset(seed=0)
    interior = env.engine.grid[0, 1:-1, 1:-1, 0]
    assert (interior == WALL).sum() == 20
    env = marlgrid.make("MarlGrid-Cluttered-11x11-v0", clutter_density=0.2)
    env.reset(seed=0)
    assert (env.engine.grid[0, 1:-1, 1:-1, 0] == WALL).sum() == int(0.2 * 81)


def _assert_connected(env) -> None:
    engine = env.engine
    types = engine.grid[0, ..., 0]
    free = {tuple(int(v) for v in c) for c in np.argwhere(types == EMPTY)}
    goals = {tuple(int(v) for v in c) for c in np.argwhere((types == GOAL) | (types == CYCLE_TILE))}
    reach = _reachable(types, next(iter(free)), avoid_tiles=True)
    assert goals <= reach, "a goal is cut off"
    assert free <= reach, "an empty cell is cut off"


@pytest.mark.parametrize(
    ("env_id", "size", "density", "seeds"),
    [
        ("MarlGrid-GoalCycle-13x13-v0", 11, 0.5, 20),  # dense: random tries all fail
        ("MarlGrid-Cluttered-11x11-v0", 11, 0.6, 20),
        ("MarlGrid-GoalCycle-13x13-3Agents-v0", 60, 0.3, 4),
    ],
)
def test_dense_clutter_is_placed_constructively_and_stays_connected(env_id, size, density, seeds):
    env = marlgrid.make(env_id, size=size, clutter_density=density)
    n_walls = int(density * (size - 2) ** 2)
    for seed in range(seeds):
        env.reset(seed=seed)
        interior = env.engine.grid[0, 1:-1, 1:-1, 0]
        assert (interior == WALL).sum() == n_walls
        _assert_connected(env)


def _timed_reset(env, seed: int) -> float:
    start = time.perf_counter()
    env.reset(seed=seed)
    return time.perf_counter() - start


@pytest.mark.parametrize("env_id", ["MarlGrid-GoalCycle-13x13-v0", "MarlGrid-Cluttered-11x11-v0"])
def test_200x200_maps_generate_fast_connected_and_per_seed(env_id):
    env = marlgrid.make(env_id, size=200, clutter_density=0.15)
    env.reset(seed=100)  # compiles the layout kernels on a cold numba cache
    seconds = min(_timed_reset(env, seed) for seed in range(3))
    assert seconds < 2.0, f"{seconds:.2f} s for a 200x200 reset"
    _assert_connected(env)
    assert (env.engine.grid[0, 1:-1, 1:-1, 0] == WALL).sum() == int(0.15 * 198 * 198)
    first = env.engine.grid[0].copy(), env.engine.cycle_id[0].copy()
    env.reset(seed=2)
    other = marlgrid.make(env_id, size=200, clutter_density=0.15)
    other.reset(seed=2)
    np.testing.assert_array_equal(first[0], other.engine.grid[0])
    np.testing.assert_array_equal(first[1], other.engine.cycle_id[0])


@pytest.mark.slow
@pytest.mark.parametrize("env_id", ["MarlGrid-GoalCycle-13x13-v0", "MarlGrid-Cluttered-11x11-v0"])
def test_500x500_maps_generate_within_15_seconds(env_id):
    env = marlgrid.make(env_id, size=500, clutter_density=0.15)
    env.reset(seed=100)
    seconds = _timed_reset(env, 0)
    assert seconds < 15.0, f"{seconds:.2f} s for a 500x500 reset"
    _assert_connected(env)
