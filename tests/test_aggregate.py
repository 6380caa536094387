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
from marlgrid.analysis.stats import steps_to, t_interval, welch  # noqa: E402

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


#: the 97.5% quantile of Student's t with 1 degree of freedom (tan(0.475 pi))
T_975_1DF = 12.706204736174704
#: fixed samples for the checks against scipy
FIXED_SAMPLES = [
    [17.38125, 17.49375, 19.140625], [15.2046875, 16.86, 17.565625], [0.9, 1.38, 1.04, 0.2],
    [-0.03, 0.0, 0.23, 0.1, 0.05], [2.5, 2.5, 2.6],
]  # fmt: skip


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

    # lr=0.001: finals 1 (seed 0) and 3 (seed 1): mean 2, sd sqrt(2), so the standard error is
    # 1 and the Student-t interval is 2 +- t(0.975, 1 df) = 2 +- 12.7062. Below 5 seeds there is
    # no IQM interval. lr=0.0003: constant curves, so the interval collapses to the value.
    rows = by_condition(read_csv(Path(f"{out}_final.csv")))
    assert set(rows) == {"agent.lr=0.001", "agent.lr=0.0003"}  # shared overrides left out
    a, b = rows["agent.lr=0.001"], rows["agent.lr=0.0003"]
    assert (a["n_seeds"], a["seeds"], a["per_seed"], a["interval"]) == ("2", "0;1", "1.0;3.0", "t")
    expected_a = {"mean": 2.0, "mean_ci_low": 2 - T_975_1DF, "mean_ci_high": 2 + T_975_1DF}
    expected_b = dict.fromkeys(expected_a, 0.5)
    assert {k: float(a[k]) for k in expected_a} == pytest.approx(expected_a)
    assert {k: float(b[k]) for k in expected_b} == pytest.approx(expected_b)
    assert a["iqm_ci_low"] == a["iqm_ci_high"] == "nan" and a["threshold"] == ""
    assert a["iqm"] == ""  # no IQM below 5 seeds, as the markdown table's "-"
    assert "agent.lr=0.001" in a["key"] and "run=smoke" in a["key"] and "seed" not in a["key"]

    table = Path(f"{out}.md").read_text()
    assert (
        "| condition | n seeds | per seed | mean (final = mean of last 2 logged `episodic_return`) "
        "| 95% CI | interval | IQM | IQM 95% CI |"
    ) in table
    row_a = "| agent.lr=0.001 | 2 | 1.000 / 3.000 | 2.000 | [-10.706, 14.706] | t | - | - |"
    assert row_a in table and row_a in stdout
    assert "| agent.lr=0.0003 | 2 | 0.500 / 0.500 | 0.500 | [0.500, 0.500] | t | - | - |" in table
    assert "Student-t with n - 1 degrees of freedom" in table and "Welch" not in table
    assert "left out" not in stderr and "missing" not in stderr

    runs = read_csv(Path(f"{out}_runs.csv"))
    assert [(r["condition"], r["seed"], float(r["final"]), r["steps_to"]) for r in runs] == [
        ("agent.lr=0.0003", "0", 0.5, ""), ("agent.lr=0.0003", "1", 0.5, ""),
        ("agent.lr=0.001", "0", 1.0, ""), ("agent.lr=0.001", "1", 3.0, ""),
    ]  # fmt: skip
    assert not Path(f"{out}_welch.csv").exists()

    # The curves: the logged steps are the grid; at step 1024 both seeds
    # of lr=0.001 are 9 (the interval collapses), at 4096 they are 1 and 3.
    curves = [r for r in read_csv(Path(f"{out}_curves.csv")) if r["condition"] == "agent.lr=0.001"]
    assert [float(r["step"]) for r in curves] == STEPS
    first, last = curves[0], curves[-1]
    assert [float(first[k]) for k in ("mean", "mean_ci_low", "mean_ci_high")] == [9.0, 9.0, 9.0]
    assert [float(last[k]) for k in ("mean", "mean_ci_low", "mean_ci_high")] == pytest.approx(
        [2.0, 2 - T_975_1DF, 2 + T_975_1DF]
    )

    png = Path(f"{out}.png")
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    from matplotlib.image import imread

    pixels = imread(png)
    assert pixels.ndim == 3 and pixels.shape[0] > 200 and pixels.shape[1] > 400
    assert pixels.std() > 0  # not a blank image
    assert f"![curves]({png.name})" in table


