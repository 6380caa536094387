"""What a learner sees (the ``reward`` and ``action`` extras, per-agent settings by agent id)
and the reward-blind scripted baselines of :mod:`marlgrid.policies.baselines`."""

from __future__ import annotations

import numpy as np
import pytest

import marlgrid
from marlgrid.config import ConfigError
from marlgrid.constants import FORWARD, LEFT, RIGHT, TOGGLE
from marlgrid.policies import make_policy, scripted_action
from marlgrid.vector import VectorEnv
from tests.conftest import HandMadeEnv, place, results_script

# -- the action extra ----------------------------------------------------------------------

ROOM = [
    "######",
    "#....#",
    "#....#",
    "#....#",
    "######",
]


def _room(**settings):
    agents = {"agent_1": {"restrict_actions": True, "spawn_delay": 1}}
    return HandMadeEnv(ROOM, n_agents=2, agent={"extras": ["action"]}, agents=agents, **settings)


def test_action_extra_is_the_last_action_taken_in_play_and_none_at_the_start():
    env = _room(max_steps=2)
    # agent_0 has 7 actions (7 = none yet), agent_1 only left/right/forward (3 = none yet)
    assert env.observation_space("agent_0")["action"].n == 8
    assert env.observation_space("agent_1")["action"].n == 4
    obs, _ = env.reset(seed=0)
    assert [obs[a]["action"] for a in env.agents] == [7, 3]
    obs, *_ = env.step({"agent_0": TOGGLE, "agent_1": RIGHT})  # agent_1 waits: not taken
    assert [obs[a]["action"] for a in env.agents] == [TOGGLE, 3]
    obs, _, _, truncs, _ = env.step({"agent_0": LEFT, "agent_1": FORWARD})
    assert [obs[a]["action"] for a in ("agent_0", "agent_1")] == [LEFT, FORWARD]
    assert all(truncs.values())
    obs, _ = env.reset(seed=1)
    assert [obs[a]["action"] for a in env.agents] == [7, 3]
    assert all(env.observation_space(a).contains(obs[a]) for a in env.agents)


def test_action_extra_of_a_batch_matches_single_envs_and_restarts_on_autoreset():
    vec = VectorEnv(_room(max_steps=2), 2)
    obs, _ = vec.reset(seed=0)
    assert obs["agent_0"]["action"].tolist() == [7, 7]
    assert obs["agent_1"]["action"].tolist() == [3, 3]
    obs, *_ = vec.step(np.array([[TOGGLE, RIGHT], [RIGHT, LEFT]]))
    assert obs["agent_0"]["action"].tolist() == [TOGGLE, RIGHT]
    assert obs["agent_1"]["action"].tolist() == [3, 3]  # waiting: its actions are ignored
    obs, _, _, _, infos = vec.step(np.array([[LEFT, FORWARD], [FORWARD, RIGHT]]))
    final = infos["final_obs"]
    assert final["agent_0"]["action"].tolist() == [LEFT, FORWARD]
    assert final["agent_1"]["action"].tolist() == [FORWARD, RIGHT]
    assert obs["agent_0"]["action"].tolist() == [7, 7]  # the new episodes: none yet
    assert obs["agent_1"]["action"].tolist() == [3, 3]


def test_action_extra_of_a_batch_follows_single_envs_across_resets():
    """Env i of a batch seeded s shows the actions the single env seeded s + i shows."""
    settings = {
        "n_agents": 2,
        "max_steps": 15,
        "agent": {"extras": ["reward", "action"]},
        "agents": {"agent_1": {"spawn_delay": 4}},
    }
    env_id = "MarlGrid-GoalCycle-7x7-v0"
    vec = marlgrid.make_vec(env_id, 3, **settings)
    singles = [marlgrid.make(env_id, **settings) for _ in range(3)]
    vobs, _ = vec.reset(seed=5)
    sobs = [env.reset(seed=5 + i)[0] for i, env in enumerate(singles)]
    rng = np.random.default_rng(0)
    for _ in range(40):
        actions = rng.integers(0, 7, (3, 2))
        vobs, *_ = vec.step(actions)
        for i, env in enumerate(singles):
            sobs[i] = env.step({a: int(actions[i, int(a[-1])]) for a in env.agents})[0]
            if not env.agents:
                sobs[i] = env.reset()[0]
            for agent, o in sobs[i].items():
                assert env.observation_space(agent).contains(o)
                assert vobs[agent]["action"][i] == o["action"], (i, agent)
                assert vobs[agent]["reward"][i] == o["reward"][0]


def test_the_action_extra_passes_pettingzoo_api_test():
    from pettingzoo.test import parallel_api_test

    env = marlgrid.make(
        "MarlGrid-GoalCycle-13x13-3Agents-v0",
        max_steps=30,
        agent={"extras": ["reward", "action"]},
        agents={"agent_2": {"restrict_actions": True, "observation": "onehot"}},
    )
    parallel_api_test(env, num_cycles=40)


# -- reward input for every observation kind -------------------------------------------------


