"""Social metrics on hand-made layouts, against hand-computed values."""

from __future__ import annotations

import csv
import math

import numpy as np
import pytest

import marlgrid
from marlgrid.constants import DONE, FORWARD, LEFT
from marlgrid.metrics.social import (
    KINDS,
    SocialTracker,
    agents_in_view,
    nearest_distance,
    summarize,
)
from tests.conftest import HandMadeEnv, place

NORTH, EAST, SOUTH, WEST = 3, 0, 1, 2

# Two rooms split by a full wall (y = 3): nothing is seen across it.
TWO_ROOMS = [
    "#######",
    "#.....#",
    "#.....#",
    "#######",
    "#.....#",
    "#.....#",
    "#.....#",
    "#######",
]
# agent: (x, y, direction). 0 looks north at 2; 1 (top room) faces the wall; 3 is behind 0.
PLACES = {0: (3, 5, NORTH), 1: (3, 1, SOUTH), 2: (4, 4, WEST), 3: (3, 6, NORTH)}


def _two_rooms(max_steps: int = 100) -> HandMadeEnv:
    env = HandMadeEnv(TWO_ROOMS, n_agents=4, max_steps=max_steps)
    env.reset(seed=0)
    for k, (x, y, d) in PLACES.items():
        place(env, k, x, y, d)
    return env


def _seen(env: HandMadeEnv) -> np.ndarray:
    e = env.engine
    views = np.array([a.view_size for a in e.agents])
    offsets = np.array([a.view_offset for a in e.agents])
    return agents_in_view(e.pos, e.dirs, e.status == 1, e.vis, views, offsets)[0]


def test_agents_in_view_follow_the_engine_visibility_with_occlusion():
    env = _two_rooms()
    seen = _seen(env)
    # Rows: who looks; columns: who is seen. 1 is behind the wall for everyone (and sees only
    # the wall); 3 is behind 0 (out of 0's view); 2, facing west, sees 0 and 3 beside it.
    expected = np.array(
        [
            [False, False, True, False],
            [False, False, False, False],
            [True, False, False, True],
            [True, False, True, False],
        ]
    )
    np.testing.assert_array_equal(seen, expected)
    # 1 lies inside 0's view square (4 ahead, straight on): only the wall hides it.
    assert env.visible_cells("agent_0")[3, 3] and not env.visible_cells("agent_0")[3, 1]
    for k in range(4):
        cells = env.visible_cells(f"agent_{k}")
        for m, (x, y, _) in PLACES.items():
            if m != k:
                assert seen[k, m] == cells[x, y]


def test_an_agent_sharing_the_cell_is_not_in_view_but_at_distance_zero():
    env = _two_rooms()
    place(env, 3, 3, 5, NORTH)  # onto agent 0's cell
    seen = _seen(env)
    assert not seen[0, 3] and not seen[3, 0]
    assert seen[0, 2] and seen[3, 2]  # both still see 2 ahead
    refer = ~np.eye(4, dtype=bool)
    assert nearest_distance(env.engine.pos, env.engine.status == 1, refer)[0, 0] == 0.0


def test_nearest_distances_are_manhattan_to_others_and_to_experts():
    env = _two_rooms()
    pos, active = env.engine.pos, env.engine.status == 1
    others = ~np.eye(4, dtype=bool)
    # d01 = 4, d02 = 1 + 1 = 2, d03 = 1, d12 = 1 + 3 = 4, d13 = 5, d23 = 1 + 2 = 3
    np.testing.assert_array_equal(nearest_distance(pos, active, others)[0], [1, 4, 2, 1])
    experts = others & np.array([False, True, True, False])[None, :]
    np.testing.assert_array_equal(nearest_distance(pos, active, experts)[0], [2, 4, 4, 3])
    active = active.copy()
    active[0, 1:] = False  # nobody else in play
    assert np.isnan(nearest_distance(pos, active, others)[0, 0])


def _track(env, tracker, actions_per_step):
    """Step ``env`` with one row of actions per step; the episode ends at the last row."""
    engine = env.engine
    for t, row in enumerate(actions_per_step):
        tracker.observe(engine)
        _, rewards, *_ = env.step(dict(zip(env.possible_agents, row, strict=True)))
        rewards = np.array([[rewards.get(a, 0.0) for a in env.possible_agents]])
        ended = np.array([t == len(actions_per_step) - 1])
        tracker.record(engine, np.array([row]), rewards, ended)
    return tracker.pop()


