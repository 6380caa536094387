"""Shared helpers for the learner tests."""

from __future__ import annotations

from typing import Any

from marlgrid.agents.learner import Learner
from marlgrid.agents.storage.rollout_buffer import RolloutBuffer
from marlgrid.agents.training.rollout import MultiAgentRollout, PolicyGroup, SingleAgentBatch


def collect(
    env: Any,
    learner: Learner,
    num_steps: int,
    seed: int | None = 0,
    buffer: RolloutBuffer | None = None,
    train: bool = True,
    explore: bool = True,
) -> MultiAgentRollout:
    """Run ``learner`` for ``num_steps`` steps on a gymnasium-style batch ``env`` (one slot per
    env) through the rollout loop; returns the rollout (the steps are in ``learner.buffer``).

    ``buffer`` replaces the learner's own buffer before the first step (e.g. one with another
    ``state_stride``); ``train=False`` only acts (nothing recorded), ``explore=False`` is greedy.
    """
    group = PolicyGroup("main", learner, [SingleAgentBatch.agent], train=train, explore=explore)
    rollout = MultiAgentRollout(SingleAgentBatch(env), [group], seed=seed)
    if buffer is not None:
        learner.buffer = buffer  # type: ignore[attr-defined]
    rollout.collect(num_steps)
    return rollout
