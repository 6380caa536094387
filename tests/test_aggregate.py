"""``marlgrid.analysis`` and ``experiments/aggregate.py``: seeded runs in, curves and tables out.

The synthetic sweeps are written the way ``experiments/train.py`` writes them: one
``<overrides>/seed_<k>`` directory per job holding ``metrics.csv``, ``train.log`` and
``.hydra/{config,hydra,overrides}.yaml``, and Hydra's ``multirun.yaml`` at the top.
"""

from __future__ import annotations

import csv
import sys
from pathlib import Path

import numpy as np
import pytest

pytest.importorskip("scipy")
yaml = pytest.importorskip("yaml")

from experiments.aggregate import main  # noqa: E402
from marlgrid.analysis import (  # noqa: E402
    AnalysisError,
    aggregate,
    align,
    bands,
    find_runs,
    iqm,
    step_grid,
)

ROOT = Path(__file__).resolve().parents[1]
#: the keys Hydra leaves out of a run directory's name, as conf/train.yaml sets them
EXCLUDE = yaml.safe_load((ROOT / "conf" / "train.yaml").read_text())["hydra"]["job"]["config"][
    "override_dirname"
]["exclude_keys"]
STEPS = [1024, 2048, 3072, 4096]
#: per condition (agent.lr) and seed: the logged charts/episodic_return
CURVES = {
    "0.001": {0: [9.0, 9.0, 1.0, 1.0], 1: [9.0, 9.0, 3.0, 3.0]},
    "0.0003": {0: [0.5, 0.5, 0.5, 0.5], 1: [0.5, 0.5, 0.5, 0.5]},
}


def write_run(
    sweep: Path,
    lr: str,
    seed: int,
    values: list[float] | None,
    *,
    total: int = 4096,
    complete: bool = True,
    name: str = "demo",
) -> Path:
    """One run directory as the trainer and experiments/train.py leave it."""
    task = ["run=smoke", "logger.progress=False", f"agent.lr={lr}", f"seed={seed}"]
    defining = sorted(o for o in task if o.partition("=")[0] not in EXCLUDE)
    run = sweep / ",".join(defining) / f"seed_{seed}"
    (run / ".hydra").mkdir(parents=True)
    config = {"name": name, "seed": seed, "total_timesteps": total, "agent": {"lr": float(lr)}}
    hydra = {
        "hydra": {
            "job": {
                "override_dirname": ",".join(defining),
                "config": {"override_dirname": {"exclude_keys": EXCLUDE}},
            },
            "runtime": {"choices": {"agent": "ppo_lstm", "env": "goal_cycle_7x7"}},
        }
    }
    (run / ".hydra" / "config.yaml").write_text(yaml.safe_dump(config))
    (run / ".hydra" / "hydra.yaml").write_text(yaml.safe_dump(hydra))
    (run / ".hydra" / "overrides.yaml").write_text(yaml.safe_dump(task))
    if values is None:  # started, then failed before its first update
        return run
    with (run / "metrics.csv").open("w", newline="") as f:
        writer = csv.writer(f)
        writer.writerow(["step", "losses/value_loss", "charts/episodic_return", "charts/episodes"])
        for step, value in zip(STEPS, values, strict=False):
            writer.writerow([step, 0.5, value, 4.0])
    last = STEPS[len(values) - 1]
    log = f"2026-01-01 00:00:00,000 INFO training {name} in {run}: 4 updates of 1024 env steps\n"
    if complete:
        log += f"2026-01-01 00:00:09,000 INFO run complete at update 4 (step {last})\n"
    (run / "train.log").write_text(log)
    return run


