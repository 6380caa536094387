"""The hyperparameters of recurrent PPO (:class:`PPOConfig`), each checked by
:meth:`PPOConfig.validate` before anything runs; the learner is :mod:`.ppo`."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from marlgrid.agents.algorithms.chunking import check_chunking
from marlgrid.agents.algorithms.imitation import check_teacher_id  # registers 'imitation'
from marlgrid.agents.algorithms.losses import check_aux_losses
from marlgrid.agents.devices import check_device
from marlgrid.agents.networks.config import (
    EPOCHS_WHY,
    MAX_PASSES,
    NetworkConfig,
    check_learner_header,
)
from marlgrid.agents.networks.registry import check_network_kind
from marlgrid.config import check_bool, check_float, check_int

__all__ = ["PPO_LOGS", "PPOConfig"]

#: the names PPO logs its own loss terms under (``losses/<name>``): no loss term may take them
PPO_LOGS = ("policy_loss", "value_loss", "entropy", "approx_kl", "clipfrac", "approx_kl_batch",
            "explained_variance", "grad_norm")  # fmt: skip


@dataclass
class PPOConfig:
    """Hyperparameters of recurrent PPO (one line of doc per field)."""

    algo: str = "ppo"  # the learner registry entry this config builds
    network: NetworkConfig = field(default_factory=NetworkConfig)  # torso and heads
    network_kind: str = "actor_critic"  # the network registry entry built (networks.registry)
    # optimisation
    lr: float = 3e-4  # Adam learning rate at the start of training
    anneal_lr: bool = True  # decay the learning rate linearly from lr to lr_final over training
    lr_final: float = 0.0  # learning rate at the end of training when anneal_lr is set
    adam_eps: float = 1e-5  # Adam epsilon
    max_grad_norm: float = 0.5  # global gradient-norm clip
    # returns and advantages
    gamma: float = 0.99  # discount factor
    gae_lambda: float = 0.95  # GAE lambda
    norm_adv: bool = True  # normalise advantages per minibatch (over non-padding steps)
    # PPO loss
    clip_coef: float = 0.2  # surrogate clipping range (also the value clipping range)
    clip_vloss: bool = True  # clip the value loss around the stored (rollout/refreshed) values
    vf_coef: float = 0.5  # value-loss weight
    ent_coef: float = 0.01  # entropy-bonus weight at the start of training
    ent_coef_final: float | None = None  # entropy weight at the end (linear); None keeps ent_coef
    # extra loss terms added to the PPO loss: [{name, coef, options}] (algorithms.losses)
    aux_losses: list[dict[str, Any]] = field(default_factory=list)
    # rollout and minibatches
    num_steps: int = 128  # rollout length per batch slot (T): the learner updates every T steps
    update_epochs: int = 4  # passes over the rollout per update
    chunk_len: int = 8  # length of the trajectory chunks minibatches are made of (BPTT length)
    num_minibatches: int = 4  # minibatches per epoch (chunks are split evenly between them)
    refresh_interval: int = 2  # refresh stored states/values/advantages every N minibatches; 0=off
    kl_target: float | None = 0.01  # end the epoch when a minibatch's approx KL > 1.5 * kl_target
    kl_hard_limit: float | None = None  # roll back the whole update if its batch KL exceeds this
    log_batch_kl: bool = False  # log the batch KL (states rerun from the rollout's start) always
    device: str = "cpu"  # torch device

    def validate(self, key: str = "agent", num_slots: int | None = None) -> None:
        """Raise :class:`~marlgrid.config.ConfigError` naming ``<key>.<field>`` for a bad value.

        With ``num_slots`` (env copies times the agents this learner drives), also check that
        each update has at least ``num_minibatches`` trajectory chunks.
        """
        check_learner_header(self, key)
        check_network_kind(self.network_kind, f"{key}.network_kind")
        check_aux_losses(self.aux_losses, f"{key}.aux_losses", PPO_LOGS)
        for i, entry in enumerate(self.aux_losses):
            if entry["name"] == "imitation":  # the teacher it reads: an agent id
                teacher = dict(entry.get("options", {})).get("teacher")
                check_teacher_id(f"{key}.aux_losses[{i}].options.teacher", teacher)
        check_float(f"{key}.lr", self.lr, low=0.0, low_open=True)
        check_float(f"{key}.lr_final", self.lr_final, low=0.0)
        check_float(f"{key}.adam_eps", self.adam_eps, low=0.0, low_open=True)
        check_float(f"{key}.max_grad_norm", self.max_grad_norm, low=0.0, low_open=True)
        check_float(f"{key}.gamma", self.gamma, 0.0, 1.0)
        check_float(f"{key}.gae_lambda", self.gae_lambda, 0.0, 1.0)
        check_float(f"{key}.clip_coef", self.clip_coef, low=0.0, low_open=True)
        check_float(f"{key}.vf_coef", self.vf_coef, low=0.0)
        check_float(f"{key}.ent_coef", self.ent_coef, low=0.0)
        if self.ent_coef_final is not None:
            check_float(f"{key}.ent_coef_final", self.ent_coef_final, low=0.0)
        for name in ("anneal_lr", "norm_adv", "clip_vloss", "log_batch_kl"):
            check_bool(f"{key}.{name}", getattr(self, name))
        check_int(f"{key}.update_epochs", self.update_epochs, 1, MAX_PASSES, why=EPOCHS_WHY)
        check_int(f"{key}.refresh_interval", self.refresh_interval, low=0)
        for name in ("kl_target", "kl_hard_limit"):
            if getattr(self, name) is not None:
                check_float(f"{key}.{name}", getattr(self, name), low=0.0, low_open=True)
        check_device(f"{key}.device", self.device)
        check_chunking(key, self.num_steps, self.chunk_len, self.num_minibatches, num_slots)

    def steps_per_iteration(self) -> int:
        """Env steps per env in one trainer iteration: one rollout, ``num_steps``."""
        return self.num_steps
