"""The batched API against the PettingZoo env: identical trajectories, autoreset, buffers."""

from __future__ import annotations

import numpy as np
import pytest

import marlgrid
from marlgrid.base import ActionError

ENV_ID = "MarlGrid-GoalCycle-13x13-3Agents-v0"


@pytest.mark.parametrize(
    ("env_id", "overrides"),
    [
        (ENV_ID, {"max_steps": 30}),
        ("MarlGrid-DoorKey-8x8-2Agents-v0", {"max_steps": 40}),
        ("MarlGrid-Empty-5x5-v0", {"max_steps": 25}),
        (ENV_ID, {"max_steps": 20, "agent": {"observation": "rgb", "tile_size": 3}}),
        (ENV_ID, {"max_steps": 20, "ghost_mode": False, "agent": {"extras": ("reward",)}}),
    ],
)
def test_batch_matches_single_envs(env_id, overrides):
    """Env i of a batch seeded with s follows the single env seeded with s + i, across resets."""
    n_envs, seed = 4, 11
    vec = marlgrid.make_vec(env_id, num_envs=n_envs, **overrides)
    singles = [marlgrid.make(env_id, **overrides) for _ in range(n_envs)]
    agents = vec.possible_agents
    vobs, _ = vec.reset(seed=seed)
    for i, env in enumerate(singles):
        env.reset(seed=seed + i)
    rng = np.random.default_rng(0)
    resets = 0
    for _ in range(overrides["max_steps"] * 2 + 7):
        actions = rng.integers(0, 7, (n_envs, len(agents)))
        vobs, vrew, vterm, vtrunc, infos = vec.step(actions)
        for i, env in enumerate(singles):
            live = list(env.agents)
            o, r, te, tr, _ = env.step({a: int(actions[i, agents.index(a)]) for a in live})
            for a in live:
                k = agents.index(a)
                assert vrew[i, k] == np.float32(r[a])
                assert vterm[i, k] == te[a] and vtrunc[i, k] == tr[a]
            if not env.agents:
                final = infos["final_obs"]
                assert infos["_final_obs"][i]
                for a in agents:
                    _assert_obs_equal(_row(final[a], i), o.get(a))
                sobs_i, _ = env.reset()
                resets += 1
            else:
                sobs_i = o
                assert "_final_obs" not in infos or not infos["_final_obs"][i]
            for a in sobs_i:
                _assert_obs_equal(_row(vobs[a], i), sobs_i[a])
    assert resets >= n_envs


def _row(obs, i):
    if isinstance(obs, dict):
        return {key: value[i] for key, value in obs.items()}
    return obs[i]


def _assert_obs_equal(batched, single):
    if single is None:  # the agent left before the end; its final view is all unseen
        assert not np.asarray(batched if not isinstance(batched, dict) else batched["image"]).any()
        return
    if isinstance(single, dict):
        for key in single:
            np.testing.assert_array_equal(batched[key], single[key])
    else:
        np.testing.assert_array_equal(batched, single)


def test_episode_statistics_and_buffer_reuse():
    vec = marlgrid.make_vec(ENV_ID, num_envs=2, max_steps=5)
    obs, _ = vec.reset(seed=0)
    first = obs["agent_0"]
    total = np.zeros((2, 3))
    for _ in range(5):
        obs, rew, term, trunc, infos = vec.step(np.full((2, 3), 2))
        total += rew
    assert obs["agent_0"] is first, "the batched API reuses its buffers"
    assert infos["_episode"].all()
    # The final observation shows the world as the episode ended, not a blank view.
    assert infos["final_obs"]["agent_0"].reshape(2, -1).any(axis=1).all()
    np.testing.assert_allclose(infos["episode"]["r"], total)
    assert infos["episode"]["l"].tolist() == [5, 5]
    assert trunc.all()
    assert infos["active"].all()  # the new episodes are already in play


def test_batched_action_errors_leave_the_batch_usable():
    vec = marlgrid.make_vec(ENV_ID, num_envs=2)
    vec.reset(seed=0)
    before = vec.engine.step_count.copy()
    with pytest.raises(ActionError, match=r"shape \(num_envs, num_agents\) = \(2, 3\)"):
        vec.step(np.zeros((3, 2), int))
    with pytest.raises(ActionError, match=r"action 9 for agent_1 in env 0 is out of range"):
        vec.step(np.array([[0, 9, 0], [0, 0, 0]]))
    with pytest.raises(ActionError, match="must be integers"):
        vec.step(np.zeros((2, 3)))
    np.testing.assert_array_equal(vec.engine.step_count, before)
    vec.step(np.zeros((2, 3), np.int32))
    assert vec.engine.step_count.tolist() == [1, 1]
