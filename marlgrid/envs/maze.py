"""A random maze with one goal; agents start far from it."""

from __future__ import annotations

import math
from typing import Any

from marlgrid.base import MarlGridEnv
from marlgrid.config import ConfigError, check_float
from marlgrid.core.layout import Layout
from marlgrid.envs._common import aec_from, square_size


class MazeEnv(MarlGridEnv):
    """A fresh random maze each episode; agents must find the goal along its corridors.

    ## Description
    A ``size x size`` maze (odd ``size``, default 13): cells at odd coordinates, one-cell walls
    between them, carved by randomised Kruskal (:meth:`marlgrid.core.layout.Layout.maze`) into a
    perfect maze, then each remaining inner wall between two cells is removed with probability
    ``extra_connections`` (default 0.05), which adds a few loops. It plays the role of the
    ``labmaze`` mazes of the original marlgrid's Maze transfer env, without that dependency.
    The green goal lies at a random open cell. Agents (re)spawn only in the farthest
    ``spawn_fraction`` (default half) of the empty cells by path length from the goal, ties
    included (see :meth:`marlgrid.core.layout.Layout.spawn_far_from`).

    ## Action Space
    ``Discrete(7)`` (``Discrete(3)`` with ``restrict_actions``).

    ## Observation
    Each agent's egocentric view; the maze walls block sight.

    ## Rewards
    ``goal_reward`` (default 1) for entering the goal, times MiniGrid's decay if ``reward_decay``.

    ## Termination
    An agent terminates on the goal (or respawns far from it with ``respawn=True``); all are
    truncated at ``max_steps`` (default ``4 * size * size``).

    ## Registered Configurations
    ``MarlGrid-Maze-13x13-v0`` (1 agent), ``MarlGrid-Maze-13x13-3Agents-v0``.
    """

    task_policies = ("goal_seeker",)

    def __init__(
        self,
        size: int = 13,
        *,
        extra_connections: float = 0.05,
        spawn_fraction: float = 0.5,
        **kwargs: Any,
    ) -> None:
        size = square_size("MazeEnv", size, kwargs)
        if size < 5 or size % 2 == 0:
            raise ConfigError(
                f"Maze needs an odd size >= 5 (cells, walls between), got size={size}"
            )
        self.extra_connections = check_float("extra_connections", extra_connections, 0.0, 1.0)
        self.spawn_fraction = check_float("spawn_fraction", spawn_fraction, 0.0, 1.0, low_open=True)
        kwargs.setdefault("max_steps", 4 * size * size)
        super().__init__(size, size, **kwargs)
        cells = ((size - 1) // 2) ** 2
        empty = 2 * cells - 2  # a perfect maze's cells and passages, less the goal
        spawn_cells = math.ceil(self.spawn_fraction * empty)
        n_agents = len(self.agent_configs)
        if n_agents > spawn_cells:
            raise ConfigError(
                f"n_agents ({n_agents}) exceeds the {spawn_cells} spawn cells a {size}x{size} "
                f"maze (size={size}) guarantees with spawn_fraction={self.spawn_fraction}"
            )

    def generate(self, layout: Layout) -> None:
        layout.maze(self.extra_connections)
        ((x, y),) = layout.place("goal")
        layout.spawn_far_from(int(x), int(y), self.spawn_fraction)


def parallel_env(**kwargs: Any) -> MazeEnv:
    """A :class:`MazeEnv` (PettingZoo ``ParallelEnv``)."""
    return MazeEnv(**kwargs)


env = aec_from(parallel_env)
