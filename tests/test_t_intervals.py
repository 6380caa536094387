"""``experiments/results/t_intervals.py``: t-intervals and Welch's tests from per-run CSVs, and
aggregate's newer outputs (which carry their own t-intervals) left as they are."""

from __future__ import annotations

import csv
from pathlib import Path

import pytest

pytest.importorskip("scipy")

from tests.conftest import results_script  # noqa: E402

t_intervals = results_script("t_intervals")


def write_rows(path: Path, header: list[str], rows: list[list[object]]) -> None:
    with path.open("w", newline="") as f:
        writer = csv.writer(f)
        writer.writerow(header)
        writer.writerows(rows)


def runs_csv(path: Path) -> None:
    rows = [[c, s, f"runs/{c}/seed_{s}", v] for c, vals in (("a", (1, 2, 3)), ("b", (6, 7, 9)))
            for s, v in enumerate(vals)]  # fmt: skip
    write_rows(path, ["condition", "seed", "run", "final"], rows)


def test_old_per_run_csvs_get_intervals_and_aggregates_own_welch_files_are_kept(
    tmp_path, monkeypatch
):
    monkeypatch.setattr(t_intervals, "RESULTS", tmp_path)
    runs_csv(tmp_path / "old_runs.csv")
    write_rows(tmp_path / "old_final.csv", ["condition", "n_seeds", "mean"], [["a", 3, 2.0]])
    runs_csv(tmp_path / "new_runs.csv")
    write_rows(tmp_path / "new_final.csv", ["condition", "mean", "interval"], [["a", 2.0, "t"]])
    kept = "a,b,n_a,n_b,mean_a,mean_b,welch_t,p\na,b,3,3,2.0,7.33,-5.0,0.01\n"
    (tmp_path / "new_welch.csv").write_text(kept)

    t_intervals.main()

    with (tmp_path / "old_t.csv").open() as f:
        t = {r["condition"]: r for r in csv.DictReader(f)}
    assert float(t["a"]["mean"]) == pytest.approx(2.0)
    assert float(t["a"]["t_low"]) < 2.0 < float(t["a"]["t_high"])
    with (tmp_path / "old_welch.csv").open() as f:
        (test,) = list(csv.DictReader(f))
    assert (test["a"], test["b"], test["value"]) == ("a", "b", "final")
    assert float(test["p"]) < 0.05
    assert (tmp_path / "new_welch.csv").read_text() == kept  # aggregate's own file untouched
    assert not (tmp_path / "new_t.csv").exists()
