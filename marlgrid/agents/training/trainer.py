"""Training runs: a config in, a trained run directory out (metrics, checkpoints, a video).

The configuration is plain dataclasses (:class:`TrainConfig`); ``experiments/train.py`` composes
it with Hydra, which never enters the core package. The :class:`Trainer` knows no algorithm: it
steps the rollout loop, lets every learner update when it says it is ready, logs, and calls its
callbacks (checkpoints, videos, evaluation are callbacks).

A run directory holds ``config.json`` (the resolved config as plain data, read back by
:class:`~marlgrid.agents.bookkeeping.saved_run.SavedRun`), ``metrics.csv``, ``tensorboard/`` events,
``checkpoints/``, ``videos/`` and ``train.log`` (the run's messages). A run may train on several
env streams (``streams``, :mod:`marlgrid.agents.training.streams`), play some of a stream's envs
without its experts and let experts leave during episodes (``mixed``, ``dropout``:
:mod:`marlgrid.agents.training.mixing`). Safety rules:

- **Checked first.** Every setting is checked when the trainer is built, before anything is
  written: :meth:`TrainConfig.validate`, then each learner config's own ``validate(key,
  num_slots)`` (see :class:`ValidatingConfig`; every registered algorithm provides one), the env
  (built once), the roles and frozen checkpoints. A bad value raises
  :class:`~marlgrid.config.ConfigError` naming the key, the value and what is allowed. Before
  the envs and networks are built, their memory is estimated from the config and a run that
  cannot fit this machine is refused, naming the setting that dominates
  (:mod:`~marlgrid.agents.bookkeeping.resources`).
- **One process per directory.** :meth:`Trainer.run` holds a
  :class:`~marlgrid.agents.bookkeeping.run_dir.RunLock` on the run directory.
- **Resume continues the same run only.** The newest checkpoint must come from the same settings
  (:func:`identity`) and the same ``total_timesteps``; a larger (or smaller) total needs
  ``extend=true`` (schedules then stretch to the new total). A complete run says so and does
  nothing.
- **Signals checkpoint.** On SIGINT or SIGTERM the current iteration (``iteration_steps`` env
  steps and the updates they trigger, about a second by default) finishes, a checkpoint of that
  iteration is written, and :class:`Interrupted` is raised (``experiments/train.py`` exits 130 or
  143). A second signal stops at once; the newest checkpoint stays.
"""

from __future__ import annotations

import logging
import math
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import numpy as np
import torch

from marlgrid.agents.bookkeeping.checkpoint import (
    CheckpointError,
    list_checkpoints,
    load_checkpoint,
    save_checkpoint,
)
from marlgrid.agents.bookkeeping.logger import Logger, last_logged, progress_bar, show_progress
from marlgrid.agents.bookkeeping.memory_budget import check_memory
from marlgrid.agents.bookkeeping.run_dir import (
    RunLock,
    StopRequest,
    disk_full_error,
    is_disk_full,
    remove_temp_files,
)
from marlgrid.agents.bookkeeping.saved_run import write_run_config
from marlgrid.agents.learner import resume_note
from marlgrid.agents.training.callbacks import (
    Callback,
    CallbackList,
    CheckpointCallback,
    EvalCallback,
    VideoCallback,
)
from marlgrid.agents.training.curriculum import CurriculumCallback
from marlgrid.agents.training.divergence import check_finite
from marlgrid.agents.training.roles import MAIN, RoleConfig
from marlgrid.agents.training.streams import build_streams
from marlgrid.agents.training.train_config import (
    EnvConfig,
    LoggerConfig,
    StreamConfig,
    TrainConfig,
    ValidatingConfig,
    identity,
    identity_defaults,
    iteration_steps,
    learner_configs,
)
from marlgrid.agents.training.warm_start import warm_start
from marlgrid.plugins import load_plugins

__all__ = [
    "EnvConfig",
    "Interrupted",
    "LoggerConfig",
    "RoleConfig",
    "StreamConfig",
    "TrainConfig",
    "Trainer",
    "ValidatingConfig",
    "train",
]


class Interrupted(KeyboardInterrupt):
    """Training stopped by SIGINT or SIGTERM after writing the checkpoint ``checkpoint``."""

    def __init__(self, signum: int, checkpoint: Path | None, exit_code: int) -> None:
        super().__init__(f"stopped by signal {signum}; checkpoint {checkpoint}")
        self.signum, self.checkpoint, self.exit_code = signum, checkpoint, exit_code


