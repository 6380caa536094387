"""Extension points of the training loop, used from outside the package: a learner that reads
another agent's actions and observations (teacher signals), one learner trained on two env
streams, and a step observer. Nothing under ``marlgrid/`` is edited for them: the toy learner
registers itself here."""

from __future__ import annotations

import csv
import dataclasses
from collections.abc import Mapping
from typing import Any

import numpy as np
import pytest
import torch

from marlgrid.agents.learner import Action, Step, register_learner
from marlgrid.agents.training.roles import RoleConfig
from marlgrid.agents.training.train_config import EnvConfig, LoggerConfig, StreamConfig
from marlgrid.agents.training.trainer import TrainConfig, Trainer
from marlgrid.config import ConfigError

GOAL_CYCLE_3 = "MarlGrid-GoalCycle-13x13-3Agents-v0"
GOAL_CYCLE_1 = "MarlGrid-GoalCycle-13x13-v0"


@dataclasses.dataclass
class CountingConfig:
    """The toy learner's config: acts on the histogram of its teacher's actions."""

    algo: str = "counting_imitator"
    num_steps: int = 8  # steps between updates (and per trainer iteration)
    teacher: str = "agent_1"

    def validate(self, key: str = "agent", num_slots: int | None = None) -> None:
        if not isinstance(self.num_steps, int) or self.num_steps < 1:
            raise ConfigError(f"{key}.num_steps must be an integer >= 1, got {self.num_steps!r}")

    def steps_per_iteration(self) -> int:
        return self.num_steps


class CountingImitator:
    """Behaviour cloning at its barest: counts the teacher's actions, plays the most frequent."""

    def __init__(self, observation_space, action_space, cfg: CountingConfig, seed: int = 0):
        self.cfg, self.device, self.action_start = cfg, torch.device("cpu"), 0
        self.teachers = (cfg.teacher,)
        self.counts = torch.zeros(int(action_space.n), dtype=torch.long)
        self.seen_obs: list[np.ndarray] = []
        self.steps = 0

    def initial_state(self, num_slots: int) -> torch.Tensor:
        return torch.zeros(num_slots, 1)

    def reset_state(self, state, resets):
        return state

    def act(self, obs, state, resets, explore: bool = True) -> Action:
        best = int(self.counts.argmax())
        return Action(torch.full((len(state),), best, dtype=torch.long), state, {})

    def begin(self, num_slots: int) -> None:
        self.num_slots = num_slots

    def record(self, step: Step) -> None:
        teacher = step.teachers[self.cfg.teacher]
        actions = teacher.actions[teacher.valid] - self.action_start
        self.counts += torch.bincount(actions, minlength=len(self.counts))
        self.seen_obs.append(teacher.obs.numpy().copy())
        self.steps += 1

    def ready(self) -> bool:
        return self.steps % self.cfg.num_steps == 0

    def update(self, progress: float) -> dict[str, float]:
        share = self.counts.max() / self.counts.sum().clamp(min=1)
        return {"losses/top_action_share": float(share)}

    def state_dict(self) -> dict[str, Any]:
        return {"counts": self.counts.clone(), "config": dataclasses.asdict(self.cfg)}

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        self.counts = state["counts"].clone()


register_learner("counting_imitator", CountingConfig, CountingImitator)


def quiet(**kwargs) -> TrainConfig:
    base = dict(
        logger=LoggerConfig(tensorboard=False, progress=False), video=False, checkpoint_every=2
    )
    return TrainConfig(**{**base, **kwargs})


def test_a_learner_receives_its_teachers_actions_and_observations(tmp_path):
    roles = {
        "agent_0": RoleConfig(),
        "agent_1": RoleConfig("scripted", policy="oracle"),
        "agent_2": RoleConfig("scripted", policy="random"),
    }
    cfg = quiet(
        env=EnvConfig(GOAL_CYCLE_3, num_envs=3, settings={"max_steps": 20}),
        agent=CountingConfig(),
        roles=roles,
        total_timesteps=3 * 8 * 4,
    )
    trainer = Trainer(cfg, tmp_path / "run")
    oracle = trainer.scripted["agent_1"]
    taken: list[np.ndarray] = []
    plan = oracle.scripted_actions

    def logged(engine, k):
        out = plan(engine, k)
        taken.append(out.copy())
        return out

    oracle.scripted_actions = logged
    shown: list[np.ndarray] = []  # what agent_1 saw before each step
    reset, step = trainer.vec.reset, trainer.vec.step

    def logged_reset(*args, **kwargs):
        obs, infos = reset(*args, **kwargs)
        shown.append(obs["agent_1"].copy())
        return obs, infos

    def logged_step(actions):
        out = step(actions)
        shown.append(out[0]["agent_1"].copy())
        return out

    trainer.vec.reset, trainer.vec.step = logged_reset, logged_step
    metrics = trainer.run()
    learner = trainer.learners["main"].learner
    expected = np.bincount(np.concatenate(taken), minlength=len(learner.counts))
    assert learner.counts.tolist() == expected.tolist()  # every oracle action, once per env
    assert learner.counts.sum() == 3 * 8 * 4
    np.testing.assert_array_equal(np.stack(learner.seen_obs), np.stack(shown[:-1]))
    assert metrics["losses/top_action_share"] == pytest.approx(expected.max() / expected.sum())
    assert int(learner.counts.argmax()) == 2  # the oracle mostly walks forward


