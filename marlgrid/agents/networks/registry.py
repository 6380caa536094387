"""Extension points of the networks: extra heads and network classes, both chosen by config.

**Heads.** ``NetworkConfig.extra_heads`` names any number of heads, ``{name: {"kind": <a
registered kind>, "options": {...}}}``, that hang off the torso next to the policy/value heads.
A kind is a builder ``builder(input_size, action_space, **options) -> nn.Module``; the module is
called as ``head(features (L, N, H), onehot (L, N, one_hot_size(action_space)) or None)`` and
returns any tensor. The built heads are ``net.extra_heads[name]`` (saved and loaded with the
network), and their outputs reach loss terms as ``NetOutput.extras[name]``::

    class ToyDecoder(nn.Module):  # a linear map of (feature, one-hot action)
        def __init__(self, input_size, action_space, out_size=27):
            super().__init__()
            self.fc = nn.Linear(input_size + one_hot_size(action_space), out_size)
        def forward(self, features, onehot):
            return self.fc(torch.cat([features, onehot], -1))

    register_head("toy_decoder", ToyDecoder)
    NetworkConfig(extra_heads={"pred": {"kind": "toy_decoder", "options": {"out_size": 27}}})

Built-in kinds: ``mlp`` (:class:`~marlgrid.agents.networks.heads.MLPHead`), a ReLU MLP with
options ``out_size``, ``hidden_sizes``, ``with_action`` (read the one-hot action too) and
``out_gain``, and ``next_view``
(:class:`~marlgrid.agents.networks.next_view_head.NextViewHead`, registered with the loss term
of that name, which declares it: a loss term may declare the heads it needs, see
:mod:`marlgrid.agents.algorithms.losses`); :func:`~marlgrid.agents.networks.heads.build_heads`
builds a config's heads and :func:`~marlgrid.agents.networks.models.one_hot_actions` makes the
one-hots.

**Networks.** ``register_network(name, cls)``: PPO builds ``cls(observation_space, action_space,
cfg.network)`` for ``PPOConfig.network_kind`` (default ``"actor_critic"``, the
:class:`~marlgrid.agents.networks.models.ActorCritic`); the class must satisfy
:class:`~marlgrid.agents.networks.protocols.PolicyValueNet`, the few members PPO and the
hidden-state refresh use.

This module imports no other network module (the config's checks read it).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any, NamedTuple, TypeVar

from gymnasium import spaces
from torch import Tensor, nn

from marlgrid.config import ConfigError, check_registered_entry

__all__ = [
    "HEADS",
    "NETWORKS",
    "NetOutput",
    "check_extra_heads",
    "check_network_kind",
    "make_network",
    "one_hot_size",
    "register_head",
    "register_network",
    "unregister_head",
    "unregister_network",
]

#: head kind -> builder ``(input_size, action_space, **options) -> nn.Module``
HEADS: dict[str, Callable[..., nn.Module]] = {}
#: network name -> class ``(observation_space, action_space, network_cfg) -> nn.Module``
NETWORKS: dict[str, Callable[..., nn.Module]] = {}

F = TypeVar("F", bound=Callable[..., nn.Module])


def _register(table: dict[str, Any], what: str, name: str, obj: Any) -> Any:
    if not isinstance(name, str) or not name or "." in name:
        raise ValueError(f"a {what} name must be a non-empty string without '.', got {name!r}")
    old = table.get(name)
    if old is not None and getattr(old, "__qualname__", old) != getattr(obj, "__qualname__", obj):
        raise ValueError(f"{what} {name!r} is already registered ({old!r})")
    table[name] = obj  # the same class again (a module reload) replaces it
    return obj


def register_head(kind: str, builder: F | None = None) -> Any:
    """Register a head builder under ``kind`` (also a decorator: ``@register_head("kind")``)."""
    if builder is None:
        return lambda b: _register(HEADS, "head", kind, b)
    return _register(HEADS, "head", kind, builder)


def unregister_head(kind: str) -> None:
    """Remove a registered head kind (for tests and plugins)."""
    del HEADS[kind]


def register_network(name: str, cls: F | None = None) -> Any:
    """Register a network class under ``name`` (also a decorator)."""
    if cls is None:
        return lambda c: _register(NETWORKS, "network", name, c)
    return _register(NETWORKS, "network", name, cls)


def unregister_network(name: str) -> None:
    """Remove a registered network (for tests and plugins)."""
    del NETWORKS[name]


# -- checks ---------------------------------------------------------------------------------------


def check_extra_heads(spec: Any, key: str = "network.extra_heads") -> None:
    """Raise :class:`~marlgrid.config.ConfigError` naming ``<key>...`` for a bad head spec."""
    if not isinstance(spec, Mapping):
        raise ConfigError(f"{key} must be a mapping name -> {{kind, options}}, got {spec!r}")
    for name, entry in spec.items():
        if not isinstance(name, str) or not name or "." in name:
            raise ConfigError(f"{key} names must be non-empty strings without '.', got {name!r}")
        check_registered_entry(f"{key}.{name}", entry, ("kind", "options"), "kind", HEADS, "head")


def check_network_kind(name: Any, key: str = "agent.network_kind") -> None:
    """Raise :class:`~marlgrid.config.ConfigError` if ``name`` is not a registered network."""
    if name not in NETWORKS:
        raise ConfigError(
            f"{key} must be a registered network, one of {sorted(NETWORKS)}, got {name!r}"
        )


def make_network(
    name: str,
    observation_space: spaces.Space,
    action_space: spaces.Space,
    cfg: Any,
    key: str = "agent.network_kind",
) -> Any:
    """Build the network registered as ``name``."""
    check_network_kind(name, key)
    return NETWORKS[name](observation_space, action_space, cfg)


def one_hot_size(action_space: spaces.Space) -> int:
    """Width of :func:`one_hot_actions`: ``n`` for ``Discrete(n)``, ``sum(nvec)`` for
    ``MultiDiscrete(nvec)`` (one one-hot block per branch)."""
    if isinstance(action_space, spaces.MultiDiscrete):
        return int(sum(int(n) for n in action_space.nvec))
    assert isinstance(action_space, spaces.Discrete), action_space
    return int(action_space.n)


# -- what a network gives a loss -------------------------------------------------------------------


class NetOutput(NamedTuple):
    """A network's training output for a minibatch of sequences (what loss terms receive)."""

    features: Tensor  # torso outputs (L, N, H)
    logits: Tensor  # policy logits (L, N, A)
    values: Tensor  # values (L, N)
    extras: dict[str, Tensor]  # outputs of the extra heads, by name (empty without any)
