"""Checks of learner configs: each bad value raises :class:`~marlgrid.config.ConfigError`
naming ``<key>.<field>``, the value and what is allowed, before anything runs.

The config dataclasses' ``validate(key, num_slots)`` methods call these; ``num_slots`` (env
copies times the agents a learner drives) enables the checks that depend on the run's size.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

import torch

from marlgrid.agents import memory
from marlgrid.agents.optim import OPTIMIZERS
from marlgrid.config import ConfigError, check_bool, check_choice, check_float, check_int

if TYPE_CHECKING:
    from marlgrid.agents.algorithms.drqn import DRQNConfig
    from marlgrid.agents.algorithms.ppo import PPOConfig
    from marlgrid.agents.networks.models import NetworkConfig


def check_device(name: str, device: str) -> None:
    """A torch device string that this machine has."""
    try:
        dev = torch.device(device)
    except (RuntimeError, TypeError) as exc:
        raise ConfigError(f"{name} must be a torch device, got {device!r}") from exc
    if dev.type == "cuda" and not torch.cuda.is_available():
        raise ConfigError(f"{name} is {device!r} but CUDA is not available")


def _check_algo(cfg: Any, key: str, algo: str) -> None:
    """The config's ``algo`` and its nested network config."""
    from marlgrid.agents.networks.models import NetworkConfig

    if getattr(cfg, "algo", None) != algo:
        name = type(cfg).__name__
        raise ConfigError(f"{key}.algo must be {algo!r} for a {name}, got {cfg.algo!r}")
    if not isinstance(cfg.network, NetworkConfig):
        raise ConfigError(f"{key}.network must be a NetworkConfig, got {cfg.network!r}")
    check_network_config(cfg.network, f"{key}.network")


def check_network_config(cfg: NetworkConfig, key: str = "network") -> None:
    """Raise :class:`~marlgrid.config.ConfigError` naming ``<key>.<field>`` for a bad value."""
    check_choice(f"{key}.memory", cfg.memory, tuple(memory.MEMORY_KINDS))
    if not isinstance(cfg.memory_kwargs, Mapping):
        raise ConfigError(f"{key}.memory_kwargs must be a mapping, got {cfg.memory_kwargs!r}")
    check_int(f"{key}.hidden_size", cfg.hidden_size, low=1)
    for name, length in (("trunk_sizes", None), ("head_sizes", None), ("conv_channels", None),
                         ("symbolic_vocab", 3)):  # fmt: skip
        sizes = getattr(cfg, name)
        if isinstance(sizes, str) or not isinstance(sizes, Sequence):
            raise ConfigError(f"{key}.{name} must be a list of integers, got {sizes!r}")
        if length is not None and len(sizes) != length:
            raise ConfigError(f"{key}.{name} must list {length} integers, got {sizes!r}")
        for size in sizes:
            check_int(f"{key}.{name} entry", size, low=1)
    check_int(f"{key}.conv_kernel", cfg.conv_kernel, low=1)
    check_int(f"{key}.conv_padding", cfg.conv_padding, low=0)
    check_int(f"{key}.embed_dim", cfg.embed_dim, low=1)
    check_choice(f"{key}.symbolic_encoder", cfg.symbolic_encoder, ("conv", "bag"))
    check_int(f"{key}.bag_dim", cfg.bag_dim, low=1)
    check_int(f"{key}.tile_size", cfg.tile_size, low=1)
    check_choice(f"{key}.image_mode", cfg.image_mode, ("auto", "symbolic", "pixels", "onehot"))


