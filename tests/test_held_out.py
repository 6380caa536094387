"""Held-out evaluation pairs policies per layout: a goal-cycle episode draws no random numbers
after its reset, so the k-th episode of a batch is on the same layout whatever was played."""

from __future__ import annotations

import numpy as np

import marlgrid
from experiments.results.held_out import ratio_interval
from marlgrid.policies import make_policy


def _layouts(policy_name: str, episodes: int = 3) -> list[np.ndarray]:
    vec = marlgrid.make_vec("MarlGrid-GoalCycle-13x13-3Agents-v0", 4, size=7, max_steps=30)
    vec.reset(seed=123)
    policy = make_policy(policy_name, 5)
    grids = [vec.engine.grid.copy()]
    for _ in range(episodes - 1):
        for _ in range(30):
            actions = np.stack([policy.scripted_actions(vec.engine, k) for k in range(3)], 1)
            vec.step(actions)
        grids.append(vec.engine.grid.copy())
    return grids


def test_later_episodes_have_the_same_layouts_whatever_the_policy():
    for random_grid, oracle_grid in zip(_layouts("random"), _layouts("oracle"), strict=True):
        np.testing.assert_array_equal(random_grid, oracle_grid)


def test_the_paired_ratio_interval_covers_the_ratio_and_narrows_with_pairing():
    rng = np.random.default_rng(0)
    layout = rng.normal(10, 3, 400)  # what each layout allows both policies
    expert, baseline = 0.8 * layout + rng.normal(0, 0.3, 400), layout
    low, high = ratio_interval(expert, baseline)
    assert low < expert.mean() / baseline.mean() < high
    assert high - low < 0.05  # pairing removes the layouts' spread
