"""The run scripts keep their own run folders when ``OUT`` is not given (``lanes.sh`` once set a
default of its own that won over theirs, putting experts runs in ``runs/<arm>``)."""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
pytestmark = pytest.mark.skipif(shutil.which("bash") is None, reason="needs bash")


@pytest.mark.parametrize(
    ("script", "args", "folder"),
    [
        ("experts_runs.sh", ["recipe:1"], "runs/experts/goal_cycle_expert/seed_1"),
    ],
)
def test_a_run_script_without_out_uses_its_own_folder(script, args, folder, tmp_path):
    env = {k: v for k, v in os.environ.items() if k != "OUT"}
    env.update(DRY="1", PY="python")
    path = str(ROOT / "experiments/results" / script)
    done = subprocess.run(["bash", path, *args], capture_output=True, text=True, env=env,
                          cwd=ROOT, timeout=60)  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert f"hydra.run.dir={folder}" in done.stdout
