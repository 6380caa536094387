"""PPO learner: metrics, KL early stopping, hard-KL rollback, schedules, checkpoints, loop."""

from __future__ import annotations

import io
import math

import numpy as np
import pytest
import torch
from gymnasium import spaces

from marlgrid.agents.algorithms.ppo import PPO, PPOConfig
from marlgrid.agents.arrays import final_obs_rows
from marlgrid.agents.learner import config_from_dict
from marlgrid.agents.networks.models import NetworkConfig
from marlgrid.agents.optim import linear_schedule
from marlgrid.agents.storage.rollout_buffer import RolloutBuffer
from marlgrid.agents.training.env_sources import register_env_source
from marlgrid.agents.training.rollout import SingleAgentBatch
from marlgrid.agents.training.trainer import EnvConfig, LoggerConfig, TrainConfig, Trainer
from marlgrid.analysis.mmer import read_metrics
from tests.agents.conftest import collect, train_learner
from tests.toy_envs import CueMemoryEnv, RandomEpisodesEnv

SMALL = {"hidden_size": 16, "trunk_sizes": (16,), "head_sizes": (8,), "conv_channels": (4,)}

METRIC_KEYS = {
    "losses/policy_loss",
    "losses/value_loss",
    "losses/entropy",
    "losses/approx_kl",
    "losses/clipfrac",
    "losses/explained_variance",
    "charts/learning_rate",
    "charts/refreshes",
    "charts/staleness_mse",
    "charts/staleness_cos",
    "charts/minibatches",
    "charts/early_stops",
    "charts/rolled_back",
}


def _cfg(memory: str = "lstm", **overrides) -> PPOConfig:
    """A small PPOConfig; ``overrides`` are PPOConfig fields."""
    return PPOConfig(network=NetworkConfig(**SMALL, memory=memory), **overrides)


@pytest.fixture(autouse=True)
def _one_thread() -> None:
    torch.set_num_threads(1)


def _learner_and_buffer(memory: str = "lstm", **overrides) -> tuple[PPO, RolloutBuffer]:
    cfg = _cfg(memory, **{"num_steps": 20, **overrides})
    env = CueMemoryEnv(8)
    learner = PPO(env.single_observation_space, env.single_action_space, cfg, seed=0)
    collect(env, learner, cfg.num_steps, seed=0)
    assert learner.buffer is not None and learner.buffer.full and learner.ready()
    return learner, learner.buffer


def _params(learner: PPO) -> list[torch.Tensor]:
    return [p.detach().clone() for p in learner.net.parameters()]


@pytest.mark.parametrize("memory", ["lstm", "gru", "none"])
def test_update_metrics_and_padding(memory: str) -> None:
    # T=20 is not a multiple of chunk_len=8: the last chunk of each slot is padded and masked
    learner, buffer = _learner_and_buffer(memory=memory, kl_target=None)
    before = _params(learner)
    metrics = learner.update()
    assert metrics.keys() >= METRIC_KEYS
    for k in METRIC_KEYS - {"losses/explained_variance"}:
        assert math.isfinite(metrics[k]), k
    assert metrics["charts/minibatches"] == 16 and metrics["charts/refreshes"] == 7
    assert any(not torch.equal(a, b) for a, b in zip(before, _params(learner), strict=True))


def test_kl_early_stopping_ends_each_epoch() -> None:
    learner, buffer = _learner_and_buffer(kl_target=1e-9, lr=1e-2)
    metrics = learner.update(buffer=buffer)
    # first minibatch: the policy is the behaviour policy (KL ~ 0) so it steps; every later
    # minibatch sees KL > 1.5e-9 and ends its epoch without stepping
    assert metrics["charts/minibatches"] == 1
    assert metrics["charts/early_stops"] == learner.cfg.update_epochs