def write_sweep(tmp_path: Path, lrs=("0.001", "0.0003"), seeds=(0, 1)) -> Path:
    """``multirun.yaml`` of ``-m agent.lr=... seed=...`` and every job's run directory."""
    sweep = tmp_path / "multirun" / "demo"
    sweep.mkdir(parents=True)
    record = {
        "name": "demo",
        "seed": 0,
        "hydra": {
            "sweeper": {"_target_": "hydra._internal.core_plugins.basic_sweeper.BasicSweeper"},
            "overrides": {
                "task": [
                    "run=smoke",
                    "logger.progress=false",
                    f"agent.lr={','.join(lrs)}",
                    f"seed={','.join(map(str, seeds))}",
                ]
            },
            "job": {"config": {"override_dirname": {"exclude_keys": EXCLUDE}}},
        },
    }
    (sweep / "multirun.yaml").write_text(yaml.safe_dump(record))
    for lr in lrs:
        for seed in seeds:
            write_run(sweep, lr, seed, CURVES.get(lr, {}).get(seed, [1.0] * 4))
    return sweep


def read_csv(path: Path) -> list[dict[str, str]]:
    with path.open(newline="") as f:
        return list(csv.DictReader(f))


def by_condition(rows: list[dict[str, str]]) -> dict[str, dict[str, str]]:
    return {r["condition"]: r for r in rows}


def run_cli(args: list[str], capsys) -> tuple[str, str]:
    main(args)
    out = capsys.readouterr()
    return out.out, out.err


# -- the table and the figure ------------------------------------------------------------------


def test_two_seeds_two_conditions_table_by_hand(tmp_path, capsys):
    sweep = write_sweep(tmp_path)
    out = tmp_path / "results" / "demo"
    stdout, stderr = run_cli([str(sweep), "--last", "2", "--out", str(out)], capsys)

    # lr=0.001: finals 1 (seed 0) and 3 (seed 1): the mean is the midpoint; with two seeds every
    # percentile-bootstrap resample mean lies in [1, 3] and each end has probability 1/4 > 2.5%.
    # lr=0.0003: constant curves, so the interval collapses to the value.
    rows = by_condition(read_csv(Path(f"{out}_final.csv")))
    assert set(rows) == {"agent.lr=0.001", "agent.lr=0.0003"}  # shared overrides left out
    a, b = rows["agent.lr=0.001"], rows["agent.lr=0.0003"]
    assert (a["n_seeds"], a["seeds"]) == ("2", "0;1")
    expected_a = {"mean": 2.0, "mean_ci_low": 1.0, "mean_ci_high": 3.0, "iqm": 2.0,
                  "iqm_ci_low": 1.0, "iqm_ci_high": 3.0}  # fmt: skip
    expected_b = dict.fromkeys(expected_a, 0.5)
    assert {k: float(a[k]) for k in expected_a} == pytest.approx(expected_a)
    assert {k: float(b[k]) for k in expected_b} == pytest.approx(expected_b)
    assert "agent.lr=0.001" in a["key"] and "run=smoke" in a["key"] and "seed" not in a["key"]

    table = Path(f"{out}.md").read_text()
    assert "| condition | n seeds | mean (final = mean of last 2 logged `episodic_return`) |" in (
        table
    )
    assert "| agent.lr=0.001 | 2 | 2.000 | [1.000, 3.000] | 2.000 | [1.000, 3.000] |" in table
    assert "| agent.lr=0.0003 | 2 | 0.500 | [0.500, 0.500] | 0.500 | [0.500, 0.500] |" in table
    assert "| agent.lr=0.001 | 2 | 2.000 |" in stdout
    assert "left out" not in stderr and "missing" not in stderr

    runs = read_csv(Path(f"{out}_runs.csv"))
    assert [(r["condition"], r["seed"], float(r["final"])) for r in runs] == [
        ("agent.lr=0.0003", "0", 0.5), ("agent.lr=0.0003", "1", 0.5),
        ("agent.lr=0.001", "0", 1.0), ("agent.lr=0.001", "1", 3.0),
    ]  # fmt: skip

    # The curves: the logged steps are the grid; at step 1024 both seeds
    # of lr=0.001 are 9 (the interval collapses), at 4096 they are 1 and 3.
    curves = [r for r in read_csv(Path(f"{out}_curves.csv")) if r["condition"] == "agent.lr=0.001"]
    assert [float(r["step"]) for r in curves] == STEPS
    first, last = curves[0], curves[-1]
    assert [float(first[k]) for k in ("mean", "mean_ci_low", "mean_ci_high")] == [9.0, 9.0, 9.0]
    assert [float(last[k]) for k in ("mean", "mean_ci_low", "mean_ci_high")] == [2.0, 1.0, 3.0]

    png = Path(f"{out}.png")
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    from matplotlib.image import imread

    pixels = imread(png)
    assert pixels.ndim == 3 and pixels.shape[0] > 200 and pixels.shape[1] > 400
    assert pixels.std() > 0  # not a blank image
    assert f"![curves]({png.name})" in table


