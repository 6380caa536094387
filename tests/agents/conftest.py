"""Shared helpers for the learner tests."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from marlgrid.agents.learner import Learner
from marlgrid.agents.storage.rollout_buffer import RolloutBuffer
from marlgrid.agents.training.rollout import (
    MultiAgentRollout,
    PolicyGroup,
    SingleAgentBatch,
    episode_metrics,
)
from marlgrid.agents.training.trainer import EnvConfig, LoggerConfig, TrainConfig, Trainer
from marlgrid.analysis.mmer import read_metrics


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


def train_learner(
    env: Any, learner: Learner, total_timesteps: int, seed: int | None = 0
) -> list[dict[str, float]]:
    """Train ``learner`` for every agent of ``env`` (a gymnasium-style batch, or a marlgrid
    ``VectorEnv``) for ``total_timesteps`` env steps with the bare rollout loop: step, and update
    whenever the learner is ready. For tests of a learner object; runs (run directories,
    checkpoints, metrics.csv) go through :class:`~marlgrid.agents.training.trainer.Trainer`.

    Returns every update's metrics with the episodes that ended since the previous update
    (``charts/episodic_return``, ``_length``, ``charts/episodes``) and ``global_step``.
    """
    vec = env if hasattr(env, "possible_agents") else SingleAgentBatch(env)
    group = PolicyGroup("main", learner, list(vec.possible_agents))
    rollout = MultiAgentRollout(vec, [group], seed=seed)
    history: list[dict[str, float]] = []
    while rollout.env_steps < total_timesteps:
        rollout.step()
        if learner.ready():
            metrics = learner.update(progress=rollout.env_steps / total_timesteps)
            metrics.update(episode_metrics(rollout.pop_returns(), rollout.pop_lengths()))
            metrics["global_step"] = float(rollout.env_steps)
            history.append(metrics)
    return history


def train_run(
    run_dir: Path, env_id: str, num_envs: int, agent: Any, total: int, seed: int = 0
) -> tuple[Trainer, list[dict[str, float]]]:
    """A trainer run of ``agent`` on ``env_id`` in ``run_dir``; the trainer and its metrics rows."""
    cfg = TrainConfig(
        env=EnvConfig(id=env_id, num_envs=num_envs),
        agent=agent,
        logger=LoggerConfig(tensorboard=False, progress=False),
        seed=seed,
        total_timesteps=total,
        video=False,
    )
    trainer = Trainer(cfg, run_dir)
    trainer.run()
    return trainer, read_metrics(run_dir)