def test_merge_keeps_the_conditions_whose_runs_are_gone(tmp_path, capsys, monkeypatch):
    import shutil

    from experiments import aggregate as aggregate_cli

    sweep = write_sweep(tmp_path)
    out = tmp_path / "results" / "demo"
    files = [Path(f"{out}_{kind}.csv") for kind in ("final", "runs", "curves")]
    run_cli([str(sweep), "--last", "2", "--out", str(out)], capsys)
    first = [f.read_bytes() for f in files]
    run_cli([str(sweep), "--last", "2", "--merge", "--out", str(out)], capsys)
    assert [f.read_bytes() for f in files] == first  # every run here: the same outputs

    runs = {lr: sorted(sweep.glob(f"*agent.lr={lr}*/seed_*")) for lr in ("0.001", "0.0003")}
    for run in runs["0.0003"]:  # a lost session: lr=0.0003's runs are gone,
        shutil.rmtree(run)
    shutil.rmtree(runs["0.001"][1])  # and lr=0.001's seed 1 is trained again, to another end
    write_run(sweep, "0.001", 1, [9.0, 9.0, 5.0, 5.0])
    drawn = []
    monkeypatch.setattr(aggregate_cli, "plot_curves", lambda path, curves, *_: drawn.extend(curves))
    here = [str(r) for r in runs["0.001"]]
    stdout, _ = run_cli([*here, "--last", "2", "--merge", "--out", str(out)], capsys)

    final = by_condition(read_csv(files[0]))
    old = by_condition(list(csv.DictReader(first[0].decode().splitlines())))
    assert final["agent.lr=0.0003"] == old["agent.lr=0.0003"]  # kept as it was
    assert (final["agent.lr=0.001"]["per_seed"], final["agent.lr=0.001"]["mean"]) == (
        "1.0;5.0",
        "3.0",
    )
    assert [r["condition"] for r in read_csv(files[0])] == [r["condition"] for r in old.values()]
    kept_curves = [r for r in read_csv(files[2]) if r["condition"] == "agent.lr=0.0003"]
    assert len(kept_curves) == len(STEPS) and {r["mean"] for r in kept_curves} == {"0.5"}
    assert sorted(c.label for c in drawn) == ["agent.lr=0.0003", "agent.lr=0.001"]
    assert "kept from the earlier outputs (runs not here): agent.lr=0.0003" in stdout
    assert "## Conditions kept from the earlier outputs" in Path(f"{out}.md").read_text()


def test_borrow_adds_a_condition_from_another_pages_outputs(tmp_path, capsys, monkeypatch):
    from experiments import aggregate as aggregate_cli

    sweep = write_sweep(tmp_path)
    runs = {lr: sorted(sweep.glob(f"*agent.lr={lr}*/seed_*")) for lr in ("0.001", "0.0003")}
    other, page = tmp_path / "other", tmp_path / "page"
    run_cli([str(sweep), "--group-by", "agent.lr", "--out", str(other)], capsys)
    label = "agent.lr=0.0003"
    drawn = []
    monkeypatch.setattr(aggregate_cli, "plot_curves", lambda path, curves, *_: drawn.extend(curves))
    here = [str(r) for r in runs["0.001"]]
    args = [*here, "--group-by", "agent.lr", "--merge", "--borrow", str(other), label]
    stdout, _ = run_cli([*args, "--out", str(page)], capsys)
    for kind in ("final", "runs", "curves"):
        ours = [r for r in read_csv(Path(f"{page}_{kind}.csv")) if r["condition"] == label]
        theirs = [r for r in read_csv(Path(f"{other}_{kind}.csv")) if r["condition"] == label]
        assert ours == theirs and ours, kind
    assert sorted(c.label for c in drawn) == ["agent.lr=0.0003", "agent.lr=0.001"]
    assert f"{label} (from {other})" in stdout
    fresh = tmp_path / "fresh"
    with pytest.raises(SystemExit):  # a condition aggregated here is not borrowed over it
        main([*here, "--group-by", "agent.lr", "--merge", "--borrow", str(other),
              "agent.lr=0.001", "--out", str(fresh)])  # fmt: skip
    assert "'agent.lr=0.001' is aggregated here" in capsys.readouterr().err
    assert not list(tmp_path.glob("fresh*"))  # refused before anything was written
    with pytest.raises(SystemExit):
        main([*here, "--merge", "--borrow", str(other), "agent.lr=9", "--out", str(page)])
    assert "has no condition 'agent.lr=9'" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        main([*here, "--borrow", str(other), label, "--out", str(page)])
    assert "--borrow needs --merge" in capsys.readouterr().err


