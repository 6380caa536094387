"""The learner protocol end to end: mixed algorithms, frozen learners from their own configs,
role errors, callbacks."""

from __future__ import annotations

import dataclasses

import pytest
import torch

from marlgrid.agents.algorithms.ppo import PPO, PPOConfig
from marlgrid.agents.bookkeeping.checkpoint import list_checkpoints, load_checkpoint
from marlgrid.agents.learner import LEARNERS, Learner, load_builtin_learners
from marlgrid.agents.memory import GRUCore, LSTMCore
from marlgrid.agents.networks.models import NetworkConfig
from marlgrid.agents.training.callbacks import Callback
from marlgrid.agents.training.trainer import EnvConfig, LoggerConfig, TrainConfig, Trainer, train
from marlgrid.config import ConfigError

ENV = "MarlGrid-GoalCycle-13x13-3Agents-v0"
SMALL = NetworkConfig(hidden_size=16, trunk_sizes=(16,), head_sizes=(8,), conv_channels=(4,))


@pytest.fixture(autouse=True)
def _one_thread() -> None:
    torch.set_num_threads(1)


def _ppo(memory: str) -> PPOConfig:
    net = dataclasses.replace(SMALL, memory=memory)
    return PPOConfig(network=net, num_steps=8, chunk_len=4, num_minibatches=2, update_epochs=1)


def _cfg(**kwargs) -> TrainConfig:
    base = {
        "env": EnvConfig(ENV, num_envs=2),
        "agent": _ppo("lstm"),
        "total_timesteps": 32,
        "checkpoint_every": 1,
        "video": False,
        "logger": LoggerConfig(tensorboard=False, progress=False),
    }
    return TrainConfig(**{**base, **kwargs})


def test_every_registered_learner_follows_the_protocol() -> None:
    load_builtin_learners()
    assert "ppo" in LEARNERS
    learner = PPO(*_spaces(), _ppo("gru"))
    assert isinstance(learner, Learner)
    assert learner.state_dict()["config"]["network"]["memory"] == "gru"


def _spaces():
    import marlgrid

    vec = marlgrid.make_vec(ENV, 1)
    return vec.single_observation_space("agent_0"), vec.single_action_space("agent_0")


def test_frozen_gru_expert_plays_beside_an_lstm_learner(tmp_path) -> None:
    expert_dir = tmp_path / "expert"
    train(_cfg(agent=_ppo("gru")), expert_dir)
    expert_ckpt = list_checkpoints(expert_dir / "checkpoints")[-1]
    roles = {"agent_0": {"kind": "frozen", "checkpoint": str(expert_ckpt), "learner": "main"}}
    trainer = Trainer(_cfg(roles=roles), tmp_path / "novice")
    frozen = next(g for g in trainer.groups if not g.train)
    learner = trainer.learners["main"]
    assert frozen.agents == ["agent_0"] and learner.agents == ["agent_1", "agent_2"]
    assert isinstance(frozen.learner.net.memory, GRUCore)
    assert isinstance(learner.learner.net.memory, LSTMCore)
    before = [p.clone() for p in frozen.learner.net.parameters()]
    trainer.run()
    after = list(frozen.learner.net.parameters())
    assert all(torch.equal(a, b) for a, b in zip(before, after, strict=True))
    payload = load_checkpoint(list_checkpoints(tmp_path / "novice" / "checkpoints")[-1])
    assert set(payload["learners"]) == {"main"}  # frozen learners are not saved again


def test_an_exported_expert_drops_training_state_and_plays_as_the_same_policy(tmp_path) -> None:
    from experiments.export_expert import main as export_main
    from marlgrid.agents.bookkeeping.checkpoint import CheckpointError, export_policies
    from marlgrid.agents.training.roles import load_frozen

    learners = {"expert_1": _ppo("gru")}
    roles = {"agent_1": {"kind": "learner", "learner": "expert_1"}}
    train(_cfg(roles=roles, learners=learners), tmp_path / "run")
    source = list_checkpoints(tmp_path / "run" / "checkpoints")[-1]
    out = tmp_path / "experts" / "e.pt"
    export_main([str(tmp_path / "run"), str(out), "--learners", "expert_1", "--note", "hi"])
    full, small = load_checkpoint(source), load_checkpoint(out)
    assert set(small["learners"]) == {"expert_1"} and small["note"] == "hi"
    assert "optimizer" not in small["learners"]["expert_1"] and "torch_rng" not in small
    assert small["global_step"] == full["global_step"] == 32
    assert out.stat().st_size < source.stat().st_size / 2
    obs_space, act_space = _spaces()
    played = load_frozen(out, "expert_1", obs_space, act_space)
    saved = full["learners"]["expert_1"]["net"]
    assert all(torch.equal(v, saved[k]) for k, v in played.net.state_dict().items())
    with pytest.raises(CheckpointError, match=r"holds learners \['expert_1', 'main'\]"):
        export_policies(source, tmp_path / "x.pt", ["nobody"])
    assert not (tmp_path / "x.pt").exists()


def test_unknown_learner_name_fails_at_start_naming_the_known_ones(tmp_path) -> None:
    roles = {"agent_1": {"kind": "learner", "learner": "novice"}}
    with pytest.raises(ConfigError, match=r"'novice'.*\['expert', 'main'\]"):
        Trainer(_cfg(roles=roles, learners={"expert": _ppo("gru")}), tmp_path / "run")
    assert not (tmp_path / "run").exists()


