"""The rollout loop on gymnasium-style batches: SingleAgentBatch, alone and as a trainer env
source."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch
from gymnasium import spaces

from marlgrid.agents.algorithms.ppo import PPO, PPOConfig
from marlgrid.agents.networks.models import NetworkConfig
from marlgrid.agents.training.env_sources import register_env_source
from marlgrid.agents.training.rollout import SingleAgentBatch
from tests.agents.conftest import collect, train_run
from tests.toy_envs import CueMemoryEnv

SMALL = NetworkConfig(hidden_size=8, trunk_sizes=(8,), head_sizes=(8,))
LENGTHS = np.array([2, 3, 4])  # episode length of env b
TRUNCATES = np.array([False, True, False])  # env 1's episodes end by truncation


@pytest.fixture(autouse=True)
def _one_thread() -> None:
    torch.set_num_threads(1)


class CountdownEnv:
    """Env ``b``'s episodes last ``LENGTHS[b]`` steps and pay ``b + 1`` per step; the observation is
    ``[b, step within the episode]``. ``reset`` returns ``(obs, infos)``, as gymnasium does."""

    num_envs = 3
    single_observation_space = spaces.Box(0, 100, (2,), np.float32)
    single_action_space = spaces.Discrete(2)

    def __init__(self) -> None:
        self.t = np.zeros(self.num_envs, dtype=np.int64)

    def _obs(self) -> np.ndarray:
        return np.stack([np.arange(self.num_envs), self.t], -1).astype(np.float32)

    def reset(self, seed: int | None = None) -> tuple[np.ndarray, dict[str, Any]]:
        self.t[:] = 0
        return self._obs(), {}

    def step(self, actions: np.ndarray) -> tuple[Any, ...]:
        assert actions.shape == (self.num_envs,)
        self.t += 1
        ended = self.t == LENGTHS
        final = self._obs()
        self.t[ended] = 0
        rewards = np.arange(1, self.num_envs + 1, dtype=np.float32)
        infos = {"final_obs": final, "_final_obs": ended}
        return self._obs(), rewards, ended & ~TRUNCATES, ended & TRUNCATES, infos


def test_single_agent_batch_steps_episodes_and_final_obs() -> None:
    vec = SingleAgentBatch(CountdownEnv())
    assert vec.possible_agents == ["agent_0"] and vec.num_agents == 1
    assert vec.single_observation_space("agent_0") == CountdownEnv.single_observation_space
    obs, infos = vec.reset(seed=0)  # the (obs, infos) form is unpacked
    np.testing.assert_array_equal(obs["agent_0"], [[0, 0], [1, 0], [2, 0]])
    assert infos["active"].shape == (3, 1) and infos["active"].all()
    actions = np.zeros((3, 1), dtype=np.int64)
    vec.step(actions)
    obs, rewards, terms, truncs, infos = vec.step(actions)  # step 2: env 0 terminates
    assert rewards.shape == terms.shape == truncs.shape == (3, 1)
    np.testing.assert_array_equal(terms[:, 0], [True, False, False])
    np.testing.assert_array_equal(infos["_episode"], [True, False, False])
    assert infos["episode"]["r"][0, 0] == 2.0 and infos["episode"]["l"][0] == 2
    assert "final_rows" not in infos  # a termination needs no bootstrap observation
    obs, _, terms, truncs, infos = vec.step(actions)  # step 3: env 1 truncates
    np.testing.assert_array_equal(truncs[:, 0], [False, True, False])
    assert infos["episode"]["r"][1, 0] == 6.0 and infos["episode"]["l"][1] == 3
    np.testing.assert_array_equal(infos["final_rows"], [1])
    np.testing.assert_array_equal(infos["final_obs"]["agent_0"], [[1, 3]])  # the true last one
    np.testing.assert_array_equal(obs["agent_0"][1], [1, 0])  # while obs starts the next episode


def test_rollout_records_episodes_and_truncation_bootstraps() -> None:
    cfg = PPOConfig(network=SMALL, num_steps=12, chunk_len=4)
    env = CountdownEnv()
    learner = PPO(env.single_observation_space, env.single_action_space, cfg)
    rollout = collect(env, learner, 12)
    # every episode ended inside the 12 steps: env 0 six of 2 steps, env 1 four of 3, env 2 three
    returns, lengths = rollout.pop_returns(), rollout.pop_lengths()
    assert returns.shape == (13, 1) and rollout.env_steps == 36
    assert sorted(returns[:, 0]) == [2.0] * 6 + [6.0] * 4 + [12.0] * 3
    assert sorted(lengths) == [2] * 6 + [3] * 4 + [4] * 3
    buf = learner.buffer
    assert buf is not None and buf.full
    torch.testing.assert_close(buf.obs[:, 1, 1], torch.tensor([0, 1, 2] * 4, dtype=torch.float32))
    torch.testing.assert_close(buf.resets[:, 0], torch.tensor([True, False] * 6))
    # env 1's truncations (steps 2, 5, 8, 11) keep their true final observations and values
    assert buf.final_t.tolist() == [2, 5, 8, 11] and buf.final_b.tolist() == [1] * 4
    assert buf.final_obs is not None
    torch.testing.assert_close(buf.final_obs, torch.tensor([[1.0, 3.0]] * 4))
    assert buf.trunc_values.count_nonzero() == 4
    with torch.no_grad():  # the value of each final observation after its episode's steps
        for i, t in enumerate(buf.final_t.tolist()):
            state = learner.initial_state(1)
            for k in range(t - 2, t + 1):
                state = learner.net.step(buf.obs[k, 1:2], state)[2]
            value = learner.net.step(buf.final_obs[i : i + 1], state)[1]
            torch.testing.assert_close(buf.trunc_values[t, 1:2], value, atol=1e-6, rtol=1e-5)


register_env_source("test-countdown", lambda name, n, settings: SingleAgentBatch(CountdownEnv()))
register_env_source("test-cue", lambda name, n, settings: SingleAgentBatch(CueMemoryEnv(n)))


def test_the_trainer_trains_on_a_single_agent_batch(tmp_path: Path) -> None:
    cfg = PPOConfig(network=SMALL, num_steps=12, chunk_len=4, kl_target=None)
    trainer, history = train_run(tmp_path, "test-countdown:v0", 3, cfg, total=2 * 12 * 3)
    learner = trainer.learners["main"].learner
    assert trainer.vec.possible_agents == ["agent_0"]
    assert len(history) == learner.num_updates == 2
    assert [h["step"] for h in history] == [36.0, 72.0]
    # episodes that ended in each update's steps: 13 (returns 2, 6, 12 per env)
    for h in history:
        assert h["charts/episodes"] == 13
        assert h["charts/episodic_return"] == pytest.approx(72 / 13)
        assert h["charts/episodic_length"] == pytest.approx(36 / 13)
    assert history[1]["charts/learning_rate"] == pytest.approx(cfg.lr * 0.5)  # progress 1 / 2


def test_the_trainer_seeds_the_learner_and_envs_it_builds(tmp_path: Path) -> None:
    cfg = PPOConfig(network=SMALL, num_steps=8, chunk_len=4)

    def losses(history: list[dict[str, float]]) -> list[float]:
        return [h[k] for h in history for k in ("losses/policy_loss", "losses/value_loss")]

    first = train_run(tmp_path / "a", "test-cue:v0", 4, cfg, total=64, seed=7)[1]
    again = train_run(tmp_path / "b", "test-cue:v0", 4, cfg, total=64, seed=7)[1]
    other = train_run(tmp_path / "c", "test-cue:v0", 4, cfg, total=64, seed=8)[1]
    assert len(first) == len(again) == 2
    assert losses(first) == losses(again)
    assert losses(first) != losses(other)
