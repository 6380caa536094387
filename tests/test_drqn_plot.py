"""``experiments/results/drqn_plot.py``: the t-intervals of its table and the pre-registered
Welch tests of the 400-step soft-Q correction."""

from __future__ import annotations

import csv
import math
from types import SimpleNamespace

import pytest

pytest.importorskip("scipy")

from tests.conftest import results_script  # noqa: E402

drqn_plot = results_script("drqn_plot")


def runs(finals: list[float], steps_to: list[float]) -> list[SimpleNamespace]:
    return [SimpleNamespace(final=f, steps_to=s) for f, s in zip(finals, steps_to, strict=True)]


def test_t_ci_is_the_student_t_half_width() -> None:
    mean, half = drqn_plot.t_ci([1.0, 2.0, 3.0, float("nan")])
    assert mean == pytest.approx(2.0)
    assert half == pytest.approx(4.303 * 1.0 / math.sqrt(3), rel=1e-3)  # t(0.975, 2 df)
    assert math.isnan(drqn_plot.t_ci([5.0])[1])


def test_cl400_welch_tests_and_the_not_tested_rule(tmp_path) -> None:
    nan = float("nan")
    drqn = runs([60.0, 62.0, 58.0, 61.0, 59.0], [40e3, 50e3, nan, nan, nan])
    dqn = runs([300.0, 310.0, 290.0, 305.0, 295.0], [nan] * 5)
    out = tmp_path / "welch.csv"
    drqn_plot.write_cl400_welch(out, drqn, dqn)
    with out.open(newline="") as f:
        rows = {r["metric"]: r for r in csv.DictReader(f)}
    final = rows["final_length"]
    assert (final["n_drqn"], final["n_dqn"], final["test"]) == ("5", "5", "tested")
    assert float(final["welch_t"]) < 0 and float(final["p"]) < 1e-4
    steps = rows["steps_to_threshold"]
    assert (steps["n_drqn"], steps["n_dqn"]) == ("2", "0")
    assert steps["test"].startswith("not tested")
