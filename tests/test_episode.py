"""The one episode runner and policy resolution behind video, record, play and the wrappers."""

from __future__ import annotations

import numpy as np
import pytest

import marlgrid
import marlgrid.viewing.play
import marlgrid.viewing.record
import marlgrid.viewing.video
import marlgrid.wrappers
from marlgrid.constants import FORWARD, LEFT, RIGHT
from marlgrid.episode import (
    EpisodeResult,
    policy_action,
    policy_kind,
    resolve_policies,
    run_episode,
)
from marlgrid.policies import DiscovererPolicy, OraclePolicy, RandomPolicy, make_policy

ENV_ID = "MarlGrid-GoalCycle-13x13-3Agents-v0"


class Joint:
    """A joint policy that records how it is called."""

    def __init__(self):
        self.resets = 0
        self.calls: list[list[str]] = []

    def reset(self):
        self.resets += 1

    def actions(self, env, obs):
        self.calls.append(sorted(obs))
        return dict.fromkeys(obs, RIGHT)


class Learner:
    """A learner-like object: an ``act`` of its own and a per-observation call."""

    def act(self, obs, state, resets):  # a learner's signature, not the scripted one
        raise AssertionError("a learner's act must never be called as a scripted policy")

    def __call__(self, obs):
        return np.array([FORWARD])


def test_resolution_makes_one_instance_per_agent_and_seeds_them():
    env = marlgrid.make(ENV_ID)
    policies = resolve_policies(env, "discoverer", seed=10)
    assert [type(p) for p in policies.values()] == [DiscovererPolicy] * 3
    assert len({id(p) for p in policies.values()}) == 3
    mixed = resolve_policies(env, {"agent_0": "oracle", "agent_1": "random", "agent_2": Joint()})
    assert isinstance(mixed["agent_0"], OraclePolicy)
    assert isinstance(mixed["agent_1"], RandomPolicy)
    seeded = [resolve_policies(env, "random", seed=3)["agent_1"] for _ in range(2)]
    assert seeded[0].rng.integers(1 << 30) == seeded[1].rng.integers(1 << 30)
    with pytest.raises(ValueError, match=r"no policy for \['agent_2'\]"):
        resolve_policies(env, {"agent_0": "oracle", "agent_1": "oracle"})
    with pytest.raises(ValueError, match=r"unknown policy 'expert'"):
        resolve_policies(env, "expert")
    with pytest.raises(TypeError, match=r"scripted_actions\(engine, k\)"):
        resolve_policies(env, object())


def test_policy_kinds_route_learners_away_from_the_scripted_call():
    assert policy_kind(make_policy("oracle")) == "scripted"
    assert policy_kind(marlgrid.viewing.play.IdlePolicy()) == "scripted"
    assert policy_kind(Joint()) == "joint"
    assert policy_kind(Learner()) == "callable"
    assert policy_kind(lambda obs, agent: 0) == "callable"

    class OnlyAct:
        def act(self, engine, k):
            return 0

    with pytest.raises(TypeError, match=r"scripted policies define scripted_actions"):
        policy_kind(OnlyAct())
    env = marlgrid.make("MarlGrid-Empty-5x5-v0")
    obs, _ = env.reset(seed=0)
    assert (
        marlgrid.viewing.video.policy_action(Learner(), env, "agent_0", obs["agent_0"]) == FORWARD
    )


def test_run_episode_with_every_kind_of_policy():
    env = marlgrid.make(ENV_ID, max_steps=12)
    joint = Joint()
    seen = []

    def two_args(obs, agent):
        seen.append((agent, obs.shape))
        return LEFT

    frames = []
    result = run_episode(
        env,
        {"agent_0": "oracle", "agent_1": two_args, "agent_2": joint},
        seed=0,
        on_frame=lambda e: frames.append(e.step_count),
    )
    assert isinstance(result, EpisodeResult) and result.steps == 12
    assert set(result.returns) == set(env.possible_agents)
    assert frames == list(range(13))  # the reset frame and one per step
    assert joint.resets == 1 and joint.calls == [["agent_2"]] * 12
    assert seen[0] == ("agent_1", (7, 7, 3)) and len(seen) == 12
    short = run_episode(env, Learner(), seed=0, max_steps=3)
    assert short.steps == 3


def test_a_joint_policy_acts_for_all_its_agents_in_one_call():
    env = marlgrid.make(ENV_ID, max_steps=5)
    joint = Joint()
    run_episode(env, joint, seed=1)
    assert joint.calls == [["agent_0", "agent_1", "agent_2"]] * 5

    class Forgetful(Joint):
        def actions(self, env, obs):
            return {}

    with pytest.raises(ValueError, match=r"gave no action for \['agent_0'"):
        run_episode(env, Forgetful(), seed=1)


def test_same_seed_same_episode_through_every_front_end(tmp_path):
    env = marlgrid.make(ENV_ID, max_steps=30)
    policies = resolve_policies(env, "discoverer", seed=5)
    direct = run_episode(env, policies, seed=3).returns
    again = run_episode(env, resolve_policies(env, "discoverer", seed=5), seed=3).returns
    assert direct == again
    video = marlgrid.viewing.video.record_episode(
        env,
        resolve_policies(env, "discoverer", seed=5),
        tmp_path / "e.gif",
        seed=3,
        render_kwargs={"tile_size": 4, "agent_views": False},
    )
    assert video == direct


def test_front_ends_share_the_episode_module():
    from marlgrid import episode

    assert marlgrid.viewing.video.resolve_policies is episode.resolve_policies
    assert marlgrid.viewing.video.policy_action is episode.policy_action
    assert marlgrid.wrappers.policy_actions is episode.policy_actions
    assert policy_action is episode.policy_action
