"""A crash leaves no debris: a SIGKILL while ``metrics.csv`` is rewritten loses no row, and the
temporary files of writes cut short are removed when the run next starts (under its lock)."""

from __future__ import annotations

import csv
import os
import signal
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

pytest.importorskip("torch")

from marlgrid.agents.algorithms.ppo import PPOConfig  # noqa: E402
from marlgrid.agents.bookkeeping.run_dir import RunLockedError  # noqa: E402
from marlgrid.agents.training.trainer import TrainConfig, train  # noqa: E402

ROWS = 2000
FIELDS = ["step", "charts/episodic_return", "charts/SPS"]


def _metrics(run_dir: Path, rows: int = ROWS) -> Path:
    path = run_dir / "metrics.csv"
    with path.open("w", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=FIELDS)
        writer.writeheader()
        writer.writerows(
            {"step": 64 * (i + 1), FIELDS[1]: 0.5, FIELDS[2]: 1e3} for i in range(rows)
        )
    return path


def _rows(path: Path) -> list[dict[str, str]]:
    with path.open(newline="") as f:
        return list(csv.DictReader(f))


#: a child that rewrites metrics.csv (resume: drop rows past a step; column: a new metric) and
#: is SIGKILLed in the middle: while the rows are written, or once they are on disk but before
#: the file takes their place
_CHILD = textwrap.dedent(
    """
    import csv, os, signal, sys
    from marlgrid.agents.bookkeeping.logger import Logger

    run_dir, rewrite, moment = sys.argv[1:4]
    die = lambda *a: os.kill(os.getpid(), signal.SIGKILL)
    if moment == "rows":
        real = csv.DictWriter.writerows

        def half_then_die(self, rows):
            rows = list(rows)
            real(self, rows[: len(rows) // 2])
            die()

        csv.DictWriter.writerows = half_then_die
    else:
        os.fsync = die
    if rewrite == "resume":
        Logger(run_dir, tensorboard=False, resume_step=64 * 1000)
    else:
        logger = Logger(run_dir, tensorboard=False)
        logger.log({"charts/episodic_return": 0.5, "eval/return": 1.0}, 64 * 2001)
    """
)


