"""``experiments/results/findings_runs.sh``: its arms and pages are checked before anything
runs, and its evaluations take only the runs whose training ended."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from tests.conftest import run_results_shell

pytestmark = pytest.mark.skipif(shutil.which("bash") is None, reason="needs bash")


def fake_run(path: Path, last_step: int, total: int) -> None:
    path.mkdir(parents=True)
    (path / "config.json").write_text(json.dumps({"name": "x", "total_timesteps": total}))
    (path / "metrics.csv").write_text(f"step,charts/episodic_return\n{last_step},1.0\n")


def test_unknown_arms_and_bad_seeds_are_refused_before_anything_runs(tmp_path) -> None:
    done = run_results_shell("findings_runs", "r2_social", "r9_nothing", out=tmp_path, DRY="1")
    assert done.returncode == 2 and "unknown page or arm 'r9_nothing'" in done.stderr
    done = run_results_shell("findings_runs", "r2_social:1,x", out=tmp_path, DRY="1")
    assert done.returncode == 2 and "seed 'x' of arm 'r2_social'" in done.stderr
    assert not any(tmp_path.iterdir())  # nothing was queued or written


def test_analysis_evaluates_finished_runs_only(tmp_path) -> None:
    fake_run(tmp_path / "r2/social/seed_1", 1500, 1500)
    fake_run(tmp_path / "r2/social_long/seed_1", 700, 5000)
    done = run_results_shell("findings_runs", "r2", out=tmp_path, DRY="1", ANALYSE="1")
    assert done.returncode == 0, done.stderr
    evaluation = next(line for line in done.stdout.splitlines() if "experts_eval.py" in line)
    assert f"{tmp_path}/r2/social/seed_1" in evaluation
    assert "social_long" not in evaluation
    assert "not evaluated" in done.stderr and "700 of 5000" in done.stderr


def test_r3_analysis_draws_the_next_view_loss_and_the_social_arms_following(tmp_path) -> None:
    for arm in ("social_aux", "alone_aux", "social_autoencoder"):
        fake_run(tmp_path / f"r3/{arm}/seed_1", 1500, 1500)
    done = run_results_shell("findings_runs", "r3", out=tmp_path, DRY="1", ANALYSE="1")
    assert done.returncode == 0, done.stderr
    lines = [line for line in done.stdout.splitlines() if "aggregate.py" in line]

    def folders(metric: str) -> set[str]:
        line = next(line for line in lines if f"--metric {metric} " in line)
        return {part.rsplit("/", 1)[1] for part in line.split() if part.startswith(str(tmp_path))}

    assert folders("losses/next_view") == {"social_aux", "alone_aux", "social_autoencoder"}
    assert folders("losses/next_view/cell_accuracy") == folders("losses/next_view")
    assert folders("social/follow_expert_agent_0") == {"social_aux", "social_autoencoder"}
    assert folders("episodic_return") == {"social_aux", "alone_aux", "social_autoencoder"}
