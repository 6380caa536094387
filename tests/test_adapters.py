"""The gymnasium single-agent wrapper and the Stable-Baselines3 VecEnv adapter."""

from __future__ import annotations

import os
import warnings

import gymnasium
import numpy as np
import pytest

os.environ.setdefault("SDL_VIDEODRIVER", "dummy")
os.environ.setdefault("SDL_AUDIODRIVER", "dummy")

import marlgrid  # noqa: E402
from marlgrid.constants import DONE, FORWARD, LEFT  # noqa: E402
from marlgrid.vector import VectorEnv  # noqa: E402
from marlgrid.wrappers import SingleAgentEnv  # noqa: E402
from tests.conftest import HandMadeEnv  # noqa: E402

EAST, SOUTH, WEST, NORTH = range(4)
ENV_IDS = sorted(marlgrid.REGISTRY)
#: SB3's checker notes that 7x7 views are too small for its default CnnPolicy
#: (see marlgrid.adapters.sb3).
SB3_SMALL_IMAGE = "minimal resolution for an image is 36x36"


# -- gymnasium single-agent wrapper -----------------------------------------------------------


@pytest.mark.parametrize("env_id", ENV_IDS)
def test_gymnasium_check_env(env_id):
    from gymnasium.utils.env_checker import check_env

    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        env = gymnasium.make(f"marlgrid/{env_id}", render_mode="rgb_array").unwrapped
        check_env(env)  # with a spec: also the human mode, and seeded determinism
    assert [str(w.message) for w in caught] == []


@pytest.mark.parametrize("env_id", ENV_IDS)
def test_sb3_check_env(env_id):
    env_checker = pytest.importorskip("stable_baselines3.common.env_checker")
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        env_checker.check_env(SingleAgentEnv(env_id))
    assert [str(w.message) for w in caught if SB3_SMALL_IMAGE not in str(w.message)] == []


def test_check_env_dict_and_rgb_observations():
    from gymnasium.utils.env_checker import check_env

    agent = {"observation": "rgb", "tile_size": 4, "extras": ("reward", "position", "direction")}
    env = SingleAgentEnv("MarlGrid-GoalCycle-13x13-3Agents-v0", others="oracle", agent=agent)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        check_env(env, skip_render_check=True)
    expected = ("spec", "maximum value is infinity", "minimum value is -infinity")  # reward extra
    assert [str(w.message) for w in caught if not any(e in str(w.message) for e in expected)] == []
    obs, _ = env.reset(seed=0)
    assert set(obs) == {"image", "reward", "position", "direction"}


def test_others_follow_their_policies_and_arrays_are_fresh():
    env = SingleAgentEnv("MarlGrid-GoalCycle-13x13-3Agents-v0", others="oracle")
    obs, info = env.reset(seed=1)
    assert set(info["prestige"]) == {"agent_0", "agent_1", "agent_2"}
    total = dict.fromkeys(("agent_1", "agent_2"), 0.0)
    previous = obs
    for _ in range(60):
        obs, reward, terminated, truncated, info = env.step(DONE)  # agent_0 waits
        assert obs is not previous and not np.shares_memory(obs, previous)
        previous = obs
        assert reward == info["rewards"]["agent_0"] == 0.0
        for name in total:
            total[name] += info["rewards"][name]
    assert all(r >= 3 for r in total.values())  # the oracles collect tiles meanwhile


def test_wrapper_episode_ends_with_the_agent():
    env = SingleAgentEnv("MarlGrid-Empty-5x5-v0", max_steps=4)
    env.reset(seed=0)
    flags = [env.step(LEFT)[2:4] for _ in range(4)]
    assert flags == [(False, False)] * 3 + [(False, True)]
    with pytest.raises(RuntimeError, match="reset"):
        env.step(LEFT)


def test_wrapper_seeding_is_reproducible():
    def rollout(seed):
        env = SingleAgentEnv("MarlGrid-Empty-8x8-3Agents-v0", others="random")
        out = [env.reset(seed=seed)[0]]
        for _ in range(10):
            out.append(env.step(FORWARD)[0])
        return np.stack(out)

    assert np.array_equal(rollout(3), rollout(3))
    assert not np.array_equal(rollout(3), rollout(4))


# -- Stable-Baselines3 adapter -------------------------------------------------------------

sb3 = pytest.importorskip("marlgrid.adapters.sb3")


