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


def _write(path, header, rows):
    with path.open("w", newline="") as f:
        w = csv.writer(f)
        w.writerow(header)
        w.writerows(rows)


def test_the_readings_apply_the_rule_to_each_arm(tmp_path):
    from experiments.results.following_pays.readings import readings

    follows = {"social": [True, True, True, True, False], "solo": [""] * 5,
               "social_to_1.5": [True, False, False, True, True],
               "social_p1.5": [False] * 3}  # fmt: skip
    table = [[arm, k + 1, 0.0, 0.9, 0.495, 0.2, 0.138, f] for arm, fs in follows.items()
             for k, f in enumerate(fs)]  # fmt: skip
    header = ["arm", "seed", "training_return", "order_expert", "order_bar",
              "trail_expert_excess", "trail_bar", "following_emerges"]  # fmt: skip
    _write(tmp_path / "pass_rule.csv", header, table)
    greedy = {"social": [18.0, 17.0, 16.5, 18.5, 15.0], "solo": [0.6, 0.7, 1.0, 0.9, 0.8],
              "social_to_1.5": [17.0] * 5, "social_p1.5": [1.0, 1.1, 0.9]}  # fmt: skip
    rows = [[f"runs/following_pays/{arm}/seed_{k + 1}", mode, 200, r if mode == "greedy" else -9]
            for arm, rs in greedy.items() for k, r in enumerate(rs)
            for mode in ("greedy", "sampled")]  # fmt: skip
    _write(tmp_path / "eval.csv", ["run", "mode", "episodes", "return"], rows)
    out = {(r[0], r[1]): r for r in readings(tmp_path / "pass_rule.csv", tmp_path / "eval.csv")}
    assert out[("1_emerges", "social")][-1].startswith("following emerges")  # 4 of 5
    assert out[("1_emerges", "social")][5] == 17.0  # the mean greedy return (not the sampled)
    assert out[("5_survives", "social_to_1.5")][-1].startswith("following does not survive")
    assert out[("1_emerges", "social_p1.5")][-1].startswith("pending (0 of 3")
    social_solo = out[("2_social_beats_solo", "social")]
    # one seed at 2.0 widens social's spread: Welch's p is above 0.05, so not shown
    assert social_solo[12] > 0.0 and social_solo[-1] in ("social beats solo", "not shown")
    assert social_solo[-1] == ("social beats solo" if social_solo[12] < 0.05 else "not shown")
    assert out[("5_needs_slope", "social_p1.5")][-1].startswith("pending")


def test_the_extension_rule_compares_the_last_million_steps_with_the_million_before():
    import numpy as np

    from experiments.results.following_pays.readings import extension_rows, windows

    steps = np.arange(1, 101) * 100_000.0  # 10M steps, a value every 100k
    flat = np.full(100, 10.0)
    rising = np.where(steps > 9_000_000, 12.0, 10.0)  # +20% in the last million
    assert windows(steps, rising) == (12.0, 10.0)
    rows = {r[0]: r for r in extension_rows({"a": [(steps, flat), (steps, rising)],
                                            "b": [(steps, flat), (steps, flat)]})}  # fmt: skip
    assert rows["a"][2:] == [11.0, 10.0, 1.1, True]  # seeds' means: +10% > 5%
    assert rows["b"][2:] == [10.0, 10.0, 1.0, False]
