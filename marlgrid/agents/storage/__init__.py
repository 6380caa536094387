"""Replay storage: the prioritized-replay sum tree and its sampler."""

from marlgrid.agents.storage.priority import PrioritizedSampler
from marlgrid.agents.storage.sum_tree import SumTree

__all__ = ["PrioritizedSampler", "SumTree"]