def test_steps_to_a_threshold_and_welch_from_the_command_line(tmp_path, capsys):
    sweep = write_sweep(tmp_path)
    out = tmp_path / "results" / "demo"
    args = [str(sweep), "--last", "2", "--threshold", "2", "--below", "--out", str(out),
            "--welch", "agent.lr=0.001", "agent.lr=0.0003"]  # fmt: skip
    stdout, _ = run_cli(args, capsys)

    # lr=0.001: seed 0 logs 9, 9, 1, 1 (at or below 2 first at step 3072), seed 1 9, 9, 3, 3
    # (never); lr=0.0003 logs 0.5 from the first step on
    runs = [(r["condition"], r["seed"], r["steps_to"]) for r in read_csv(Path(f"{out}_runs.csv"))]
    assert runs == [("agent.lr=0.0003", "0", "1024"), ("agent.lr=0.0003", "1", "1024"),
                    ("agent.lr=0.001", "0", "3072"), ("agent.lr=0.001", "1", "never")]  # fmt: skip
    a = by_condition(read_csv(Path(f"{out}_final.csv")))["agent.lr=0.001"]
    assert (a["threshold"], a["steps_to_reached"], a["steps_to_per_seed"]) == (
        "2.0",
        "1",
        "3072;never",
    )
    assert float(a["steps_to_mean"]) == 3072
    table = Path(f"{out}.md").read_text()
    assert "| IQM 95% CI | env steps to <= 2 (per seed) |" in table
    assert "| t | - | - | 3.07k / never (mean 3.07k; never: 1 of 2) |" in table
    assert "| t | - | - | 1.02k / 1.02k (mean 1.02k; never: 0 of 2) |" in table

    # Welch: 1, 3 against 0.5, 0.5: standard error sqrt(2/2 + 0) = 1, t = 1.5 with 1 df, so
    # p = 1 - 2 atan(1.5) / pi = 0.374334
    (welch_row,) = read_csv(Path(f"{out}_welch.csv"))
    assert (welch_row["a"], welch_row["b"], welch_row["n_a"]) == (
        "agent.lr=0.001",
        "agent.lr=0.0003",
        "2",
    )
    assert float(welch_row["welch_t"]) == pytest.approx(1.5)
    assert float(welch_row["p"]) == pytest.approx(0.374334, abs=1e-6)
    assert "| agent.lr=0.001 | agent.lr=0.0003 | 2 | 2 | 2.000 | 0.500 | 1.500 | 0.374 |" in table
    assert "t = 1.5, p = 0.3743" in stdout

    with pytest.raises(SystemExit):
        main([str(sweep), "--out", str(out), "--welch", "agent.lr=0.01", "agent.lr=0.001"])
    err = capsys.readouterr().err
    assert "--welch condition 'agent.lr=0.01' matches no condition; the conditions are" in err
    with pytest.raises(SystemExit):
        main([str(sweep), "--out", str(out), "--below"])
    assert "--below needs --threshold" in capsys.readouterr().err