class Trainer:
    """One training run in ``run_dir`` (see the module docstring).

    Building it checks the whole configuration and builds the env, groups and callbacks; it
    writes nothing. :meth:`run` trains. ``stop`` (default: a new one) turns SIGINT/SIGTERM into
    a checkpoint and :class:`Interrupted`.

    Attributes callbacks may read: ``cfg``, ``run_dir``, ``vec``, ``groups``, ``scripted``,
    ``learners`` (training groups by name), ``iteration``, ``num_iterations``, ``global_step``,
    ``finished``, ``learner_columns`` (env columns of the trained agents), ``rules`` (what
    :meth:`set_rules` set, e.g. a curriculum's stage) and ``streams`` (every
    :class:`~marlgrid.agents.training.streams.EnvStream`, the main one first; ``vec``,
    ``groups``, ``scripted``, ``learners`` and ``learner_columns`` are the main stream's).
    """

    def __init__(
        self,
        cfg: TrainConfig,
        run_dir: str | Path,
        callbacks: Sequence[Callback] = (),
        stop: StopRequest | None = None,
    ) -> None:
        load_plugins(cfg.plugins)  # outside code first: what the config names may live there
        cfg.validate()
        configs = learner_configs(cfg)  # validated once the slots they drive are known
        check_memory(cfg, configs)  # before anything large is built
        self.cfg, self.run_dir = cfg, Path(run_dir)
        self.stop = stop or StopRequest()
        self.log = _run_logger()
        torch.set_num_threads(cfg.torch_threads)
        self.streams, self.joins = build_streams(cfg, configs)
        main = self.streams[0]
        self.vec, self.roles = main.vec, main.roles
        self.groups, self.scripted = main.groups, main.scripted
        self.learners = {}  # every training group by learner name, the main stream's first
        for stream in self.streams:
            for name, group in stream.learners.items():
                self.learners.setdefault(name, group)
        self.learner_columns = main.learner_columns
        self.warm_started: dict[str, str] = {}  # learner -> the saved learner it started from
        if cfg.init_from is not None:  # a resume overwrites these weights with its own
            learners = {name: g.learner for name, g in self.learners.items()}
            self.warm_started = warm_start(learners, cfg.init_from, cfg.env.settings)
        self.rules: dict[str, Any] = {}  # rules set during training (set_rules), every stream
        self.steps = iteration_steps(cfg)
        per_iteration = self.steps * sum(s.vec.num_envs for s in self.streams)
        self.num_iterations = max(1, math.ceil(cfg.total_timesteps / per_iteration))
        self.iteration = self.global_step = 0
        self.ckpt_dir = self.run_dir / "checkpoints"
        self._saved_iteration: int | None = None  # iteration of the newest checkpoint on disk
        defaults: list[Callback] = [CheckpointCallback(cfg.checkpoint_every)]
        if cfg.eval_every:
            defaults.append(EvalCallback(cfg.eval_every, cfg.eval_episodes))
        if cfg.video:
            defaults.append(VideoCallback(cfg.video_every, final=True))
        if cfg.curriculum:  # after evaluation: a threshold may read eval/ metrics
            defaults.append(CurriculumCallback(cfg.curriculum))
        self.callbacks = CallbackList([*defaults, *callbacks])
        self.callbacks.check(self)

    @property
    def stream_envs(self) -> list[Any]:
        """The env batch of every stream, the main one first."""
        return [s.vec for s in self.streams]

    def set_rules(self, **rules: Any) -> None:
        """Set env rules on every stream (each env takes them at its next reset); evaluation
        and videos play them too (:attr:`rules`)."""
        for stream in self.streams:
            stream.vec.set_rules(**rules)
        self.rules.update(rules)

    @property
    def finished(self) -> bool:
        return self.iteration >= self.num_iterations

    def say(self, message: str) -> None:
        """Print ``message`` and write it to ``train.log``."""
        print(message, flush=True)
        self.log.info(message.strip())

    # -- checkpoints -----------------------------------------------------------------------------

    def checkpoint(self) -> Path:
        """Write the run's state atomically as ``checkpoints/ckpt_<iteration>.pt``."""
        payload = {
            "identity": identity(self.cfg),
            "learners": {name: g.learner.state_dict() for name, g in self.learners.items()},
            "update": self.iteration,
            "global_step": self.global_step,
            "total_timesteps": self.cfg.total_timesteps,
            "torch_rng": torch.get_rng_state(),
        }
        for callback in self.callbacks.stateful():
            payload[callback.state_key] = callback.state_dict()
        keep = self.cfg.keep_checkpoints
        path = save_checkpoint(self.ckpt_dir, self.iteration, payload, keep=keep)
        self._saved_iteration = self.iteration
        self.log.info(f"checkpoint {path} (update {self.iteration}, step {self.global_step})")
        return path

    def _checkpoint_once(self) -> Path:
        """A checkpoint of the current iteration, unless the newest one already is."""
        if self._saved_iteration == self.iteration:
            return self.ckpt_dir / f"ckpt_{self.iteration:09d}.pt"
        return self.checkpoint()

    def _resume(self) -> bool:
        """Load the newest checkpoint if resuming; True when one was loaded."""
        existing = list_checkpoints(self.ckpt_dir)
        if self.cfg.resume and existing:
            payload = load_checkpoint(existing[-1], identity(self.cfg), identity_defaults(self.cfg))
            saved_total = payload.get("total_timesteps")
            if saved_total is not None and saved_total != self.cfg.total_timesteps:
                if not self.cfg.extend:
                    raise CheckpointError(
                        f"checkpoint {existing[-1]} belongs to a run of total_timesteps="
                        f"{saved_total}, but total_timesteps is {self.cfg.total_timesteps} now. "
                        "To train this run on to the new total, add extend=true (schedules "
                        "such as the learning rate then stretch to it); to start over, "
                        "resume=false or another run directory"
                    )
                self.say(
                    f"extending the run from {saved_total} to {self.cfg.total_timesteps} steps"
                )
            for name, state in payload["learners"].items():
                self.learners[name].learner.load_state_dict(state)
                note = resume_note(self.learners[name].learner)
                if note:
                    self.say(f"learner {name}: {note}")
            self.iteration, self.global_step = int(payload["update"]), int(payload["global_step"])
            self._saved_iteration = self.iteration
            torch.set_rng_state(payload["torch_rng"])
            for callback in self.callbacks.stateful():
                callback.load_state_dict(payload.get(callback.state_key, {}))
            return True
        if existing:
            self.say(f"resume=false: removing {len(existing)} checkpoint(s) of the previous run")
            for old in existing:
                old.unlink()
        return False

    # -- the loop --------------------------------------------------------------------------------

    def _iterate(self) -> dict[str, float]:
        """One iteration: ``steps`` env steps; each learner updates whenever it is ready."""
        t0 = time.perf_counter()
        update_time = 0.0
        out: dict[str, dict[str, list[float]]] = {}  # learner -> metric -> one value per update
        counts: dict[str, int] = {}  # learner -> updates in this iteration
        progress = self.iteration / self.num_iterations
        for _ in range(self.steps):
            for stream in self.streams:
                stream.rollout.step()
            for name, g in self.learners.items():
                if g.learner.ready():
                    t1 = time.perf_counter()
                    counts[name] = counts.get(name, 0) + 1
                    for key, value in g.learner.update(progress).items():
                        out.setdefault(name, {}).setdefault(key, []).append(value)
                    check_finite(name, g.learner, _settings_key(name), self.iteration + 1)
                    update_time += time.perf_counter() - t1
        self.iteration += 1
        self.global_step += self.steps * sum(s.vec.num_envs for s in self.streams)
        metrics: dict[str, float] = {}
        for name, m in out.items():  # each metric: its mean over the updates that reported it
            prefix = "" if len(self.learners) == 1 else f"{name}/"
            metrics.update({f"{prefix}{k}": float(np.mean(v)) for k, v in m.items()})
            metrics[f"{prefix}charts/updates"] = float(counts[name])
        for stream in self.streams:
            metrics.update(stream.pop_metrics())
        metrics["charts/rollout_time"] = time.perf_counter() - t0 - update_time
        metrics["charts/update_time"] = update_time
        metrics["charts/update"] = float(self.iteration)
        return metrics

    def run(self) -> dict[str, float]:
        """Train (resuming if possible) until ``total_timesteps``; returns the last metrics.

        A complete run returns its last logged metrics and does nothing else.
        """
        with self.stop, RunLock(self.run_dir) as lock, self._log_file():
            if lock.stale_pid is not None:
                self.say(
                    f"took over the lock of process {lock.stale_pid}, which ended without "
                    f"releasing it (killed?); {self.run_dir} continues from its newest checkpoint"
                )
            stale = remove_temp_files(self.run_dir, self.ckpt_dir)  # the lock is ours: none live
            if stale:
                self.say(
                    f"removed {len(stale)} temporary file(s) of a write cut short (a killed "
                    f"process?): {', '.join(p.name for p in stale)}"
                )
            try:
                return self._run()
            except Exception as exc:
                if is_disk_full(exc):  # not logged: train.log is on the full disk too
                    raise disk_full_error(self.run_dir, exc) from None
                self.log.error(f"failed: {type(exc).__name__}: {exc}")
                raise

    def _run(self) -> dict[str, float]:
        cfg = self.cfg
        if self._resume():
            where = f"update {self.iteration} of {self.num_iterations} (step {self.global_step})"
            if self.finished:
                self.say(
                    f"run {self.run_dir} is complete: {where}; nothing to do (to train "
                    "longer, rerun with a larger total_timesteps and extend=true)"
                )
                return last_logged(self.run_dir)
            self.say(f"resumed from {list_checkpoints(self.ckpt_dir)[-1]} at {where}")
        else:
            self.say(
                f"training {cfg.name} in {self.run_dir}: {self.num_iterations} updates of "
                f"{self.steps * sum(s.vec.num_envs for s in self.streams)} env steps"
            )
            for name, source in self.warm_started.items():
                self.say(f"learner {name} starts from the weights of {source} in {cfg.init_from}")
        write_run_config(self.run_dir, cfg)  # config.json: the run's config as plain data
        logger = Logger(
            self.run_dir, cfg.logger.csv, cfg.logger.tensorboard, cfg.logger.print_every,
            resume_step=self.global_step,  # drops rows logged past the checkpoint
        )  # fmt: skip
        bar = progress_bar(cfg.logger.progress, cfg.name, self.num_iterations, self.iteration)
        metrics: dict[str, float] = {}
        t_start, steps_start = time.perf_counter(), self.global_step
        mid_iteration = False  # learners are past `iteration` while True: no checkpoint then
        completed = True
        stop = self.stop
        stop.deferring = True
        try:
            self.callbacks.on_training_start(self)  # before the envs' first reset: rules apply
            # Episodes after a resume start fresh, seeded by the iteration they start at.
            seed = cfg.seed * 100_003 + self.iteration
            for join in self.joins:  # after a resume too: the learner's storage for every part
                join.begin()
            self.rollout = self.streams[0].start(seed)
            for k, stream in enumerate(self.streams[1:], start=1):
                stream.start(seed + 7_919 * k)
            t_start = time.perf_counter()
            while not self.finished and not stop.requested:
                mid_iteration = True
                metrics = self._iterate()
                mid_iteration = False
                elapsed = time.perf_counter() - t_start
                metrics["charts/SPS"] = (self.global_step - steps_start) / max(elapsed, 1e-9)
                self.callbacks.on_rollout_end(self, metrics)
                logger.log(metrics, self.global_step)
                show_progress(bar, metrics)
                if not self.callbacks.on_update_end(self, metrics):
                    completed = self.finished
                    if not completed:
                        self.checkpoint()
                    break
            if stop.requested and stop.signum is not None:
                path = self._checkpoint_once()
                self.say(
                    f"\n{stop.name} at update {self.iteration} (step {self.global_step}): "
                    f"checkpoint {path} written; rerun the same command to resume"
                )
                raise Interrupted(stop.signum, path, stop.exit_code)
        except Interrupted:
            raise
        except KeyboardInterrupt:
            if mid_iteration or stop.requested:  # part-way into an iteration, or a second signal
                self.say(
                    f"\ninterrupted in update {self.iteration + 1}; the newest checkpoint stays"
                )
            else:
                self.say(f"\ninterrupted: checkpoint written to {self._checkpoint_once()}")
            raise
        finally:
            stop.deferring = False  # from here on a signal stops at once: all is saved
            if bar is not None:
                bar.close()
            logger.close()
        try:
            self.callbacks.on_training_end(self, completed)
        except KeyboardInterrupt:
            self.say(f"\ninterrupted after the last checkpoint (update {self.iteration})")
            raise
        state = "complete" if self.finished else "stopped by a callback"
        self.say(f"run {state} at update {self.iteration} (step {self.global_step})")
        return metrics

    @contextmanager
    def _log_file(self) -> Iterator[None]:
        """``train.log`` receives this run's messages while the block runs."""
        handler = logging.FileHandler(self.run_dir / "train.log", encoding="utf-8")
        handler.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(message)s"))
        self.log.addHandler(handler)
        try:
            yield
        finally:
            self.log.removeHandler(handler)
            handler.close()


def train(
    cfg: TrainConfig,
    run_dir: str | Path,
    callbacks: Sequence[Callback] = (),
    stop: StopRequest | None = None,
) -> dict[str, float]:
    """Train as ``cfg`` says in ``run_dir`` (resuming there if possible); returns final metrics."""
    return Trainer(cfg, run_dir, callbacks, stop).run()


def _settings_key(learner: str) -> str:
    """Where a learner's settings sit on the command line: ``agent`` or ``learners.<name>``."""
    return "agent" if learner == MAIN else f"learners.{learner}"


def _run_logger() -> logging.Logger:
    """A logger of its own per trainer (``train.log`` handlers never cross runs)."""
    log = logging.Logger("marlgrid.train", logging.INFO)
    log.propagate = False
    return log
