"""``experiments/results/restart_window.py``: a run's training either side of an extension."""

from __future__ import annotations

import csv

import pytest

from tests.conftest import results_script

restart_window = results_script("restart_window")


def fake_metrics(run, returns) -> None:
    run.mkdir(parents=True)
    lines = ["step,charts/episodic_return,curriculum/penalty,charts/learning_rate,charts/ent_coef"]
    lines += [f"{100 * (k + 1)},{r},1.5,0.001,0.01" for k, r in enumerate(returns)]
    (run / "metrics.csv").write_text("\n".join(lines) + "\n")


def test_means_either_side_of_the_restart_skip_updates_without_episodes(tmp_path) -> None:
    run = tmp_path / "seed_1"
    fake_metrics(run, [1, 2, "", 4, 10, 20])  # steps 100..600; the restart at 400
    out = tmp_path / "w.csv"
    restart_window.main([str(run), "--restart", "400", "--since", "400", "--last", "2",
                         "--csv", str(out)])  # fmt: skip
    rows = list(csv.DictReader(out.open()))
    assert [r["step"] for r in rows if r["row"] == "logged"] == ["400", "500", "600"]
    means = {
        r["row"]: (r["step"], float(r["episodic_return"])) for r in rows if r["row"] != "logged"
    }
    assert means == {"mean_before_restart": ("400", 3.0), "mean_at_end": ("600", 15.0)}


def test_too_few_values_before_the_restart_are_refused(tmp_path) -> None:
    run = tmp_path / "seed_1"
    fake_metrics(run, [1, 2, 3])
    with pytest.raises(SystemExit, match="needs 5 logged returns up to --restart 200"):
        restart_window.main([str(run), "--restart", "200", "--last", "5", "--csv", "x.csv"])
    assert not (tmp_path / "x.csv").exists()