def test_two_named_learners_get_their_own_networks_and_algorithms(tmp_path) -> None:
    roles = {"agent_1": {"kind": "learner", "learner": "other"}}
    learners = {"other": dataclasses.asdict(_ppo("gru"))}  # as YAML gives it: a plain dict
    trainer = Trainer(_cfg(roles=roles, learners=learners), tmp_path / "run")
    assert {n: g.agents for n, g in trainer.learners.items()} == {
        "main": ["agent_0", "agent_2"],
        "other": ["agent_1"],
    }
    assert isinstance(trainer.learners["other"].learner.net.memory, GRUCore)
    metrics = trainer.run()
    assert "main/losses/policy_loss" in metrics and "other/losses/policy_loss" in metrics


class _StopAfter(Callback):
    def __init__(self, n: int) -> None:
        self.n, self.calls = n, []

    def on_training_start(self, trainer) -> None:
        self.calls.append("start")

    def on_update_end(self, trainer, metrics) -> bool:
        self.calls.append(trainer.iteration)
        return trainer.iteration < self.n

    def on_training_end(self, trainer, completed: bool) -> None:
        self.calls.append(("end", completed))


def test_a_callback_can_stop_training_and_the_stop_is_checkpointed(tmp_path) -> None:
    stop = _StopAfter(2)
    trainer = Trainer(_cfg(total_timesteps=64, checkpoint_every=10), tmp_path / "run", [stop])
    trainer.run()
    assert stop.calls == ["start", 1, 2, ("end", False)]
    assert trainer.iteration == 2 < trainer.num_iterations
    assert [p.name for p in list_checkpoints(tmp_path / "run" / "checkpoints")] == [
        "ckpt_000000002.pt"
    ]


def _drqn():
    from marlgrid.agents.algorithms.drqn import DRQNConfig

    return DRQNConfig(
        network=SMALL,
        seq_len=8,
        burn_in=2,
        overlap=4,
        n_step=2,
        buffer_size=2_000,
        batch_size=4,
        learning_starts=16,
        train_freq=4,
        target_update_period=10,
    )


def test_a_ppo_and_a_drqn_learner_train_side_by_side_checkpoint_and_resume(tmp_path) -> None:
    from marlgrid.agents.algorithms.drqn import DRQN

    cfg = _cfg(
        env=EnvConfig("MarlGrid-DoorKey-8x8-2Agents-v0", num_envs=2),
        roles={"agent_1": {"kind": "learner", "learner": "q"}},
        learners={"q": _drqn()},
        total_timesteps=96,  # 6 iterations of 8 steps x 2 envs
    )
    run_dir = tmp_path / "run"
    stop = _StopAfter(3)
    first = Trainer(cfg, run_dir, [stop])
    assert isinstance(first.learners["main"].learner, PPO)
    assert isinstance(first.learners["q"].learner, DRQN)
    metrics = first.run()
    assert "main/losses/policy_loss" in metrics and "q/losses/td_loss" in metrics
    q_first = first.learners["q"].learner
    saved = load_checkpoint(list_checkpoints(run_dir / "checkpoints")[-1])
    assert saved["learners"]["q"]["config"]["algo"] == "drqn"
    assert saved["learners"]["main"]["config"]["algo"] == "ppo"

    seen: dict[str, object] = {}

    class _Capture(Callback):
        def on_training_start(self, trainer) -> None:  # called after the resume
            q = trainer.learners["q"].learner
            seen.update(
                iteration=trainer.iteration,
                q_updates=q.num_updates,
                steps_added=q.replay.steps_added,
                ppo_updates=trainer.learners["main"].learner.num_updates,
                params=[p.clone() for p in q.q.parameters()],
            )

    second = Trainer(cfg, run_dir, [_Capture()])  # the same command again: resumes at 3
    second.run()
    assert seen["iteration"] == 3
    assert seen["q_updates"] == q_first.num_updates > 0
    assert seen["steps_added"] == q_first.replay.steps_added
    assert seen["ppo_updates"] == first.learners["main"].learner.num_updates == 3
    for a, b in zip(q_first.q.parameters(), seen["params"], strict=True):
        assert torch.equal(a, b)
    assert second.iteration == second.num_iterations == 6
    assert second.learners["q"].learner.num_updates > q_first.num_updates


def test_metrics_of_every_update_in_an_iteration_are_averaged_and_none_is_lost(tmp_path) -> None:
    import dataclasses as dc

    from marlgrid.agents.algorithms.drqn import DRQN

    reported: list[dict[str, float]] = []
    original = DRQN.update

    def update(self, progress):  # odd updates report an extra metric, as a periodic refresh does
        out = original(self, progress)
        out["charts/extra"] = float(self.num_updates)
        if self.num_updates % 2:
            out["charts/odd_only"] = 1.0
        reported.append(out)
        return out

    class _Keep(Callback):
        rows: list[dict[str, float]] = []

        def on_update_end(self, trainer, metrics) -> bool:
            self.rows.append(dict(metrics))
            return True

    keep = _Keep()
    cfg = _cfg(
        env=EnvConfig("MarlGrid-Empty-5x5-v0", num_envs=2),
        agent=dc.replace(_drqn(), learning_starts=0, train_freq=2),
        iteration_steps=8,
        total_timesteps=32,
    )
    DRQN.update = update
    try:
        Trainer(cfg, tmp_path / "run", [keep]).run()
    finally:
        DRQN.update = original
    last = keep.rows[-1]
    assert last["charts/updates"] == 4  # 8 steps per iteration, an update every 2
    assert last["charts/extra"] == pytest.approx(sum(r["charts/extra"] for r in reported[-4:]) / 4)
    assert last["charts/odd_only"] == 1.0  # reported by 2 of the 4 updates, kept
    assert sum(r.get("charts/updates", 0) for r in keep.rows) == len(reported)