@pytest.mark.parametrize("kind", ["symbolic", "onehot", "rgb"])
def test_reward_extra_for_every_observation_kind_and_the_network_builds(kind):
    torch = pytest.importorskip("torch")
    from marlgrid.agents.arrays import obs_to_tensor
    from marlgrid.agents.learner import build_learner
    from marlgrid.vector import stack_agents

    settings = {"observation": kind, "extras": ["reward", "action"]}
    vec = marlgrid.make_vec("MarlGrid-GoalCycle-7x7-v0", 2, agent=settings)
    space = vec.single_observation_space("agent_0")
    assert sorted(space.spaces) == ["action", "image", "reward"]
    obs, _ = vec.reset(seed=0)
    assert obs["agent_0"]["reward"].shape == (2, 1)
    learner = build_learner({"algo": "ppo"}, space, vec.single_action_space("agent_0"))
    out = learner.act(
        obs_to_tensor(stack_agents(obs, ["agent_0"]), learner.device),
        learner.initial_state(2),
        torch.ones(2, dtype=torch.bool),
    )
    assert out.actions.shape == (2,)
    image = learner.net.torso.encoder.encoders["image"]
    expected = {
        "symbolic": "SymbolicEncoder",
        "onehot": "OneHotImageEncoder",
        "rgb": "PixelEncoder",
    }
    assert type(image).__name__ == expected[kind]


def test_the_reward_extra_reads_the_last_reward():
    env = HandMadeEnv(["#####", "#.0.#", "#...#", "#.1.#", "#####"], agent={"extras": ["reward"]})
    env.reset(seed=0)
    place(env, 0, 2, 2, 3)  # below tile 0, facing north
    obs, rewards, *_ = env.step({"agent_0": FORWARD})
    assert rewards["agent_0"] == 1.0 and obs["agent_0"]["reward"].tolist() == [1.0]
    obs, *_ = env.step({"agent_0": LEFT})
    assert obs["agent_0"]["reward"].tolist() == [0.0]


# -- per-agent settings by agent id ------------------------------------------------------------


def test_agents_by_id_override_only_those_agents():
    env = marlgrid.make(
        "MarlGrid-GoalCycle-13x13-3Agents-v0",
        agent={"extras": ["reward"], "color": "prestige"},
        agents={"agent_0": {"color": None}, "agent_2": {"hide": ["cycle_tile"]}},
    )
    assert [a.color for a in env.agent_configs] == ["red", "prestige", "prestige"]
    assert [a.hide for a in env.agent_configs] == [(), (), ("cycle_tile",)]
    assert {a.extras for a in env.agent_configs} == {("reward",)}
    assert {(a.view_size, a.view_offset) for a in env.agent_configs} == {(7, 1)}


@pytest.mark.parametrize("key", ["agent_3", "agent_x", "agent_01", "agent", 1])
def test_agents_by_id_must_name_agents_of_the_env(key):
    with pytest.raises(ConfigError, match=r"agent_0 \.\.\. agent_2 \(this env has 3 agents\)"):
        marlgrid.make("MarlGrid-GoalCycle-13x13-3Agents-v0", agents={key: {}})


# -- the reward-blind baselines --------------------------------------------------------------

#: three tiles round a room; the agent starts in the middle (tile ids 0 -> 1 -> 2 -> 0)
TRIANGLE = [
    "#######",
    "#0...1#",
    "#.....#",
    "#..s..#",
    "#.....#",
    "#..2..#",
    "#######",
]
PENALTY = 1.5


def _entries(policy_name: str, seed: int, rows=TRIANGLE, steps: int = 100):
    """The cells agent_0 entered a tile at and what each entry paid."""
    env = HandMadeEnv(rows, penalty=PENALTY, max_steps=steps)
    policy = make_policy(policy_name, seed=seed)
    env.reset(seed=seed)
    cells, paid = [], []
    while env.agents:
        _, rewards, *_ = env.step({"agent_0": scripted_action(policy, env, "agent_0")})
        if rewards["agent_0"] != 0.0:
            cells.append(tuple(env.engine.pos[0, 0].tolist()))  # in play or just truncated
            paid.append(rewards["agent_0"])
    return cells, paid


def test_reward_blind_keeps_one_direction_round_the_cycle():
    routes = set()
    for seed in range(12):
        cells, paid = _entries("reward_blind", seed)
        assert len(cells) >= 9
        route = tuple(cells[:3])
        assert len(set(route)) == 3
        assert cells == [route[i % 3] for i in range(len(cells))]  # the same order throughout
        assert paid[0] == 1.0  # the free first tile
        if all(p == 1.0 for p in paid):  # the right direction: every entry pays
            routes.add("right")
        else:  # the wrong one: the tile before the last correct one (penalty), then the next
            assert paid[1:] == [-PENALTY if i % 2 == 0 else 1.0 for i in range(len(paid) - 1)]
            routes.add("wrong")
    assert routes == {"right", "wrong"}