def test_final_of_the_last_logged_value_and_iqm_over_four_runs(tmp_path):
    sweep = write_sweep(tmp_path)
    result = aggregate([sweep], "episodic_return", group_by=["agent"], last=1, resamples=1000)
    assert result.metric == "charts/episodic_return"  # the short name found its column
    (row,) = result.finals
    assert row.label == "agent=ppo_lstm" and row.stats["n"] == 4  # the config-group choice
    # finals 1, 3, 0.5, 0.5: mean 1.25; IQM drops one value at each end: mean(0.5, 1) = 0.75
    assert sorted(row.values) == [0.5, 0.5, 1.0, 3.0]
    assert row.stats["mean"] == pytest.approx(1.25)
    assert row.stats["iqm"] == pytest.approx(0.75)
    assert 0.5 <= row.stats["mean_low"] < 1.25 < row.stats["mean_high"] <= 3.0
    assert result.definition == "final = last logged `episodic_return`"


def test_group_by_a_config_value(tmp_path):
    sweep = write_sweep(tmp_path)
    result = aggregate([sweep], group_by=["agent.lr"], resamples=1000)  # from config.yaml
    assert [c.label for c in result.conditions] == ["agent.lr=0.0003", "agent.lr=0.001"]
    with pytest.raises(AnalysisError, match="group-by key 'agent.gamma' is not set in"):
        aggregate([sweep], group_by=["agent.gamma"])


# -- runs missing or unfinished are reported ------------------------------------------------------


def test_a_missing_seed_is_reported(tmp_path, capsys):
    sweep = write_sweep(tmp_path)
    gone = sweep / "agent.lr=0.0003,run=smoke" / "seed_1"
    for f in sorted(gone.rglob("*"), reverse=True):
        f.rmdir() if f.is_dir() else f.unlink()
    gone.rmdir()
    out = tmp_path / "demo"
    _, stderr = run_cli([str(sweep), "--out", str(out)], capsys)
    assert f"missing: {gone} (name=demo,agent.lr=0.0003,run=smoke, seed 1): no such run" in stderr
    rows = by_condition(read_csv(Path(f"{out}_final.csv")))
    assert rows["agent.lr=0.0003"]["n_seeds"] == "1"
    assert float(rows["agent.lr=0.0003"]["mean"]) == 0.5
    assert rows["agent.lr=0.0003"]["mean_ci_low"] == "nan"  # one seed: no interval
    page = Path(f"{out}.md").read_text()
    assert "## Runs left out or missing" in page and f"missing: {gone}" in page
    assert "| agent.lr=0.0003 | 1 | 0.500 | n/a |" in page
    with pytest.raises(SystemExit) as exit_info:
        main([str(sweep), "--out", str(out), "--strict"])
    assert exit_info.value.code == 1


def test_missing_runs_are_found_without_a_sweep_record(tmp_path):
    sweep = write_sweep(tmp_path)
    (sweep / "multirun.yaml").unlink()
    write_run(sweep, "0.01", 0, [1.0] * 4)  # a third condition with only seed 0
    result = aggregate([sweep], resamples=1000)
    assert [(m.key[1], m.seed) for m in result.missing] == [("agent.lr=0.01", 1)]


