"""Generated layouts: every goal reachable from every spawn cell, clutter counts as asked."""

from __future__ import annotations

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
        engine = env._engine
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
    interior = env._engine.grid[0, 1:-1, 1:-1, 0]
    assert (interior == WALL).sum() == 20
    env = marlgrid.make("MarlGrid-Cluttered-11x11-v0", clutter_density=0.2)
    env.reset(seed=0)
    assert (env._engine.grid[0, 1:-1, 1:-1, 0] == WALL).sum() == int(0.2 * 81)