def test_hard_kl_limit_rolls_back_params_and_optimizer() -> None:
    learner, buffer = _learner_and_buffer(kl_target=None, kl_hard_limit=0.0, lr=1e-2)
    before = _params(learner)
    opt_before = learner.optimizer.state_dict()
    metrics = learner.update(buffer=buffer)
    assert metrics["charts/rolled_back"] == 1.0 and metrics["losses/approx_kl_batch"] > 0
    assert all(torch.equal(a, b) for a, b in zip(before, _params(learner), strict=True))
    assert learner.optimizer.state_dict()["state"] == opt_before["state"] == {}

    learner.cfg.kl_hard_limit = 1e9
    metrics = learner.update(buffer=buffer)
    assert metrics["charts/rolled_back"] == 0.0
    assert any(not torch.equal(a, b) for a, b in zip(before, _params(learner), strict=True))


def test_batch_kl_logged_on_request_from_states_rerun_in_either_refresh_arm() -> None:
    for refresh_interval in (0, 2):
        learner, buffer = _learner_and_buffer(kl_target=None, lr=1e-2, log_batch_kl=True,
                                              refresh_interval=refresh_interval)  # fmt: skip
        metrics = learner.update(buffer=buffer)
        assert metrics["charts/rolled_back"] == 0.0
        # the logged figure is the whole-rollout KL of the network after the update
        assert metrics["losses/approx_kl_batch"] == pytest.approx(learner.batch_kl(buffer))
        assert metrics["losses/approx_kl_batch"] > 0
    learner, buffer = _learner_and_buffer(kl_target=None)
    assert "losses/approx_kl_batch" not in learner.update(buffer=buffer)


def test_schedules() -> None:
    assert linear_schedule(1.0, 0.0, 0.25) == 0.75 and linear_schedule(1.0, 3.0, 2.0) == 3.0
    learner, buffer = _learner_and_buffer(lr=1e-3, anneal_lr=True, ent_coef=0.1, ent_coef_final=0.0)
    metrics = learner.update(progress=0.5)
    assert metrics["charts/learning_rate"] == pytest.approx(5e-4)
    assert metrics["charts/ent_coef"] == pytest.approx(0.05)
    assert learner.optimizer.param_groups[0]["lr"] == pytest.approx(5e-4)
    learner.cfg.anneal_lr = False
    assert learner.update(0.9, buffer)["charts/learning_rate"] == pytest.approx(1e-3)


def test_state_dict_round_trip() -> None:
    learner, _ = _learner_and_buffer()
    learner.update()
    blob = io.BytesIO()
    torch.save(learner.state_dict(), blob)
    blob.seek(0)
    env = CueMemoryEnv(1)
    saved = torch.load(blob, weights_only=True)
    cfg = config_from_dict(saved["config"])  # the saved config rebuilds the learner
    assert cfg == learner.cfg
    restored = PPO(env.single_observation_space, env.single_action_space, cfg, seed=123)
    restored.load_state_dict(saved)
    assert all(torch.equal(a, b) for a, b in zip(_params(learner), _params(restored), strict=True))
    assert restored.num_updates == 1 and restored.num_refreshes == learner.num_refreshes
    opt_a, opt_b = learner.optimizer.state_dict(), restored.optimizer.state_dict()
    for k, v in opt_a["state"].items():
        assert torch.equal(v["exp_avg"], opt_b["state"][k]["exp_avg"])
    # same generator state -> same sampled actions
    obs, state, resets = torch.rand(8, 3), learner.initial_state(8), torch.ones(8, dtype=torch.bool)
    torch.testing.assert_close(
        learner.act(obs, state, resets).actions, restored.act(obs, state, resets).actions
    )


DICT_SPACE = spaces.Dict(
    {
        "image": spaces.Box(0, 255, (5, 5, 3), np.uint8),
        "position": spaces.Box(0, 1, (2,), np.float32),
        "direction": spaces.Discrete(4),
    }
)
register_env_source(
    "test-random-dict",
    lambda name, n, settings: SingleAgentBatch(RandomEpisodesEnv(n, DICT_SPACE, num_actions=7)),
)


