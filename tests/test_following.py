"""Following against chance: the repeat share, its time-shuffled control, the random-novice
control and the scripted follower, on hand layouts and short scripted runs."""

from __future__ import annotations

import math
import pickle

import numpy as np
import pytest

from marlgrid.analysis.chance import against_chance, chance_levels, play_scripted, social_levels
from marlgrid.config import ConfigError
from marlgrid.constants import DONE, FORWARD
from marlgrid.metrics.following import NO_ENTRY, EntryLog
from marlgrid.policies import make_policy
from marlgrid.policies.follower import FollowerPolicy
from marlgrid.registry import register
from tests.conftest import HandMadeEnv, place

EAST = 0
OTHERS = ~np.eye(3, dtype=bool)
EXPERTS = OTHERS & np.array([False, True, False])[None, :]  # agent 1 is the expert


def _log(length: int, entries: dict[int, dict[int, int]]) -> EntryLog:
    """An entry log of one env: ``entries[agent] = {step: tile}``."""
    log = EntryLog(1, 3, capacity=4)
    log.reserve(length)
    for k, steps in entries.items():
        for u, tile in steps.items():
            log.tiles[0, k, u] = tile
    return log


# 12 steps, window 2. Expert (1): tile 0 at step 1, tile 1 at 5. Agent 2: tile 2 at 8. Novice
# (0): tile 1 at 1, tile 0 at 2 (1 step after the expert), tile 2 at 9 (1 after agent 2),
# tile 1 at 10 (5 after the expert: too late).
ENTRIES = {0: {1: 1, 2: 0, 9: 2, 10: 1}, 1: {1: 0, 5: 1}, 2: {8: 2}}


def test_repeat_share_and_its_shuffled_control_by_hand():
    log = _log(12, ENTRIES)
    out = log.repeats(np.array([0]), np.array([12]), np.stack([OTHERS, EXPERTS]), 2, 3)
    share, shuffled, excess = out[""], out["_shuffled"], out["_excess"]
    # Offsets 3..9 (7 of them). The novice's entry at t counts under offset o when the set
    # entered that tile at u with (u + o) mod 12 in [t - 2, t - 1] (never before step 0):
    # t=1 tile 1: only d=1 fits: u=5 needs o=7 -> 1 of 7; t=2 tile 0: o in {0, 11} -> none;
    # t=9 tile 2: agent 2 at 8 needs o in {0, 11} -> none; t=10 tile 1: o in {3, 4} -> 2 of 7.
    assert share[0, 0, 0] == pytest.approx(2 / 4)  # others: tile 0 at 2 and tile 2 at 9
    assert share[1, 0, 0] == pytest.approx(1 / 4)  # the expert: tile 0 at 2
    np.testing.assert_allclose(shuffled[:, 0, 0], [3 / 28, 3 / 28])  # (3 / 7) / 4 entries
    np.testing.assert_allclose(excess[:, 0, 0], [11 / 28, 1 / 7])
    # Agent 2 entered tile 2 at 8, the novice at 9 (after): no repeat; shifted, the novice's
    # entry at 9 lands at 6 or 7 for o = 9 or 10, and only 9 is an offset -> 1 of 7.
    assert share[0, 0, 2] == 0.0 and shuffled[0, 0, 2] == pytest.approx(1 / 7)
    assert share[1, 0, 1] == 0.0  # the expert has nobody but itself in the expert set


def test_a_short_episode_has_no_shuffled_control_and_no_entries_no_share():
    log = _log(5, {0: {3: 0}, 1: {2: 0}})  # 5 <= 2 * 2 + 1: no offset qualifies
    out = log.repeats(np.array([0]), np.array([5]), np.stack([OTHERS, EXPERTS]), 2, 1)
    assert out[""][1, 0, 0] == 1.0 and math.isnan(out["_shuffled"][1, 0, 0])
    assert math.isnan(out[""][0, 0, 2])  # agent 2 entered nothing


def test_the_entry_log_grows_and_clears():
    log = _log(3, {0: {2: 1}})
    log.reserve(9)
    assert log.tiles.shape == (1, 3, 16) and log.tiles[0, 0, 2] == 1
    log.clear(np.array([0]))
    assert (log.tiles == NO_ENTRY).all()


# A pocket: the novice (spawning after 4 steps) gets the only spawn cell, sealed by walls and by
# the expert, who enters tile 0 next to it and then turns on it for good (tile 1 lies beyond a
# wall). In blocking mode the random novice can never move: with a 3x3 view round it, it sees
# the expert on every step in play, at distance 1, and enters no tile.
POCKET = ["#######", "#s0#1.#", "#######"]


