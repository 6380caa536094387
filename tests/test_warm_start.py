"""``init_from``: a new run's learners start from a saved learner's network weights, with a
fresh optimizer and counters; weights that do not fit are refused before anything trains."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")

from marlgrid.agents.algorithms.drqn import DRQNConfig  # noqa: E402
from marlgrid.agents.algorithms.ppo import PPOConfig  # noqa: E402
from marlgrid.agents.bookkeeping.checkpoint import CheckpointError, list_checkpoints  # noqa: E402
from marlgrid.agents.networks.models import NetworkConfig  # noqa: E402
from marlgrid.agents.training.trainer import (  # noqa: E402
    EnvConfig,
    LoggerConfig,
    TrainConfig,
    Trainer,
    train,
)
from marlgrid.config import ConfigError  # noqa: E402

NET = NetworkConfig(hidden_size=16, trunk_sizes=(16,), head_sizes=(8,), conv_channels=(4,))


def config(agent=None, size: int = 7, **overrides) -> TrainConfig:
    """A tiny goal-cycle run (2 envs, 32 env steps)."""
    agent = agent or PPOConfig(network=NET, num_steps=8, chunk_len=4, num_minibatches=2)
    return TrainConfig(
        env=EnvConfig("MarlGrid-GoalCycle-13x13-3Agents-v0", num_envs=2,
                      settings={"size": size, "max_steps": 30}),
        agent=agent, video=False, logger=LoggerConfig(tensorboard=False, progress=False),
        **{"total_timesteps": 32, **overrides},
    )  # fmt: skip


def net_of(trainer: Trainer, key: str = "net") -> dict[str, torch.Tensor]:
    return trainer.learners["main"].learner.state_dict()[key]


@pytest.fixture(scope="module")
def trained(tmp_path_factory) -> Path:
    torch.set_num_threads(1)
    run = tmp_path_factory.mktemp("warm_start") / "source"
    train(config(), run)
    return run


def test_a_new_run_starts_from_the_saved_weights_with_a_fresh_optimizer(trained, tmp_path):
    saved = torch.load(list_checkpoints(trained / "checkpoints")[-1], weights_only=True)
    source = saved["learners"]["main"]
    cfg = config(size=9, seed=3, init_from=str(trained))  # another map size: the same network
    trainer = Trainer(cfg, tmp_path / "warm")
    learner = trainer.learners["main"].learner
    for name, tensor in net_of(trainer).items():
        assert torch.equal(tensor, source["net"][name]), name
    assert source["num_updates"] > 0 and learner.num_updates == 0
    assert learner.optimizer.state_dict()["state"] == {}  # no moments carried over
    cold = Trainer(config(size=9, seed=3), tmp_path / "cold")
    pairs = zip(net_of(cold).values(), net_of(trainer).values(), strict=True)
    assert any(not torch.equal(a, b) for a, b in pairs)
    trainer.run()
    log = (tmp_path / "warm" / "train.log").read_text()
    assert f"learner main starts from the weights of main in {trained}" in log


def test_an_exported_file_or_one_checkpoint_starts_it_too(trained, tmp_path):
    checkpoint = list_checkpoints(trained / "checkpoints")[-1]
    from_dir = net_of(Trainer(config(init_from=str(trained)), tmp_path / "a"))
    from_file = net_of(Trainer(config(init_from=str(checkpoint)), tmp_path / "b"))
    assert all(torch.equal(from_dir[k], from_file[k]) for k in from_dir)


def test_weights_that_do_not_fit_are_refused_naming_the_tensor(trained, tmp_path):
    wider = PPOConfig(network=dataclasses.replace(NET, hidden_size=32), num_steps=8, chunk_len=4,
                      num_minibatches=2)  # fmt: skip
    with pytest.raises(CheckpointError, match=r"init_from: learner 'main' of .* does not fit"):
        Trainer(config(wider, init_from=str(trained)), tmp_path / "wider")
    q = DRQNConfig(network=NET)  # another algorithm: the PPO file holds no Q-network
    with pytest.raises(ConfigError, match="init_from: learner 'main' of .* has no 'q'"):
        Trainer(config(q, init_from=str(trained)), tmp_path / "drqn")
    assert not (tmp_path / "wider" / "metrics.csv").exists()


def test_a_missing_path_is_refused_before_anything_is_built(tmp_path):
    missing = tmp_path / "nowhere"
    with pytest.raises(ConfigError, match=f"init_from must name .* got '{missing}'"):
        config(init_from=str(missing)).validate()
    with pytest.raises(ConfigError, match="init_from: .* is neither a run directory"):
        from marlgrid.agents.training.warm_start import saved_weights_file

        saved_weights_file(missing)


def test_a_resumed_run_keeps_its_own_weights(trained, tmp_path):
    run = tmp_path / "resumed"
    train(config(seed=5, init_from=str(trained)), run)
    own = torch.load(list_checkpoints(run / "checkpoints")[-1], weights_only=True)
    again = Trainer(config(seed=5, init_from=str(trained), total_timesteps=64, extend=True), run)
    again._resume()
    for name, tensor in net_of(again).items():
        assert torch.equal(tensor, own["learners"]["main"]["net"][name]), name


def test_a_loss_terms_new_head_starts_fresh_beside_the_saved_weights(trained, tmp_path):
    saved = torch.load(list_checkpoints(trained / "checkpoints")[-1], weights_only=True)
    source = saved["learners"]["main"]["net"]
    term = [{"name": "next_reward", "coef": 1.0}]
    agent = PPOConfig(network=NET, num_steps=8, chunk_len=4, num_minibatches=2, aux_losses=term)
    trainer = Trainer(config(agent, init_from=str(trained)), tmp_path / "aux")
    net = net_of(trainer)
    new = sorted(set(net) - set(source))
    assert new and all(k.startswith("extra_heads.next_reward.") for k in new)
    assert all(torch.equal(net[k], source[k]) for k in source)
    trainer.run()  # and it trains
