"""The order and trail following measures and the locked follower: hand-built logs and layouts
with values computed by hand, a plain-Python reference for the shuffled controls, and the
scripted followers ranked in a real env."""

from __future__ import annotations

import pickle

import numpy as np
import pytest

from marlgrid.analysis.chance import play_scripted
from marlgrid.config import ConfigError
from marlgrid.constants import DONE
from marlgrid.metrics.following import NO_CELL, NO_ENTRY, SHUFFLE_OFFSETS, EntryLog
from marlgrid.policies import make_policy
from marlgrid.policies.follower import FollowerPolicy
from tests.conftest import HandMadeEnv, place

EAST, WEST = 0, 2
# two agents: agent 0 the novice, agent 1 the expert
REFER = np.array([[[False, True], [True, False]], [[False, True], [False, False]]])
EXPERT = {2: 0, 5: 1, 8: 2, 11: 0}  # step: tile


def _log(length: int, entries: dict[int, dict[int, int]], n_agents: int = 2) -> EntryLog:
    log = EntryLog(1, n_agents, capacity=4)
    log.reserve(length)
    for k, steps in entries.items():
        for u, tile in steps.items():
            log.tiles[0, k, u] = tile
    return log


def _order(log: EntryLog, length: int, lag: int | None = None) -> dict[str, np.ndarray]:
    return log.orders(np.array([0]), np.array([length]), REFER, lag)


def test_a_locked_copy_continues_the_expert_in_order_with_any_lag_up_to_the_bound():
    # The novice enters tiles 0, 1, 2, 0 two steps after the expert. Its first entry anchors on
    # the expert's entry of tile 0 at step 2 (not counted); each next one is the tile of the
    # expert's next entry, made before it: 3 of 4.
    log = _log(20, {0: {4: 0, 7: 1, 10: 2, 13: 0}, 1: EXPERT})
    assert _order(log, 20)[""][1, 0, 0] == pytest.approx(3 / 4)
    assert _order(log, 20, lag=2)[""][1, 0, 0] == pytest.approx(3 / 4)
    assert _order(log, 20, lag=1)[""][1, 0, 0] == 0.0  # 2 steps behind is beyond a lag of 1
    # 30 steps behind: the same with the whole episode as the lag.
    late = _log(50, {0: {32: 0, 35: 1, 38: 2, 41: 0}, 1: EXPERT})
    assert _order(late, 50)[""][1, 0, 0] == pytest.approx(3 / 4)
    # The expert never continues the novice: every novice entry of its tile comes later or
    # (tile 0 at step 4, before the expert's 11) starts a match that its end cannot continue.
    assert _order(log, 20)[""][0, 0, 1] == 0.0


def test_entries_out_of_order_continue_nothing():
    # Tiles 0, 2, 1, 0 after the expert's 0, 1, 2, 0: each entry is not the tile of the
    # expert's entry after the last matched one, so each re-anchors and none counts.
    log = _log(20, {0: {12: 0, 13: 2, 14: 1, 15: 0}, 1: EXPERT})
    assert _order(log, 20)[""][1, 0, 0] == 0.0


