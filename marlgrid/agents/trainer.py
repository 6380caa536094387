"""Training runs: a config in, a trained run directory out (metrics, checkpoints, a video).

The configuration is plain dataclasses (:class:`TrainConfig`); ``experiments/train.py`` composes
it with Hydra, which never enters the core package. The :class:`Trainer` knows no algorithm: it
steps the rollout loop, lets every learner update when it says it is ready, logs, and calls its
callbacks (checkpoints, videos, evaluation are callbacks). A run directory holds ``metrics.csv``,
``tensorboard/`` events, ``checkpoints/`` and ``videos/``; running the same command again resumes
from the newest checkpoint.
"""

from __future__ import annotations

import dataclasses
import math
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import torch

import marlgrid
from marlgrid.agents.callbacks import (
    Callback,
    CallbackList,
    CheckpointCallback,
    EvalCallback,
    VideoCallback,
)
from marlgrid.agents.checkpoint import list_checkpoints, load_checkpoint, save_checkpoint
from marlgrid.agents.learner import config_from_dict
from marlgrid.agents.logger import Logger
from marlgrid.agents.ppo import PPOConfig
from marlgrid.agents.roles import MAIN, RoleConfig, as_role, build_groups, resolve_roles
from marlgrid.agents.rollout import MultiAgentRollout, episode_metrics

__all__ = ["EnvConfig", "LoggerConfig", "RoleConfig", "TrainConfig", "Trainer", "train"]


@dataclass
class EnvConfig:
    """Which environment to train in."""

    id: str = "MarlGrid-GoalCycle-7x7-v0"  # registered marlgrid id
    num_envs: int = 16  # envs stepped together by the batched API
    settings: dict[str, Any] = field(default_factory=dict)  # overrides of the registered settings


@dataclass
class LoggerConfig:
    """Where metrics go."""

    csv: bool = True  # metrics.csv in the run directory
    tensorboard: bool = True  # TensorBoard events in run_dir/tensorboard
    print_every: int = 0  # print a line every N iterations (0: never)
    progress: bool = True  # tqdm progress bar with steps/s and recent return


@dataclass
class TrainConfig:
    """A whole training run."""

    env: EnvConfig = field(default_factory=EnvConfig)
    agent: Any = field(default_factory=PPOConfig)  # the 'main' learner's config (any algorithm)
    learners: dict[str, Any] = field(default_factory=dict)  # more learner configs by name
    roles: dict[str, RoleConfig] = field(default_factory=dict)  # agent id -> role (default main)
    logger: LoggerConfig = field(default_factory=LoggerConfig)
    name: str = "default"  # run name (part of the run directory)
    seed: int = 0  # seeds networks, sampling and environments
    total_timesteps: int = 200_000  # env steps summed over the batch (each is one step per agent)
    iteration_steps: int | None = None  # env steps per env between logs; None: agent.num_steps
    checkpoint_every: int = 10  # iterations between checkpoints (also at the end and on Ctrl-C)
    keep_checkpoints: int = 3  # newest checkpoints kept
    eval_every: int = 0  # iterations between greedy evaluations on fresh envs (0: never)
    eval_episodes: int = 10  # episodes per evaluation
    video: bool = True  # record a greedy episode at the end (needs the video extra)
    video_every: int = 0  # also record every N iterations (0: only at the end)
    resume: bool = True  # continue from the newest checkpoint in the run directory if any
    torch_threads: int = 1  # torch CPU threads


def learner_configs(cfg: TrainConfig) -> dict[str, Any]:
    """Learner name -> config dataclass (``main`` is ``cfg.agent``; dict entries are rebuilt)."""

    def typed(value: Any) -> Any:
        return config_from_dict(value) if isinstance(value, Mapping) else value

    return {MAIN: typed(cfg.agent), **{k: typed(v) for k, v in cfg.learners.items()}}


def iteration_steps(cfg: TrainConfig) -> int:
    """Env steps per env in one trainer iteration."""
    if cfg.iteration_steps is not None:
        return cfg.iteration_steps
    return int(getattr(learner_configs(cfg)[MAIN], "num_steps", 64))


