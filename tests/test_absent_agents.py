"""Absent agents in the engine and the batched API: out of their env until its next reset.

An absent agent occupies no cell, takes no action, gets no reward or done flag, is drawn in no
view (symbolic, one-hot, pixels), is not ``active`` and comes back at the reset (or, marked
absent at reset, stays out of every episode until cleared).
"""

from __future__ import annotations

import pickle

import numpy as np
import pytest

from marlgrid.base import ActionError
from marlgrid.config import ConfigError
from marlgrid.constants import AGENT, DONE, EMPTY, FORWARD, KEY, N_COLORS, N_TYPES, RIGHT, TOGGLE
from marlgrid.core import kernels as K
from marlgrid.core.atlas import get_atlas
from marlgrid.metrics.social import agents_in_view
from marlgrid.vector import VectorEnv
from tests.conftest import HandMadeEnv

NORTH, WEST = 3, 2
ROOM = ["#####", "#...#", "#...#", "#...#", "#####"]
NOVICE, EXPERT = 0, 1
AHEAD = (3, 5)  # view cell of the map cell right in front of an agent with a 7x7 view


def _vec(rows: list[str], num_envs: int = 1, **settings) -> VectorEnv:
    vec = VectorEnv(HandMadeEnv(rows, n_agents=2, **settings), num_envs)
    vec.reset(seed=0)
    return vec


def _put(vec: VectorEnv, k: int, x: int, y: int, direction: int, n: int = 0) -> None:
    engine = vec.engine
    engine.pos[n, k] = (x, y)
    engine.dirs[n, k] = direction
    engine.status[n, k] = K.ACTIVE
    engine.observe()


def _expert_in_front(observation: str = "symbolic") -> VectorEnv:
    """The novice at (2, 2) facing north, the expert right in front of it at (2, 1)."""
    agent = {"observation": observation, "tile_size": 4} if observation != "symbolic" else None
    vec = _vec(ROOM, agent=agent)
    _put(vec, NOVICE, 2, 2, NORTH)
    _put(vec, EXPERT, 2, 1, NORTH)
    return vec


def _seen(vec: VectorEnv) -> np.ndarray:
    """Env 0's ``(K, K)`` agents in view as the social metrics count them."""
    e, sizes, offsets = vec.engine, np.array([7, 7]), np.array([0, 0])
    return agents_in_view(e.pos, e.dirs, e.status == K.ACTIVE, e.vis, sizes, offsets)[0]


def test_a_removed_expert_leaves_the_novices_symbolic_view_and_the_social_metrics():
    vec = _expert_in_front()
    engine = vec.engine
    before = vec._obs()["agent_0"][0, AHEAD[0], AHEAD[1]].copy()
    assert before[0] == AGENT and before[2] == NORTH
    assert _seen(vec)[NOVICE, EXPERT]
    obs, active = vec.remove_agents(0, ["agent_1"])
    assert active.tolist() == [[True, False]]
    np.testing.assert_array_equal(obs["agent_0"][0, AHEAD[0], AHEAD[1]], (EMPTY, 0, 0))
    assert not obs["agent_1"][0].any()  # its own view is blank
    assert not engine.vis[0, EXPERT].any()
    assert not _seen(vec)[NOVICE, EXPERT]  # the social metrics read status == ACTIVE
    assert vec.absent.tolist() == [[False, True]]


def test_a_removed_expert_leaves_the_one_hot_and_pixel_views():
    vec = _expert_in_front("onehot")
    cell = vec._obs()["agent_0"][0, AHEAD[0], AHEAD[1]]
    assert cell[AGENT] == 1 and cell[EMPTY] == 0
    obs, _ = vec.remove_agents(0, "agent_1")
    cell = obs["agent_0"][0, AHEAD[0], AHEAD[1]]
    assert cell[AGENT] == 0 and cell[EMPTY] == 1 and cell[N_TYPES] == 1  # empty, color 0
    assert cell[N_TYPES + N_COLORS] == 1  # state 0

    vec = _expert_in_front("rgb")
    ts = 4
    empty = get_atlas(ts).tiles[EMPTY, 0, 0]
    i, j = AHEAD

    def tile(obs):
        return obs["agent_0"][0, j * ts : (j + 1) * ts, i * ts : (i + 1) * ts]

    assert not np.array_equal(tile(vec._obs()), empty)  # the expert is drawn there
    obs, _ = vec.remove_agents(0, "agent_1")
    np.testing.assert_array_equal(tile(obs), empty)


def test_a_removed_agent_takes_no_action_gets_no_reward_and_blocks_no_one():
    rows = ["#####", "#0..#", "#...#", "#1..#", "#####"]
    vec = _vec(rows, ghost_mode=False, initial_reward=True)
    _put(vec, EXPERT, 1, 2, NORTH)  # tile 0 in front of it
    _put(vec, NOVICE, 2, 2, WEST)  # the expert's cell in front of it
    vec.remove_agents(0, "agent_1")
    _, rewards, terms, truncs, infos = vec.step(np.array([[FORWARD, FORWARD]]))
    assert vec.engine.pos[0, EXPERT].tolist() == [1, 2]  # it did not move onto tile 0
    assert vec.engine.pos[0, NOVICE].tolist() == [1, 2]  # its old cell is free
    assert rewards.tolist() == [[0.0, 0.0]]
    assert infos["active"].tolist() == [[True, False]]
    vec.step(np.array([[RIGHT, TOGGLE]]))  # the novice turns north, towards tile 0
    _, rewards, *_ = vec.step(np.array([[FORWARD, FORWARD]]))
    assert rewards[0, NOVICE] == 1.0 and rewards[0, EXPERT] == 0.0  # only the novice is paid