def test_trainer_on_dict_observations_with_truncations(tmp_path) -> None:
    """A gymnasium-style batch as a trainer env source (``SingleAgentBatch``): Dict
    observations, truncations with final observations, one metrics row per update."""
    cfg = TrainConfig(
        env=EnvConfig(id="test-random-dict:v0", num_envs=4),
        agent=_cfg("gru", num_steps=16, chunk_len=4, kl_hard_limit=10.0),
        logger=LoggerConfig(tensorboard=False, progress=False),
        total_timesteps=3 * 16 * 4,
        video=False,
    )
    trainer = Trainer(cfg, tmp_path)
    trainer.run()
    history = read_metrics(tmp_path)
    assert [h["step"] for h in history] == [64, 128, 192]
    assert history[-1]["charts/episodes"] > 0 and history[-1]["charts/SPS"] > 0
    assert trainer.learners["main"].learner.num_updates == 3


def test_missing_final_obs_on_truncation_raises() -> None:
    class NoFinalObs(RandomEpisodesEnv):
        def step(self, actions):
            obs, r, te, tr, _ = super().step(actions)
            return obs, r, te, tr, {}

    env = NoFinalObs(4, spaces.Box(0, 1, (2,), np.float32), p_term=0.0, p_trunc=1.0)
    learner = PPO(env.single_observation_space, env.single_action_space, _cfg(num_steps=4))
    with pytest.raises(ValueError, match="final_obs"):
        collect(env, learner, 4)


def test_final_obs_rows_accepts_gymnasium_object_arrays() -> None:
    rows = np.empty(3, dtype=object)
    rows[0], rows[1], rows[2] = np.zeros(2), None, np.ones(2)
    np.testing.assert_array_equal(final_obs_rows(rows, np.array([2, 0])), [[1, 1], [0, 0]])
    dict_rows = np.empty(2, dtype=object)
    dict_rows[0], dict_rows[1] = None, {"a": np.array([5]), "b": np.array(1.0)}
    out = final_obs_rows(dict_rows, np.array([1]))
    np.testing.assert_array_equal(out["a"], [[5]])
    batched = {"a": np.arange(6).reshape(3, 2)}
    np.testing.assert_array_equal(final_obs_rows(batched, np.array([1]))["a"], [[2, 3]])


def test_runs_on_a_gymnasium_vector_env() -> None:
    """gymnasium's same-step autoreset vector envs fit the BatchedEnv protocol as they are."""
    import gymnasium as gym

    envs = gym.make_vec(
        "CartPole-v1",
        num_envs=4,
        vectorization_mode="sync",
        vector_kwargs={"autoreset_mode": gym.vector.AutoresetMode.SAME_STEP},
    )
    cfg = _cfg(num_steps=16)
    learner = PPO(envs.single_observation_space, envs.single_action_space, cfg, seed=0)
    history = train_learner(envs, learner, total_timesteps=2 * 16 * 4)
    assert len(history) == 2 and history[-1]["charts/episodes"] > 0


def test_invalid_steps_do_not_change_the_update() -> None:
    """Steps marked not valid (agents out of play) are left out of every loss term."""

    def run(garbage: float) -> list[torch.Tensor]:
        cfg = PPOConfig(
            num_steps=8,
            chunk_len=4,
            num_minibatches=1,
            update_epochs=1,
            kl_target=None,
            refresh_interval=0,
            norm_adv=False,
        )
        space = spaces.Box(-1e9, 1e9, (3,), np.float32)
        learner = PPO(space, spaces.Discrete(2), cfg, seed=0)
        buf = learner.new_buffer(2)
        state = learner.initial_state(2)
        gen = torch.Generator().manual_seed(0)
        for t in range(8):
            obs = torch.rand(2, 3, generator=gen)
            valid = torch.tensor([True, t < 4])
            obs[1] = torch.where(valid[1], obs[1], torch.full((3,), garbage))
            resets = torch.tensor([t == 0, t == 0])
            out = learner.act(obs, state, resets)
            buf.add(
                obs,
                resets,
                state,
                out.actions,
                out.extras["logp"],
                out.extras["values"],
                torch.ones(2),
                torch.tensor([False, t == 3]),
                torch.zeros(2, dtype=torch.bool),
                valid=valid,
            )
            state = out.state
        buf.finish(obs, state, torch.zeros(2, dtype=torch.bool), torch.zeros(2))
        learner.update(buffer=buf)
        return [p.detach().clone() for p in learner.net.parameters()]

    for a, b in zip(run(0.0), run(123.0), strict=True):
        torch.testing.assert_close(a, b)
