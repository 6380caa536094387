"""Trainer callbacks: everything periodic (checkpoints, evaluation, videos, curricula).

The shape follows Stable-Baselines3's ``BaseCallback`` / ``CallbackList``: hooks at training
start, rollout end (every trainer iteration, before its metrics are logged), update end (after
they are logged) and training end. ``on_update_end`` returning ``False`` stops training after the
current iteration (the training-end hooks still run).
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from marlgrid.config import check_int

if TYPE_CHECKING:
    from marlgrid.agents.training.trainer import Trainer


class Callback:
    """Base class: every hook does nothing; override the ones you need."""

    def on_training_start(self, trainer: Trainer) -> None:
        """Before the envs are first reset and the first iteration runs (also after a resume):
        env rules set here (``trainer.vec.set_rules``) hold from the first episodes on."""

    def on_rollout_end(self, trainer: Trainer, metrics: dict[str, float]) -> None:
        """After an iteration's steps and updates; ``metrics`` may be extended before logging."""

    def on_update_end(self, trainer: Trainer, metrics: dict[str, float]) -> bool:
        """After the iteration's metrics were logged; return ``False`` to stop training."""
        return True

    def on_training_end(self, trainer: Trainer, completed: bool) -> None:
        """After the last iteration; ``completed`` is false when training stopped early."""


class CallbackList(Callback):
    """Several callbacks called in order."""

    def __init__(self, callbacks: Sequence[Callback] = ()) -> None:
        self.callbacks = list(callbacks)

    def on_training_start(self, trainer: Trainer) -> None:
        for c in self.callbacks:
            c.on_training_start(trainer)

    def on_rollout_end(self, trainer: Trainer, metrics: dict[str, float]) -> None:
        for c in self.callbacks:
            c.on_rollout_end(trainer, metrics)

    def on_update_end(self, trainer: Trainer, metrics: dict[str, float]) -> bool:
        keep_going = True
        for c in self.callbacks:
            keep_going = c.on_update_end(trainer, metrics) and keep_going
        return keep_going

    def on_training_end(self, trainer: Trainer, completed: bool) -> None:
        for c in self.callbacks:
            c.on_training_end(trainer, completed)


class CheckpointCallback(Callback):
    """Writes a checkpoint every ``every`` (>= 1) iterations and at the end of training."""

    def __init__(self, every: int) -> None:
        self.every = check_int("checkpoint_every", every, low=1)

    def on_update_end(self, trainer: Trainer, metrics: dict[str, float]) -> bool:
        if trainer.iteration % self.every == 0 or trainer.finished:
            trainer.checkpoint()
        return True


class VideoCallback(Callback):
    """Records a greedy episode every ``every`` iterations (0: never) and, with ``final``, at the
    end of a completed run, into ``run_dir/videos``."""

    def __init__(self, every: int = 0, final: bool = True) -> None:
        self.every, self.final = every, final

    def on_update_end(self, trainer: Trainer, metrics: dict[str, float]) -> bool:
        if self.every and trainer.iteration % self.every == 0:
            self._record(trainer, f"update_{trainer.iteration:06d}.mp4")
        return True

    def on_training_end(self, trainer: Trainer, completed: bool) -> None:
        if self.final and completed:
            self._record(trainer, "final.mp4")

    @staticmethod
    def _record(trainer: Trainer, name: str) -> Path | None:
        from marlgrid.agents.training.evaluation import record_video

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

    def on_rollout_end(self, trainer: Trainer, metrics: dict[str, float]) -> None:
        if self.every and trainer.iteration % self.every == 0:
            from marlgrid.agents.training.evaluation import evaluate

            metrics.update(evaluate(trainer, self.episodes, self.seed))


class StopAtReturn(Callback):
    """Stops training once the logged ``charts/episodic_return`` reaches ``threshold``."""

    def __init__(self, threshold: float) -> None:
        self.threshold = threshold

    def on_update_end(self, trainer: Trainer, metrics: dict[str, Any]) -> bool:
        return not metrics.get("charts/episodic_return", float("-inf")) >= self.threshold
