"""The social metrics of :mod:`marlgrid.metrics.social` as a rollout observer.

:class:`SocialObserver` is a :class:`~marlgrid.agents.training.rollout.StepObserver`: it feeds a
:class:`~marlgrid.metrics.social.SocialTracker` the engine's state before each step and the step's
actions and rewards after it (about 20 us per step for 16 envs of 3 agents, plus about 1 ms
per batch of episode ends for the repeat metrics and their shuffled control of
:mod:`marlgrid.metrics.following`), and :meth:`SocialObserver.pop` turns the episodes ended
since the last call into ``social/*`` log entries. The trainer attaches one to every env
stream with a marlgrid engine whose rules place goal-cycle tiles.

Experts (the reference set of the ``expert_*`` metrics) are by default the agents of scripted
policies that know the task (``is_expert``: the oracle and the discoverer, not ``random``) and
of groups that do not train (frozen checkpoints).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from marlgrid.agents.training.rollout import PolicyGroup
from marlgrid.metrics.following import DEFAULT_REPEAT_WINDOW
from marlgrid.metrics.social import DEFAULT_WINDOW, SocialTracker, summarize


def default_experts(groups: Sequence[PolicyGroup], scripted: dict[str, Any]) -> list[str]:
    """Agents of expert scripted policies and of frozen groups (see the module docstring)."""
    experts = [a for a, p in scripted.items() if getattr(p, "is_expert", False)]
    return experts + [a for g in groups if not g.train for a in g.agents]


class SocialObserver:
    """Tracks the social metrics of ``vec`` (a marlgrid ``VectorEnv``) per agent per episode;
    ``window`` / ``repeat_window``: those of :class:`~marlgrid.metrics.social.SocialTracker`."""

    def __init__(
        self,
        vec: Any,
        experts: Sequence[str],
        window: int = DEFAULT_WINDOW,
        repeat_window: int = DEFAULT_REPEAT_WINDOW,
    ) -> None:
        engine = getattr(vec, "engine", None)
        if engine is None:
            raise ValueError("social metrics need a marlgrid VectorEnv (one with an engine)")
        agents = list(vec.possible_agents)
        unknown = sorted(set(experts) - set(agents))
        if unknown:
            raise ValueError(f"experts {unknown} are not agents of the env; agents are {agents}")
        self.agents = agents
        self.tracker = SocialTracker.for_engine(
            engine, [agents.index(a) for a in experts], window, repeat_window
        )

    @classmethod
    def for_roles(
        cls, vec: Any, groups: Sequence[PolicyGroup], scripted: dict[str, Any]
    ) -> SocialObserver | None:
        """An observer with the default experts, or None where ``vec`` has no engine or its
        rules place no goal-cycle tiles (the metrics are about those tiles)."""
        engine = getattr(vec, "engine", None)
        if engine is None or not any(r.n_goals > 0 for r in engine.next_rules):
            return None
        return cls(vec, default_experts(groups, scripted))

    def before_step(self, vec: Any, actions: np.ndarray) -> None:
        self.tracker.observe(vec.engine)

    def after_step(
        self, vec: Any, actions: np.ndarray, rewards: np.ndarray, infos: dict[str, Any]
    ) -> None:
        self.tracker.record(vec.engine, actions, rewards, infos.get("_episode"))

    def pop(self, columns: list[int] | None = None) -> dict[str, float]:
        """The metrics of the episodes ended since the last call, as log entries
        (:func:`marlgrid.metrics.social.summarize`: means over ``columns``' agents and per
        agent)."""
        return summarize(self.tracker.pop(), self.agents, columns)
