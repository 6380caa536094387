"""What callbacks, evaluation and videos may read of a running trainer."""

from __future__ import annotations

from pathlib import Path
from typing import Any, Protocol


class TrainerView(Protocol):
    """What callbacks, evaluation and videos read of a trainer
    (:class:`~marlgrid.agents.training.trainer.Trainer` has all of it)."""

    cfg: Any  #: the run's TrainConfig
    run_dir: Path
    vec: Any  #: the main env stream's batch
    groups: list[Any]  #: the main stream's policy groups
    scripted: dict[str, Any]  #: the main stream's scripted policies (agent id -> policy)
    learners: dict[str, Any]  #: training groups of the main stream by learner name
    learner_columns: list[int]  #: env columns of the main stream's trained agents
    rules: dict[str, Any]  #: rules set during training (e.g. by a curriculum), on every stream
    iteration: int
    num_iterations: int
    global_step: int

    @property
    def finished(self) -> bool: ...

    @property
    def stream_envs(self) -> list[Any]:
        """The env batch of every stream, the main one first."""
        ...

    def say(self, message: str) -> None: ...

    def checkpoint(self) -> Path: ...

    def set_rules(self, **rules: Any) -> None: ...
