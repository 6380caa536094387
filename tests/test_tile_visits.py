"""``experiments/results/tile_visits.py``: tile entries split into the wrong ones the agent's own
episode had ruled out (a memory failure) and the exploring ones."""

from __future__ import annotations

import marlgrid
from marlgrid.policies import make_policy
from tests.conftest import results_script

tile_visits = results_script("tile_visits")
P = -1.5


def test_a_wrong_entry_is_ruled_out_once_the_episode_showed_it() -> None:
    # the hidden cycle is 0 -> 1 -> 2 -> 0
    entries = [(0, 1.0), (2, P), (2, P), (1, 1.0), (0, P), (2, 1.0), (0, 1.0)]
    labelled = tile_visits.label_entries(entries, n_goals=3)
    assert [e.reward for e in labelled] == [r for _, r in entries]
    # 0 -> 2 first tried (exploring), then repeated (ruled out); after 0 -> 1 the cycle is
    # known (1 can only go to 2), so 1 -> 0 was ruled out too
    assert [e.ruled_out for e in labelled] == [False, False, True, False, True, False, False]


def test_an_unpaid_entry_counts_as_seen_but_is_not_listed() -> None:
    labelled = tile_visits.label_entries([(1, 0.0), (1, P), (2, 1.0)], n_goals=3)
    assert [(e.reward, e.ruled_out) for e in labelled] == [(P, True), (1.0, False)]


def test_the_discoverer_never_repeats_a_ruled_out_mistake_and_random_actions_do() -> None:
    env = marlgrid.make("MarlGrid-GoalCycle-13x13-3Agents-v0", size=7, max_steps=100, n_goals=4)
    rows = {}
    for name in ("discoverer", "random"):
        policies = {a: make_policy(name, 7) for a in env.possible_agents}
        episodes = [tile_visits.episode_entries(env, None, policies, s) for s in range(3)]
        rows[name] = tile_visits.summarize(name, episodes)
    assert rows["discoverer"]["wrong_ruled_out"] == 0.0
    assert rows["discoverer"]["wrong_exploring"] > 0.0  # it does try tiles
    assert rows["discoverer"]["rewards"] > 5.0
    total = rows["random"]["wrong_ruled_out"] + rows["random"]["wrong_exploring"]
    assert total == rows["random"]["penalties"]
