"""A room with randomly scattered walls and a goal."""

from __future__ import annotations

from typing import Any

from marlgrid.base import MarlGridEnv
from marlgrid.config import check_bool
from marlgrid.core.layout import Layout
from marlgrid.envs._common import aec_from, check_fits, clutter_count, clutter_label, square_size


class ClutteredEnv(MarlGridEnv):
    """A room cluttered with walls; agents look for the goal.

    ## Description
    A ``size x size`` room with ``n_clutter`` walls (or ``clutter_density`` of the interior,
    default 0.15) at random cells, never cutting the room into pieces, so the goal is always
    reachable (generation takes time about linear in the map area, e.g. under a second at
    200x200). The goal sits in the bottom-right corner, or anywhere with ``randomize_goal``.

    ## Action Space
    ``Discrete(7)`` (``Discrete(3)`` with ``restrict_actions``).

    ## Observation
    Each agent's egocentric view; clutter blocks sight.

    ## Rewards
    ``goal_reward`` (default 1) for entering the goal.

    ## Termination
    An agent terminates on the goal unless ``respawn`` (then it is placed again at once);
    truncation at ``max_steps`` (default 100).

    ## Registered Configurations
    ``MarlGrid-Cluttered-11x11-v0`` (1 agent), ``MarlGrid-Cluttered-11x11-3Agents-v0``,
    ``MarlGrid-Cluttered-15x15-3Agents-v0``.
    """

    task_policies = ("goal_seeker",)

    def __init__(
        self,
        size: int = 11,
        *,
        n_clutter: int | None = None,
        clutter_density: float | None = None,
        randomize_goal: bool = False,
        **kwargs: Any,
    ) -> None:
        size = square_size("ClutteredEnv", size, kwargs)
        super().__init__(size, size, **kwargs)
        if n_clutter is None and clutter_density is None:
            clutter_density = 0.15
        self.n_clutter = clutter_count(size, size, n_clutter, clutter_density)
        self.randomize_goal = check_bool("randomize_goal", randomize_goal)
        self._clutter_label = clutter_label(n_clutter, clutter_density)
        needed = {self._clutter_label: self.n_clutter, "the goal": 1}
        check_fits(size, size, {**needed, "n_agents": len(self.agent_configs)})

    def generate(self, layout: Layout) -> None:
        layout.walls_border()
        if self.randomize_goal:
            layout.place("goal")
        else:
            layout.put(self.width - 2, self.height - 2, "goal")
        n = self.n_clutter
        layout.retry_until_connected(
            lambda: layout.place("wall", count=n),
            f"{n} clutter walls ({self._clutter_label}, size={self.width})",
            fallback=lambda: layout.scatter_connected("wall", n),
        )


def parallel_env(**kwargs: Any) -> ClutteredEnv:
    """A :class:`ClutteredEnv` (PettingZoo ``ParallelEnv``)."""
    return ClutteredEnv(**kwargs)


env = aec_from(parallel_env)
