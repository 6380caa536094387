"""Four rooms joined by random doorways, one goal somewhere inside."""

from __future__ import annotations

from typing import Any

from marlgrid.base import MarlGridEnv
from marlgrid.config import ConfigError
from marlgrid.core.layout import Layout
from marlgrid.envs._common import aec_from, square_size


class FourRoomsEnv(MarlGridEnv):
    """MiniGrid's FourRooms for several agents: find the goal in one of four rooms.

    ## Description
    A ``size x size`` map (default 19) walled all round and split by a wall across its middle
    column (``size // 2`` for odd sizes) and one across its middle row into four rooms. Each of
    the four inner wall segments has one doorway at a random cell. The green goal lies at a
    random empty cell; agents start at random empty cells facing random directions. A transfer
    map for policies trained in open rooms: the goal is often out of sight behind a wall.

    ## Action Space
    ``Discrete(7)``: left, right, forward, pickup, drop, toggle, done (``Discrete(3)`` with
    ``restrict_actions``).

    ## Observation
    Each agent's egocentric view (see :class:`marlgrid.config.AgentConfig`); walls block sight.

    ## Rewards
    ``goal_reward`` (default 1) for entering the goal, times MiniGrid's decay if ``reward_decay``.

    ## Termination
    An agent terminates on the goal (or respawns at a random cell with ``respawn=True``); all
    are truncated at ``max_steps`` (default 100, as in MiniGrid).

    ## Registered Configurations
    ``MarlGrid-FourRooms-v0`` (1 agent), ``MarlGrid-FourRooms-3Agents-v0``.
    """

    task_policies = ("goal_seeker",)

    def __init__(self, size: int = 19, **kwargs: Any) -> None:
        size = square_size("FourRoomsEnv", size, kwargs)
        if size < 5:
            raise ConfigError(f"FourRooms needs size >= 5 (rooms of at least 1x1), got size={size}")
        kwargs.setdefault("max_steps", 100)
        super().__init__(size, size, **kwargs)
        room_cells = (size - 3) ** 2  # the interior less one wall column and one wall row
        n_agents = len(self.agent_configs)
        if 1 + n_agents > room_cells:
            raise ConfigError(
                f"the goal and n_agents ({n_agents}) need {1 + n_agents} cells but the rooms of a "
                f"{size}x{size} map (size={size}) have {room_cells}"
            )

    def generate(self, layout: Layout) -> None:
        layout.room_grid(2, 2)
        layout.place("goal")


def parallel_env(**kwargs: Any) -> FourRoomsEnv:
    """A :class:`FourRoomsEnv` (PettingZoo ``ParallelEnv``)."""
    return FourRoomsEnv(**kwargs)


env = aec_from(parallel_env)
