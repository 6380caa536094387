"""Scripted goal-cycle policies: the oracle is flawless, the discoverer learns the order."""

from __future__ import annotations

import numpy as np
import pytest

import marlgrid
from marlgrid.policies import act, make_policy, run_episode, scripted_action

ENV_ID = "MarlGrid-GoalCycle-13x13-3Agents-v0"


def test_oracle_never_errs_and_collects_steadily():
    env = marlgrid.make(ENV_ID)
    policies = {a: make_policy("oracle") for a in env.possible_agents}
    for seed in range(5):
        env.reset(seed=seed)
        rewards_seen = []
        while env.agents:
            _, rewards, *_ = env.step({a: scripted_action(policies[a], env, a) for a in env.agents})
            rewards_seen += list(rewards.values())
        assert min(rewards_seen) >= 0.0, "the oracle stepped on a wrong tile"
        # 250 steps on a 13x13 map: a reward every ~15 steps or better
        assert sum(rewards_seen) >= 3 * 12


def test_discoverer_learns_the_order_within_an_episode():
    env = marlgrid.make(ENV_ID, n_agents=1)
    totals = []
    for seed in range(5):
        returns = run_episode(env, {"agent_0": make_policy("discoverer", seed)}, seed=seed)
        totals.append(returns["agent_0"])
    # At most n*(n-1) = 6 mistakes in an episode cost 9; then it cycles without error.
    assert min(totals) >= 5.0
    oracle = run_episode(env, {"agent_0": make_policy("oracle")}, seed=0)["agent_0"]
    assert oracle >= totals[0]


def test_random_policy_is_worse():
    env = marlgrid.make(ENV_ID, n_agents=1)

    def mean_return(name):
        runs = [run_episode(env, {"agent_0": make_policy(name, s)}, seed=s) for s in range(3)]
        return np.mean([r["agent_0"] for r in runs])

    assert mean_return("oracle") > mean_return("random") + 10


def test_policies_act_on_batches():
    vec = marlgrid.make_vec(ENV_ID, num_envs=4, max_steps=100)
    vec.reset(seed=0)
    oracle = make_policy("oracle")
    total = np.zeros((4, 3))
    for _ in range(100):
        actions = np.stack([oracle.scripted_actions(vec.engine, k) for k in range(3)], axis=1)
        _, rew, *_ = vec.step(actions)
        total += rew
    assert (total > 0).all()


def test_unknown_policy():
    with pytest.raises(ValueError, match=r"unknown policy 'expert'; choose one of"):
        make_policy("expert")


def test_scripted_actions_are_valid_for_agents_out_of_play():
    vec = marlgrid.make_vec(
        ENV_ID, num_envs=2, agent={"restrict_actions": True}, agents=[{"spawn_delay": 3}, {}, {}]
    )
    vec.reset(seed=0)
    for name in ("oracle", "discoverer"):
        actions = make_policy(name).scripted_actions(vec.engine, 0)  # agent_0 is still waiting
        assert (actions < 3).all()
        vec.step(np.stack([actions, actions, actions], axis=1))


def test_one_discoverer_shared_by_two_agents_scores_as_two_instances():
    env = marlgrid.make(ENV_ID, n_agents=2)
    for seed in range(3):
        shared = make_policy("discoverer", 7)
        together = run_episode(env, dict.fromkeys(env.possible_agents, shared), seed=seed)
        apart = run_episode(
            env, {a: make_policy("discoverer", 7) for a in env.possible_agents}, seed=seed
        )
        assert together == apart
        assert min(together.values()) >= 5.0  # each learns the order (see above)


def test_one_discoverer_serves_agents_of_a_batch_and_a_single_env_at_once():
    vec = marlgrid.make_vec(ENV_ID, num_envs=2, max_steps=60)
    env = marlgrid.make(ENV_ID, max_steps=60)
    vec.reset(seed=0)
    env.reset(seed=0)
    shared = make_policy("discoverer", 1)
    alone = [make_policy("discoverer", 1) for _ in range(3)]
    for _ in range(60):
        # Interleaved calls for several agents and two engines must not disturb each other.
        single = {a: scripted_action(shared, env, a) for a in env.agents}
        batch = np.stack([shared.scripted_actions(vec.engine, k) for k in range(3)], axis=1)
        reference = np.stack([alone[k].scripted_actions(vec.engine, k) for k in range(3)], axis=1)
        np.testing.assert_array_equal(batch, reference)
        vec.step(batch)
        if env.agents:
            env.step(single)


def test_scripted_policies_are_renamed_and_the_old_names_still_work():
    env = marlgrid.make(ENV_ID)
    env.reset(seed=0)
    oracle = make_policy("oracle")
    expected = scripted_action(oracle, env, "agent_1")
    with pytest.warns(DeprecationWarning, match="scripted_action"):
        assert act(oracle, env, "agent_1") == expected
    with pytest.warns(DeprecationWarning, match="scripted_actions"):
        assert int(oracle.act(env.engine, 1)[0]) == expected

    class OldStyle:  # a user's policy written against the old protocol
        def act(self, engine, k):
            return np.full(engine.num_envs, 2)

    with pytest.warns(DeprecationWarning):
        assert act(OldStyle(), env, "agent_0") == 2


def test_discoverer_pickles():
    import pickle

    env = marlgrid.make(ENV_ID)
    env.reset(seed=0)
    policy = make_policy("discoverer", 3)
    policy.scripted_actions(env.engine, 0)
    copy = pickle.loads(pickle.dumps(policy))
    assert copy.scripted_actions(env.engine, 0).shape == (1,)
