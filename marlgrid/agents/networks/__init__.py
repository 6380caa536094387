"""Networks: their settings (:mod:`.config`: :class:`NetworkConfig`), observation encoders
(:mod:`.encoders`) and the torso (encoder, trunk, memory core) with its heads (:mod:`.models`:
actor-critic, Q network); the extension points, extra heads and network classes chosen by
config, are in :mod:`.registry` (building heads: :mod:`.heads`; what learners need of a network:
:mod:`.protocols`)."""

from marlgrid.agents.networks.config import NetworkConfig
from marlgrid.agents.networks.models import ActorCritic, QNetwork, Torso, one_hot_actions
from marlgrid.agents.networks.protocols import PolicyValueNet
from marlgrid.agents.networks.registry import (
    HEADS,
    NETWORKS,
    NetOutput,
    make_network,
    one_hot_size,
    register_head,
    register_network,
)

__all__ = [
    "HEADS",
    "NETWORKS",
    "ActorCritic",
    "NetOutput",
    "NetworkConfig",
    "PolicyValueNet",
    "QNetwork",
    "Torso",
    "make_network",
    "one_hot_actions",
    "one_hot_size",
    "register_head",
    "register_network",
]
