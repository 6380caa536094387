"""The architecture settings of a network: :class:`NetworkConfig`, which checks itself.

Its own module (no torch modules built here), so the encoders and the models both read it
without importing each other.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from marlgrid.agents import memory
from marlgrid.config import ConfigError, check_choice, check_int

__all__ = ["IMAGE_MODES", "SYMBOLIC_ENCODERS", "NetworkConfig"]

#: symbolic encoders by ``NetworkConfig.symbolic_encoder``
SYMBOLIC_ENCODERS = ("conv", "bag")
#: ``NetworkConfig.image_mode``: how a 3-D ``Box`` observation is read
IMAGE_MODES = ("auto", "symbolic", "pixels", "onehot")


@dataclass
class NetworkConfig:
    """Architecture of a :class:`~marlgrid.agents.networks.models.Torso` and its heads."""

    memory: str = "lstm"  # memory core (a name registered in marlgrid.agents.memory)
    memory_kwargs: dict[str, Any] = field(default_factory=dict)  # the core's own options
    hidden_size: int = 128  # memory core width (output size of 'none')
    trunk_sizes: tuple[int, ...] = (128,)  # MLP between encoder and memory core
    head_sizes: tuple[int, ...] = (64,)  # hidden layers of each head
    conv_channels: tuple[int, ...] = (32, 32)  # conv layers applied on the cell grid
    conv_kernel: int = 3  # kernel size of those conv layers
    conv_padding: int = 1  # zero padding of those conv layers (1 keeps a 3x3 conv's grid size)
    embed_dim: int = 8  # embedding width per symbolic channel (type, color, state)
    symbolic_encoder: str = "conv"  # symbolic views: 'conv' (embeddings + convs) or 'bag'
    bag_dim: int = 128  # output width of the 'bag' encoder (a sum of per-cell embeddings)
    symbolic_vocab: tuple[int, int, int] = (16, 32, 8)  # minimum table sizes (type, color, state)
    tile_size: int = 8  # pixels per cell for pixel observations
    image_mode: str = "auto"  # 'auto', 'symbolic', 'pixels' or 'onehot'
    # extra heads on the torso: name -> {"kind": a registered head, "options": {...}}
    # (marlgrid.agents.networks.registry); none by default
    extra_heads: dict[str, dict[str, Any]] = field(default_factory=dict)

    def validate(self, key: str = "network") -> None:
        """Raise :class:`~marlgrid.config.ConfigError` naming ``<key>.<field>`` for a bad value."""
        check_choice(f"{key}.memory", self.memory, tuple(memory.MEMORY_KINDS))
        if not isinstance(self.memory_kwargs, Mapping):
            raise ConfigError(f"{key}.memory_kwargs must be a mapping, got {self.memory_kwargs!r}")
        try:  # option names (a typo in agent.network.memory_kwargs.<option>=... is refused)
            memory.CORES[self.memory].check_options(self.memory_kwargs)
        except ValueError as exc:
            raise ConfigError(f"{key}.memory_kwargs: {exc}") from None
        check_int(f"{key}.hidden_size", self.hidden_size, low=1)
        for name, length in (("trunk_sizes", None), ("head_sizes", None), ("conv_channels", None),
                             ("symbolic_vocab", 3)):  # fmt: skip
            sizes = getattr(self, name)
            if isinstance(sizes, str) or not isinstance(sizes, Sequence):
                raise ConfigError(f"{key}.{name} must be a list of integers, got {sizes!r}")
            if length is not None and len(sizes) != length:
                raise ConfigError(f"{key}.{name} must list {length} integers, got {sizes!r}")
            for size in sizes:
                check_int(f"{key}.{name} entry", size, low=1)
        check_int(f"{key}.conv_kernel", self.conv_kernel, low=1)
        check_int(f"{key}.conv_padding", self.conv_padding, 0, self.conv_kernel - 1,
                  why=f"{key}.conv_kernel - 1: wider padding only adds rows of zeros")  # fmt: skip
        check_int(f"{key}.embed_dim", self.embed_dim, low=1)
        check_choice(f"{key}.symbolic_encoder", self.symbolic_encoder, SYMBOLIC_ENCODERS)
        check_int(f"{key}.bag_dim", self.bag_dim, low=1)
        check_int(f"{key}.tile_size", self.tile_size, low=1)
        check_choice(f"{key}.image_mode", self.image_mode, IMAGE_MODES)
        from marlgrid.agents.networks.registry import check_extra_heads

        check_extra_heads(self.extra_heads, f"{key}.extra_heads")


#: passes over one batch per update (PPO epochs, BC epochs, DRQN gradient steps per iteration):
#: published settings use 1-30; past this a run spends its time refitting one batch
MAX_PASSES = 100
EPOCHS_WHY = "passes over one batch; published PPO uses 3-30"
GRADIENT_STEPS_WHY = "gradient steps per iteration; a replay ratio past this refits one replay"


def check_learner_header(cfg: Any, key: str) -> None:
    """What every learner config checks first: its ``algo`` is its own class's (a subclass may
    register under another name) and ``network`` is a valid :class:`NetworkConfig`."""
    own = type(cfg).algo
    if cfg.algo != own:
        name = type(cfg).__name__
        raise ConfigError(f"{key}.algo must be {own!r} for a {name}, got {cfg.algo!r}")
    if not isinstance(cfg.network, NetworkConfig):
        raise ConfigError(f"{key}.network must be a NetworkConfig, got {cfg.network!r}")
    cfg.network.validate(f"{key}.network")