def test_a_whole_condition_of_the_sweep_missing_is_reported(tmp_path):
    sweep = write_sweep(tmp_path)
    record = yaml.safe_load((sweep / "multirun.yaml").read_text())
    record["hydra"]["overrides"]["task"][2] = "agent.lr=0.001,0.0003,0.01"
    (sweep / "multirun.yaml").write_text(yaml.safe_dump(record))
    pytest.importorskip("hydra")
    missing = find_runs([sweep]).missing
    assert sorted((m.key, m.seed) for m in missing) == [
        (("name=demo", "agent.lr=0.01", "run=smoke"), 0),
        (("name=demo", "agent.lr=0.01", "run=smoke"), 1),
    ]
    assert missing[0].path == sweep / "agent.lr=0.01,run=smoke" / "seed_0"


def test_unfinished_and_failed_runs_are_left_out_and_named(tmp_path, capsys):
    sweep = tmp_path / "sweep"
    for seed in (0, 1):
        write_run(sweep, "0.001", seed, [2.0] * 4)
    short = write_run(sweep, "0.001", 2, [4.0, 4.0], total=4096, complete=False)
    failed = write_run(sweep, "0.001", 3, None)
    out = tmp_path / "page"
    _, stderr = run_cli([str(sweep), "--out", str(out)], capsys)
    assert f"left out: {short}: unfinished: last logged step 2048 of 4096" in stderr
    assert f"left out: {failed}: no metrics.csv: the run never logged an update" in stderr
    assert read_csv(Path(f"{out}_final.csv"))[0]["n_seeds"] == "2"

    run_cli([str(sweep), "--out", str(out), "--include-unfinished"], capsys)
    row = read_csv(Path(f"{out}_final.csv"))[0]
    assert row["seeds"] == "0;1;2" and float(row["mean"]) == pytest.approx((2 + 2 + 4) / 3)
    curves = read_csv(Path(f"{out}_curves.csv"))
    # the short run ends at 2048: no extrapolation, so later points have 2 of 3 runs, no mean
    assert [int(r["n"]) for r in curves] == [3, 3, 2, 2]
    assert float(curves[1]["mean"]) == pytest.approx(8 / 3) and curves[2]["mean"] == "nan"


def test_a_single_run_directory(tmp_path):
    run = write_run(tmp_path / "sweep", "0.001", 0, [1.0, 2.0, 3.0, 4.0])
    result = aggregate([run], last=2, resamples=1000)
    (row,) = result.finals
    assert row.stats["n"] == 1 and row.stats["mean"] == 3.5 and np.isnan(row.stats["mean_low"])


# -- clear errors -----------------------------------------------------------------------------


def test_no_runs_found(tmp_path, capsys):
    with pytest.raises(SystemExit) as exit_info:
        main([str(tmp_path), "--out", str(tmp_path / "x")])
    assert exit_info.value.code == 2
    assert f"no runs found in {tmp_path}" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        main([str(tmp_path / "nope"), "--out", str(tmp_path / "x")])
    assert f"{tmp_path / 'nope'} does not exist" in capsys.readouterr().err


def test_an_unknown_metric_names_the_available_columns(tmp_path, capsys):
    sweep = write_sweep(tmp_path)
    with pytest.raises(SystemExit) as exit_info:
        main([str(sweep), "--metric", "return_mean", "--out", str(tmp_path / "x")])
    assert exit_info.value.code == 2
    err = capsys.readouterr().err
    assert "metric 'return_mean' is not in metrics.csv of any run" in err
    assert "['charts/episodes', 'charts/episodic_return', 'losses/value_loss']" in err
    assert not (tmp_path / "x.png").exists()


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--last", "0"], "last must be an integer >= 1, got 0"),
        (["--points", "1"], "points must be an integer >= 2, got 1"),
        (["--resamples", "10"], "bootstrap resamples must be an integer >= 100, got 10"),
        (["--confidence", "1.5"], "confidence level must be in (0, 1), got 1.5"),
    ],
)
def test_bad_options_are_named(tmp_path, capsys, args, message):
    sweep = write_sweep(tmp_path)
    with pytest.raises(SystemExit):
        main([str(sweep), "--out", str(tmp_path / "x"), *args])
    assert message in capsys.readouterr().err