def test_play_safe_enters_exactly_one_tile_per_episode():
    for seed in range(6):
        cells, paid = _entries("play_safe", seed)
        assert paid == [1.0]
    vec = marlgrid.make_vec("MarlGrid-GoalCycle-13x13-3Agents-v0", 8, size=7, max_steps=100)
    policies = [make_policy("play_safe", seed=k) for k in range(3)]
    vec.reset(seed=3)
    entries = np.zeros((8, 3))
    actions = np.zeros((8, 3), dtype=np.int64)
    for _ in range(100):
        for k, policy in enumerate(policies):
            actions[:, k] = policy.scripted_actions(vec.engine, k)
        _, rewards, *_ = vec.step(actions)
        entries += rewards != 0.0  # penalty 1.5: every entry pays or costs
    assert (entries == 1).all()


@pytest.mark.parametrize("name", ["reward_blind", "play_safe"])
def test_baselines_are_registered_and_are_no_experts(name):
    policy = make_policy(name, seed=0)
    assert policy.is_expert is False
    assert type(policy).__module__ == "marlgrid.policies.baselines"


def test_reward_blind_ignores_rewards():
    """The same moves whatever the penalty: nothing it does reads a reward."""
    walks = []
    for penalty in (PENALTY, 0.0):
        env = HandMadeEnv(TRIANGLE, penalty=penalty, max_steps=60)
        policy = make_policy("reward_blind", seed=4)
        env.reset(seed=4)
        cells = []
        while env.agents:
            env.step({"agent_0": scripted_action(policy, env, "agent_0")})
            cells.append(tuple(env.engine.pos[0, 0].tolist()))
        walks.append(cells)
    assert walks[0] == walks[1]


def test_the_baselines_script_plays_alone_in_the_one_agent_env():
    script = results_script("goal_cycle_baselines")
    alone = script.row(7, 40, 1.5, "alone", "oracle", episodes=4, seed=3)
    assert alone["condition"] == "alone" and alone["penalties_mean"] == 0.0
    assert alone["return_mean"] == alone["rewards_mean"] > 0  # the oracle never pays a penalty
    found = script.play(7, 40, 1.5, ["play_safe"], episodes=4, seed=3)
    assert found["return"].shape == (4, 1)  # one agent: the one-agent env
    np.testing.assert_array_equal(found["rewards"], 1.0)  # play safe: one tile each episode
    beside = script.play(7, 40, 1.5, ["play_safe", "oracle", "oracle"], episodes=4, seed=3)
    assert beside["return"].shape == (4, 3)


def test_the_following_chance_script_separates_the_follower_from_a_random_novice():
    script = results_script("following_chance")
    follower = script.measure(13, 120, "follower", episodes=16, seed=1)
    random = script.measure(13, 120, "random", episodes=16, seed=1)
    assert set(script.METRICS) <= set(follower) and follower["novice"] == "follower"
    assert follower["repeat_expert_excess"] > random["repeat_expert_excess"] + 0.2
    assert follower["expert_in_view"] > random["expert_in_view"]


def test_the_random_length_script_counts_each_env_copy_alike():
    script = results_script("random_length")
    found = script.measure("MarlGrid-Empty-5x5-v0", 30, episodes=3, num_envs=4, seed=1)
    assert found["episodes"] == 12 and found["max_steps"] == 30
    assert 1 <= found["mean_length"] <= 30
    assert found["length_low"] <= found["mean_length"] <= found["length_high"]
    # Empty rooms pay only at the goal: the return is positive exactly when the goal was reached
    assert (found["mean_return"] > 0) == (found["reached_goal"] > 0)
    assert 0.0 <= found["reached_goal"] <= 1.0
    with pytest.raises(ValueError, match="3 agents"):
        script.measure("MarlGrid-Empty-8x8-3Agents-v0", 30, episodes=1, num_envs=1, seed=1)


def test_the_baselines_script_can_make_the_novices_oracles_noisy():
    script = results_script("goal_cycle_baselines")
    clean = script.play(7, 60, 1.5, ["play_safe", "oracle", "oracle"], episodes=6, seed=3)
    noisy = script.play(7, 60, 1.5, ["play_safe", "oracle", "oracle"], episodes=6, seed=3,
                        epsilons=[0.0, 0.6, 0.6])  # fmt: skip
    assert noisy["return"][:, 1:].sum() < clean["return"][:, 1:].sum()  # the oracles' own
    np.testing.assert_array_equal(noisy["rewards"][:, 0], 1.0)  # play safe: still one tile
    found = script.row(7, 60, 1.5, "beside_oracles", "random", 4, 3, oracle_epsilon=0.3)
    assert found["condition"] == "beside_oracles_eps_0.3"
    own = script.row(7, 60, 1.5, "beside_oracles", "noisy_oracle", 6, 3, oracle_epsilon=0.6)
    oracle = script.row(7, 60, 1.5, "beside_oracles", "oracle", 6, 3, oracle_epsilon=0.6)
    assert own["return_mean"] < oracle["return_mean"]  # the noisy oracle in the novice's slot
    assert script.row(7, 60, 1.5, "alone", "random", 4, 3, oracle_epsilon=0.3)["condition"] == (
        "alone"  # no oracles to make noisy
    )
