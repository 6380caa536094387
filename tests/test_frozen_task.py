"""A frozen expert from another task (another map size or number of tiles) is played, as a
transfer, with a warning naming the difference."""

from __future__ import annotations

from pathlib import Path

import pytest

pytest.importorskip("torch")

import marlgrid  # noqa: E402
from marlgrid.agents.training.roles import other_task  # noqa: E402

EXPERTS = Path(__file__).resolve().parents[1] / "experiments" / "experts"
FOUR_TILES = EXPERTS / "goal_cycle_7x7_4tiles_3agents_expert_6m_seed2.pt"
THREE_TILES_13 = EXPERTS / "goal_cycle_13x13_3agents_expert_seed1.pt"


def _vec(**settings):
    return marlgrid.make_vec("MarlGrid-GoalCycle-13x13-3Agents-v0", 1, **settings)


def test_a_frozen_expert_of_another_task_is_named_and_its_own_task_is_not():
    assert other_task(str(FOUR_TILES), _vec(size=7, n_goals=4)) is None
    assert "n_goals=4; here it plays n_goals=3" in other_task(str(FOUR_TILES), _vec(size=7))
    assert other_task(str(THREE_TILES_13), _vec()) is None
    assert "size=13; here it plays size=7" in other_task(str(THREE_TILES_13), _vec(size=7))