def test_fraction_in_view_and_mean_distance_over_an_episode():
    # 0 turns left each step (north, west, south, east); the others stand still. Expert: 2.
    # 0 sees: north 2; west 3 (beside it); south 3; east 2 and 3 -> others 4/4, expert 2/4.
    env = _two_rooms(max_steps=4)
    tracker = SocialTracker.for_engine(env.engine, experts=[2])
    rows = _track(env, tracker, [[LEFT, DONE, DONE, DONE]] * 4)
    nan = math.nan
    np.testing.assert_array_equal(rows["other_in_view"][0], [1.0, 0.0, 1.0, 1.0])
    np.testing.assert_array_equal(rows["expert_in_view"][0], [0.5, 0.0, nan, 1.0])
    np.testing.assert_array_equal(rows["other_distance"][0], [1.0, 4.0, 2.0, 1.0])
    np.testing.assert_array_equal(rows["expert_distance"][0], [2.0, 4.0, nan, 3.0])
    assert tracker.names[-2:] == ("expert_in_view", "expert_distance")  # no tiles: no follow


def test_an_occluded_expert_is_never_in_view():
    env = _two_rooms(max_steps=3)
    tracker = SocialTracker.for_engine(env.engine, experts=[1])  # behind the wall
    rows = _track(env, tracker, [[LEFT, DONE, DONE, DONE]] * 3)
    assert rows["expert_in_view"][0, 0] == 0.0 and rows["expert_distance"][0, 0] == 4.0


def test_streaks_and_counts_from_rewards():
    tracker = SocialTracker(2, 1, [7], [0], tiles=False)
    # env 0: streaks 1, 2, 2 (a zero neither extends nor breaks), 3, broken, 1, 2, 2, broken, 1
    env0 = [1, 1, 0, 1, -1.5, 1, 1, 0, -1.5, 1]
    env1 = [-1.5, 1, 1, -1.5, 1]  # ends after 5 steps, then starts again with [1, 1]
    env1_next = [1, 1, 0, 0, 0]
    for t in range(10):
        r1 = env1[t] if t < 5 else env1_next[t - 5]
        rewards = np.array([[env0[t]], [r1]], dtype=np.float32)
        tracker.after_step(np.zeros((2, 1), dtype=np.int64), rewards, np.zeros((2, 1, 2)),
                           ended=np.array([t == 9, t in (4, 9)]))  # fmt: skip
    rows = tracker.pop()
    # episodes end in order: env 1 (step 5), then env 0 and env 1 (step 10)
    np.testing.assert_array_equal(rows["longest_streak"][:, 0], [2, 3, 2])
    np.testing.assert_array_equal(rows["rewards"][:, 0], [3, 6, 2])
    np.testing.assert_array_equal(rows["penalties"][:, 0], [2, 2, 0])
    np.testing.assert_allclose(rows["return"][:, 0], [0.0, 3.0, 2.0])
    assert tracker.pop()["return"].shape == (0, 1)


# A corridor of three tiles, ids in order along it.
CORRIDOR = [
    "#########",
    "#.0.1.2.#",
    "#.......#",
    "#########",
]
F, W = FORWARD, DONE
# The expert (agent 1) walks east: tiles 0, 1, 2 at steps 1, 3, 5. The learner (agent 0) waits
# 3 steps, enters 0 at step 4 and 1 at step 6, waits 2, enters 2 at step 10, turns back and
# re-enters 2 (penalty, step 14), 1 (penalty, step 16), then 0 (correct, step 18).
LEARNER = [W, W, W, F, F, F, W, W, F, F, F, LEFT, LEFT, F, F, F, F, F]
EXPERT = [F] * 6 + [W] * 12


