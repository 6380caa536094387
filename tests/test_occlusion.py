"""Occlusion and egocentric views against MiniGrid itself, cell for cell."""

from __future__ import annotations

import numpy as np
import pytest

from marlgrid.constants import DOOR, SEE_BEHIND
from marlgrid.core import kernels as K
from tests.conftest import HandMadeEnv, place

minigrid = pytest.importorskip("minigrid")
from minigrid.core.grid import Grid  # noqa: E402
from minigrid.core.world_object import Ball, Box, Door, Goal, Key, Lava, Wall  # noqa: E402


def _random_minigrid_grid(rng: np.random.Generator, w: int, h: int) -> Grid:
    grid = Grid(w, h)
    for x in range(w):
        for y in range(h):
            u = rng.random()
            if u < 0.25:
                grid.set(x, y, Wall())
            elif u < 0.32:
                state = rng.integers(3)
                grid.set(x, y, Door("yellow", is_open=state == 0, is_locked=state == 2))
            elif u < 0.35:
                grid.set(x, y, Goal())
            elif u < 0.37:
                grid.set(x, y, Key("blue"))
            elif u < 0.39:
                grid.set(x, y, Ball("green"))
            elif u < 0.41:
                grid.set(x, y, Box("purple"))
            elif u < 0.43:
                grid.set(x, y, Lava())
    return grid


def _opaque(encoded: np.ndarray) -> np.ndarray:
    types, states = encoded[..., 0], encoded[..., 2]
    return np.where(types == DOOR, states != 0, ~SEE_BEHIND[types])


def test_visibility_equals_minigrid_process_vis():
    """1,200 random views (walls, doors in all states, objects): masks equal MiniGrid's."""
    rng = np.random.default_rng(0)
    checked = 0
    for _ in range(1200):
        v = int(rng.choice([3, 5, 7, 9, 11]))
        grid = _random_minigrid_grid(rng, v, v)
        agent = (v // 2, v - 1)
        grid.set(*agent, None)  # the agent stands on an open cell
        expected = grid.process_vis(agent)
        ours = K.process_vis(_opaque(grid.encode()), v // 2, v - 1)
        np.testing.assert_array_equal(ours, expected)
        checked += 1
    assert checked == 1200


def _parity_env(rows, **agent):
    return HandMadeEnv(rows, agent=agent, max_steps=10)


def test_views_equal_minigrid_observations():
    """Full symbolic observations equal MiniGrid's gen_obs on random maps, positions, directions
    and carried objects: slicing, rotation, out-of-map walls, occlusion and the carried object."""
    from minigrid.core.mission import MissionSpace
    from minigrid.minigrid_env import MiniGridEnv

    class Blank(MiniGridEnv):
        def __init__(self, size, view):
            super().__init__(
                mission_space=MissionSpace(mission_func=lambda: ""),
                width=size,
                height=size,
                agent_view_size=view,
                max_steps=10,
            )

        def _gen_grid(self, width, height):
            self.grid = Grid(width, height)
            self.agent_pos, self.agent_dir = (0, 0), 0

    rng = np.random.default_rng(1)
    for trial in range(300):
        size = int(rng.integers(5, 12))
        view = int(rng.choice([3, 5, 7]))
        mg = Blank(size, view)
        mg.reset(seed=trial)
        mg.grid = _random_minigrid_grid(rng, size, size)
        x, y = int(rng.integers(size)), int(rng.integers(size))
        mg.grid.set(x, y, None)
        mg.agent_pos, mg.agent_dir = (x, y), int(rng.integers(4))
        mg.carrying = Key("red") if rng.random() < 0.3 else None
        expected = mg.gen_obs()["image"]

        env = _parity_env(["." * size] * size, view_size=view)
        env.reset(seed=0)
        env.engine.grid[0] = mg.grid.encode()
        if mg.carrying is not None:
            env.engine.carrying[0, 0] = mg.carrying.encode()
        place(env, 0, x, y, mg.agent_dir)
        np.testing.assert_array_equal(env.engine.sym[0, 0, :view, :view], expected, f"{trial}")


def test_view_offset_extends_the_sweep_behind():
    """With view_offset=1 the row behind the agent is seen, except behind walls beside it."""
    rows = [
        "#######",
        "#.....#",
        "#.....#",
        "#.....#",
        "#.#...#",
        "#.....#",
        "#######",
    ]
    env = _parity_env(rows, view_size=5, view_offset=1)
    env.reset(seed=0)
    place(env, 0, 3, 3, 3)  # facing north, the row behind is y = 4
    vis = env.visibility("agent_0")
    # View row 4 is behind the agent (row 3); columns 0..4 map to x = 1..5 at y = 4.
    # (x=2, y=4) is a wall: visible itself; the cell behind it in the sweep direction is x=1.
    assert vis[:, 4].tolist() == [True, True, True, True, True]
    obs = env.engine.sym[0, 0]
    assert obs[1, 4, 0] == 2  # the wall at (2, 4)
    assert obs[2, 3, 0] == 1  # the agent's own cell: carries nothing
    # Without the offset the same agent sees no row behind it.
    env0 = _parity_env(rows, view_size=5)
    env0.reset(seed=0)
    place(env0, 0, 3, 3, 3)
    assert env0.visibility("agent_0")[:, 4].all()  # row 4 of a view_size 5 is the agent row
    assert env0.engine.sym[0, 0, 2, 4, 0] == 1


def test_walls_block_sight_behind_them():
    rows = [
        "#######",
        "#.....#",
        "#.....#",
        "#######",
        "#.....#",
        "#.....#",
        "#######",
    ]
    env = _parity_env(rows, view_size=7, view_offset=2)
    env.reset(seed=0)
    place(env, 0, 3, 2, 3)  # facing north, the wall row y = 3 is behind, rows 4..5 beyond it
    seen = env.visible_cells("agent_0")
    assert seen[1:6, 3].all()  # the wall itself is seen
    assert not seen[:, 4:].any()  # nothing behind the wall
    assert seen[1:6, 1:3].all()
