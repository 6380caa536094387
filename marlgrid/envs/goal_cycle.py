"""Goal cycle: visit look-alike tiles in a hidden order, paid for each correct one."""

from __future__ import annotations

from typing import Any

from marlgrid.base import MarlGridEnv
from marlgrid.config import ConfigError, check_float, check_int
from marlgrid.core.layout import Layout
from marlgrid.envs._common import aec_from, check_fits, clutter_count, clutter_label, square_size
from marlgrid.registry import GOAL_CYCLE_CANONICAL

#: The canonical goal-cycle task (registered as ``MarlGrid-GoalCycle-13x13-3Agents-v0``).
CANONICAL = GOAL_CYCLE_CANONICAL


class GoalCycleEnv(MarlGridEnv):
    """Tiles that pay only when entered in the right cyclic order.

    ## Description
    ``n_goals`` yellow tiles with hidden ids ``0..n_goals-1`` lie at random cells of a cluttered
    room (clutter never cuts it into pieces; generation takes time about linear in the map
    area). All tiles look alike and all agents share the order. An agent learns the order by
    trial, or by watching an agent that knows it.

    ## Action Space
    ``Discrete(7)`` (``Discrete(3)`` with ``restrict_actions``).

    ## Observation
    Each agent's egocentric view; tiles read as ``(11, yellow, 0)``. Agents can be made blind to
    the tiles with ``hide=("cycle_tile",)`` (novices) or shown with prestige colors.

    ## Rewards
    Only *entering* a tile by moving pays. The first tile of an episode pays ``reward`` (nothing
    with ``initial_reward=False``) and becomes the agent's last tile; entering its successor
    ``(last + 1) % n_goals`` pays ``reward`` (plus ``streak_bonus * streak``) and advances; any
    other tile, the last one included, pays ``-abs(penalty)`` and keeps the state (or restarts
    the cycle there with ``reset_on_mistake``).

    ## Termination
    Tiles never end an episode: it is truncated at ``max_steps``. The cycle state survives
    respawns and clears on reset.

    ## Registered Configurations
    ``MarlGrid-GoalCycle-13x13-3Agents-v0`` (the canonical task, :data:`CANONICAL`),
    ``MarlGrid-GoalCycle-13x13-v0`` (1 agent), ``MarlGrid-GoalCycle-7x7-v0`` (small, 1 agent),
    ``MarlGrid-GoalCycle-13x13-4Goals-3Agents-v0`` (the canonical task with 4 tiles, for transfer).
    The 2020 study's public scripts' settings (:data:`marlgrid.registry.GOAL_CYCLE_2020`):
    ``MarlGrid-GoalCycle-9x9-3Agents-v0`` / ``-9x9-v0`` (clutter 0.2, penalty 0.5, 150 steps)
    and ``MarlGrid-GoalCycle-13x13-Penalty0.25-3Agents-v0`` / ``-Penalty0.25-v0`` (the canonical
    map at penalty 0.25). Their other documented options: ``reset_on_mistake=True`` (a wrong
    entry restarts the cycle from that tile) and ``agent={"view_size": 9}`` (a 9-cell view).
    """

    def __init__(
        self,
        size: int = 13,
        *,
        n_goals: int = 3,
        reward: float = 1.0,
        penalty: float = 1.5,
        initial_reward: bool = True,
        reset_on_mistake: bool = False,
        streak_bonus: float = 0.0,
        n_clutter: int | None = None,
        clutter_density: float | None = None,
        **kwargs: Any,
    ) -> None:
        size = square_size("GoalCycleEnv", size, kwargs)
        if "cycle_reward" in kwargs:
            raise ConfigError("GoalCycleEnv sets cycle_reward from reward: set reward instead")
        reward = check_float("reward", reward)
        penalty = check_float("penalty", penalty)
        streak_bonus = check_float("streak_bonus", streak_bonus)
        n_goals = check_int("n_goals", n_goals)
        if n_goals < 2:
            raise ConfigError(f"n_goals must be >= 2 for a cycle, got {n_goals}")
        kwargs.setdefault("max_steps", 250)
        kwargs.setdefault("respawn", True)
        super().__init__(
            size,
            size,
            n_goals=n_goals,
            cycle_reward=reward,
            penalty=penalty,
            initial_reward=initial_reward,
            reset_on_mistake=reset_on_mistake,
            streak_bonus=streak_bonus,
            **kwargs,
        )
        if n_clutter is None and clutter_density is None:
            clutter_density = 0.15
        self.n_clutter = clutter_count(size, size, n_clutter, clutter_density)
        self._clutter_label = clutter_label(n_clutter, clutter_density)
        needed = {self._clutter_label: self.n_clutter, "n_goals": n_goals}
        check_fits(size, size, {**needed, "n_agents": len(self.agent_configs)})

    def generate(self, layout: Layout) -> None:
        layout.walls_border()

        n_goals, n_clutter = self.rules.n_goals, self.n_clutter

        def tiles_and_clutter() -> None:
            layout.cycle_tiles(n_goals)
            layout.place("wall", count=n_clutter)

        def scattered_clutter_and_tiles() -> None:
            layout.scatter_connected("wall", n_clutter, tiles=n_goals)

        label = f"{self._clutter_label}, size={self.width}"
        what = f"n_goals={n_goals} tiles and {n_clutter} clutter walls ({label})"
        layout.retry_until_connected(tiles_and_clutter, what, fallback=scattered_clutter_and_tiles)


def parallel_env(**kwargs: Any) -> GoalCycleEnv:
    """A :class:`GoalCycleEnv` (PettingZoo ``ParallelEnv``)."""
    return GoalCycleEnv(**kwargs)


env = aec_from(parallel_env)
