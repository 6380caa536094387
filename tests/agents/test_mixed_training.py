"""Mixed training (some envs without the experts) and expert dropout, through engine absence.

The configs: ``mixed.solo_fraction`` / ``mixed.agents`` and ``dropout.rate`` / ``dropout.step``
/ ``dropout.agents`` of a :class:`TrainConfig` (and of a stream); see
:mod:`marlgrid.agents.training.mixing`.
"""

from __future__ import annotations

import csv

import numpy as np
import pytest

import marlgrid
from marlgrid.agents.training.mixing import (
    DropoutConfig,
    ExpertDropout,
    MixedConfig,
    solo_env_count,
)
from marlgrid.agents.training.roles import RoleConfig
from marlgrid.agents.training.train_config import EnvConfig, LoggerConfig, StreamConfig, identity
from marlgrid.agents.training.trainer import TrainConfig, Trainer
from marlgrid.config import ConfigError
from marlgrid.constants import AGENT, EMPTY
from marlgrid.core import kernels as K
from marlgrid.vector import VectorEnv
from tests.conftest import HandMadeEnv

GOAL_CYCLE_3 = "MarlGrid-GoalCycle-13x13-3Agents-v0"
ORACLE = RoleConfig("scripted", policy="oracle")
EXPERTS = {"agent_1": ORACLE, "agent_2": ORACLE}


def small_config(num_envs: int, max_steps: int, **kwargs) -> TrainConfig:
    """A tiny PPO novice (agent_0) beside two oracles; one iteration is one episode."""
    from marlgrid.agents.algorithms.ppo import PPOConfig
    from marlgrid.agents.networks import NetworkConfig

    net = NetworkConfig(hidden_size=16, trunk_sizes=(16,), head_sizes=(16,), conv_channels=(4,))
    base = dict(
        env=EnvConfig(GOAL_CYCLE_3, num_envs=num_envs, settings={"max_steps": max_steps}),
        roles=dict(EXPERTS),
        agent=PPOConfig(
            network=net,
            num_steps=max_steps,
            chunk_len=max_steps,
            num_minibatches=1,
            update_epochs=1,
        ),
        logger=LoggerConfig(tensorboard=False, progress=False),
        video=False,
        total_timesteps=num_envs * max_steps * 2,
    )
    return TrainConfig(**{**base, **kwargs})


def test_solo_env_count_rounds_half_up():
    assert solo_env_count(0.25, 16) == 4
    assert solo_env_count(0.25, 10) == 3  # 2.5 rounds up
    assert solo_env_count(0.3, 5) == 2  # 1.5 rounds up
    assert solo_env_count(0.1, 4) == 0  # 0.4 rounds down
    assert solo_env_count(0.0, 8) == 0


def test_mixed_training_plays_exactly_the_configured_envs_without_the_experts(tmp_path):
    cfg = small_config(16, 6, mixed=MixedConfig(solo_fraction=0.25))
    trainer = Trainer(cfg, tmp_path / "run")
    stream = trainer.streams[0]
    rollout = stream.start(seed=3)
    status = stream.vec.engine.status
    solo = np.arange(16) < 4  # 16 x 0.25: envs 0..3
    assert (status[solo, 1:] == K.ABSENT).all() and (status[~solo, 1:] == K.ACTIVE).all()
    ended = 0
    for _ in range(3 * 6 + 2):  # three whole episodes and the start of a fourth
        rollout.step()
        assert (status[solo, 1:] == K.ABSENT).all()
        assert not (status[~solo, 1:] == K.ABSENT).any()
        assert (status[:, 0] != K.ABSENT).all()  # the learner always plays
        ended += int(stream.vec.engine.step_count[0] == 0)
    assert ended == 3
    # the oracles of solo envs never earn anything: they never act
    returns, envs = rollout.pop_returns(), rollout.pop_envs()
    assert len(returns) == 3 * 16 and (returns[solo[envs]][:, 1:] == 0).all()


