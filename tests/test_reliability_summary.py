"""The main job ends saying what it learned: the final return beside the env's scripted
baselines, where the run's files are, and commands that evaluate and continue it
(experiments/run_summary.py, printed by experiments/train.py)."""

from __future__ import annotations

import os
import re
import shlex
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

pytest.importorskip("torch")
pytest.importorskip("hydra")

from marlgrid.analysis.curves import read_curve  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
TRAIN = [sys.executable, str(ROOT / "experiments" / "train.py")]
#: 64 env steps per update, episodes of 12 steps (so some end), an evaluation every 2 updates
TINY = [
    "run=smoke", "env.num_envs=4", "agent.num_steps=16", "logger.progress=false",
    "env.settings.max_steps=12", "eval_every=2", "eval_episodes=2", "total_timesteps=128",
]  # fmt: skip


def _run(command: list[str], cwd: Path) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONUNBUFFERED": "1", "OMP_NUM_THREADS": "1"}
    return subprocess.run(command, capture_output=True, text=True, env=env, cwd=cwd, timeout=300)


def _summary(stdout: str) -> tuple[Path, dict[str, str]]:
    """The run directory the summary names, and its lines by label."""
    lines = stdout.splitlines()
    (start,) = [k for k, line in enumerate(lines) if line.startswith("summary of ")]
    run_dir = Path(re.match(r"summary of (\S+) \(", lines[start]).group(1))
    return run_dir, {line[:15].strip(): line[15:] for line in lines[start + 1 :]}


def _command(text: str) -> list[str]:
    """A printed command as this test runs it: ``python`` is this interpreter."""
    words = shlex.split(text)
    return [sys.executable, *words[1:]] if words[0] == "python" else words


def test_a_finished_run_ends_with_its_return_baselines_files_and_commands(tmp_path):
    out = _run([*TRAIN, *TINY], tmp_path)
    assert out.returncode == 0, out.stderr[-2000:]
    run_dir, lines = _summary(out.stdout)
    run_dir = tmp_path / run_dir
    # the return, as logged: the mean of the last 10 updates that ended episodes
    _, returns = read_curve(run_dir, "charts/episodic_return")
    assert lines["return"].startswith(f"{np.mean(returns[-10:]):.3f} (charts/episodic_return")
    _, evaluated = read_curve(run_dir, "eval/return")
    assert lines["eval return"].startswith(f"{evaluated[-1]:.3f} (greedy")
    # beside the scripted baselines of that env, measured now
    # (the T-maze's: random, the cue-reading oracle and the memoryless cue-blind walker)
    drawn = dict(re.findall(r"(\w+) (-?\d+\.\d{3}) \(", lines["baselines"]))
    assert list(drawn) == ["random", "cue_reader", "cue_blind"], lines["baselines"]
    assert float(drawn["cue_reader"]) > float(drawn["cue_blind"]) > float(drawn["random"])
    assert "(memoryless: always the top end)" in lines["baselines"]
    assert "50 episodes each" in lines["baselines"]
    # where the run's files are
    assert (tmp_path / lines["metrics"]) == run_dir / "metrics.csv"
    assert (run_dir / "metrics.csv").is_file()
    events = tmp_path / shlex.split(lines["TensorBoard"])[-1]
    assert events == run_dir / "tensorboard" and any(events.glob("events.out.tfevents.*"))
    newest = tmp_path / lines["checkpoints"].split()[0]
    assert newest == run_dir / "checkpoints" / "ckpt_000000002.pt" and newest.is_file()
    assert lines["video"] == "none (video=false)"
    # commands that work from where the run was started
    assert lines["continue"].endswith("total_timesteps=256 extend=true")
    assert "total_timesteps=128" not in lines["continue"]
    evaluate = _command(lines["evaluate"].replace("--episodes 100", "--episodes 2"))
    evaluated_now = _run(evaluate, tmp_path)
    assert evaluated_now.returncode == 0, evaluated_now.stderr[-2000:]
    assert "mean return" in evaluated_now.stdout
