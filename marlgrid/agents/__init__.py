"""Learners for marlgrid (requires torch; not imported by ``import marlgrid``)."""

from marlgrid.agents.memory import GRUCore, LSTMCore, MemoryCore, NoMemory, make_memory
from marlgrid.agents.networks import ActorCritic, NetworkConfig, make_encoder
from marlgrid.agents.ppo import (
    PPO,
    BatchedEnv,
    PPOConfig,
    RolloutBuffer,
    VectorRollout,
    compute_gae,
    ppo_loss,
    train_on_vector_env,
)

__all__ = [
    "PPO",
    "ActorCritic",
    "BatchedEnv",
    "GRUCore",
    "LSTMCore",
    "MemoryCore",
    "NetworkConfig",
    "NoMemory",
    "PPOConfig",
    "RolloutBuffer",
    "VectorRollout",
    "compute_gae",
    "make_encoder",
    "make_memory",
    "ppo_loss",
    "train_on_vector_env",
]
