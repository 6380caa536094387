"""Shared test helpers: hand-made layouts and direct state access."""

from __future__ import annotations

import os

import numpy as np
import pytest

os.environ.setdefault("SDL_VIDEODRIVER", "dummy")
os.environ.setdefault("SDL_AUDIODRIVER", "dummy")

from marlgrid.base import MarlGridEnv  # noqa: E402
from marlgrid.core.layout import Layout  # noqa: E402


class HandMadeEnv(MarlGridEnv):
    """A layout given as text rows: ``#`` wall, ``.`` empty, ``G`` goal, ``L`` lava,
    ``0``-``9`` goal-cycle tiles with that id, ``K`` yellow key, ``B`` blue ball,
    ``D`` closed yellow door, ``X`` locked yellow door, ``O`` open yellow door, ``x`` box with a
    red ball. Agents spawn only on ``s`` cells when any are given."""

    def __init__(self, rows: list[str], **kwargs) -> None:
        self.rows = rows
        n_goals = sum(ch.isdigit() for row in rows for ch in row)
        if n_goals:
            kwargs.setdefault("n_goals", n_goals)
        super().__init__(len(rows[0]), len(rows), **kwargs)

    def generate(self, layout: Layout) -> None:
        spawn = []
        for y, row in enumerate(self.rows):
            for x, ch in enumerate(row):
                if ch == "#":
                    layout.put(x, y, "wall")
                elif ch == "G":
                    layout.put(x, y, "goal")
                elif ch == "L":
                    layout.put(x, y, "lava")
                elif ch.isdigit():
                    layout.put(x, y, "cycle_tile")
                    layout.cycle_id[x, y] = int(ch)
                elif ch == "K":
                    layout.put(x, y, "key", "yellow")
                elif ch == "B":
                    layout.put(x, y, "ball", "blue")
                elif ch in "DXO":
                    layout.put(x, y, "door", "yellow", {"O": 0, "D": 1, "X": 2}[ch])
                elif ch == "x":
                    layout.put(x, y, "box", "purple")
                    layout.contents[x, y] = (6, 0, 0)
                elif ch == "s":
                    spawn.append((x, y))
        if spawn:
            layout.spawn_ok[...] = False
            for x, y in spawn:
                layout.spawn_ok[x, y] = True


def place(env: MarlGridEnv, agent: int, x: int, y: int, direction: int) -> None:
    """Put an agent in play at ``(x, y)`` facing ``direction`` and refresh the views."""
    engine = env.engine
    engine.pos[0, agent] = (x, y)
    engine.dirs[0, agent] = direction
    engine.status[0, agent] = 1
    engine.observe()


def step(env: MarlGridEnv, *actions: int):
    """Step with positional actions for agent_0, agent_1, ... (live agents only)."""
    acts = {name: a for name, a in zip(env.possible_agents, actions, strict=False)}
    return env.step({name: acts[name] for name in env.agents})


@pytest.fixture
def rng() -> np.random.Generator:
    return np.random.default_rng(0)


def results_script(name: str):
    """The module ``experiments/results/<name>.py``, loaded from its file (the result scripts are
    not a package)."""
    import importlib.util
    from pathlib import Path

    path = Path(__file__).resolve().parents[1] / f"experiments/results/{name}.py"
    spec = importlib.util.spec_from_file_location(name, path)
    script = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(script)
    return script


def fake_run(path, last_step: int, total: int) -> None:
    """A run directory at ``path`` whose metrics end at ``last_step`` of ``total`` env steps
    (finished when they are equal), as the result scripts read it."""
    import json

    path.mkdir(parents=True)
    (path / "config.json").write_text(json.dumps({"name": "x", "total_timesteps": total}))
    (path / "metrics.csv").write_text(f"step,charts/episodic_return\n{last_step},1.0\n")


def run_results_shell(name: str, *args: str, out, **env: str):
    """Run ``experiments/results/<name>.sh`` with ``args`` from the repository root, its runs
    under ``out`` (``OUT``), this Python as ``PY`` and ``env`` on top; the completed process."""
    import subprocess
    import sys
    from pathlib import Path

    root = Path(__file__).resolve().parents[1]
    environ = {**os.environ, "OUT": str(out), "PY": sys.executable, **env}
    script = root / f"experiments/results/{name}.sh"
    return subprocess.run(["bash", str(script), *args], capture_output=True, text=True,
                          env=environ, cwd=root, timeout=60)  # fmt: skip