def check_ppo_config(cfg: PPOConfig, key: str = "agent", num_slots: int | None = None) -> None:
    """Raise :class:`~marlgrid.config.ConfigError` naming ``<key>.<field>`` for a bad value.

    With ``num_slots`` (env copies times the agents this learner drives), also check that
    each update has at least ``num_minibatches`` trajectory chunks.
    """
    _check_algo(cfg, key, "ppo")
    check_float(f"{key}.lr", cfg.lr, low=0.0, low_open=True)
    check_float(f"{key}.lr_final", cfg.lr_final, low=0.0)
    check_float(f"{key}.adam_eps", cfg.adam_eps, low=0.0, low_open=True)
    check_float(f"{key}.max_grad_norm", cfg.max_grad_norm, low=0.0, low_open=True)
    check_float(f"{key}.gamma", cfg.gamma, 0.0, 1.0)
    check_float(f"{key}.gae_lambda", cfg.gae_lambda, 0.0, 1.0)
    check_float(f"{key}.clip_coef", cfg.clip_coef, low=0.0, low_open=True)
    check_float(f"{key}.vf_coef", cfg.vf_coef, low=0.0)
    check_float(f"{key}.ent_coef", cfg.ent_coef, low=0.0)
    if cfg.ent_coef_final is not None:
        check_float(f"{key}.ent_coef_final", cfg.ent_coef_final, low=0.0)
    for name in ("anneal_lr", "norm_adv", "clip_vloss"):
        check_bool(f"{key}.{name}", getattr(cfg, name))
    check_int(f"{key}.num_steps", cfg.num_steps, low=1)
    check_int(f"{key}.update_epochs", cfg.update_epochs, low=1)
    check_int(f"{key}.chunk_len", cfg.chunk_len, low=1)
    if cfg.chunk_len > cfg.num_steps:
        raise ConfigError(
            f"{key}.chunk_len must be <= {key}.num_steps ({cfg.num_steps}), got {cfg.chunk_len}"
        )
    check_int(f"{key}.num_minibatches", cfg.num_minibatches, low=1)
    check_int(f"{key}.refresh_interval", cfg.refresh_interval, low=0)
    for name in ("kl_target", "kl_hard_limit"):
        if getattr(cfg, name) is not None:
            check_float(f"{key}.{name}", getattr(cfg, name), low=0.0, low_open=True)
    check_device(f"{key}.device", cfg.device)
    if num_slots is not None:
        per_slot = -(-cfg.num_steps // cfg.chunk_len)
        chunks = per_slot * num_slots
        if cfg.num_minibatches > chunks:
            raise ConfigError(
                f"{key}.num_minibatches must be <= the trajectory chunks of one update, "
                f"ceil(num_steps / chunk_len) * (num_envs * agents) = {per_slot} * {num_slots} "
                f"= {chunks}, got {cfg.num_minibatches}"
            )


def check_drqn_config(cfg: DRQNConfig, key: str = "agent", num_slots: int | None = None) -> None:
    """DRQN's fields; with ``num_slots``, also that the replay holds a sequence per slot."""
    _check_algo(cfg, key, "drqn")
    for name in ("dueling", "double_q", "uniform", "value_rescale", "checkpoint_replay"):
        check_bool(f"{key}.{name}", getattr(cfg, name))
    for name in ("gamma", "eta", "beta0", "eps_start", "eps_end", "eps_fraction"):
        check_float(f"{key}.{name}", getattr(cfg, name), 0.0, 1.0)
    for name in ("lr", "optimizer_eps", "max_grad_norm", "priority_eps", "alpha"):
        check_float(f"{key}.{name}", getattr(cfg, name), low=0.0, low_open=True)
    for name in ("priority_alpha", "huber_delta", "rescale_eps", "apex_alpha"):
        check_float(f"{key}.{name}", getattr(cfg, name), low=0.0)
    check_float(f"{key}.tau", cfg.tau, 0.0, 1.0, low_open=True)
    for name in ("n_step", "seq_len", "buffer_size", "batch_size", "train_freq", "gradient_steps",
                 "target_update_period"):  # fmt: skip
        check_int(f"{key}.{name}", getattr(cfg, name), low=1)
    for name in ("max_sequences", "learning_starts", "refresh_every"):
        check_int(f"{key}.{name}", getattr(cfg, name), low=0)
    check_int(f"{key}.burn_in", cfg.burn_in, 0, cfg.seq_len - 1)
    check_int(f"{key}.overlap", cfg.overlap, 0, cfg.seq_len - 1)
    check_choice(f"{key}.is_norm", cfg.is_norm, ("buffer", "batch"))
    check_choice(f"{key}.optimizer", cfg.optimizer, OPTIMIZERS)
    check_choice(f"{key}.exploration", cfg.exploration, ("epsilon", "boltzmann"))
    check_device(f"{key}.device", cfg.device)
    if num_slots is not None and cfg.buffer_size < num_slots * cfg.seq_len:
        raise ConfigError(
            f"{key}.buffer_size must hold one sequence per slot, >= num_slots * seq_len = "
            f"{num_slots} * {cfg.seq_len} = {num_slots * cfg.seq_len}, got {cfg.buffer_size}"
        )