def test_a_teacher_that_is_not_an_agent_of_the_env_is_refused(tmp_path):
    cfg = quiet(
        env=EnvConfig(GOAL_CYCLE_1, num_envs=2),
        agent=CountingConfig(teacher="agent_7"),
        total_timesteps=16,
    )
    with pytest.raises(ConfigError, match="asks for teachers \\['agent_7'\\]"):
        Trainer(cfg, tmp_path / "run")
    assert not (tmp_path / "run").exists()  # refused before anything is written


def test_a_teacher_whose_view_differs_from_the_learners_is_refused(tmp_path):
    """The learner reads the teacher's views with its own network: another view size (or
    other extras) cannot fit, so the run is refused before anything is written."""
    cfg = quiet(
        env=EnvConfig(GOAL_CYCLE_3, num_envs=2, settings={"agents": {"agent_1": {"view_size": 5}}}),
        roles={
            "agent_0": RoleConfig(),
            "agent_1": RoleConfig("scripted", policy="oracle"),
            "agent_2": RoleConfig("scripted", policy="oracle"),
        },
        agent=CountingConfig(teacher="agent_1"),
        total_timesteps=16,
    )
    with pytest.raises(ConfigError, match="teacher 'agent_1', whose observation space"):
        Trainer(cfg, tmp_path / "run")
    assert not (tmp_path / "run").exists()


def mixed_config(total: int) -> TrainConfig:
    """One PPO learner: 2 envs beside two oracles (main) and 3 envs alone (stream 'solo')."""
    from marlgrid.agents.algorithms.ppo import PPOConfig
    from marlgrid.agents.networks import NetworkConfig

    net = NetworkConfig(hidden_size=16, trunk_sizes=(16,), head_sizes=(16,), conv_channels=(4,))
    oracle = RoleConfig("scripted", policy="oracle")
    return quiet(
        env=EnvConfig(GOAL_CYCLE_3, num_envs=2, settings={"max_steps": 12}),
        roles={"agent_0": RoleConfig(), "agent_1": oracle, "agent_2": oracle},
        streams={
            "solo": StreamConfig(
                env=EnvConfig(GOAL_CYCLE_1, num_envs=3, settings={"max_steps": 12})
            )
        },
        agent=PPOConfig(network=net, num_steps=8, chunk_len=8, num_minibatches=2, update_epochs=1),
        total_timesteps=total,
    )


def test_one_learner_trains_on_two_env_streams_and_resumes(tmp_path):
    run = tmp_path / "mixed"
    trainer = Trainer(mixed_config(8 * 5 * 3), run)
    learner = trainer.learners["main"].learner
    solo = trainer.streams[1]
    assert solo.name == "solo" and solo.learners["main"].learner is learner  # one learner
    assert trainer.num_iterations == 3  # 8 steps of 2 + 3 envs per iteration
    before = [p.detach().clone() for p in learner.net.parameters()]
    trainer.run()
    assert learner.buffer.num_envs == 2 + 3  # one batch: the main stream's slots, then solo's
    assert learner.num_updates == 3
    assert any(not torch.equal(a, b) for a, b in zip(before, learner.net.parameters(), strict=True))
    assert trainer.global_step == 8 * 5 * 3
    with (run / "metrics.csv").open() as f:
        rows = list(csv.DictReader(f))
    assert len(rows) == 3
    assert {"charts/episodic_return", "solo/charts/episodic_return", "solo/social/return"} <= set(
        rows[0]
    )
    # the solo stream's episodes are its own: 12-step episodes of 1 agent
    assert float(rows[-1]["solo/charts/episodic_length"]) == 12.0
    # longer: resume the two-stream run from its checkpoint
    longer = mixed_config(8 * 5 * 4)
    longer.extend = True
    again = Trainer(longer, run)
    again.run()
    assert again.iteration == 4 and again.learners["main"].learner.num_updates == 4


