"""``experiments/plot_curves.py``: clear errors for bad metrics and run directories."""

from __future__ import annotations

import pytest

pytest.importorskip("matplotlib")

from experiments.plot_curves import main  # noqa: E402
from marlgrid.registry import REGISTRY  # noqa: E402


@pytest.fixture
def run(tmp_path):
    run = tmp_path / "run"
    run.mkdir()
    (run / "metrics.csv").write_text(
        "step,charts/episodic_return,losses/value_loss\n100,0.5,1.0\n200,1.5,\n300,2.0,0.5\n"
    )
    return run


def test_an_unknown_metric_names_the_available_ones(run, tmp_path, capsys):
    out = tmp_path / "curves.png"
    with pytest.raises(SystemExit) as exit_info:
        main([str(run), "--metric", "bogus", "--out", str(out)])
    assert exit_info.value.code == 2
    err = capsys.readouterr()
    assert "metric 'bogus' is not in" in err.err
    assert "['charts/episodic_return', 'losses/value_loss']" in err.err
    assert "wrote" not in err.out and not out.exists()


def test_a_missing_run_directory_is_named(tmp_path, capsys):
    with pytest.raises(SystemExit):
        main([str(tmp_path / "nope"), "--out", str(tmp_path / "c.png")])
    assert f"run directory {tmp_path / 'nope'} does not exist" in capsys.readouterr().err


def test_a_folder_without_metrics_is_not_a_run(tmp_path, capsys):
    with pytest.raises(SystemExit):
        main([str(tmp_path), "--out", str(tmp_path / "c.png")])
    assert "is not a run directory: it has no metrics.csv" in capsys.readouterr().err


def test_a_good_run_is_plotted(run, tmp_path, capsys):
    out = tmp_path / "curves.png"
    main([str(run), "--metric", "losses/value_loss", "--out", str(out)])
    assert out.stat().st_size > 0
    assert f"wrote {out}" in capsys.readouterr().out


def test_every_env_has_baselines_and_those_that_know_its_task() -> None:
    """Random everywhere; the T-maze (the default task) adds its cue-reading oracle and the
    memoryless cue-blind walker, a goal cycle its oracle and discoverer, an env without a
    scripted player of its task (Empty) random only (the command used to crash there)."""
    from experiments.plot_curves import scripted_baselines

    tmaze = scripted_baselines("MarlGrid-MemoryS7TMaze-v0", {}, episodes=3)
    assert list(tmaze) == ["random", "cue_reader", "cue_blind"]
    assert tmaze["cue_reader"] > 0.9  # it succeeds in every episode
    cycle = scripted_baselines("MarlGrid-GoalCycle-7x7-v0", {"max_steps": 30}, episodes=2)
    assert list(cycle) == ["random", "oracle", "discoverer"]
    assert cycle["oracle"] > cycle["random"]
    assert list(scripted_baselines("MarlGrid-DoorKey-8x8-v0", {}, episodes=2)) == ["random"]


@pytest.mark.parametrize("env_id", sorted(REGISTRY))
def test_the_baselines_of_every_registered_env_play_it_and_its_oracle_beats_random(env_id):
    from experiments.plot_curves import scripted_baselines

    drawn = scripted_baselines(env_id, {}, episodes=2)
    assert list(drawn)[0] == "random"
    if len(drawn) > 1:  # the env's oracle, the first of its own
        assert list(drawn.values())[1] > drawn["random"], drawn
