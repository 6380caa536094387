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


def compose_learner(*overrides: str) -> Any:
    """The main learner's config that ``experiments/train.py`` would build from ``conf/`` with
    these Hydra overrides (the test is skipped without hydra)."""
    import pytest

    hydra = pytest.importorskip("hydra")
    from omegaconf import OmegaConf

    import experiments.train  # noqa: F401  (registers the schemas)
    from marlgrid.agents.training.train_config import learner_configs

    conf = Path(__file__).resolve().parents[2] / "conf"
    with hydra.initialize_config_dir(str(conf), version_base="1.3"):
        cfg = hydra.compose("train", overrides=list(overrides))
    return learner_configs(OmegaConf.to_object(cfg))["main"]


def assert_term_trains_head_memory_encoder_only(loss: Any, net: Any, head: str) -> None:
    """The gradient of a loss term's ``loss`` reaches ``net``'s encoder, memory core and extra
    head ``head``, and neither the policy nor the value head."""
    import torch

    params = dict(net.named_parameters())
    grads = torch.autograd.grad(loss, list(params.values()), allow_unused=True)
    pairs = zip(params, grads, strict=True)
    norm = {k: 0.0 if g is None else float(g.abs().sum()) for k, g in pairs}
    for part in ("torso.encoder.", "torso.memory.", f"extra_heads.{head}."):
        assert any(norm[k] > 0 for k in norm if k.startswith(part)), part
    assert all(norm[k] == 0 for k in norm if k.startswith(("policy_head.", "value_head.")))