def test_a_stream_needs_a_valid_name_and_env_config():
    with pytest.raises(ConfigError, match="main"):
        quiet(streams={"main": StreamConfig()}).validate()
    with pytest.raises(ConfigError, match="streams.solo.env.num_envs"):
        quiet(streams={"solo": {"env": {"id": GOAL_CYCLE_1, "num_envs": 0}}}).validate()
    with pytest.raises(ConfigError, match="streams.solo.env.settings must be a mapping"):
        quiet(streams={"solo": {"env": {"id": GOAL_CYCLE_1, "settings": [1]}}}).validate()
    with pytest.raises(ConfigError, match="streams.solo: a stream must be a mapping"):
        quiet(streams={"solo": {"envs": {}}}).validate()


def test_a_learner_shared_by_streams_needs_the_same_spaces_in_each(tmp_path):
    cfg = quiet(
        env=EnvConfig(GOAL_CYCLE_1, num_envs=2),  # a 7x7 view
        streams={"small": StreamConfig(env=EnvConfig("MarlGrid-GoalCycle-7x7-v0", num_envs=2))},
        total_timesteps=64,
    )
    with pytest.raises(ConfigError, match="streams.small: learner 'main' drives agent_0"):
        Trainer(cfg, tmp_path / "run")
    assert not (tmp_path / "run").exists()


def test_a_learner_driven_only_in_a_second_stream_trains_and_is_saved(tmp_path):
    from marlgrid.agents.algorithms.ppo import PPOConfig

    small = PPOConfig(num_steps=8, chunk_len=8, num_minibatches=1, update_epochs=1)
    cfg = quiet(
        env=EnvConfig(GOAL_CYCLE_1, num_envs=2, settings={"max_steps": 12}),
        agent=small,
        learners={"novice": small},
        streams={
            "solo": StreamConfig(
                env=EnvConfig(GOAL_CYCLE_1, num_envs=2, settings={"max_steps": 12}),
                roles={"agent_0": RoleConfig(learner="novice")},
            )
        },
        total_timesteps=8 * 4 * 2,
    )
    trainer = Trainer(cfg, tmp_path / "run")
    assert sorted(trainer.learners) == ["main", "novice"]
    trainer.run()
    assert trainer.learners["novice"].learner.num_updates == 2
    from marlgrid.agents.bookkeeping.checkpoint import list_checkpoints, load_checkpoint

    saved = load_checkpoint(list_checkpoints(tmp_path / "run" / "checkpoints")[-1])
    assert sorted(saved["learners"]) == ["main", "novice"]


def test_an_observer_sees_every_step_before_and_after_the_env():
    import marlgrid
    from marlgrid.agents.training.rollout import MultiAgentRollout
    from marlgrid.policies import make_policy

    class CountRewards:
        def __init__(self) -> None:
            self.before = self.after = 0
            self.paid = 0.0

        def before_step(self, vec, actions) -> None:
            self.before += 1

        def after_step(self, vec, actions, rewards, infos) -> None:
            self.after += 1
            self.paid += float(rewards.sum())

    vec = marlgrid.make_vec(GOAL_CYCLE_1, num_envs=2, max_steps=50)
    counter = CountRewards()
    rollout = MultiAgentRollout(
        vec, [], {"agent_0": make_policy("oracle")}, seed=0, observers=[counter]
    )
    rollout.collect(50)
    returns = rollout.pop_returns()
    assert counter.before == counter.after == 50
    assert counter.paid == pytest.approx(float(returns.sum())) and counter.paid > 0


def test_a_stream_inherits_the_main_env_agent_settings_unless_it_sets_its_own(tmp_path):
    """The README's streams example: the main env gives every agent its last reward
    (``extras: [reward]``); a stream that sets no agent settings gets the same, so one learner
    sees the same inputs in both. A stream that sets other ones is refused, naming the fix."""
    main = EnvConfig(GOAL_CYCLE_3, num_envs=2, settings={"agent": {"extras": ["reward"]}})
    roles = {
        "agent_0": RoleConfig(),
        "agent_1": RoleConfig("scripted", policy="oracle"),
        "agent_2": RoleConfig("scripted", policy="oracle"),
    }
    solo = StreamConfig(env=EnvConfig(GOAL_CYCLE_1, num_envs=2))
    cfg = quiet(env=main, roles=roles, total_timesteps=256, streams={"solo": solo})
    trainer = Trainer(cfg, tmp_path / "run")
    trainer.run()
    assert trainer.global_step >= 256
    own = EnvConfig(GOAL_CYCLE_1, num_envs=2, settings={"agent": {"extras": []}})
    cfg = quiet(env=main, roles=roles, total_timesteps=256,
                streams={"solo": StreamConfig(env=own)})  # fmt: skip
    with pytest.raises(ConfigError, match=r"give streams\.solo\.env\.settings\.agent the main"):
        Trainer(cfg, tmp_path / "refused")
    assert not (tmp_path / "refused").exists()
