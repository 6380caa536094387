"""``marlgrid.analysis.runs.wall_seconds`` and ``last_step``: a run's training time and steps
from the files it wrote."""

from __future__ import annotations

from pathlib import Path

import pytest

from marlgrid.analysis.runs import last_step, wall_seconds

LOG = """\
2026-12-05 09:00:00,000 INFO training x in /r: 10 updates of 2048 env steps
2026-12-05 09:00:30,500 INFO checkpoint /r/checkpoints/ckpt_1.pt (update 1, step 2048)
2026-12-05 09:01:40,000 INFO checkpoint /r/checkpoints/ckpt_2.pt (update 2, step 4096)
a traceback line without a time
2026-12-05 11:00:00,000 INFO resumed from /r/checkpoints/ckpt_2.pt
2026-12-05 11:00:20,000 INFO run complete: 20480 env steps
2026-12-05 12:00:00,000 INFO run /r is complete: nothing to do
"""


def test_sessions_are_summed_and_the_time_between_them_is_not(tmp_path: Path):
    (tmp_path / "train.log").write_text(LOG)
    assert wall_seconds(tmp_path) == pytest.approx(100.0 + 20.0)


def test_a_run_trained_on_to_a_longer_budget_does_not_count_the_wait_before_it(tmp_path: Path):
    extended = LOG + (
        "2026-12-05 13:00:00,000 INFO extending the run from 20480 to 40960 steps\n"
        "2026-12-05 13:00:00,100 INFO resumed from /r/checkpoints/ckpt_10.pt\n"
        "2026-12-05 13:00:50,000 INFO run complete: 40960 env steps\n"
    )
    (tmp_path / "train.log").write_text(extended)
    assert wall_seconds(tmp_path) == pytest.approx(100.0 + 20.0 + 50.0)


def test_no_log_is_no_wall_time(tmp_path: Path):
    assert wall_seconds(tmp_path) is None


def test_the_last_logged_step(tmp_path: Path):
    metrics = tmp_path / "metrics.csv"
    metrics.write_text("step,charts/episodic_return\n2048,0.5\n4096.0,0.7\n")
    assert last_step(metrics) == 4096
    metrics.write_text("step,charts/episodic_return\n")
    assert last_step(metrics) is None
