"""Learning tests: recurrent PPO solves a cue-memory task that memoryless PPO cannot.

Task (:class:`CueMemoryEnv`): a cue in {0, 1} is shown at the first step, 3-6 blank steps follow,
then a query step pays +1 for the action equal to the cue. Episodes (5-8 steps) straddle the
8-step training chunks, so stored (and refreshed) chunk-start states matter. A memoryless policy
sees the same query observation whatever the cue, so it cannot beat a mean return of 0.5.
Each run takes 3-15 s on one core.
"""

from __future__ import annotations

import numpy as np
import pytest
import torch

from marlgrid.agents.algorithms.ppo import PPO, PPOConfig
from marlgrid.agents.networks.models import NetworkConfig
from tests.agents.conftest import collect, train_learner
from tests.toy_envs import CueMemoryEnv

DELAYS = {"min_delay": 3, "max_delay": 6}


def _train(memory: str, seed: int = 0) -> tuple[PPO, float]:
    torch.set_num_threads(1)
    net = NetworkConfig(memory=memory, hidden_size=32, trunk_sizes=(32,), head_sizes=())
    cfg = PPOConfig(network=net, num_steps=32, lr=3e-3)
    env = CueMemoryEnv(16, **DELAYS)
    learner = PPO(env.single_observation_space, env.single_action_space, cfg, seed=seed)
    history = train_learner(env, learner, total_timesteps=30_000, seed=seed)
    assert learner.num_updates == len(history) == 58
    return learner, float(np.mean([h["charts/episodic_return"] for h in history[-5:]]))


def _greedy_success(learner: PPO, seed: int = 1000) -> float:
    env = CueMemoryEnv(32, **DELAYS)
    rollout = collect(env, learner, 64, seed=seed, train=False, explore=False)
    returns = rollout.pop_returns()
    assert len(returns) > 200
    return float(returns.mean())


@pytest.mark.parametrize("memory", ["lstm", "gru"])
def test_recurrent_ppo_solves_cue_memory(memory: str) -> None:
    learner, train_return = _train(memory)
    assert train_return > 0.9
    assert _greedy_success(learner) > 0.9


def test_memoryless_ppo_stays_at_chance() -> None:
    learner, train_return = _train("none")
    assert train_return < 0.65
    assert _greedy_success(learner) < 0.65