def test_the_rliable_backend_without_rliable_says_how_to_install(tmp_path, monkeypatch):
    monkeypatch.setitem(sys.modules, "rliable", None)  # import rliable raises ImportError
    with pytest.raises(AnalysisError, match=r"pip install 'marlgrid\[rliable\]'"):
        bands(np.array([1.0, 3.0]), backend="rliable")


def test_the_rliable_backend_matches_the_hand_values():
    pytest.importorskip("rliable")
    b = bands(np.array([[1.0, 0.5], [3.0, 0.5]]), backend="rliable", resamples=2000)
    assert [b.mean_low[0], b.mean_high[0], b.mean_low[1], b.mean_high[1]] == [1, 3, 0.5, 0.5]


# -- the pieces -------------------------------------------------------------------------------


def test_align_interpolates_and_never_extrapolates():
    curves = [(np.array([0.0, 10.0]), np.array([0.0, 10.0])), (np.array([5.0]), np.array([7.0]))]
    assert step_grid(curves, points=3).tolist() == [0, 5, 10]  # every logged step
    grid = step_grid(curves, points=2)  # more logged steps than points: an even grid
    assert grid.tolist() == [0, 10]
    aligned = align(curves, np.array([-1.0, 0.0, 5.0, 10.0, 15.0]))
    assert np.array_equal(aligned[0], [np.nan, 0, 5, 10, np.nan], equal_nan=True)
    assert np.array_equal(aligned[1], [np.nan, np.nan, 7, np.nan, np.nan], equal_nan=True)


def test_iqm_is_the_mean_of_the_middle_half():
    values = np.array([1, 2, 3, 4, 100, 5, 6, 7], dtype=float)
    assert iqm(values) == pytest.approx(4.5)  # 3, 4, 5, 6
    assert iqm(values[:3]) == pytest.approx(2.0)  # fewer than 4: nothing is dropped


@pytest.mark.parametrize("method", ["percentile", "bca"])
def test_bands_by_hand(method):
    data = np.array([[2.0, 1.0, 5.0, np.nan], [2.0, 3.0, 5.0, 1.0]])
    b = bands(data, method=method, resamples=2000)
    assert b.n.tolist() == [2, 2, 2, 1]
    assert b.mean[:3].tolist() == [2.0, 2.0, 5.0] and np.isnan(b.mean[3])
    assert [b.mean_low[0], b.mean_high[0], b.iqm_low[2], b.iqm_high[2]] == [2, 2, 5, 5]
    assert b.mean_low[1] >= 1.0 and b.mean_high[1] <= 3.0
    assert np.isnan(b.mean_low[3]) and np.isnan(b.iqm_high[3])
    same = bands(data, method=method, resamples=2000)
    assert np.array_equal(b.mean_low, same.mean_low, equal_nan=True)  # seeded: reproducible


def test_plot_curves_reads_through_the_shared_reader(tmp_path):
    from experiments import plot_curves
    from marlgrid.analysis import curves

    assert plot_curves.read_curve is curves.read_curve and plot_curves.smooth is curves.smooth


# -- end to end -------------------------------------------------------------------------------


