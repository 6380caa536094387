"""Learners for marlgrid (requires torch; not imported by ``import marlgrid``).

Every algorithm implements the :class:`~marlgrid.agents.learner.Learner` protocol and registers
in :data:`~marlgrid.agents.learner.LEARNERS`; :func:`~marlgrid.agents.learner.build_learner`
builds one from its config.
"""

from marlgrid.agents.algorithms.ppo import PPO, PPOConfig, ppo_loss
from marlgrid.agents.learner import LEARNERS, Learner, build_learner, register_learner
from marlgrid.agents.memory import GRUCore, LSTMCore, MemoryCore, NoMemory, make_memory
from marlgrid.agents.networks.models import ActorCritic, NetworkConfig, QNetwork, Torso
from marlgrid.agents.returns import compute_gae
from marlgrid.agents.storage.rollout_buffer import RolloutBuffer
from marlgrid.agents.training.rollout import MultiAgentRollout, PolicyGroup

__all__ = [
    "LEARNERS",
    "PPO",
    "ActorCritic",
    "GRUCore",
    "LSTMCore",
    "Learner",
    "MemoryCore",
    "MultiAgentRollout",
    "NetworkConfig",
    "NoMemory",
    "PPOConfig",
    "PolicyGroup",
    "QNetwork",
    "RolloutBuffer",
    "Torso",
    "build_learner",
    "compute_gae",
    "make_memory",
    "ppo_loss",
    "register_learner",
]
