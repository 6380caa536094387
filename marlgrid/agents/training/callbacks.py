"""Trainer callbacks: everything periodic (checkpoints, evaluation, videos, curricula).

The shape follows Stable-Baselines3's ``BaseCallback`` / ``CallbackList``: hooks at training
start, rollout end (every trainer iteration, before its metrics are logged), update end (after
they are logged) and training end. ``on_update_end`` returning ``False`` stops training after the
current iteration (the training-end hooks still run).

A callback may also check the run before anything is written (``check``) and keep state across
resumes: with a ``state_key``, its ``state_dict()`` is saved in every checkpoint under that key
and handed back to ``load_state_dict`` when the run resumes (the curriculum keeps its stages
that way). Callbacks see the trainer through :class:`TrainerView`. A callback, in full::

    class StopWhenSolved(Callback):
        state_key = "stop_when_solved"  # its state travels with the checkpoints

        def __init__(self) -> None:
            self.hits = 0

        def on_update_end(self, trainer, metrics) -> bool:
            self.hits += metrics.get("eval/return", 0.0) >= 0.95
            return self.hits < 3  # stop after three solved evaluations

        def state_dict(self) -> dict:
            return {"hits": self.hits}

        def load_state_dict(self, state) -> None:  # {} for a checkpoint without it
            self.hits = state.get("hits", 0)
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from marlgrid.agents.training.view import TrainerView
from marlgrid.config import check_int

#: checkpoint entries the trainer writes itself: no callback's ``state_key`` may take them
RESERVED_STATE_KEYS = ("format", "identity", "learners", "update", "global_step",
                       "total_timesteps", "torch_rng", "exported_from", "note")  # fmt: skip


class Callback:
    """Base class: every hook does nothing; override the ones you need."""

    #: key of this callback's state in checkpoints; None: it keeps none
    state_key: str | None = None

    def check(self, trainer: TrainerView) -> None:
        """When the trainer is built, before anything is written: raise
        :class:`~marlgrid.config.ConfigError` for a setting this run cannot honour."""

    def state_dict(self) -> dict[str, Any]:
        """State to save with each checkpoint (used when ``state_key`` is set)."""
        return {}

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        """Restore what :meth:`state_dict` saved (on resume)."""

    def on_training_start(self, trainer: TrainerView) -> None:
        """Before the envs are first reset and the first iteration runs (also after a resume):
        env rules set here (``trainer.set_rules``: every stream, and evaluation and videos too)
        hold from the first episodes on."""

    def on_rollout_end(self, trainer: TrainerView, metrics: dict[str, float]) -> None:
        """After an iteration's steps and updates; ``metrics`` may be extended before logging."""

    def on_update_end(self, trainer: TrainerView, metrics: dict[str, float]) -> bool:
        """After the iteration's metrics were logged; return ``False`` to stop training."""
        return True

    def on_training_end(self, trainer: TrainerView, completed: bool) -> None:
        """After the last iteration; ``completed`` is false when training stopped early."""


class CallbackList(Callback):
    """Several callbacks called in order."""

    def __init__(self, callbacks: Sequence[Callback] = ()) -> None:
        self.callbacks = list(callbacks)
        keys = [c.state_key for c in self.callbacks if c.state_key is not None]
        if len(set(keys)) < len(keys):
            raise ValueError(f"callbacks share a state_key: {keys}; each needs its own")
        taken = sorted(set(keys) & set(RESERVED_STATE_KEYS))
        if taken:
            raise ValueError(
                f"state_key {taken} is a checkpoint entry of the trainer's own; reserved: "
                f"{list(RESERVED_STATE_KEYS)}"
            )

    def stateful(self) -> list[Callback]:
        """The callbacks that keep state in checkpoints (``state_key`` set)."""
        return [c for c in self.callbacks if c.state_key is not None]

    def check(self, trainer: TrainerView) -> None:
        for c in self.callbacks:
            c.check(trainer)

    def on_training_start(self, trainer: TrainerView) -> None:
        for c in self.callbacks:
            c.on_training_start(trainer)

    def on_rollout_end(self, trainer: TrainerView, metrics: dict[str, float]) -> None:
        for c in self.callbacks:
            c.on_rollout_end(trainer, metrics)

    def on_update_end(self, trainer: TrainerView, metrics: dict[str, float]) -> bool:
        keep_going = True
        for c in self.callbacks:
            keep_going = c.on_update_end(trainer, metrics) and keep_going
        return keep_going

    def on_training_end(self, trainer: TrainerView, completed: bool) -> None:
        for c in self.callbacks:
            c.on_training_end(trainer, completed)


class CheckpointCallback(Callback):
    """Writes a checkpoint every ``every`` (>= 1) iterations and at the end of training."""

    def __init__(self, every: int) -> None:
        self.every = check_int("checkpoint_every", every, low=1)

    def on_update_end(self, trainer: TrainerView, metrics: dict[str, float]) -> bool:
        if trainer.iteration % self.every == 0 or trainer.finished:
            trainer.checkpoint()
        return True


class VideoCallback(Callback):
    """Records a greedy episode every ``every`` iterations (0: never) and, with ``final``, at the
    end of a completed run, into ``run_dir/videos``."""

    def __init__(self, every: int = 0, final: bool = True) -> None:
        self.every, self.final = every, final

    def on_update_end(self, trainer: TrainerView, metrics: dict[str, float]) -> bool:
        if self.every and trainer.iteration % self.every == 0:
            self._record(trainer, f"update_{trainer.iteration:06d}.mp4")
        return True

    def on_training_end(self, trainer: TrainerView, completed: bool) -> None:
        if self.final and completed:
            self._record(trainer, "final.mp4")

    @staticmethod
    def _record(trainer: TrainerView, name: str) -> Path | None:
        from marlgrid.agents.training.env_sources import is_marlgrid_id
        from marlgrid.agents.training.evaluation import record_video

        if not is_marlgrid_id(trainer.cfg.env.id):  # popgym:, memorygym: ... have no renderer
            trainer.say(f"no video: {trainer.cfg.env.id} is not a marlgrid env (video=false)")
            return None
        try:
            path = record_video(trainer, trainer.run_dir / "videos" / name, seed=trainer.cfg.seed)
        except ImportError as exc:  # the video extra is missing
            trainer.say(f"no video written ({exc}); pip install 'marlgrid[video]'")
            return None
        trainer.say(f"video: {path}")
        return path


class EvalCallback(Callback):
    """Every ``every`` iterations, plays ``episodes`` greedy episodes on fresh envs (seeds
    ``seed, seed + 1, ...``) and adds ``eval/return`` (mean over the learners' agents) and
    ``eval/return_<agent>`` to the iteration's metrics."""

    def __init__(self, every: int, episodes: int = 10, seed: int = 10_000) -> None:
        self.every, self.episodes, self.seed = every, episodes, seed

    def on_rollout_end(self, trainer: TrainerView, metrics: dict[str, float]) -> None:
        if self.every and trainer.iteration % self.every == 0:
            from marlgrid.agents.training.evaluation import evaluate

            metrics.update(evaluate(trainer, self.episodes, self.seed))


class StopAtReturn(Callback):
    """Stops training once the logged ``charts/episodic_return`` reaches ``threshold``."""

    def __init__(self, threshold: float) -> None:
        self.threshold = threshold

    def on_update_end(self, trainer: TrainerView, metrics: dict[str, Any]) -> bool:
        return not metrics.get("charts/episodic_return", float("-inf")) >= self.threshold