def test_five_seeds_add_the_iqm_with_its_bootstrap_interval(tmp_path, capsys):
    sweep = write_sweep(tmp_path, lrs=("0.001",), seeds=(0, 1, 2, 3, 4))
    out = tmp_path / "five"
    run_cli([str(sweep), "--last", "1", "--resamples", "4000", "--out", str(out)], capsys)
    # finals 1, 3, 1, 1, 1 (FIVE_RUNS): mean 1.4, sd sqrt(0.8), so the t-interval is
    # 1.4 +- 2.776445 * 0.4; the IQM is 1 with the bootstrap interval [1, 7/3] worked out above
    row = read_csv(Path(f"{out}_final.csv"))[0]
    assert row["interval"] == "t; IQM bootstrap" and row["per_seed"] == "1.0;3.0;1.0;1.0;1.0"
    assert float(row["mean_ci_low"]) == pytest.approx(1.4 - 2.776445 * 0.4, abs=1e-6)
    assert [float(row[k]) for k in ("iqm", "iqm_ci_low", "iqm_ci_high")] == pytest.approx(
        [1.0, 1.0, 7 / 3]
    )
    table = Path(f"{out}.md").read_text()
    assert (
        "| name=demo,agent.lr=0.001,run=smoke | 5 | 1.000 / 3.000 / 1.000 / 1.000 / 1.000 | "
        "1.400 | [0.289, 2.511] | t; IQM bootstrap | 1.000 | [1.000, 2.333] |"
    ) in table
    assert "percentile, 4000 resamples, scipy, seed 0" in table


def test_final_of_the_last_logged_value_and_iqm_over_four_runs(tmp_path):
    sweep = write_sweep(tmp_path)
    with pytest.raises(AnalysisError, match=r"differ in \['agent.lr'\].*--pool-over agent.lr"):
        aggregate([sweep], "episodic_return", group_by=["agent"], last=1, resamples=1000)
    result = aggregate([sweep], "episodic_return", group_by=["agent"], last=1, resamples=1000,
                       pool_over=["agent.lr"])  # fmt: skip
    assert result.metric == "charts/episodic_return"  # the short name found its column
    (row,) = result.finals
    assert row.label == "agent=ppo_lstm" and row.stats["n"] == 4  # the config-group choice
    # finals 1, 3, 0.5, 0.5: mean 1.25; IQM drops one value at each end: mean(0.5, 1) = 0.75
    assert sorted(row.values) == [0.5, 0.5, 1.0, 3.0]
    assert row.stats["mean"] == pytest.approx(1.25)
    assert row.stats["iqm"] == pytest.approx(0.75)
    # sd = sqrt(4.25 / 3) = 1.19024, so the standard error is 0.59512; t(0.975, 3 df) = 3.18245
    assert row.stats["mean_low"] == pytest.approx(1.25 - 3.182446305 * 0.595119, abs=1e-5)
    assert row.stats["mean_high"] == pytest.approx(1.25 + 3.182446305 * 0.595119, abs=1e-5)
    assert np.isnan(row.stats["iqm_low"])  # 4 seeds: no IQM interval
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
    assert "| agent.lr=0.0003 | 1 | 0.500 | 0.500 | n/a | n/a | - | - |" in page
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
        bands(FIVE_RUNS, backend="rliable")


#: five runs' values whose IQM's percentile-bootstrap interval is known exactly: the IQM of 5
#: values is the mean of the middle 3, so a resample's IQM is 1 with at most one 3 in it
#: (probability 0.737), 5/3 with two, 7/3 with three (P(>= 3) = 0.058) and 3 with four or five
#: (P = 0.0067 < 2.5%): the interval is [1, 7/3]
FIVE_RUNS = np.array([1.0, 3.0, 1.0, 1.0, 1.0])


@pytest.mark.parametrize("backend", ["scipy", "rliable"])
def test_the_iqm_bootstrap_from_five_runs_matches_the_hand_values(backend):
    if backend == "rliable":
        pytest.importorskip("rliable")
    b = bands(np.stack([FIVE_RUNS, np.full(5, 0.5)], axis=1), backend=backend, resamples=4000)
    assert b.iqm.tolist() == [1.0, 0.5]
    assert [b.iqm_low[0], b.iqm_high[0]] == pytest.approx([1.0, 7 / 3])
    assert [b.iqm_low[1], b.iqm_high[1]] == [0.5, 0.5]
    assert np.isnan(bands(FIVE_RUNS[:4], backend=backend).iqm_low[0])  # 4 runs: none