@pytest.mark.parametrize(
    ("window", "followed"),
    [
        (3, [True, True, False, False]),  # entries 3, 3, 5 and 17 steps after the expert's
        (2, [False, False, False, False]),
        (10, [True, True, True, False]),
    ],
)
def test_follow_the_expert_fraction_counts_recent_expert_entries(window, followed):
    env = HandMadeEnv(CORRIDOR, n_agents=2, max_steps=18, penalty=1.5)
    env.reset(seed=0)
    place(env, 0, 1, 1, EAST)
    place(env, 1, 1, 1, EAST)
    tracker = SocialTracker.for_engine(env.engine, experts=[1], window=window)
    rows = _track(env, tracker, list(zip(LEARNER, EXPERT, strict=True)))
    assert rows["rewards"][0].tolist() == [4, 3]
    assert rows["penalties"][0].tolist() == [2, 0]
    assert rows["longest_streak"][0].tolist() == [3, 3]
    np.testing.assert_allclose(rows["return"][0], [4 - 2 * 1.5, 3])
    assert rows["follow_expert"][0, 0] == pytest.approx(np.mean(followed))
    assert rows["follow_other"][0, 0] == pytest.approx(np.mean(followed))
    assert rows["follow_other"][0, 1] == 0.0  # the expert was always first
    assert np.isnan(rows["follow_expert"][0, 1])  # no expert but itself


def test_repeat_shares_and_their_shuffled_control_over_an_episode():
    env = HandMadeEnv(CORRIDOR, n_agents=2, max_steps=18, penalty=1.5)
    env.reset(seed=0)
    place(env, 0, 1, 1, EAST)
    place(env, 1, 1, 1, EAST)
    tracker = SocialTracker.for_engine(env.engine, experts=[1], repeat_window=3)
    rows = _track(env, tracker, list(zip(LEARNER, EXPERT, strict=True)))
    # 0-based steps: the expert enters tiles 0, 1, 2 at 0, 2, 4; the learner enters 0, 1, 2,
    # 2, 1, 0 at 3, 5, 9, 13, 15, 17. Within 3 steps: the first two -> 2 / 6.
    assert rows["repeat_expert"][0, 0] == pytest.approx(1 / 3)
    # Offsets 4..14 (11). An entry (t, tile) counts under o when t - u - o is in 1..3 (u the
    # expert's step on that tile): t - u = 3, 3, 5, 9, 13, 17 -> 0, 0, 1 (o=4), 3, 3, 1 (o=14).
    assert rows["repeat_expert_shuffled"][0, 0] == pytest.approx(8 / 11 / 6)
    assert rows["repeat_expert_excess"][0, 0] == pytest.approx(7 / 33)
    assert rows["repeat_other"][0, 0] == rows["repeat_expert"][0, 0]
    assert rows["repeat_other"][0, 1] == 0.0  # the expert was always first
    assert np.isnan(rows["repeat_expert_shuffled"][0, 1])  # no expert but itself


def test_a_blocked_move_is_no_entry():
    tracker = SocialTracker(1, 2, [7, 7], [0, 0], experts=[1])
    cycle_id = np.full((1, 5, 3), -1, dtype=np.int16)
    cycle_id[0, 2, 1] = 0
    pos = np.array([[[1, 1], [3, 1]]])  # both face the tile at (2, 1)
    dirs = np.array([[EAST, WEST]])
    vis = np.zeros((1, 2, 7, 7), dtype=bool)
    tracker.before_step(pos, dirs, np.ones((1, 2), dtype=bool), vis, cycle_id)
    after = np.array([[[1, 1], [2, 1]]])  # blocking mode: only agent 1 got there
    rewards = np.array([[0.0, 1.0]], dtype=np.float32)
    tracker.after_step(np.full((1, 2), FORWARD), rewards, after, ghost_mode=False)
    assert tracker.last_entry[0, :, 0].tolist() == [-(1 << 40), 1]


def test_summaries_average_per_agent_and_over_columns():
    rows = {"penalties": np.array([[1.0, 0.0], [3.0, 2.0]]), "follow_expert": np.array(
        [[0.5, np.nan], [np.nan, np.nan]])}  # fmt: skip
    out = summarize(rows, ["agent_0", "agent_1"], columns=[0])
    assert out["social/penalties"] == 2.0
    assert out["social/penalties_agent_1"] == 1.0
    assert out["social/follow_expert"] == 0.5
    assert math.isnan(out["social/follow_expert_agent_1"])


