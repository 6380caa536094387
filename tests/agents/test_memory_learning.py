"""Learning tests: recurrent PPO solves a cue-memory task that memoryless PPO cannot.

Task (:class:`CueMemoryEnv`): a cue in {0, 1} is shown at the first step, 3-6 blank steps follow,
then a query step pays +1 for the action equal to the cue. Episodes (5-8 steps) straddle the
8-step training chunks, so stored (and refreshed) chunk-start states matter. A memoryless policy
sees the same query observation whatever the cue, so it cannot beat a mean return of 0.5.
Each run takes a few seconds on one core.
"""

from __future__ import annotations

import numpy as np
import pytest
import torch

from marlgrid.agents.ppo import PPO, PPOConfig, RolloutBuffer, VectorRollout, train_on_vector_env
from marlgrid.agents.toy_envs import CueMemoryEnv

DELAYS = {"min_delay": 3, "max_delay": 6}


def _train(memory: str, seed: int = 0) -> tuple[PPO, float]:
    torch.set_num_threads(1)
    cfg = PPOConfig(
        memory=memory,
        hidden_size=32,
        trunk_sizes=(32,),
        head_sizes=(),
        num_steps=32,
        lr=3e-3,
        total_timesteps=30_000,
        seed=seed,
    )
    learner, history = train_on_vector_env(CueMemoryEnv(16, **DELAYS), cfg)
    return learner, float(np.mean([h["charts/episodic_return"] for h in history[-5:]]))


def _greedy_success(learner: PPO, seed: int = 1000) -> float:
    env = CueMemoryEnv(32, **DELAYS)
    buffer = RolloutBuffer(64, 32, env.single_observation_space, learner.net.state_size)
    rollout = VectorRollout(env, learner, seed=seed)
    rollout.collect(buffer, deterministic=True)
    stats = rollout.stats.pop()
    assert stats["charts/episodes"] > 200
    return stats["charts/episodic_return"]


@pytest.mark.parametrize("memory", ["lstm", "gru"])
def test_recurrent_ppo_solves_cue_memory(memory: str) -> None:
    learner, train_return = _train(memory)
    assert train_return > 0.9
    assert _greedy_success(learner) > 0.9


def test_memoryless_ppo_stays_at_chance() -> None:
    learner, train_return = _train("none")
    assert train_return < 0.65
    assert _greedy_success(learner) < 0.65