def test_the_learners_episode_metrics_are_split_into_solo_and_social(tmp_path):
    cfg = small_config(8, 6, mixed=MixedConfig(solo_fraction=0.25))  # 2 solo envs
    Trainer(cfg, tmp_path / "run").run()
    with (tmp_path / "run" / "metrics.csv").open() as f:
        rows = list(csv.DictReader(f))
    assert len(rows) == 2
    for row in rows:  # one episode per env per iteration
        assert float(row["charts/episodes"]) == 8.0
        assert float(row["charts/solo/episodes"]) == 2.0
        assert float(row["charts/social/episodes"]) == 6.0
        assert float(row["charts/solo/episodic_length"]) == 6.0
        assert "charts/social/episodic_return" in row


def test_dropout_removes_the_experts_at_the_configured_step(tmp_path):
    cfg = small_config(4, 8, dropout=DropoutConfig(agents=["agent_2"], step=3))
    trainer = Trainer(cfg, tmp_path / "run")
    stream = trainer.streams[0]
    rollout = stream.start(seed=0)
    engine = stream.vec.engine
    for _ in range(2 * 8):  # two episodes
        pos_before = engine.pos[:, 2].copy()
        rollout.step()
        t = int(engine.step_count[0])  # every env has the same clock
        assert (engine.status[:, 2] == K.ABSENT).all() == (t >= 3), t
        assert (engine.status[:, 1] == K.ACTIVE).all()  # agent_1 is not listed
        if t > 3:  # out since step 3: it did not move
            np.testing.assert_array_equal(engine.pos[:, 2], pos_before)
    assert stream.pop_metrics()["charts/dropouts"] == 2 * 4


def test_dropout_at_a_rate_leaves_after_a_geometric_number_of_steps():
    """Each expert still present leaves after a step with chance 0.1: it acts for L steps with
    P(L = j) = 0.9 ** (j - 1) * 0.1, mean 10; the leaving share per present step is 0.1."""
    num_envs, rate = 64, 0.1
    vec = marlgrid.make_vec(GOAL_CYCLE_3, num_envs=num_envs, max_steps=200)
    dropout = ExpertDropout([1, 2], rate, None, seed=5)
    obs, infos = vec.reset(seed=0)
    rng = np.random.default_rng(0)
    lengths, present_steps = [], 0
    for _ in range(400):  # two episodes
        _, _, _, _, infos = vec.step(rng.integers(0, 7, (num_envs, 3)))
        before = vec.engine.status[:, 1:] == K.ACTIVE
        present_steps += int(before.sum()) if vec.engine.step_count[0] > 0 else 0
        obs, infos = dropout.after_step(vec, obs, infos)
        left = before & vec.absent[:, 1:]
        lengths += [int(vec.engine.step_count[0])] * int(left.sum())
        assert not (infos["active"][:, 1:] & vec.absent[:, 1:]).any()
    assert len(lengths) == 2 * num_envs * 2  # every expert left in each episode
    assert abs(np.mean(lengths) - 1 / rate) < 4 * np.sqrt(1 - rate) / rate / np.sqrt(256)
    assert abs(len(lengths) / present_steps - rate) < 0.015


def test_a_dropout_step_takes_the_expert_out_of_the_novices_view():
    """The hand-built layout: the expert right in front of the novice, seen before step 1 and
    gone from the novice's view once dropout.step=1 removed it after that step."""
    vec = VectorEnv(HandMadeEnv(["#####", "#...#", "#...#", "#####"], n_agents=2), 1)
    obs, infos = vec.reset(seed=0)
    engine = vec.engine
    engine.pos[0] = [(2, 2), (2, 1)]
    engine.dirs[0] = [3, 3]  # both face north: the expert is one cell ahead of the novice
    engine.observe()
    assert obs["agent_0"][0, 3, 5, 0] == AGENT
    obs, _, _, _, infos = vec.step(np.array([[6, 6]]))  # 'done': nobody moves
    assert obs["agent_0"][0, 3, 5, 0] == AGENT
    obs, infos = ExpertDropout([1], 0.0, 1, seed=0).after_step(vec, obs, infos)
    assert obs["agent_0"][0, 3, 5].tolist() == [EMPTY, 0, 0]
    assert infos["active"].tolist() == [[True, False]]