def test_slots_and_shapes():
    venv = sb3.MarlGridVecEnv("MarlGrid-Empty-8x8-3Agents-v0", num_envs=2)
    assert venv.num_envs == 6
    obs = venv.reset()
    assert obs.shape == (6, 7, 7, 3) and obs.dtype == np.uint8
    assert obs in gymnasium.spaces.Box(0, 255, (6, 7, 7, 3), np.uint8)
    # slot n * K + k is agent k of env n
    views = venv.engine.views()[1]
    assert np.array_equal(obs[1 * 3 + 1], views[1])
    obs, rewards, dones, infos = venv.step(np.zeros(6, dtype=np.int64))
    assert rewards.dtype == np.float32 and dones.shape == (6,) and len(infos) == 6
    with pytest.raises(ValueError, match="actions"):
        venv.step(np.full(6, 9))
    assert venv.get_attr("render_mode") == [None] * 6


def test_different_agent_spaces_are_refused():
    with pytest.raises(ValueError, match="same spaces"):
        sb3.MarlGridVecEnv("MarlGrid-Empty-8x8-3Agents-v0", agents=[{"view_size": 5}, {}, {}])


def test_truncation_sets_terminal_observation_and_time_limit():
    venv = sb3.MarlGridVecEnv("MarlGrid-Empty-5x5-v0", num_envs=2, max_steps=3)
    venv.seed(10)
    venv.reset()
    for t in range(3):
        obs, rewards, dones, infos = venv.step(np.full(2, LEFT))
        if t < 2:
            assert not dones.any() and all("terminal_observation" not in i for i in infos)
    assert dones.all()
    for n in range(2):
        # The same episode in a PettingZoo env that is not truncated yet: the same last view.
        ref = marlgrid.make("MarlGrid-Empty-5x5-v0", max_steps=4)
        ref.reset(seed=10 + n)
        for _ in range(3):
            last = ref.step({"agent_0": LEFT})[0]["agent_0"]
        assert infos[n]["TimeLimit.truncated"] is True
        assert np.array_equal(infos[n]["terminal_observation"], last)
        assert last.any()  # a real view, not the blank one of a finished agent
        # The env was reset in the same step: obs is the next episode's first observation.
        ref2 = marlgrid.make("MarlGrid-Empty-5x5-v0", max_steps=3)
        ref2.reset(seed=10 + n)
        for _ in range(3):
            ref2.step({"agent_0": LEFT})
        assert np.array_equal(obs[n], ref2.reset()[0]["agent_0"])


CORRIDOR = ["######", "#...G#", "#....#", "######"]


def corridor_vec(n_agents: int, **rules) -> VectorEnv:
    vec = VectorEnv(HandMadeEnv(CORRIDOR, n_agents=n_agents, **rules), 1)
    return vec


def put(venv, k: int, x: int, y: int, d: int) -> None:
    engine = venv.engine
    engine.pos[0, k] = (x, y)
    engine.dirs[0, k] = d
    engine.observe()


def test_termination_is_not_a_time_limit():
    venv = sb3.MarlGridVecEnv(corridor_vec(1, max_steps=20))
    venv.reset()
    put(venv, 0, 3, 1, EAST)
    obs, rewards, dones, infos = venv.step(np.array([FORWARD]))
    assert dones[0] and rewards[0] == 1.0
    assert infos[0]["TimeLimit.truncated"] is False
    assert infos[0]["terminal_observation"].any()
    assert venv.engine.step_count[0] == 0  # the single agent finished: the env reset


def test_agents_that_finish_early_idle_until_the_env_resets():
    venv = sb3.MarlGridVecEnv(corridor_vec(2, max_steps=4))
    venv.reset()
    put(venv, 0, 3, 1, EAST)  # next to the goal
    put(venv, 1, 1, 2, WEST)  # facing the wall
    # Step 1: agent_0 reaches the goal: its slot is done once, with its last view.
    obs, rewards, dones, infos = venv.step(np.array([FORWARD, LEFT]))
    assert dones.tolist() == [True, False] and rewards.tolist() == [1.0, 0.0]
    assert infos[0]["TimeLimit.truncated"] is False and infos[0]["terminal_observation"].any()
    assert "idle" not in infos[0] and "idle" not in infos[1]
    # Steps 2-3: slot 0 is idle: blank view, no reward, no done, actions ignored.
    for _ in range(2):
        obs, rewards, dones, infos = venv.step(np.array([FORWARD, LEFT]))
        assert not obs[0].any() and rewards[0] == 0.0 and not dones[0]
        assert infos[0]["idle"] is True and "idle" not in infos[1]
        assert "terminal_observation" not in infos[0]
    # Step 4: agent_1 is truncated, the env resets; slot 0 goes on with the new episode.
    obs, rewards, dones, infos = venv.step(np.array([FORWARD, LEFT]))
    assert dones.tolist() == [False, True]
    assert infos[1]["TimeLimit.truncated"] is True and infos[1]["terminal_observation"].any()
    assert infos[0]["idle"] is True and "terminal_observation" not in infos[0]
    assert obs[0].any() and obs[1].any()  # both slots see the new episode
    assert venv.engine.step_count[0] == 0