def test_a_removed_agent_drops_what_it_carries_on_a_free_cell_and_loses_it_elsewhere():
    rows = ["#####", "#0..#", "#...#", "#1..#", "#####"]
    vec = _vec(rows)
    engine = vec.engine
    yellow_key = (KEY, 4, 0)
    _put(vec, EXPERT, 2, 2, NORTH)  # empty floor
    engine.carrying[0, EXPERT] = yellow_key
    vec.remove_agents(0, "agent_1")
    assert engine.grid[0, 2, 2].tolist() == list(yellow_key)
    assert not engine.carrying[0, EXPERT].any()

    vec.reset(seed=0)
    _put(vec, EXPERT, 1, 1, NORTH)  # on goal-cycle tile 0: nowhere to drop it
    engine.carrying[0, EXPERT] = yellow_key
    grid = engine.grid.copy()
    vec.remove_agents(0, "agent_1")
    np.testing.assert_array_equal(engine.grid, grid)
    assert not engine.carrying[0, EXPERT].any()


def test_the_env_ends_when_the_agents_left_are_done_and_the_absent_agent_returns():
    rows = ["#####", "#.G.#", "#...#", "#...#", "#####"]
    vec = _vec(rows, max_steps=50)
    _put(vec, NOVICE, 2, 2, NORTH)  # the goal in front of it
    vec.remove_agents(0, "agent_1")
    _, rewards, terms, truncs, infos = vec.step(np.array([[FORWARD, FORWARD]]))
    assert terms.tolist() == [[True, False]] and not truncs.any()
    assert infos["_episode"].tolist() == [True] and infos["episode"]["l"][0] == 1
    assert infos["active"].tolist() == [[True, True]]  # the new episode has both again
    assert not vec.absent.any()


def test_agents_absent_at_reset_sit_out_every_episode_until_cleared():
    vec = VectorEnv(HandMadeEnv(ROOM, n_agents=2, max_steps=4), 4)
    vec.set_absent_at_reset([1, 3], ["agent_1"])
    _, infos = vec.reset(seed=0)
    expected = np.array([[True, True], [True, False], [True, True], [True, False]])
    assert infos["active"].tolist() == expected.tolist()
    rng = np.random.default_rng(0)
    for t in range(1, 13):  # three episodes of 4 steps
        _, rewards, terms, truncs, infos = vec.step(rng.integers(0, 7, (4, 2)))
        assert (vec.absent == ~expected).all()
        if t % 4 == 0:
            assert infos["_episode"].all()
            assert truncs.tolist() == expected.tolist()  # no flag for an absent agent
    vec.set_absent_at_reset([1], ["agent_1"], absent=False)
    assert vec.absent[1, 1]  # the running episode keeps it out
    for _ in range(4):
        vec.step(np.full((4, 2), DONE))
    assert vec.absent[:, 1].tolist() == [False, False, False, True]


def test_absence_survives_pickling_and_bad_requests_are_refused():
    vec = VectorEnv(HandMadeEnv(ROOM, n_agents=2), 2)
    with pytest.raises(ActionError, match="before reset"):
        vec.remove_agents(0, "agent_1")
    vec.set_absent_at_reset([0], "agent_1")
    vec.reset(seed=0)
    vec.remove_agents([1], "agent_0")
    engine = pickle.loads(pickle.dumps(vec.engine))
    assert engine.absent.tolist() == [[False, True], [True, False]]
    assert engine.absent_at_reset.tolist() == [[False, True], [False, False]]
    with pytest.raises(ConfigError, match="agent_7"):
        vec.remove_agents(0, ["agent_7"])
    with pytest.raises(ConfigError, match="envs must be"):
        vec.remove_agents(5, ["agent_0"])
    with pytest.raises(ValueError, match="mask must have shape"):
        vec.engine.remove_agents(np.ones((3, 2), dtype=bool))


def test_social_metrics_of_an_episode_without_the_experts_are_nan_not_zero():
    """Mixed training's solo envs: the expert is absent all episode, so the novice's expert_*
    metrics there say 'no expert' (NaN) while the envs with the expert give numbers."""
    import marlgrid
    from marlgrid.metrics.social import SocialTracker
    from marlgrid.policies import make_policy

    vec = marlgrid.make_vec("MarlGrid-GoalCycle-13x13-3Agents-v0", 4, size=7, max_steps=20)
    vec.set_absent_at_reset([0, 1], ["agent_1", "agent_2"])
    vec.reset(seed=0)
    tracker = SocialTracker.for_engine(vec.engine, experts=[1, 2])
    oracle, rng = make_policy("oracle", seed=0), np.random.default_rng(0)
    actions = np.zeros((4, 3), dtype=np.int64)
    ended = None
    while ended is None:
        actions[:, 0] = rng.integers(0, 3, 4)
        actions[:, 1] = oracle.scripted_actions(vec.engine, 1)
        actions[:, 2] = oracle.scripted_actions(vec.engine, 2)
        tracker.observe(vec.engine)
        _, rewards, _, _, infos = vec.step(actions)
        tracker.record(vec.engine, actions, rewards, infos.get("_episode"))
        if "_episode" in infos:
            ended = tracker.pop()
    in_view = ended["expert_in_view"][:, 0]  # the novice, per env (episodes end together)
    assert np.isnan(in_view[:2]).all()
    assert not np.isnan(in_view[2:]).any()
    assert not np.isnan(ended["other_in_view"][2:, 0]).any()