def _reference_order(novice, expert, length, lag):
    """The order share and its shuffled mean in plain Python (the module docstring's rule)."""

    def continued(ref):
        hits, anchor = 0, -1
        for t, tile in novice:
            nxt = anchor + 1
            if anchor >= 0 and nxt < len(ref) and ref[nxt][1] == tile and ref[nxt][0] < t:
                if t - ref[nxt][0] <= lag:
                    hits, anchor = hits + 1, nxt
                    continue
            anchor = next(
                (q for q, (u, j) in enumerate(ref) if u < t and j == tile and t - u <= lag), -1
            )
        return hits

    low, high = (1, length - 1) if lag >= length else (lag + 1, length - lag - 1)
    count = high - low + 1
    n = min(count, SHUFFLE_OFFSETS)
    offsets = [low + (i * count) // n for i in range(n)]
    shifted = [sorted(((u + o) % length, j) for u, j in expert) for o in offsets]
    return continued(expert), sum(continued(ref) for ref in shifted) / len(offsets)


@pytest.mark.parametrize("lag", [None, 6])
def test_the_shuffled_order_control_matches_a_plain_python_reference(lag):
    rng = np.random.default_rng(0)
    for _ in range(20):
        length = int(rng.integers(30, 60))
        steps = {k: np.sort(rng.choice(length, size=int(rng.integers(3, 12)), replace=False))
                 for k in (0, 1)}  # fmt: skip
        entries = {k: {int(u): int(rng.integers(0, 3)) for u in s} for k, s in steps.items()}
        log = _log(length, entries)
        out = _order(log, length, lag)
        novice, expert = sorted(entries[0].items()), sorted(entries[1].items())
        hits, chance = _reference_order(novice, expert, length, lag or 1 << 30)
        n = len(novice)
        assert out[""][1, 0, 0] == pytest.approx(hits / n)
        assert out["_shuffled"][1, 0, 0] == pytest.approx(chance / n)


def test_trail_share_and_its_shuffled_control_by_hand():
    # Six states, window 1: the expert walks cells 10..15, the novice one step behind it from
    # state 1. It is on the expert's cell of the step before in states 1-5 (5 of 6). Shifted by
    # o in {2, 3, 4} (the offsets with 1 < o < 5), the expert's cell one step before state t is
    # cell 10 + (t - 1 - o) mod 6, never the novice's 10 + t - 1: a shuffled share of 0.
    log = _log(6, {})
    log.cells[0, 1, :6] = [10, 11, 12, 13, 14, 15]
    log.cells[0, 0, :6] = [20, 10, 11, 12, 13, 14]
    out = log.trails(np.array([0]), np.array([6]), REFER, window=1)
    assert out[""][1, 0, 0] == pytest.approx(5 / 6)
    assert out["_shuffled"][1, 0, 0] == 0.0
    assert out["_excess"][1, 0, 0] == pytest.approx(5 / 6)
    log.cells[0, 0, 0] = NO_CELL  # a state out of play is not counted
    assert log.trails(np.array([0]), np.array([6]), REFER, window=1)[""][1, 0, 0] == 1.0


def test_the_log_clears_cells_and_tiles():
    log = _log(6, {0: {1: 2}})
    log.cells[0, 0, 0] = 5
    log.clear(np.array([0]))
    assert (log.tiles == NO_ENTRY).all() and (log.cells == NO_CELL).all()


ROOM = ["#########", "#.......#", "#.......#", "#.......#", "#########"]


def _leader_after_another_comes_near(policy: FollowerPolicy) -> int:
    """The follower (agent 0) starts 2 cells from agent 1 and 4 from agent 2; after a step
    agent 2 stands next to it, nearer than agent 1."""
    env = HandMadeEnv(ROOM, n_agents=3, max_steps=20)
    env.reset(seed=0)
    place(env, 0, 4, 2, WEST)
    place(env, 1, 6, 2, EAST)
    place(env, 2, 1, 1, EAST)
    action = int(policy.scripted_actions(env.engine, 0)[0])
    assert int(policy._trails[env.engine][0].leader[0]) == 1
    env.step({"agent_0": action, "agent_1": DONE, "agent_2": DONE})
    x, y = env.engine.pos[0, 0]
    place(env, 2, int(x), int(y) + 1, WEST)
    assert np.abs(env.engine.pos[0, 1] - env.engine.pos[0, 0]).sum() > 1
    policy.scripted_actions(env.engine, 0)
    return int(policy._trails[env.engine][0].leader[0])


def test_the_locked_follower_keeps_its_leader_and_the_old_rule_switches():
    assert _leader_after_another_comes_near(FollowerPolicy(0)) == 1
    assert _leader_after_another_comes_near(FollowerPolicy(0, leader="nearest_each_step")) == 2


def test_the_leader_rule_is_checked_and_pickled():
    with pytest.raises(ConfigError, match="leader must be one of"):
        FollowerPolicy(leader="nearest")
    copy = pickle.loads(pickle.dumps(FollowerPolicy(lag=3, leader="nearest_each_step")))
    assert (copy.leader, copy.lag) == ("nearest_each_step", 3)
    assert make_policy("follower").leader == "locked"


def _rows(novice, episodes: int, size: int = 9) -> dict[str, float]:
    env_id = (
        "MarlGrid-GoalCycle-9x9-3Agents-v0" if size == 9 else "MarlGrid-GoalCycle-13x13-3Agents-v0"
    )
    experts = {"agent_1": "oracle", "agent_2": "oracle"}
    settings = {"agents": [{"hide": ["cycle_tile"]}, {}, {}]}
    rows, _ = play_scripted(env_id, settings, {**experts, "agent_0": novice}, list(experts),
                            episodes, seed=11)  # fmt: skip
    return {name: float(np.nanmean(values[:, 0])) for name, values in rows.items()}


def test_the_measures_rank_careful_sloppy_and_no_following():
    locked = _rows(FollowerPolicy(0), 32)
    switching = _rows(FollowerPolicy(0, leader="nearest_each_step"), 32)
    lagging = _rows(FollowerPolicy(0, lag=30), 32)
    walker = _rows(make_policy("random", 0), 64)
    cycler = _rows(make_policy("oracle", 0), 32)
    assert locked["order_expert"] > 0.85 and lagging["order_expert"] > 0.85
    assert switching["order_expert"] < locked["order_expert"] - 0.1
    assert walker["order_expert"] < 0.2
    # Only trail proximity tells a follower from an agent cycling the tiles on its own.
    assert cycler["order_expert"] > 0.75
    assert locked["trail_expert_excess"] > 0.2 > 0.1 > cycler["trail_expert_excess"]
    assert abs(walker["trail_expert_excess"]) < 0.02
    assert abs(walker["order_expert_excess"]) < 0.05


def test_the_locked_follower_earns_15_beside_two_oracles_on_the_canonical_map():
    # The acceptance: agent_0 blind to the tiles, 13x13 / 250 steps / penalty 1.5.
    found = _rows(make_policy("follower"), 100, size=13)
    assert found["return"] >= 15.0
