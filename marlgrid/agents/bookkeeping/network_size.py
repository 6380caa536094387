"""The memory-relevant size of a network, counted without allocating it: its parameters,
state and activation floats per sample (:func:`network_size`), and an observation's bytes
(:func:`observation_bytes`). Used by :mod:`.resources`' estimate.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import torch
from gymnasium import spaces

from marlgrid.agents.arrays import alloc_obs
from marlgrid.agents.networks.config import NetworkConfig
from marlgrid.agents.networks.models import Torso

__all__ = [
    "MEMORY_WIDTH",
    "NetSize",
    "head_size",
    "network_size",
    "num_actions",
    "observation_bytes",
]

#: floats of the memory core's activations per sample, per unit of ``hidden_size``
MEMORY_WIDTH = 6


@dataclass(frozen=True)
class NetSize:
    """What the memory of one network depends on (counted without allocating it)."""

    params: float  # parameters of the torso and heads
    state_size: int  # floats of memory state per slot
    width: float  # floats of activations per sample in a training forward
    peak: float  # floats per sample held at once by an inference pass over many samples


def observation_bytes(space: spaces.Space) -> int:
    """Bytes of one observation of ``space`` as stored (counted on the meta device)."""
    obs = alloc_obs(space, (1,), "meta")
    leaves = obs.values() if isinstance(obs, Mapping) else [obs]
    return sum(t.numel() * t.element_size() for t in leaves)


def num_actions(space: spaces.Space) -> int:
    """Outputs of a policy head over ``space`` (summed over a MultiDiscrete's parts)."""
    if isinstance(space, spaces.Discrete):
        return int(space.n)
    if isinstance(space, spaces.MultiDiscrete):
        return int(sum(int(n) for n in space.nvec))
    return 1


def _new_floats(inputs: tuple[Any, ...], out: Any) -> int:
    """Elements a layer's output adds (none for an in-place one, e.g. ``ReLU(inplace=True)``)."""
    if not isinstance(out, torch.Tensor) or any(out is x for x in inputs):
        return 0
    return out.numel()


def network_size(net: NetworkConfig, obs_space: spaces.Space, act_space: spaces.Space,
                 heads: int = 2) -> NetSize:  # fmt: skip
    """The :class:`NetSize` of a torso of ``net`` and ``heads`` heads (PPO's actor and critic,
    DRQN's Q head): the torso built on the meta device, its encoder and trunk run once on a
    meta observation; from the sizes alone where even that fails (absurd sizes)."""
    head = [net.hidden_size, *net.head_sizes, num_actions(act_space)]
    head_params = heads * sum(a * b + b for a, b in zip(head, head[1:], strict=False))
    head_width = heads * sum(head[1:])
    try:
        with torch.device("meta"):
            torso = Torso(obs_space, net)
        outs: list[int] = []
        hooks = [
            m.register_forward_hook(lambda _m, inputs, out: outs.append(_new_floats(inputs, out)))
            for m in torso.modules()
            if not list(m.children())
        ]
        torso.features(alloc_obs(obs_space, (1, 1), "meta"), 1, 1)
        for hook in hooks:
            hook.remove()
        params = float(sum(p.numel() for p in torso.parameters()))
        state_size = int(torso.state_size)
    except (RuntimeError, ValueError, TypeError, OverflowError, NotImplementedError):
        widths = [observation_bytes(obs_space), *net.trunk_sizes]
        params = float(sum(a * b for a, b in zip(widths, widths[1:], strict=False)))
        params += 4.0 * (widths[-1] + net.hidden_size) * net.hidden_size  # an LSTM's gates
        outs, state_size = list(net.trunk_sizes), 2 * net.hidden_size
    inputs = 4 * observation_bytes(obs_space)  # the observation as floats and as long ids
    hidden = net.hidden_size
    width = inputs + sum(outs) + MEMORY_WIDTH * hidden + state_size + head_width
    peak = inputs + 4 * max(outs, default=0) + (outs[-1] if outs else 0) + 4 * hidden + state_size
    return NetSize(params + head_params, state_size, float(width), float(peak + head_width))


def head_size(
    spec: Mapping[str, Any], input_size: int, act_space: spaces.Space
) -> tuple[float, float]:
    """Parameters and activation floats per sample of one extra head (``{kind, options}``, as
    ``NetworkConfig.extra_heads`` holds it), built on the meta device (nothing allocated,
    whatever its sizes); a head that cannot be built there counts as none (its build then
    raises the config error)."""
    from marlgrid.agents.networks.registry import HEADS

    try:
        with torch.device("meta"):
            head = HEADS[spec["kind"]](input_size, act_space, **dict(spec.get("options", {})))
    except (KeyError, RuntimeError, ValueError, TypeError, OverflowError):
        return 0.0, 0.0
    params = float(sum(p.numel() for p in head.parameters()))
    width = float(sum(m.out_features for m in head.modules() if isinstance(m, torch.nn.Linear)))
    return params, width