def test_the_auto_backend_is_scipy_without_rliable(monkeypatch):
    from marlgrid.analysis.stats import resolve_backend

    monkeypatch.setitem(sys.modules, "rliable", None)
    assert resolve_backend("auto") == "scipy" and resolve_backend("rliable") == "rliable"
    auto, scipy_band = bands(FIVE_RUNS, backend="auto"), bands(FIVE_RUNS, backend="scipy")
    assert (auto.iqm_low[0], auto.iqm_high[0]) == (scipy_band.iqm_low[0], scipy_band.iqm_high[0])


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


def test_bands_by_hand():
    data = np.array([[2.0, 1.0, 5.0, np.nan], [2.0, 3.0, 5.0, 1.0]])
    b = bands(data, resamples=2000)
    assert b.n.tolist() == [2, 2, 2, 1]
    assert b.mean[:3].tolist() == [2.0, 2.0, 5.0] and np.isnan(b.mean[3])
    assert [b.mean_low[0], b.mean_high[0], b.mean_low[2], b.mean_high[2]] == [2, 2, 5, 5]
    # values 1 and 3: standard error 1, so the interval is 2 +- t(0.975, 1 df)
    assert [b.mean_low[1], b.mean_high[1]] == pytest.approx([2 - T_975_1DF, 2 + T_975_1DF])
    assert np.isnan(b.mean_low[3]) and np.isnan(b.iqm_high[3])
    assert np.isnan(b.iqm_low).all()  # 2 runs: no IQM interval


@pytest.mark.parametrize("method", ["percentile", "bca"])
def test_the_iqm_bootstrap_is_seeded_and_inside_the_values(method):
    spread = np.array([0.3, 1.2, 2.0, 2.9, 5.1, 1.7])
    data = np.stack([spread, spread[::-1] * 2], axis=1)
    b, same = (bands(data, method=method, resamples=2000, seed=3) for _ in range(2))
    assert np.array_equal(b.iqm_low, same.iqm_low) and np.array_equal(b.iqm_high, same.iqm_high)
    assert 0.3 <= b.iqm_low[0] < b.iqm[0] < b.iqm_high[0] <= 5.1


def test_t_interval_by_hand_and_against_scipy():
    from scipy import stats

    # 1, 2, 3: mean 2, sd 1, standard error 1 / sqrt(3); t(0.975, 2 df) = 4.302653
    low, high = t_interval(np.array([1.0, 2.0, 3.0]))
    assert (low, high) == pytest.approx((2 - 4.302653 / 3**0.5, 2 + 4.302653 / 3**0.5), abs=1e-6)
    for values in FIXED_SAMPLES:
        x = np.array(values)
        expected = stats.t.interval(0.95, len(x) - 1, loc=x.mean(), scale=stats.sem(x))
        assert t_interval(x) == pytest.approx(expected, rel=1e-12)
        b = bands(x)  # the table's interval is the same one
        assert (b.mean_low[0], b.mean_high[0]) == pytest.approx(expected, rel=1e-12)
    assert t_interval(np.array([0.9, 0.99]), 0.99) == pytest.approx(
        stats.t.interval(0.99, 1, loc=0.945, scale=0.045)
    )
    assert np.isnan(t_interval(np.array([1.0, np.nan]))).all()  # one value left: no interval
    assert t_interval(np.array([4.0, 4.0, 4.0])) == (4.0, 4.0)


def test_welch_by_hand_and_against_scipy():
    from scipy import stats

    # 1, 2, 3 (mean 2, variance 1) against 4, 5, 6, 7 (mean 5.5, variance 5/3): standard error
    # sqrt(1/3 + 5/12) = sqrt(0.75), t = -3.5 / sqrt(0.75); Welch-Satterthwaite df
    # = 0.75^2 / ((1/3)^2 / 2 + (5/12)^2 / 3) = 4.95918
    t, p = welch(np.array([1.0, 2.0, 3.0]), np.array([4.0, 5.0, 6.0, 7.0]))
    assert t == pytest.approx(-4.041452, abs=1e-6)
    assert p == pytest.approx(2 * stats.t.sf(4.041452, 4.959184), abs=1e-6)
    assert 0.009 < p < 0.011
    for a, b in zip(FIXED_SAMPLES, FIXED_SAMPLES[1:], strict=False):
        res = stats.ttest_ind(a, b, equal_var=False)
        assert welch(np.array(a), np.array(b)) == pytest.approx((res.statistic, res.pvalue))
    assert np.isnan(welch(np.array([1.0]), np.array([2.0, 3.0]))).all()


