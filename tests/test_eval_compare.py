"""``experiments/results/eval_compare.py``: per-arm t-intervals and Welch's tests from the
evaluation CSVs of ``experts_eval.py``."""

from __future__ import annotations

import csv
from pathlib import Path

import pytest

pytest.importorskip("scipy")

from marlgrid.analysis.stats import t_interval, welch  # noqa: E402
from tests.conftest import results_script  # noqa: E402

eval_compare = results_script("eval_compare")

SOLO = [1.0, 1.2, 0.9]
SOCIAL = [6.0, 8.5, 7.0]


def eval_csv(path: Path, rows: list[tuple[str, str, float, float]]) -> Path:
    with path.open("w", newline="") as f:
        writer = csv.writer(f)
        writer.writerow(["run", "mode", "episodes", "return", "rewards"])
        for run, mode, ret, rewards in rows:
            writer.writerow([run, mode, 200, ret, rewards])
    return path


def read(path: str) -> list[dict[str, str]]:
    with open(path, newline="") as f:
        return list(csv.DictReader(f))


@pytest.fixture
def csvs(tmp_path: Path) -> list[Path]:
    solo = [(f"runs/r1/solo/seed_{k}", "greedy", v, v + 1) for k, v in enumerate(SOLO, 1)]
    solo += [("runs/r1/solo/seed_1", "sampled", 0.5, 1.5)]  # another mode: left out
    social = [(f"runs/r2/social/seed_{k}", "greedy", v, v + 2) for k, v in enumerate(SOCIAL, 1)]
    return [eval_csv(tmp_path / "r1.csv", solo), eval_csv(tmp_path / "r2.csv", social)]


def test_arms_from_two_pages_get_their_intervals_and_welch(csvs, tmp_path):
    out = tmp_path / "cmp"
    eval_compare.main(
        [*map(str, csvs), "--metric", "return", "--metric", "rewards"]
        + ["--welch", "r2/social", "r1/solo", "--out", str(out)]
    )
    rows = {(r["arm"], r["metric"]): r for r in read(f"{out}_t.csv")}
    solo = rows[("r1/solo", "return")]
    assert solo["seeds"] == "3" and solo["per_seed"] == "1:1 2:1.2 3:0.9"
    assert float(solo["t_low"]) == pytest.approx(t_interval(SOLO)[0], abs=1e-4)
    assert float(rows[("r2/social", "rewards")]["mean"]) == pytest.approx(
        sum(SOCIAL) / 3 + 2, abs=1e-4
    )
    (test, rewards) = read(f"{out}_welch.csv")
    assert (test["a"], test["b"], test["metric"]) == ("r2/social", "r1/solo", "return")
    assert float(test["p"]) == pytest.approx(welch(SOCIAL, SOLO)[1], rel=1e-3)
    assert float(test["welch_t"]) > 0 and rewards["metric"] == "rewards"


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--welch", "r2/social", "r1/nope"], "--welch arm 'r1/nope' is not in the CSVs"),
        (["--metric", "reward"], "has no column 'reward'"),
        (["--mode", "sampled", "--metric", "return"], None),  # one seed of one arm: fine
    ],
)
def test_bad_arms_and_columns_are_refused_before_anything_is_written(csvs, tmp_path, args, message):
    out = tmp_path / "cmp"
    if message is None:
        eval_compare.main([*map(str, csvs), *args, "--out", str(out)])
        (row,) = read(f"{out}_t.csv")
        assert row["arm"] == "r1/solo" and row["t_low"] == "nan"
        return
    with pytest.raises(SystemExit, match=message):
        eval_compare.main([*map(str, csvs), *args, "--out", str(out)])
    assert not list(tmp_path.glob("cmp_*"))


def test_a_run_path_without_its_arm_or_seed_is_refused(tmp_path):
    bad = eval_csv(tmp_path / "bad.csv", [("seed_1", "greedy", 1.0, 1.0)])
    with pytest.raises(SystemExit, match="is not a .../<page>/<arm>/seed_<k> path"):
        eval_compare.main([str(bad), "--out", str(tmp_path / "x")])
    twice = eval_csv(tmp_path / "twice.csv", [("r/a/seed_1", "greedy", 1.0, 1.0)] * 2)
    with pytest.raises(SystemExit, match="r/a seed 1 appears twice"):
        eval_compare.main([str(twice), "--out", str(tmp_path / "x")])
    with pytest.raises(SystemExit, match="no rows of mode 'sampled'"):
        eval_compare.main([str(twice), "--mode", "sampled", "--out", str(tmp_path / "x")])
