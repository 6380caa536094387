"""The following-pays page's analysis: kept runs and the pooling check."""

from __future__ import annotations

import csv
import json

import pytest

from experiments.results.following_pays import analyse


def _run(path, total=10, seed=1, rows=300):
    path.mkdir(parents=True)
    (path / "config.json").write_text(json.dumps({"seed": seed, "total_timesteps": total,
                                                  "agent": {"lr": 0.001}}))  # fmt: skip
    (path / "train.log").write_text("".join(f"line {i}\n" for i in range(50)))
    with (path / "metrics.csv").open("w", newline="") as f:
        writer = csv.writer(f)
        writer.writerow(["step", "charts/episodic_return", "losses/entropy"])
        writer.writerows([[i + 1, i / 10, 0.5] for i in range(rows)])
    return path


def test_a_kept_run_holds_every_tenth_row_and_the_last_hundred(tmp_path):
    run = _run(tmp_path / "social" / "seed_1")
    analyse.keep(run, tmp_path / "kept")
    with (tmp_path / "kept" / "metrics.csv").open(newline="") as f:
        rows = list(csv.DictReader(f))
    assert list(rows[0]) == ["step", "charts/episodic_return"]  # curve columns only
    steps = [int(r["step"]) for r in rows]
    assert steps == sorted({*range(1, 201, 10), *range(201, 301)})
    assert (tmp_path / "kept" / "train.log").read_text().splitlines() == [
        f"line {i}" for i in range(30, 50)
    ]


def test_runs_whose_configs_differ_beyond_the_seed_are_not_pooled(tmp_path):
    a = _run(tmp_path / "a" / "seed_1", seed=1)
    b = _run(tmp_path / "a" / "seed_2", seed=2)
    analyse.check_poolable([a, b])  # the seed may differ
    c = _run(tmp_path / "a" / "seed_3", seed=3, total=20)
    with pytest.raises(SystemExit, match=r"differ in \['total_timesteps'\]"):
        analyse.check_poolable([a, b, c])


def _finished(path, total=4096, seed=1):
    """A finished fake run of the social arm: the three curve columns, 4 logged updates."""
    path.mkdir(parents=True)
    config = {"name": "following_pays_social", "seed": seed, "total_timesteps": total}
    (path / "config.json").write_text(json.dumps(config))
    with (path / "metrics.csv").open("w", newline="") as f:
        writer = csv.writer(f)
        writer.writerow(["step", *analyse.CURVES.values()])
        for i in range(1, 5):
            writer.writerow([i * total // 4, 1.0 + seed, 0.2 * i, 0.01 * i])
    return path


def _digests(folder):
    import hashlib

    files = (p for p in folder.rglob("*") if p.is_file())
    return {str(p): hashlib.sha256(p.read_bytes()).hexdigest() for p in files}


def test_the_analysis_never_touches_the_committed_page_and_refuses_a_reduced_budget(
    tmp_path, monkeypatch
):
    monkeypatch.setattr(analyse, "EXPORTED", ())  # fake runs have no weights to export
    committed = _digests(analyse.HERE)
    runs, out = tmp_path / "runs", tmp_path / "out"
    for seed in (1, 2):
        _finished(runs / "social" / f"seed_{seed}", seed=seed)
    analyse.main(["--runs", str(runs), "--out", str(out), "--arms", "social", "--skip-eval"])
    with (out / "pass_rule.csv").open(newline="") as f:
        rows = list(csv.DictReader(f))
    assert [(r["seed"], r["order_expert"]) for r in rows] == [
        ("1", "0.5"),
        ("2", "0.5"),
    ]  # mean of 4
    assert _digests(analyse.HERE) == committed
    # a reduced-budget rerun of another seed beside them: refused, naming the key
    _finished(runs / "social" / "seed_3", total=2048, seed=3)
    with pytest.raises(SystemExit, match="total_timesteps"):
        analyse.main(["--runs", str(runs), "--out", str(out), "--arms", "social", "--skip-eval"])
    assert _digests(analyse.HERE) == committed