def test_steps_to_on_a_hand_made_curve():
    steps = np.array([100, 200, 300, 400, 500, 600])
    values = np.array([0.0, 0.5, 1.0, 0.8, 1.0, 1.0])
    assert steps_to(steps, values, 0.9) == 300
    assert steps_to(steps, values, 0.9, window=2) == 400  # means .25 .75 .9 .9 1: the third
    assert steps_to(steps, values, 0.9, window=3) == 500  # means .5 .767 .933: the 5th value
    assert steps_to(steps, values, 0.3, below=True) == 100
    assert steps_to(steps, values, 0.6, window=4, below=True) == 400  # means .575 .825 .95
    assert np.isnan(steps_to(steps, values, 1.5)) and np.isnan(steps_to(steps, values, 0, window=7))
    with pytest.raises(AnalysisError, match="threshold window must be an integer >= 1, got 0"):
        steps_to(steps, values, 0.9, window=0)


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
        assert float(row["mean_ci_low"]) == pytest.approx(t_interval(np.array(finals))[0])
    run_cli([str(sweep), "--metric", "value_loss", "--evaluate", "2", "--greedy",
             "--out", str(out)], capsys)  # fmt: skip
    assert "mean return of 2 greedy episodes" in Path(f"{out}.md").read_text()
    assert len(list(sweep.glob("*/seed_*/aggregate_eval_greedy_2ep_seed12345.json"))) == 4


def test_tables_keep_three_significant_digits_of_small_values():
    from marlgrid.analysis.report import FinalRow, markdown_table, table_digits

    def row(label: str, mean: float, low: float, high: float) -> FinalRow:
        stats = {"n": 3, "mean": mean, "mean_low": low, "mean_high": high}
        stats.update(iqm=mean, iqm_low=low, iqm_high=high)
        return FinalRow(label, (label,), [0, 1, 2], [], np.array([0.8, 1.0, 1.2]) * mean, stats)

    kl = [row("on", 0.000462, 0.000391, 0.000524), row("off", 0.000194, 0.000143, 0.000285)]
    assert table_digits(kl) == 6
    assert (
        "| on | 3 | 0.000370 / 0.000462 / 0.000554 | 0.000462 | [0.000391, 0.000524] | t | - | - |"
    ) in markdown_table(kl, "KL")
    returns = [row("a", 16.5, 15.2, 17.6), row("b", 0.05, 0.01, 0.09)]
    assert table_digits(returns) == 3
    assert table_digits([row("z", 0.0, 0.0, float("nan"))]) == 3
    assert "| a | 3 | 13.20 / 16.50 / 19.80 | 16.50 |" in markdown_table(
        returns, "return", digits=2
    )


def test_a_condition_holding_a_seed_twice_is_reported(tmp_path, capsys):
    sweep = write_sweep(tmp_path)  # agent.lr=0.001 and 0.0003, seeds 0 and 1, all named demo
    out = tmp_path / "results" / "pooled"
    pooled = [str(sweep), "--group-by", "name", "--out", str(out)]
    with pytest.raises(SystemExit):  # seeds of different learning rates are not pooled ...
        run_cli(pooled, capsys)
    assert "differ in ['agent.lr']" in capsys.readouterr().err
    _, stderr = run_cli([*pooled, "--pool-over", "agent.lr"], capsys)  # ... unless asked
    repeated = [line for line in stderr.splitlines() if line.startswith("repeated seed:")]
    assert len(repeated) == 2, stderr
    assert "name=demo holds seed 0 2 times" in repeated[0] and "agent.lr=0.001" in repeated[0]
    assert "- repeated seed: name=demo holds seed 1 2 times" in out.with_suffix(".md").read_text()
    _, stderr = run_cli([str(sweep), "--out", str(tmp_path / "results" / "split")], capsys)
    assert "repeated seed" not in stderr
