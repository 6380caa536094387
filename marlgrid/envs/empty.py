"""Empty room with a goal in the far corner."""

from __future__ import annotations

from typing import Any

from marlgrid.base import MarlGridEnv
from marlgrid.core.layout import Layout
from marlgrid.envs._common import aec_from, check_fits, square_size


class EmptyEnv(MarlGridEnv):
    """An empty room; entering the green goal in the bottom-right corner pays ``goal_reward``.

    ## Description
    A ``size x size`` room walled all round, one goal at ``(size - 2, size - 2)``. Agents start
    at random empty cells facing random directions. A sanity check and a place to debug learners.

    ## Action Space
    ``Discrete(7)``: left, right, forward, pickup, drop, toggle, done (``Discrete(3)`` with
    ``restrict_actions``).

    ## Observation
    Each agent's egocentric view (see :class:`marlgrid.config.AgentConfig`).

    ## Rewards
    ``goal_reward`` (default 1) for entering the goal, times MiniGrid's decay if ``reward_decay``.

    ## Termination
    An agent terminates on the goal (or respawns with ``respawn=True``); all are truncated at
    ``max_steps`` (default ``4 * size * size``).

    ## Registered Configurations
    ``MarlGrid-Empty-8x8-v0`` (1 agent), ``MarlGrid-Empty-8x8-3Agents-v0``.
    """

    task_policies = ("goal_seeker",)

    def __init__(self, size: int = 8, **kwargs: Any) -> None:
        size = square_size("EmptyEnv", size, kwargs)
        kwargs.setdefault("max_steps", 4 * size * size)
        super().__init__(size, size, **kwargs)
        check_fits(size, size, {"the goal": 1, "n_agents": len(self.agent_configs)})

    def generate(self, layout: Layout) -> None:
        layout.walls_border()
        layout.put(self.width - 2, self.height - 2, "goal")


def parallel_env(**kwargs: Any) -> EmptyEnv:
    """An :class:`EmptyEnv` (PettingZoo ``ParallelEnv``)."""
    return EmptyEnv(**kwargs)


env = aec_from(parallel_env)
