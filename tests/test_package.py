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