BAD_SETTINGS = [
    # fractions that round to no solo env or to all of them (16 envs), and a step that never comes
    (r"mixed.solo_fraction=0.01 gives 0 of 4 envs", {"mixed": MixedConfig(solo_fraction=0.01)}),
    (r"mixed.solo_fraction=0.99 gives all 4 envs", {"mixed": MixedConfig(solo_fraction=0.99)}),
    (r"dropout.step=6 never comes: .* end at step 6", {"dropout": DropoutConfig(step=6)}),
    (r"mixed.solo_fraction must be .*\[0, 1\).* got 1", {"mixed": MixedConfig(1.0)}),
    (r"mixed.solo_fraction .* got -0.25", {"mixed": MixedConfig(-0.25)}),
    (r"dropout.rate .* got 1.5", {"dropout": DropoutConfig(rate=1.5)}),
    (r"dropout.step must be .* got 0", {"dropout": DropoutConfig(step=0)}),
    (
        r"mixed.agents names unknown agent ids \['agent_9'\]",
        {"mixed": MixedConfig(0.5, agents=["agent_9"])},
    ),
    (
        r"dropout.agents includes \['agent_0'\], driven by a training learner",
        {"dropout": DropoutConfig(agents=["agent_0"], rate=0.1)},
    ),
    (r"mixed.agents must be a non-empty list", {"mixed": MixedConfig(0.5, agents=[])}),
    (
        r"mixed.agents is null .* every agent of this env is a learner",
        {"mixed": MixedConfig(0.5), "roles": {}},
    ),
    (
        r"streams.solo: mixed: unknown key\(s\) \['fraction'\]",
        {"streams": {"solo": {"env": {"id": GOAL_CYCLE_3}, "mixed": {"fraction": 0.5}}}},
    ),
    (
        r"streams.solo.dropout.agents includes \['agent_0'\]",
        {
            "streams": {
                "solo": StreamConfig(
                    EnvConfig(GOAL_CYCLE_3, num_envs=2),
                    dict(EXPERTS),
                    dropout=DropoutConfig(agents=["agent_0"], rate=0.1),
                )
            }
        },
    ),
]


@pytest.mark.parametrize(("match", "settings"), BAD_SETTINGS)
def test_mixed_and_dropout_settings_are_checked_before_anything_runs(tmp_path, match, settings):
    with pytest.raises(ConfigError, match=match):
        Trainer(small_config(4, 6, **settings), tmp_path / "run")
    assert not (tmp_path / "run").exists()


def test_runs_without_mixing_keep_their_identity_and_runs_with_it_record_it():
    plain = identity(small_config(4, 6))
    assert "mixed" not in plain and "dropout" not in plain
    mixed = identity(small_config(4, 6, mixed=MixedConfig(0.25), dropout=DropoutConfig(step=3)))
    assert mixed["mixed"] == {"solo_fraction": 0.25, "agents": None}
    assert mixed["dropout"] == {"agents": None, "rate": 0.0, "step": 3}


def test_hydra_style_overrides_reach_the_config():
    from omegaconf import OmegaConf

    schema = OmegaConf.structured(TrainConfig)
    merged = OmegaConf.merge(
        schema, OmegaConf.from_dotlist(["mixed.solo_fraction=0.25", "dropout.agents=[agent_1]"])
    )
    cfg = OmegaConf.to_object(merged)
    assert cfg.mixed == MixedConfig(0.25) and cfg.dropout.agents == ["agent_1"]