@pytest.mark.parametrize(("rewrite", "moment"), [("resume", "rows"), ("column", "rename")])
def test_a_kill_while_metrics_csv_is_rewritten_loses_no_row(tmp_path, rewrite, moment):
    path = _metrics(tmp_path)
    before = path.read_bytes()
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    child = subprocess.run(
        [sys.executable, "-c", _CHILD, str(tmp_path), rewrite, moment],
        env=env, capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert child.returncode == -signal.SIGKILL, child.stderr[-2000:]
    assert path.read_bytes() == before  # the old file, whole: every row
    assert len(_rows(path)) == ROWS
    if moment == "rename":  # what the kill left is what the next start removes
        from marlgrid.agents.bookkeeping.run_dir import remove_temp_files

        (left,) = tmp_path.glob(".metrics_*.tmp")
        assert remove_temp_files(tmp_path) == [left]


def _tiny(**overrides) -> TrainConfig:
    cfg = TrainConfig(total_timesteps=128, checkpoint_every=1, video=False)
    cfg.agent = PPOConfig(num_steps=16)
    cfg.env.num_envs = 4
    cfg.logger.progress, cfg.logger.tensorboard = False, False
    for key, value in overrides.items():
        setattr(cfg, key, value)
    return cfg


#: temporary files of replace_atomically cut short: a checkpoint, metrics.csv, config.json
STALE = [
    "checkpoints/.ckpt_000000003_k2x9_q0a.tmp",
    ".metrics_ab12cd34.tmp",
    ".config_zz9y8x7w.tmp",
]
#: files that only look alike: never removed
KEPT = ["notes.tmp", ".ckpt_short.tmp", "checkpoints/ckpt_000000003.pt.tmp"]


def _plant(run_dir: Path, names: list[str]) -> list[Path]:
    paths = [run_dir / name for name in names]
    for path in paths:
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(b"half a file")
    return paths


def test_temporary_files_of_a_killed_write_are_removed_when_the_run_starts(tmp_path, capsys):
    stale, kept = _plant(tmp_path, STALE), _plant(tmp_path, KEPT)
    train(_tiny(), tmp_path)
    assert not [p for p in stale if p.exists()]
    assert all(p.exists() for p in kept)
    message = "removed 3 temporary file(s) of a write cut short"
    assert message in capsys.readouterr().out
    assert message in (tmp_path / "train.log").read_text()
    # a clean start says nothing
    train(_tiny(total_timesteps=192, extend=True), tmp_path)
    assert "temporary file" not in capsys.readouterr().out


def test_the_temporary_files_of_a_live_run_are_left_alone(tmp_path):
    """Cleaning happens under the run's lock: a second process, refused, removes nothing."""
    code = textwrap.dedent(
        f"""
        import time
        from marlgrid.agents.bookkeeping.run_dir import RunLock
        with RunLock({str(tmp_path)!r}):
            print("locked", flush=True)
            time.sleep(120)
        """
    )
    holder = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout.readline().strip() == "locked"
        live = _plant(tmp_path, STALE)
        with pytest.raises(RunLockedError):
            train(_tiny(), tmp_path)
        assert all(p.exists() for p in live)
    finally:
        holder.kill()
        holder.wait()


def test_files_written_atomically_keep_ordinary_permissions(tmp_path):
    """The temporary files are made 0600; the files that replace their targets are not."""
    train(_tiny(), tmp_path)
    umask = os.umask(0o022)
    os.umask(umask)
    for name in ("metrics.csv", "config.json", "checkpoints/ckpt_000000002.pt"):
        assert (tmp_path / name).stat().st_mode & 0o777 == 0o666 & ~umask, name


#: a child that resumes a run (extend it by one update) and says when training starts, so the
#: parent's SIGKILL lands in the resume itself, not in the imports
_RESUMER = textwrap.dedent(
    """
    import sys, time
    sys.path.insert(0, sys.argv[2])
    from test_reliability_crash_debris import _tiny
    from marlgrid.agents.training.trainer import train

    print("start", flush=True)
    train(_tiny(total_timesteps=192, extend=True), sys.argv[1])
    """
)
#: rows of the 50k-row run at or before its checkpoint (kept by a resume) and after it (dropped)
KEPT_ROWS, DROPPED_ROWS = 40_000, 10_000


def _run_of_50k_rows(run_dir: Path) -> list[dict[str, str]]:
    """A run checkpointed at step 128 whose metrics.csv holds 50k rows, 10k of them past it."""
    train(_tiny(), run_dir)
    steps = [128 * (i + 1) / KEPT_ROWS for i in range(KEPT_ROWS)]
    steps += [128 + i + 1 for i in range(DROPPED_ROWS)]
    with (run_dir / "metrics.csv").open("w", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=FIELDS)
        writer.writeheader()
        writer.writerows({"step": s, FIELDS[1]: 0.5, FIELDS[2]: 1e3} for s in steps)
    return _rows(run_dir / "metrics.csv")[:KEPT_ROWS]


def _kept(path: Path) -> list[dict[str, str]]:
    """The first rows of ``path`` in the columns written before the resume (it may add some)."""
    return [{k: row[k] for k in FIELDS} for row in _rows(path)[:KEPT_ROWS]]


def _resume_killed_after(run_dir: Path, delay: float | None) -> float:
    """Resume ``run_dir`` in a child, SIGKILLed ``delay`` s after it starts training (None: let
    it finish); returns how long it trained."""
    import time

    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    args = [sys.executable, "-c", _RESUMER, str(run_dir), str(Path(__file__).parent)]
    child = subprocess.Popen(args, env=env, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL)
    assert child.stdout.readline().strip() == b"start"
    started = time.monotonic()
    if delay is None:
        child.communicate(timeout=300)
        assert child.returncode == 0
    else:
        time.sleep(delay)
        child.kill()
        child.communicate(timeout=60)
    return time.monotonic() - started


@pytest.mark.slow
def test_sigkill_at_random_moments_of_a_50k_row_resume_loses_no_row(tmp_path):
    """10 kills at random moments of a resume (the CSV's rewrite, the checkpoint load, the
    update, the new checkpoint): every row logged up to the checkpoint is still there, and the
    next start leaves no temporary file and finishes the run."""
    import random
    import shutil

    template = tmp_path / "template"
    kept = _run_of_50k_rows(template)
    calibration = tmp_path / "calibration"
    shutil.copytree(template, calibration)
    duration = _resume_killed_after(calibration, None)
    rng = random.Random(24)
    for trial in range(10):
        run_dir = tmp_path / f"trial_{trial}"
        shutil.copytree(template, run_dir)
        _resume_killed_after(run_dir, rng.uniform(0.0, duration))
        assert _kept(run_dir / "metrics.csv") == kept, f"trial {trial}"
        train(_tiny(total_timesteps=192, extend=True), run_dir)  # the next start
        assert not list(run_dir.rglob("*.tmp")), f"trial {trial}"
        rows = _rows(run_dir / "metrics.csv")
        assert _kept(run_dir / "metrics.csv") == kept, f"trial {trial}"
        assert float(rows[-1]["step"]) == 192, f"trial {trial}"
        assert len(rows) == KEPT_ROWS + 1, f"trial {trial}: rows past the checkpoint are kept"