def test_rollout_tracks_social_metrics_of_scripted_experts():
    from marlgrid.agents.training.rollout import MultiAgentRollout, SingleAgentBatch
    from marlgrid.agents.training.social_observer import SocialObserver
    from marlgrid.policies import make_policy
    from tests.toy_envs import CueMemoryEnv

    vec = marlgrid.make_vec("MarlGrid-GoalCycle-13x13-3Agents-v0", num_envs=4, max_steps=60)
    scripted = {
        "agent_0": make_policy("discoverer", 0),
        "agent_1": make_policy("oracle"),
        "agent_2": make_policy("random", 0),
    }
    social = SocialObserver.for_roles(vec, [], scripted)
    rollout = MultiAgentRollout(vec, [], scripted, seed=0, observers=[social])
    rollout.collect(60)
    returns = rollout.pop_returns()
    raw = social.tracker.pop()
    np.testing.assert_allclose(raw["return"], returns, rtol=1e-5)  # the same episodes
    assert (raw["penalties"][:, 1] == 0).all()  # the oracle never errs
    # experts by default: the scripted agents other than random (rows: whose experts)
    expected = [[False, True, False], [True, False, False], [True, True, False]]
    np.testing.assert_array_equal(social.tracker.refer[KINDS.index("expert")], expected)
    rollout.collect(60)
    logged = social.pop(columns=[0])
    assert logged["social/penalties_agent_1"] == 0.0
    assert 0.0 <= logged["social/expert_in_view"] <= 1.0
    assert set(logged) >= {"social/follow_expert", "social/other_distance_agent_2"}
    assert {"social/repeat_expert_shuffled", "social/repeat_other_excess_agent_0"} <= set(logged)
    assert SocialObserver.for_roles(SingleAgentBatch(CueMemoryEnv(2)), [], {}) is None
    # a marlgrid env without goal-cycle tiles logs no social metrics
    rooms = marlgrid.make_vec("MarlGrid-FourRooms-3Agents-v0", num_envs=2)
    assert SocialObserver.for_roles(rooms, [], {}) is None


def test_training_logs_social_metrics_to_metrics_csv(tmp_path):
    pytest.importorskip("torch")
    from marlgrid.agents.algorithms.ppo import PPOConfig
    from marlgrid.agents.training.trainer import TrainConfig, train

    cfg = TrainConfig(total_timesteps=128, checkpoint_every=4, video=False)
    cfg.agent = PPOConfig(num_steps=16)
    cfg.env.id = "MarlGrid-GoalCycle-13x13-3Agents-v0"
    cfg.env.num_envs, cfg.env.settings = 2, {"max_steps": 16}
    cfg.roles = {"agent_0": {"kind": "scripted", "policy": "oracle", "epsilon": 0.1}}
    cfg.logger.progress, cfg.logger.tensorboard = False, False
    train(cfg, tmp_path)
    with (tmp_path / "metrics.csv").open() as f:
        rows = list(csv.DictReader(f))
    assert {"social/penalties", "social/expert_in_view", "social/follow_expert_agent_1"} <= set(
        rows[0]
    )
    assert float(rows[-1]["social/penalties_agent_0"]) >= 0.0
    assert {"social/repeat_expert", "social/repeat_expert_excess_agent_1"} <= set(rows[0])


def test_a_registered_metric_observer_logs_beside_the_social_metrics(monkeypatch):
    from marlgrid.agents.training import metric_observers
    from marlgrid.agents.training.rollout import MultiAgentRollout
    from marlgrid.policies import make_policy

    class StepCounter:
        def __init__(self):
            self.steps = 0

        def before_step(self, vec, actions):
            self.steps += 1

        def after_step(self, vec, actions, rewards, infos):
            pass

        def pop(self, columns=None):
            return {"custom/steps": float(self.steps)}

    monkeypatch.setattr(
        metric_observers, "METRIC_OBSERVERS", list(metric_observers.METRIC_OBSERVERS)
    )
    metric_observers.register_metric_observer(lambda vec, groups, scripted: StepCounter())
    with pytest.raises(TypeError, match="'module:attribute'"):
        metric_observers.register_metric_observer("no_colon")
    vec = marlgrid.make_vec("MarlGrid-GoalCycle-13x13-3Agents-v0", num_envs=2, max_steps=20)
    scripted = {f"agent_{k}": make_policy("oracle") for k in range(3)}
    observers = metric_observers.build_metric_observers(vec, [], scripted)
    assert [type(o).__name__ for o in observers] == ["SocialObserver", "StepCounter"]
    MultiAgentRollout(vec, [], scripted, seed=0, observers=observers).collect(20)
    assert observers[1].pop() == {"custom/steps": 20.0}
    rooms = marlgrid.make_vec("MarlGrid-FourRooms-3Agents-v0", num_envs=2)
    assert [type(o).__name__ for o in metric_observers.build_metric_observers(rooms, [], {})] == [
        "StepCounter"
    ]