def test_dict_and_rgb_observations_train():
    from stable_baselines3 import PPO

    pytest.importorskip("torch").set_num_threads(1)
    agent = {"observation": "onehot", "extras": ("reward", "position", "direction")}
    venv = sb3.MarlGridVecEnv("MarlGrid-Empty-8x8-3Agents-v0", num_envs=2, agent=agent)
    obs = venv.reset()
    assert obs["image"].shape == (6, 7, 7, 38) and obs["direction"].shape == (6,)
    PPO("MultiInputPolicy", venv, n_steps=8, batch_size=24, n_epochs=1, device="cpu").learn(48)

    rgb = {"observation": "rgb", "tile_size": 6}  # 42x42 pixels: enough for NatureCNN
    venv = sb3.MarlGridVecEnv("MarlGrid-Empty-8x8-3Agents-v0", num_envs=1, agent=rgb)
    PPO("CnnPolicy", venv, n_steps=8, batch_size=24, n_epochs=1, device="cpu").learn(24)


def test_symbolic_extractor_both_layouts():
    th = pytest.importorskip("torch")
    space = gymnasium.spaces.Box(0, 255, (7, 7, 3), np.uint8)
    last = sb3.SymbolicGridExtractor(space, features_dim=16)
    first = sb3.SymbolicGridExtractor(
        gymnasium.spaces.Box(0, 255, (3, 7, 7), np.uint8), features_dim=16
    )
    first.load_state_dict(last.state_dict())
    x = th.randint(0, 12, (4, 7, 7, 3)).float()
    assert th.allclose(last(x), first(x.permute(0, 3, 1, 2)))
    assert last(x).shape == (4, 16)


def _mean_return(venv, policy, episodes: int = 48) -> float:
    obs = venv.reset()
    done_returns: list[float] = []
    running = np.zeros(venv.num_envs)
    rng = np.random.default_rng(0)
    while len(done_returns) < episodes:
        if policy is None:
            actions = rng.integers(0, 7, venv.num_envs)
        else:
            actions, _ = policy.predict(obs, deterministic=True)
        obs, rewards, dones, _ = venv.step(actions)
        running += rewards
        for i in np.flatnonzero(dones):
            done_returns.append(running[i])
            running[i] = 0.0
    return float(np.mean(done_returns))


def test_ppo_learns_empty_5x5():
    from stable_baselines3 import PPO
    from stable_baselines3.common.vec_env import VecMonitor

    pytest.importorskip("torch").set_num_threads(1)
    settings = {"reward_decay": True, "max_steps": 20}  # faster is better; random rarely scores

    def make(num_envs: int, seed: int):
        venv = sb3.MarlGridVecEnv("MarlGrid-Empty-5x5-v0", num_envs=num_envs, **settings)
        venv.seed(seed)
        return venv

    random_return = _mean_return(make(16, 100), None)
    model = PPO(
        "MlpPolicy",
        VecMonitor(make(8, 0)),
        n_steps=64,
        batch_size=128,
        n_epochs=4,
        learning_rate=1e-3,
        gamma=0.95,
        ent_coef=0.01,
        policy_kwargs=sb3.symbolic_policy_kwargs(64, net_arch=[64]),
        seed=0,
        device="cpu",
    )
    model.learn(8192)
    trained_return = _mean_return(make(16, 100), model)
    assert random_return < 0.3
    assert trained_return > 0.7 > random_return + 0.35


@pytest.mark.parametrize("missing", ["stable_baselines3", "torch"])
def test_sb3_adapter_without_its_extra_names_the_install_command(monkeypatch, missing):
    import sys

    monkeypatch.delitem(sys.modules, "marlgrid.adapters.sb3", raising=False)
    for name in [m for m in sys.modules if m == missing or m.startswith(missing + ".")]:
        monkeypatch.setitem(sys.modules, name, None)  # as if it were not installed
    monkeypatch.setitem(sys.modules, missing, None)
    with pytest.raises(ModuleNotFoundError, match=r"pip install 'marlgrid\[sb3\]'") as err:
        import marlgrid.adapters.sb3  # noqa: F401
    assert missing in str(err.value)
    monkeypatch.delitem(sys.modules, "marlgrid.adapters.sb3", raising=False)


def test_single_agent_env_with_a_joint_policy_for_the_others():
    calls = []

    class Joint:
        def reset(self):
            calls.append("reset")

        def actions(self, env, obs):
            calls.append(sorted(obs))
            return dict.fromkeys(obs, LEFT)

    joint = Joint()
    env = SingleAgentEnv("MarlGrid-Empty-8x8-3Agents-v0", others=joint)
    env.reset(seed=0)
    env.step(FORWARD)
    env.step(FORWARD)
    assert calls == ["reset", ["agent_1", "agent_2"], ["agent_1", "agent_2"]]
