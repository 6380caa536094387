"""``experiments/results/view_chance.py``: the trivial predictors' cell accuracy, the chance
level beside the next-view loss's ``cell_accuracy``."""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest

from tests.conftest import results_script

view_chance = results_script("view_chance")
AGENTS = ["agent_0", "agent_1"]
VEC = SimpleNamespace(possible_agents=AGENTS)
ROOT = Path(__file__).resolve().parents[1]


def _step(pairs, views, active, ended=None, final=None, respawned=None):
    obs = {a: {"image": np.asarray(views)} for a in AGENTS}
    infos = {"active": np.asarray(active)}
    if respawned is not None:
        infos["respawned"] = np.asarray(respawned)
    if ended is not None:
        infos["_final_obs"] = np.asarray(ended)
        infos["final_obs"] = {a: {"image": np.asarray(final)} for a in AGENTS}
    out = pairs.after_step(VEC, obs, infos)
    assert out == (obs, infos)  # the editor changes nothing


def _views(*cells):
    """Two envs' 1x2 views of one channel: ``cells`` = ((a, b), (c, d))."""
    return np.asarray(cells).reshape(2, 1, 2, 1)


def test_pairs_follow_the_loss_mask_and_an_ended_episode_targets_its_final_view() -> None:
    pairs = view_chance.ViewPairs("agent_1")
    on = [[True, True], [True, True]]
    _step(pairs, _views((1, 2), (3, 4)), on)
    # env 0's episode ended: its target is the final view (1, 2), not the reset's (9, 9)
    _step(pairs, _views((9, 9), (3, 5)), on, ended=[True, False], final=_views((1, 2), (0, 0)))
    # agent_1 out of play in env 1 at this step: no pair there
    _step(pairs, _views((9, 8), (6, 6)), [[True, True], [True, False]])
    # back in play after being out: the step before was out of play, so no pair either
    _step(pairs, _views((9, 8), (6, 6)), on, respawned=[[False, False], [False, True]])
    got = pairs.scores()
    assert got["pairs"] == 4  # (1,2)->(1,2), (3,4)->(3,5), (9,9)->(9,8), (9,8)->(9,8)
    assert got["copy"] == pytest.approx(6 / 8)
    # the most common id per cell: (9 or 1..., 8): cell 0 ids [1,3,9,9] -> 9; cell 1 [2,5,8,8] -> 8
    assert got["constant"] == pytest.approx(4 / 8)


def test_a_kept_agent_plays_and_most_of_its_view_stays_for_a_step() -> None:
    agent = ROOT / "experiments/results/social_r6/agents/r3_social_aux_seed_1.pt"
    row = view_chance.measure(agent, steps=160, seed=3)
    assert row["agent"] == "agent_0"
    assert 0 < row["pairs"] <= 9 * 16  # the first step has no pair
    assert 0.0 <= row["constant"] <= 1.0 and 0.0 <= row["copy"] <= 1.0
    assert row["copy"] > 0.5  # most of a 7x7 view stays as it was for a step


def test_too_few_steps_is_refused_before_anything_plays(capsys) -> None:
    with pytest.raises(SystemExit):
        view_chance.main(["nothing.pt", "--steps", "3"])
    assert "--steps 3" in capsys.readouterr().err
