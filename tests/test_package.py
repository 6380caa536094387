"""Packaging promises: a light import and the scripted demo entry point."""

from __future__ import annotations

import subprocess
import sys


def test_import_is_light():
    code = (
        "import sys, marlgrid; env = marlgrid.make('MarlGrid-GoalCycle-13x13-3Agents-v0'); "
        "env.reset(seed=0); env.step({a: 2 for a in env.agents}); "
        "heavy = [m for m in ('torch', 'pygame', 'hydra', 'imageio', 'stable_baselines3') "
        "if m in sys.modules]; print(heavy)"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"


def test_only_the_env_classes_touch_their_private_engine():
    """``MarlGridEnv`` and ``VectorEnv`` expose ``engine``; nothing else reads ``_engine``."""
    import re
    from pathlib import Path

    root = Path(__file__).resolve().parents[1]
    owners = {
        root / "marlgrid" / "base.py",
        root / "marlgrid" / "vector.py",
        Path(__file__).resolve(),
    }
    pattern = re.compile(r"\._engine\b")
    offenders = [
        f"{path.relative_to(root)}:{n}"
        for folder in ("marlgrid", "experiments", "tests")
        for path in sorted((root / folder).rglob("*.py"))
        if path not in owners
        for n, line in enumerate(path.read_text().splitlines(), 1)
        if pattern.search(line)
    ]
    assert offenders == []
