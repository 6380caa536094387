"""Scripted goal-cycle policies: the oracle is flawless, the discoverer learns the order."""

from __future__ import annotations

from functools import cache

import numpy as np
import pytest

import marlgrid
from marlgrid.config import ConfigError
from marlgrid.episode import run_episode as play
from marlgrid.policies import CycleKnowledge, act, make_policy, scripted_action

ENV_ID = "MarlGrid-GoalCycle-13x13-3Agents-v0"
EPISODES = 300  # agent-episodes per estimate


def run_episode(env, policies, seed=None):
    """Each agent's return in one episode."""
    return play(env, policies, seed=seed).returns


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


# -- the ideal discoverer ------------------------------------------------------------------------


def test_knowledge_rules_out_known_predecessors_and_early_closing():
    known = CycleKnowledge(4)
    assert known.candidates().tolist() == [0, 1, 2, 3]
    known.learn(0, 1.0)  # the first tile starts the cycle
    assert known.candidates().tolist() == [1, 2, 3]
    known.learn(2, -1.5)  # 0 -> 2 is wrong
    assert known.candidates().tolist() == [1, 3]
    known.learn(1, 1.0)  # 0 -> 1: now 1's successor, neither 0 (the chain's start) nor 1
    assert known.candidates().tolist() == [2, 3]
    known.learn(3, -1.5)  # 1 -> 3 is wrong: 1 -> 2 -> 3 -> 0 follows, nothing left to try
    assert known.succ.tolist() == [1, 2, 3, 0]
    assert known.candidates().tolist() == [2]
    known.learn(2, 1.0)
    known.learn(3, 1.0)
    assert known.candidates().tolist() == [0]  # the chain covers all tiles: it may close


def test_knowledge_infers_a_forced_successor_after_restarts():
    known = CycleKnowledge(4)
    known.learn(0, 1.0)
    known.learn(2, -1.5, reset_on_mistake=True)  # 0 -> 2 wrong; the cycle restarts at 2
    assert known.candidates().tolist() == [0, 1, 3]
    known.learn(0, 1.0, reset_on_mistake=True)  # 2 -> 0
    known.learn(3, -1.5, reset_on_mistake=True)  # 0 -> 3 wrong, so 0 -> 1; restart at 3
    # 3 can only precede 2 (0 and 1 have predecessors, 3 cannot follow itself): all is known
    assert known.succ.tolist() == [1, 3, 0, 2]
    assert known.candidates().tolist() == [2]


@cache
def _play(name: str, n_agents: int, n_goals: int, epsilon: float = 0.0) -> tuple:
    """Per agent-episode penalties and returns of ``name`` on the canonical task's map."""
    num_envs = EPISODES // n_agents
    vec = marlgrid.make_vec(ENV_ID, num_envs=num_envs, n_agents=n_agents, n_goals=n_goals)
    vec.reset(seed=1000 * n_goals + n_agents)
    policy = make_policy(name, 0, epsilon=epsilon)
    penalties = np.zeros((num_envs, n_agents))
    returns = np.zeros((num_envs, n_agents))
    for _ in range(vec.template.max_steps):  # exactly one episode in every env
        actions = np.stack([policy.scripted_actions(vec.engine, k) for k in range(n_agents)], 1)
        _, rewards, *_ = vec.step(actions)
        penalties += rewards < 0
        returns += rewards
    return penalties.ravel(), returns.ravel()


@pytest.mark.parametrize("n_agents", [1, 3])
@pytest.mark.parametrize(
    ("n_goals", "mean", "tolerance", "worst"),
    [(3, 0.5, 0.15, 1), (4, 1.5, 0.3, 3)],  # (n-1)(n-2)/4 on average, (n-1)(n-2)/2 at worst
)
def test_discoverer_pays_the_ideal_number_of_penalties(n_agents, n_goals, mean, tolerance, worst):
    penalties, _ = _play("discoverer", n_agents, n_goals)
    assert len(penalties) == EPISODES
    assert abs(penalties.mean() - mean) <= tolerance
    assert penalties.max() <= worst  # it never tries a tile twice, nor one ruled out


def test_discoverer_returns_stay_within_two_of_the_oracle():
    _, oracle = _play("oracle", 1, 3)
    _, discoverer = _play("discoverer", 1, 3)
    assert 0 < oracle.mean() - discoverer.mean() <= 2.0


# -- epsilon-noisy experts -----------------------------------------------------------------------


@pytest.mark.parametrize("bad", [-0.1, 1.5, "0.1", True, float("nan")])
def test_epsilon_is_checked(bad):
    with pytest.raises(ConfigError, match=r"epsilon must be"):
        make_policy("oracle", epsilon=bad)


@pytest.mark.parametrize("restrict", [False, True])
def test_epsilon_replaces_that_share_of_actions_with_uniform_ones(restrict):
    vec = marlgrid.make_vec(ENV_ID, num_envs=64, agent={"restrict_actions": restrict})
    vec.reset(seed=0)
    clean, noisy = make_policy("oracle"), make_policy("oracle", 3, epsilon=0.25)
    n_actions = 3 if restrict else 7
    differ, largest = 0, 0
    for _ in range(100):
        planned = np.stack([clean.scripted_actions(vec.engine, k) for k in range(3)], axis=1)
        taken = noisy.scripted_actions(vec.engine, 0)
        differ += (taken != planned[:, 0]).sum()
        largest = max(largest, taken.max())
        vec.step(planned)
    # a random action equals the planned one with chance 1 / n_actions
    assert differ / 6400 == pytest.approx(0.25 * (1 - 1 / n_actions), abs=0.03)
    assert largest == n_actions - 1  # every action can be drawn, and no other


def test_noisy_policies_are_seeded_per_agent_and_pickle():
    import pickle

    env = marlgrid.make(ENV_ID, n_agents=2, max_steps=80)
    for name in ("oracle", "discoverer"):
        shared = make_policy(name, 5, epsilon=0.3)
        together = run_episode(env, dict.fromkeys(env.possible_agents, shared), seed=1)
        apart = {a: make_policy(name, 5, epsilon=0.3) for a in env.possible_agents}
        assert together == run_episode(env, apart, seed=1)
        assert pickle.loads(pickle.dumps(shared)).epsilon == 0.3


def test_scripted_roles_take_epsilon():
    pytest.importorskip("torch")
    from marlgrid.agents.algorithms.ppo import PPOConfig
    from marlgrid.agents.training.roles import build_groups, resolve_roles, role_identity

    vec = marlgrid.make_vec(ENV_ID, num_envs=2)
    roles = {"agent_0": {"kind": "scripted", "policy": "discoverer", "epsilon": 0.2}}
    resolved = resolve_roles(roles, vec.possible_agents, ["main"])
    _, scripted = build_groups(resolved, vec, {"main": PPOConfig()}, seed=0)
    assert scripted["agent_0"].epsilon == 0.2
    assert role_identity(resolved["agent_0"])["epsilon"] == 0.2
    assert "epsilon" not in role_identity(resolved["agent_1"])  # identities from before stay
    bad = {"agent_0": {"kind": "scripted", "policy": "oracle", "epsilon": 2}}
    with pytest.raises(ConfigError, match=r"epsilon of agent_0 must be in \[0, 1\], got 2"):
        resolve_roles(bad, vec.possible_agents, ["main"])
