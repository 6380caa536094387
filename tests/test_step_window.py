"""``experiments/results/step_window.py``: a run's mean training metrics over a step window."""

from __future__ import annotations

import csv

import pytest

from experiments.results.step_window import main, window_means


def _run(tmp_path, rows: list[str]):
    run = tmp_path / "run"
    run.mkdir()
    header = "step,charts/episodic_return,social/rewards,social/penalties,curriculum/penalty"
    (run / "metrics.csv").write_text("\n".join([header, *rows]) + "\n")
    return run


def test_means_cover_the_window_and_skip_updates_without_an_episode(tmp_path):
    run = _run(
        tmp_path,
        [
            "500,9.0,9.0,0.0,0.0",
            "1000,1.0,2.0,4.0,0.25",
            "1500,,,,0.25",
            "2000,3.0,4.0,4.0,0.25",
            "2500,8.0,8.0,0.0,0.5",
        ],  # fmt: skip
    )
    assert window_means(run, 1000, 2000) == [str(run), 1000, 2000, 2, 2.0, 3.0, 4.0, 0.25]


def test_an_empty_window_and_a_reversed_one_are_refused(tmp_path, capsys):
    run = _run(tmp_path, ["500,9.0,9.0,0.0,0.0"])
    with pytest.raises(SystemExit, match="no logged training return between steps 1000 and 2000"):
        window_means(run, 1000, 2000)
    with pytest.raises(SystemExit):
        main([str(run), "--start", "10", "--end", "5", "--csv", str(tmp_path / "x.csv")])
    assert "--end (5) must not be before --start (10)" in capsys.readouterr().err
    assert not (tmp_path / "x.csv").exists()


def test_the_csv_has_one_row_per_run(tmp_path):
    run = _run(tmp_path, ["1000,1.0,2.0,4.0,0.25"])
    out = tmp_path / "w.csv"
    main([str(run), "--start", "0", "--end", "1000", "--csv", str(out)])
    with out.open(newline="") as f:
        rows = list(csv.DictReader(f))
    assert [(r["logged"], r["episodic_return"], r["penalty"]) for r in rows] == [
        ("1", "1.0", "0.25")
    ]


def test_last_takes_each_runs_own_window_and_is_not_mixed_with_start(tmp_path, capsys):
    run = _run(tmp_path, ["1000,1.0,2.0,4.0,0.25", "2000,3.0,4.0,4.0,0.25", "3000,8.0,8.0,0.0,0.5"])
    out = tmp_path / "w.csv"
    main([str(run), "--last", "1000", "--csv", str(out)])
    with out.open(newline="") as f:
        (row,) = list(csv.DictReader(f))
    assert (row["start"], row["end"], row["logged"], row["episodic_return"]) == (
        "2000",
        "3000",
        "2",
        "5.5",
    )
    for bad in (["--last", "10", "--start", "0", "--end", "5"], ["--start", "0"], []):
        with pytest.raises(SystemExit):
            main([str(run), *bad, "--csv", str(tmp_path / "x.csv")])
        assert "give either --start and --end, or --last" in capsys.readouterr().err
    assert not (tmp_path / "x.csv").exists()
