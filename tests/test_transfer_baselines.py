"""``experiments/results/transfer_baselines.py``: scripted policies in agent_0's slot of R6's
transfer conditions."""

from __future__ import annotations

import pytest

from tests.conftest import results_script

transfer_baselines = results_script("transfer_baselines")


def test_scripted_policies_score_what_they_must() -> None:
    primary, alone = transfer_baselines.PRIMARY
    assert transfer_baselines.policies_for(primary) == transfer_baselines.GOAL_CYCLE
    safe = transfer_baselines.measure(primary, "play_safe", 4, 777)
    assert (safe["return"], safe["correct"], safe["wrong"]) == (1.0, 1.0, 0.0)
    oracle = transfer_baselines.measure(alone, "oracle", 4, 777)
    assert oracle["wrong"] == 0.0 and oracle["return"] == oracle["correct"] > 10
    rooms = next(c for c in transfer_baselines.CONDITIONS["social_transfer"]
                 if c.name == "four_rooms/goal_seeker")  # fmt: skip
    assert transfer_baselines.policies_for(rooms) == ("random", "goal_seeker")
    assert transfer_baselines.measure(rooms, "goal_seeker", 4, 777)["return"] == 1.0


def test_one_episode_is_refused(capsys) -> None:
    with pytest.raises(SystemExit):
        transfer_baselines.main(["--episodes", "1"])
    assert "--episodes must be >= 2" in capsys.readouterr().err