@pytest.mark.slow
def test_a_real_sweep_end_to_end(tmp_path, capsys):
    """Hydra multirun of experiments/train.py (2 conditions x 2 seeds, 2 updates each), then the
    aggregate of its value loss and of a greedy evaluation of each final checkpoint."""
    import os
    import subprocess

    pytest.importorskip("torch")
    pytest.importorskip("hydra")
    sweep = tmp_path / "sweep"
    tiny = ["run=smoke", "env.num_envs=4", "agent.num_steps=16", "total_timesteps=128",
            "logger.progress=false", "logger.tensorboard=false"]  # fmt: skip
    proc = subprocess.run(
        [sys.executable, str(ROOT / "experiments" / "train.py"), "-m", *tiny,
         "agent.lr=0.001,0.0003", "seed=0,1", f"hydra.sweep.dir={sweep}"],
        capture_output=True, text=True, cwd=ROOT, timeout=300,
        env={**os.environ, "OMP_NUM_THREADS": "1"},
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr[-2000:]
    out = tmp_path / "page"
    _, stderr = run_cli([str(sweep), "--metric", "value_loss", "--out", str(out)], capsys)
    assert "left out" not in stderr and "missing" not in stderr
    rows = by_condition(read_csv(Path(f"{out}_final.csv")))
    assert set(rows) == {"agent.lr=0.001", "agent.lr=0.0003"}
    for label, row in rows.items():
        finals = [float(r["final"]) for r in read_csv(Path(f"{out}_runs.csv"))
                  if r["condition"] == label]  # fmt: skip
        assert row["n_seeds"] == "2" and float(row["mean"]) == pytest.approx(np.mean(finals))
        assert float(row["mean_ci_low"]) == pytest.approx(min(finals))
    run_cli([str(sweep), "--metric", "value_loss", "--evaluate", "2", "--greedy",
             "--out", str(out)], capsys)  # fmt: skip
    assert "mean return of 2 greedy episodes" in Path(f"{out}.md").read_text()
    assert len(list(sweep.glob("*/seed_*/aggregate_eval_greedy_2ep_seed12345.json"))) == 4


def test_tables_keep_three_significant_digits_of_small_values():
    from marlgrid.analysis.report import FinalRow, markdown_table, table_digits

    def row(label: str, mean: float, low: float, high: float) -> FinalRow:
        stats = {"n": 3, "mean": mean, "mean_low": low, "mean_high": high}
        stats.update(iqm=mean, iqm_low=low, iqm_high=high)
        return FinalRow(label, (label,), [0, 1, 2], [], np.zeros(3), stats)

    kl = [row("on", 0.000462, 0.000391, 0.000524), row("off", 0.000194, 0.000143, 0.000285)]
    assert table_digits(kl) == 6
    assert "| on | 3 | 0.000462 | [0.000391, 0.000524] | 0.000462 |" in markdown_table(kl, "KL")
    returns = [row("a", 16.5, 15.2, 17.6), row("b", 0.05, 0.01, 0.09)]
    assert table_digits(returns) == 3
    assert table_digits([row("z", 0.0, 0.0, float("nan"))]) == 3
    assert "| a | 3 | 16.50 |" in markdown_table(returns, "return", digits=2)


def test_a_condition_holding_a_seed_twice_is_reported(tmp_path, capsys):
    sweep = write_sweep(tmp_path)  # agent.lr=0.001 and 0.0003, seeds 0 and 1, all named demo
    out = tmp_path / "results" / "pooled"
    _, stderr = run_cli([str(sweep), "--group-by", "name", "--out", str(out)], capsys)
    repeated = [line for line in stderr.splitlines() if line.startswith("repeated seed:")]
    assert len(repeated) == 2, stderr
    assert "name=demo holds seed 0 2 times" in repeated[0] and "agent.lr=0.001" in repeated[0]
    assert "- repeated seed: name=demo holds seed 1 2 times" in out.with_suffix(".md").read_text()
    _, stderr = run_cli([str(sweep), "--out", str(tmp_path / "results" / "split")], capsys)
    assert "repeated seed" not in stderr
