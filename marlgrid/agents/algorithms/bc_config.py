"""The hyperparameters of behaviour cloning (:class:`BCConfig`), each checked by
:meth:`BCConfig.validate` before anything runs; the learner is :mod:`.bc`."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from marlgrid.agents.algorithms.chunking import check_chunking
from marlgrid.agents.algorithms.imitation import check_teacher_id
from marlgrid.agents.devices import check_device
from marlgrid.agents.networks.config import (
    EPOCHS_WHY,
    MAX_PASSES,
    NetworkConfig,
    check_learner_header,
)
from marlgrid.agents.networks.registry import check_network_kind
from marlgrid.config import ConfigError, check_float, check_int

__all__ = ["BCConfig"]


@dataclass
class BCConfig:
    """Hyperparameters of behaviour cloning (one line of doc per field)."""

    algo: str = "bc"  # the learner registry entry this config builds
    network: NetworkConfig = field(default_factory=NetworkConfig)  # torso and heads (as PPO's)
    network_kind: str = "actor_critic"  # the network registry entry built (networks.registry)
    teachers: tuple[str, ...] = ("agent_1",)  # agent ids imitated (one sequence each per env)
    # optimisation
    lr: float = 1e-3  # Adam learning rate
    adam_eps: float = 1e-5  # Adam epsilon
    max_grad_norm: float = 0.5  # global gradient-norm clip
    # rollout and minibatches
    num_steps: int = 64  # steps stored per env between updates (T)
    epochs: int = 4  # passes over the stored sequences per update
    chunk_len: int = 16  # length of the sequence chunks minibatches are made of (BPTT length)
    num_minibatches: int = 4  # minibatches per epoch (chunks are split evenly between them)
    device: str = "cpu"  # torch device

    def validate(self, key: str = "agent", num_slots: int | None = None) -> None:
        """Raise :class:`~marlgrid.config.ConfigError` naming ``<key>.<field>`` for a bad value.

        With ``num_slots`` (env copies times the agents this learner drives), also check that
        each update has at least ``num_minibatches`` sequence chunks.
        """
        check_learner_header(self, key)
        check_network_kind(self.network_kind, f"{key}.network_kind")
        teachers = self.teachers
        if isinstance(teachers, str | bytes | Mapping) or not isinstance(teachers, Sequence):
            raise ConfigError(
                f"{key}.teachers must be a list of agent ids, e.g. [agent_1], got {teachers!r}"
            )
        if not teachers:
            raise ConfigError(
                f"{key}.teachers must name at least one agent to imitate, e.g. [agent_1], "
                f"got {list(teachers)!r}"
            )
        for i, name in enumerate(teachers):
            check_teacher_id(f"{key}.teachers[{i}]", name)
        twice = sorted({n for n in teachers if list(teachers).count(n) > 1})
        if twice:
            raise ConfigError(f"{key}.teachers names {twice} more than once: {list(teachers)!r}")
        check_float(f"{key}.lr", self.lr, low=0.0, low_open=True)
        check_float(f"{key}.adam_eps", self.adam_eps, low=0.0, low_open=True)
        check_float(f"{key}.max_grad_norm", self.max_grad_norm, low=0.0, low_open=True)
        check_int(f"{key}.epochs", self.epochs, 1, MAX_PASSES, why=EPOCHS_WHY)
        check_device(f"{key}.device", self.device)
        columns = None if num_slots is None else num_slots * len(teachers)
        check_chunking(
            key, self.num_steps, self.chunk_len, self.num_minibatches, columns,
            "num_envs * agents * teachers", "sequence",
        )  # fmt: skip

    def steps_per_iteration(self) -> int:
        """Env steps per env in one trainer iteration: one rollout, ``num_steps``."""
        return self.num_steps
