"""Networks: observation encoders (:mod:`.encoders`) and the torso (encoder, trunk, memory core)
with its heads (:mod:`.models`: actor-critic, Q network)."""

from marlgrid.agents.networks.models import ActorCritic, NetworkConfig, QNetwork, Torso

__all__ = ["ActorCritic", "NetworkConfig", "QNetwork", "Torso"]
