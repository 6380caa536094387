"""``experiments/results/tile_memory_probe.py``: its AUC, its logistic probe and the episode
loop it shares with ``tile_visits.py`` (the step at which each entry's state is read)."""

from __future__ import annotations

import numpy as np
import pytest

import marlgrid
from marlgrid.policies import make_policy
from tests.conftest import results_script

probe = results_script("tile_memory_probe")
tile_visits = results_script("tile_visits")


def test_roc_auc_counts_pairs_and_half_ties() -> None:
    labels = np.array([True, True, False, False])
    assert probe.roc_auc(np.array([0.9, 0.8, 0.1, 0.2]), labels) == 1.0
    assert probe.roc_auc(np.array([0.1, 0.2, 0.9, 0.8]), labels) == 0.0
    # pairs (pos, neg): (0.5, 0.5) tie, (0.5, 0.1) win, (0.3, 0.5) loss, (0.3, 0.1) win
    assert probe.roc_auc(np.array([0.5, 0.3, 0.5, 0.1]), labels) == pytest.approx(2.5 / 4)
    assert np.isnan(probe.roc_auc(np.array([0.5, 0.3]), np.array([True, True])))


def test_the_probe_finds_a_planted_signal_and_not_noise() -> None:
    rng = np.random.default_rng(0)
    y = rng.random(600) < 0.3
    noise = rng.normal(size=(600, 20))
    planted = noise.copy()
    planted[:, 3] += 3.0 * y  # one feature carries the label (AUC 0.98 in theory)
    signal = probe.probe_auc(planted[:400], y[:400], planted[400:], y[400:])
    chance = probe.probe_auc(noise[:400], y[:400], noise[400:], y[400:])
    assert signal > 0.9
    assert abs(chance - 0.5) < 0.12


def test_entries_are_read_at_the_step_the_agent_chose_to_enter() -> None:
    env = marlgrid.make("MarlGrid-GoalCycle-13x13-3Agents-v0", size=7, max_steps=100, n_goals=4)
    policies = {a: make_policy("discoverer", 7) for a in env.possible_agents}
    seen: list[int] = []
    played = tile_visits.play_episode(env, None, policies, 3, observe=seen.append)
    assert seen == list(range(100))  # once per step, before it is played
    assert played.entries and played.n_goals == 4
    steps = [step for step, _, _ in played.entries]
    assert steps == sorted(steps) and len(set(steps)) == len(steps)
    # the same episode, labelled as tile_visits labels it
    labelled = tile_visits.episode_entries(env, None, policies, 3)
    assert len(labelled) == sum(reward != 0.0 for _, _, reward in played.entries)


def test_the_episode_bootstrap_brackets_the_estimates() -> None:
    rng = np.random.default_rng(1)
    groups = np.repeat(np.arange(40), 10)
    labels = rng.random(400) < 0.4
    state = labels * 1.5 + rng.normal(size=400)  # a better read-out than the control
    control = labels * 0.3 + rng.normal(size=400)
    bands = probe.episode_bootstrap(groups, labels, state, control, resamples=300)
    a, c = probe.roc_auc(state, labels), probe.roc_auc(control, labels)
    assert bands["state"][0] < a < bands["state"][1]
    assert bands["control"][0] < c < bands["control"][1]
    assert bands["difference"][0] < a - c < bands["difference"][1]
    assert bands["difference"][0] > 0.0  # the gap is far beyond resampling noise here


def test_every_result_column_is_one_probe_run_fills() -> None:
    # a run without probes (no ruled-out entry) writes NaN in the same columns as one with them,
    # so a CSV of several runs keeps one header
    filled = ("state", "control", "difference")
    expected = {"state_auc", "control_auc", "state_minus_control", "wrong_test",
                "wrong_only_state_auc", "wrong_only_control_auc",
                *(f"{n}_{end}" for n in filled for end in ("low", "high"))}  # fmt: skip
    assert set(probe.RESULT_COLUMNS) == expected