@pytest.fixture(scope="module")
def pocket_id() -> str:
    register(
        "Test-FollowingPocket-v0",
        "tests.conftest:HandMadeEnv",
        rows=POCKET,
        n_agents=2,
        ghost_mode=False,
        max_steps=20,
        agents=[{"view_size": 3, "view_offset": 1, "spawn_delay": 4}, {}],
    )
    return "Test-FollowingPocket-v0"


def test_random_novice_control_on_a_sealed_pocket(pocket_id):
    chance = chance_levels(pocket_id, None, {"agent_1": "oracle"}, episodes=6, num_envs=4)
    assert chance["return"] == 0.0 and chance["penalties"] == 0.0
    assert chance["expert_in_view"] == 1.0 and chance["expert_distance"] == 1.0
    for name in ("follow_expert", "repeat_expert", "repeat_expert_shuffled"):
        assert math.isnan(chance[name])  # no entry to judge
    novice = social_levels(pocket_id, None, {"agent_1": "oracle"}, "follower", episodes=4)
    assert novice["expert_distance"] == 1.0  # a follower is sealed in just the same
    report = against_chance({"expert_distance": 1.5, "unmatched": 1.0}, chance)
    assert report == {
        "expert_distance": 1.5,
        "expert_distance_chance": 1.0,
        "expert_distance_minus_chance": 0.5,
    }


def test_bad_control_settings_raise_config_errors(pocket_id):
    with pytest.raises(ConfigError, match="missing \\['agent_1'\\]"):
        chance_levels(pocket_id, None, {}, episodes=1)
    with pytest.raises(ConfigError, match="novice 'agent_1' is also among the experts"):
        chance_levels(pocket_id, None, {"agent_1": "oracle"}, novice="agent_1")
    with pytest.raises(ConfigError, match="episodes must be >= 1"):
        chance_levels(pocket_id, None, {"agent_1": "oracle"}, episodes=0)
    with pytest.raises(ConfigError, match="lag must be >= 0"):
        FollowerPolicy(lag=-1)


CORRIDOR = ["#########", "#.0.1.2.#", "#.......#", "#########"]


def test_the_follower_walks_the_leaders_trail_onto_its_tiles():
    follower = make_policy("follower")
    assert isinstance(follower, FollowerPolicy) and not follower.is_expert
    assert pickle.loads(pickle.dumps(FollowerPolicy(lag=3, leaders=[1]))).leaders == (1,)
    env = HandMadeEnv(CORRIDOR, n_agents=2, max_steps=14)
    env.reset(seed=0)
    place(env, 0, 1, 1, EAST)
    place(env, 1, 1, 1, EAST)
    entered = []
    for t in range(1, 13):
        action = int(follower.scripted_actions(env.engine, 0)[0])
        _, rewards, *_ = env.step({"agent_0": action, "agent_1": FORWARD if t <= 6 else DONE})
        entered += [t] if rewards["agent_0"] > 0 else []
    # The expert enters tiles 0, 1, 2 at steps 1, 3, 5. The follower waits until the expert's
    # cell of 2 steps before differs from its own (state 3), then walks the trail: each tile
    # 3 steps after the expert, and waits beside it at the end of the corridor.
    assert entered == [4, 6, 8]
    assert env.engine.pos[0].tolist() == [[7, 1], [7, 1]]


def _novice_rows(size: int, novice, episodes: int) -> dict[str, np.ndarray]:
    settings = {"size": size, "max_steps": 100} if size == 7 else {}
    experts = {"agent_1": "oracle", "agent_2": "oracle"}
    rows, agents = play_scripted(
        "MarlGrid-GoalCycle-13x13-3Agents-v0",
        settings,
        {**experts, "agent_0": novice},
        list(experts),
        episodes,
        seed=3,
    )
    return {name: values[:, 0][~np.isnan(values[:, 0])] for name, values in rows.items()}


@pytest.mark.parametrize("size", [7, 13])
def test_follower_is_far_above_chance_and_a_random_walker_at_chance(size):
    follower = _novice_rows(size, FollowerPolicy(0), 32)
    walker = _novice_rows(size, "random", 160)
    # The follower enters almost only tiles an oracle entered a few steps before (share about
    # 1) while the shuffled control stays at what the oracles' pace gives (about 0.75 on 7x7,
    # 0.5 on 13x13 with the window of 10).
    assert follower["repeat_expert"].mean() > 0.9
    assert follower["repeat_expert_excess"].mean() > 0.15
    assert follower["repeat_expert"].mean() > walker["repeat_expert"].mean() + 0.15
    # The walker's per-episode excess has a spread of about 0.3-0.45 over the ~60-100 episodes
    # with entries: its mean lies within 3 standard errors of 0.
    excess = walker["repeat_expert_excess"]
    assert len(excess) >= 40
    assert abs(excess.mean()) < 3 * excess.std(ddof=1) / math.sqrt(len(excess))
    # The old follow metric cannot tell them apart as well: the walker scores high on it.
    assert walker["follow_expert"].mean() > 0.35
