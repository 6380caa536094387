"""Building a network's extra heads (``NetworkConfig.extra_heads``) and the built-in ``mlp`` head.

The registry of head kinds and its example are in :mod:`marlgrid.agents.networks.registry`.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import torch
from gymnasium import spaces
from torch import Tensor, nn

from marlgrid.agents.networks.encoders import mlp
from marlgrid.agents.networks.registry import HEADS, check_extra_heads, one_hot_size, register_head
from marlgrid.config import ConfigError

__all__ = ["MLPHead", "build_heads"]


def build_heads(
    spec: Mapping[str, Mapping[str, Any]],
    input_size: int,
    action_space: spaces.Space,
    key: str = "network.extra_heads",
) -> nn.ModuleDict:
    """The extra heads of ``spec`` (``NetworkConfig.extra_heads``), in its order."""
    check_extra_heads(spec, key)
    heads = nn.ModuleDict()
    for name, entry in spec.items():
        options = dict(entry.get("options", {}))
        try:
            heads[name] = HEADS[entry["kind"]](input_size, action_space, **options)
        except TypeError as exc:
            raise ConfigError(f"{key}.{name}.options {options!r} do not fit: {exc}") from exc
    return heads


class MLPHead(nn.Module):
    """The built-in ``mlp`` head: features (and, ``with_action``, the one-hot action) -> a ReLU
    MLP -> ``(..., out_size)``."""

    def __init__(
        self,
        input_size: int,
        action_space: spaces.Space,
        out_size: int,
        hidden_sizes: Sequence[int] = (64,),
        with_action: bool = False,
        out_gain: float = 1.0,
    ) -> None:
        super().__init__()
        self.with_action = bool(with_action)
        in_size = input_size + (one_hot_size(action_space) if self.with_action else 0)
        self.net, _ = mlp(in_size, tuple(hidden_sizes), int(out_size), out_gain=out_gain)

    def forward(self, features: Tensor, onehot: Tensor | None = None) -> Tensor:
        if self.with_action:
            if onehot is None:
                raise ValueError("this mlp head reads the actions (with_action) but got none")
            features = torch.cat([features, onehot], -1)
        return self.net(features)


register_head("mlp", MLPHead)