def identity(cfg: TrainConfig) -> dict[str, Any]:
    """The settings a checkpoint must share with the run that resumes it."""

    def strip(c: Any) -> dict[str, Any]:
        d = dataclasses.asdict(c)
        d.pop("device", None)
        return d

    return {
        "env": {"id": cfg.env.id, "num_envs": cfg.env.num_envs, "settings": dict(cfg.env.settings)},
        "learners": {k: strip(v) for k, v in sorted(learner_configs(cfg).items())},
        "roles": {k: dataclasses.asdict(as_role(v)) for k, v in sorted(cfg.roles.items())},
        "iteration_steps": iteration_steps(cfg),
    }


class Trainer:
    """One training run in ``run_dir`` (see the module docstring).

    Attributes callbacks may read: ``cfg``, ``run_dir``, ``vec``, ``groups``, ``scripted``,
    ``learners`` (training groups by name), ``iteration``, ``num_iterations``, ``global_step``,
    ``finished``, ``learner_columns`` (env columns of the trained agents).
    """

    def __init__(
        self, cfg: TrainConfig, run_dir: str | Path, callbacks: Sequence[Callback] = ()
    ) -> None:
        self.cfg, self.run_dir = cfg, Path(run_dir)
        torch.set_num_threads(cfg.torch_threads)
        self.vec = marlgrid.make_vec(cfg.env.id, cfg.env.num_envs, **cfg.env.settings)
        configs = learner_configs(cfg)
        roles = resolve_roles(cfg.roles, self.vec.possible_agents, sorted(configs))
        self.roles = roles
        self.groups, self.scripted = build_groups(roles, self.vec, configs, cfg.seed)
        self.learners = {g.name: g for g in self.groups if g.train}
        agents = self.vec.possible_agents
        self.learner_columns = [agents.index(a) for g in self.learners.values() for a in g.agents]
        self.steps = iteration_steps(cfg)
        per_iteration = self.steps * cfg.env.num_envs
        self.num_iterations = max(1, math.ceil(cfg.total_timesteps / per_iteration))
        self.iteration = self.global_step = 0
        self.ckpt_dir = self.run_dir / "checkpoints"
        defaults: list[Callback] = [CheckpointCallback(cfg.checkpoint_every)]
        if cfg.eval_every:
            defaults.append(EvalCallback(cfg.eval_every, cfg.eval_episodes))
        if cfg.video:
            defaults.append(VideoCallback(cfg.video_every, final=True))
        self.callbacks = CallbackList([*defaults, *callbacks])

    @property
    def finished(self) -> bool:
        return self.iteration >= self.num_iterations

    # -- checkpoints -----------------------------------------------------------------------------

    def checkpoint(self) -> Path:
        """Write the run's state atomically as ``checkpoints/ckpt_<iteration>.pt``."""
        payload = {
            "identity": identity(self.cfg),
            "learners": {name: g.learner.state_dict() for name, g in self.learners.items()},
            "update": self.iteration,
            "global_step": self.global_step,
            "torch_rng": torch.get_rng_state(),
        }
        keep = self.cfg.keep_checkpoints
        return save_checkpoint(self.ckpt_dir, self.iteration, payload, keep=keep)

    def _resume(self) -> None:
        existing = list_checkpoints(self.ckpt_dir)
        if self.cfg.resume and existing:
            payload = load_checkpoint(existing[-1], identity(self.cfg))
            for name, state in payload["learners"].items():
                self.learners[name].learner.load_state_dict(state)
            self.iteration, self.global_step = int(payload["update"]), int(payload["global_step"])
            torch.set_rng_state(payload["torch_rng"])
            print(
                f"resumed from {existing[-1]} at update {self.iteration} (step {self.global_step})",
                flush=True,
            )
        elif existing:
            for old in existing:
                old.unlink()

    # -- the loop --------------------------------------------------------------------------------

    def _iterate(self) -> dict[str, float]:
        """One iteration: ``steps`` env steps; each learner updates whenever it is ready."""
        t0 = time.perf_counter()
        update_time = 0.0
        out: dict[str, dict[str, float]] = {}
        progress = self.iteration / self.num_iterations
        for _ in range(self.steps):
            self.rollout.step()
            for name, g in self.learners.items():
                if g.learner.ready():
                    t1 = time.perf_counter()
                    out[name] = g.learner.update(progress)
                    update_time += time.perf_counter() - t1
        self.iteration += 1
        self.global_step += self.steps * self.cfg.env.num_envs
        metrics: dict[str, float] = {}
        for name, m in out.items():
            prefix = "" if len(self.learners) == 1 else f"{name}/"
            metrics.update({f"{prefix}{k}": v for k, v in m.items()})
        returns = self.rollout.pop_returns()
        metrics.update(episode_metrics(returns, self.rollout.pop_lengths(), self.learner_columns))
        if len(returns):
            for k, agent in enumerate(self.vec.possible_agents):
                metrics[f"charts/return_{agent}"] = float(returns[:, k].mean())
        metrics["charts/rollout_time"] = time.perf_counter() - t0 - update_time
        metrics["charts/update_time"] = update_time
        metrics["charts/update"] = float(self.iteration)
        return metrics

    def run(self) -> dict[str, float]:
        """Train (resuming if possible) until ``total_timesteps``; returns the last metrics."""
        cfg = self.cfg
        self._resume()
        logger = Logger(
            self.run_dir, cfg.logger.csv, cfg.logger.tensorboard, cfg.logger.print_every,
            resume_step=self.global_step,  # drops rows logged past the checkpoint
        )  # fmt: skip
        # Episodes after a resume start fresh, seeded by the iteration they start at.
        seed = cfg.seed * 100_003 + self.iteration
        self.rollout = MultiAgentRollout(self.vec, self.groups, self.scripted, seed=seed)
        bar = _progress(cfg, self.num_iterations, self.iteration)
        metrics: dict[str, float] = {}
        t_start, steps_start = time.perf_counter(), self.global_step
        mid_iteration = False  # learners are past `iteration` while True: no checkpoint then
        completed = True
        try:
            self.callbacks.on_training_start(self)
            while not self.finished:
                mid_iteration = True
                metrics = self._iterate()
                mid_iteration = False
                elapsed = time.perf_counter() - t_start
                metrics["charts/SPS"] = (self.global_step - steps_start) / max(elapsed, 1e-9)
                self.callbacks.on_rollout_end(self, metrics)
                logger.log(metrics, self.global_step)
                _show(bar, metrics)
                if not self.callbacks.on_update_end(self, metrics):
                    completed = self.finished
                    if not completed:
                        self.checkpoint()
                    break
        except KeyboardInterrupt:
            if mid_iteration:  # the learners are part-way into the next iteration
                print(f"\ninterrupted in update {self.iteration + 1}; the newest checkpoint stays")
            else:
                print(f"\ninterrupted: checkpoint written to {self.checkpoint()}", flush=True)
            raise
        finally:
            if bar is not None:
                bar.close()
            logger.close()
        self.callbacks.on_training_end(self, completed)
        return metrics


def train(
    cfg: TrainConfig, run_dir: str | Path, callbacks: Sequence[Callback] = ()
) -> dict[str, float]:
    """Train as ``cfg`` says in ``run_dir`` (resuming there if possible); returns final metrics."""
    return Trainer(cfg, run_dir, callbacks).run()


def _progress(cfg: TrainConfig, total: int, initial: int) -> Any:
    if not cfg.logger.progress:
        return None
    try:
        from tqdm import tqdm
    except ImportError:
        return None
    return tqdm(total=total, initial=initial, unit="update", desc=f"train {cfg.name}")


def _show(bar: Any, metrics: dict[str, float]) -> None:
    if bar is None:
        return
    bar.update(1)
    shown = {"sps": f"{metrics['charts/SPS']:.0f}"}
    ret = metrics.get("charts/episodic_return", float("nan"))
    if not np.isnan(ret):
        shown["return"] = f"{ret:.2f}"
    bar.set_postfix(shown)
