"""``extend=true`` continues the run it names, though the new total names another directory.

``total_timesteps`` is part of a run directory's name, so an extend with a new total computes a
directory that holds nothing: experiments/train.py must find the earlier run of the same
settings (marlgrid/agents/bookkeeping/extend.py), say so and train there; no run, or several, is a
clear error, never a silent fresh start.
"""

from __future__ import annotations

import csv
import os
import shlex
import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("torch")
pytest.importorskip("hydra")
yaml = pytest.importorskip("yaml")

from marlgrid.config import ConfigError  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
TRAIN = [sys.executable, str(ROOT / "experiments" / "train.py")]
#: 64 env steps per update; no video, bar or TensorBoard
TINY = ["run=smoke", "env.num_envs=4", "agent.num_steps=16", "logger.progress=false"]
TINY += ["logger.tensorboard=false"]
EXCLUDE = ["seed", "name", "resume", "extend", "logger.progress", "video"]


def _train(args: list[str], cwd: Path) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONUNBUFFERED": "1", "OMP_NUM_THREADS": "1"}
    return subprocess.run(
        TRAIN + args, capture_output=True, text=True, env=env, cwd=cwd, timeout=300
    )


def _steps(run_dir: Path) -> list[int]:
    with (run_dir / "metrics.csv").open(newline="") as f:
        return [int(float(r["step"])) for r in csv.DictReader(f)]


def test_extend_continues_the_run_its_old_total_names(tmp_path):
    first = _train(["name=d2", *TINY, "total_timesteps=128"], tmp_path)
    assert first.returncode == 0, first.stderr[-2000:]
    (old,) = (tmp_path / "runs/d2").glob("*total_timesteps=128/seed_0")
    assert _steps(old) == [64, 128]

    longer = _train(["name=d2", *TINY, "total_timesteps=256", "extend=true"], tmp_path)
    assert longer.returncode == 0, longer.stderr[-2000:]
    assert f"extend=true: continuing {old} (saved at 128 steps) to 256 steps" in longer.stdout
    assert _steps(old) == [64, 128, 192, 256]  # trained on, not from zero elsewhere
    assert [p.name for p in (tmp_path / "runs/d2").iterdir()] == [old.parent.name]


def test_the_advised_way_to_name_a_run_directory_parses():
    """``"hydra.run.dir='<run dir>'"`` reaches Hydra as ``hydra.run.dir='<run dir>'``: one value,
    the ``=`` and ``,`` of a run directory's name notwithstanding (unquoted, it fails)."""
    from hydra.core.override_parser.overrides_parser import OverridesParser
    from hydra.errors import OverrideParseException

    from marlgrid.agents.bookkeeping.extend import PICK_RUN_DIR

    run_dir = "runs/d2/agent.num_steps=16,run=smoke,total_timesteps=128/seed_0"
    typed = PICK_RUN_DIR.replace("<run dir>", run_dir)
    (word,) = shlex.split(typed)  # what the shell passes on
    (override,) = OverridesParser.create().parse_overrides([word])
    assert override.value() == run_dir
    with pytest.raises(OverrideParseException):
        OverridesParser.create().parse_overrides([f"hydra.run.dir={run_dir}"])


def test_extend_without_an_earlier_run_fails_in_one_line_and_leaves_no_folder(tmp_path):
    out = _train(["name=nobody", *TINY, "total_timesteps=256", "extend=true"], tmp_path)
    assert out.returncode == 1
    assert "Traceback" not in out.stderr
    lines = out.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: extend=true: no run to extend")
    assert str(tmp_path / "runs/nobody") in lines[0]  # where it looked
    assert not (tmp_path / "runs").exists()


# -- the lookup itself (marlgrid.agents.bookkeeping.extend) ----------------------------------


def _fake_run(run_dir: Path, overrides: list[str], step: int = 64) -> Path:
    """A run directory with a checkpoint at ``step`` and its recorded overrides."""
    from marlgrid.agents.bookkeeping.checkpoint import save_checkpoint

    save_checkpoint(run_dir / "checkpoints", 1, {"update": 1, "global_step": step})
    (run_dir / ".hydra").mkdir(parents=True)
    (run_dir / ".hydra/overrides.yaml").write_text(yaml.safe_dump(overrides))
    return run_dir


def run_to_extend(*args):
    """:func:`marlgrid.agents.bookkeeping.extend.run_to_extend`, imported where a test calls it."""
    from marlgrid.agents.bookkeeping.extend import run_to_extend

    return run_to_extend(*args)


def _lookup(parent: Path, overrides: list[str], seed: int = 0):
    job = parent / "total_timesteps=512" / f"seed_{seed}"
    return run_to_extend(job, parent, seed, overrides, EXCLUDE, 512)


def test_the_run_of_the_same_overrides_and_seed_is_found(tmp_path):
    wanted = ["agent=ppo_gru", "total_timesteps=256"]
    run = _fake_run(tmp_path / "agent=ppo_gru,total_timesteps=256/seed_0", wanted, step=256)
    _fake_run(tmp_path / "agent=ppo_gru,total_timesteps=256/seed_1", wanted)  # another seed
    _fake_run(tmp_path / "agent=ppo_mlp,total_timesteps=256/seed_0", ["agent=ppo_mlp"])
    found, note = _lookup(tmp_path, ["agent=ppo_gru", "total_timesteps=512", "extend=true"])
    assert found == run
    assert note == f"extend=true: continuing {run} (saved at 256 steps) to 512 steps"
    # the default run (seed_<seed> directly under the parent) counts too
    default = _fake_run(tmp_path / "plain" / "seed_0", ["name=x"])
    assert _lookup(tmp_path / "plain", ["name=x", "extend=true"])[0] == default


def test_a_job_directory_with_a_checkpoint_is_the_run(tmp_path):
    job = _fake_run(tmp_path / "seed_0", ["total_timesteps=64"])
    assert run_to_extend(job, tmp_path, 0, ["extend=true"], EXCLUDE, 512) == (job, None)


def test_several_matching_runs_are_listed_and_one_must_be_picked(tmp_path):
    a = _fake_run(tmp_path / "total_timesteps=128/seed_0", ["total_timesteps=128"])
    b = _fake_run(tmp_path / "total_timesteps=256/seed_0", ["total_timesteps=256"])
    with pytest.raises(ConfigError) as err:
        _lookup(tmp_path, ["total_timesteps=512", "extend=true"])
    message = str(err.value)
    assert "2 runs match" in message and str(a) in message and str(b) in message
    assert "\"hydra.run.dir='<run dir>'\"" in message


def test_no_matching_run_says_where_it_looked(tmp_path):
    _fake_run(tmp_path / "agent=ppo_mlp/seed_0", ["agent=ppo_mlp"])
    (tmp_path / "agent=ppo_gru/seed_0").mkdir(parents=True)  # no checkpoint: not a run to extend
    with pytest.raises(ConfigError, match="no run to extend") as err:
        _lookup(tmp_path, ["agent=ppo_gru", "extend=true"])
    assert f"seed_0 or */seed_0 of {tmp_path}" in str(err.value)
    assert "agent=ppo_gru" in str(err.value)


def test_a_directory_given_by_hand_without_a_checkpoint_is_an_error(tmp_path):
    with pytest.raises(ConfigError, match="holds no checkpoint, so there is no run to extend"):
        run_to_extend(tmp_path / "mine", None, 0, ["extend=true"], EXCLUDE, 512)
    assert not (tmp_path / "mine").exists()  # looking creates nothing
