"""Training speed of this checkout against an earlier commit, measured in one run.

The commit is checked out in a temporary git worktree; every loop then trains from each
checkout in turns (base, this, base, this, ...: a change of load hits both), ``--repeats``
times, best of each kept. A loop is an ordinary ``experiments/train.py`` run (or the POPGym
script), as a result page would start it. Its rate is the steady state: env steps per wall
second between the log row after ``--skip`` updates and the last one, read from the rate the
run logs (``charts/SPS``: env steps since training started over the time since then; from
``metrics.csv``, or from the progress lines the POPGym script prints). Startup, imports and
the first updates' compilation are left out; logging and checkpoints are in.

    python experiments/benchmarks/versus_commit.py --commit 544385b
    python experiments/benchmarks/versus_commit.py --commit 544385b --loops canonical --threads 2
    python experiments/benchmarks/versus_commit.py --commit 544385b \\
        --json experiments/results/versus_544385b.json

See README.md beside this file ("Against an earlier commit").
"""

from __future__ import annotations

import argparse
import csv
import json
import os
import re
import subprocess
import sys
import tempfile
from dataclasses import asdict, dataclass, field
from pathlib import Path

from experiments.benchmarks.ledger import LOOPS as LEDGER_LOOPS

ROOT = Path(__file__).resolve().parents[2]

TRAIN = ["experiments/train.py", "video=false", "eval_every=0", "logger.progress=false"]
#: loop -> (agents per env step, train.py overrides (those of ledger.LOOPS) or None for the
#: POPGym script, env steps)
LOOPS: dict[str, tuple[int, list[str] | None, int]] = {
    "canonical": (3, LEDGER_LOOPS["canonical"][1], 20_480),
    "scripted_experts": (3, LEDGER_LOOPS["scripted_experts"][1], 40_960),
    "frozen_experts": (3, LEDGER_LOOPS["frozen_experts"][1], 40_960),
    "popgym": (1, None, 49_152),
}
#: the POPGym script of each era: (path, arguments)
POPGYM_SCRIPTS = ("experiments/examples/popgym_sweep.py", "experiments/popgym.py")
PROGRESS = re.compile(r"step\s+([\d,]+)\s.*?([\d,.]+) steps/s")


@dataclass
class Measure:
    """One loop on one checkout: the steady-state rates of every repeat."""

    loop: str
    side: str  # "base" or "this"
    agents: int
    rates: list[float] = field(default_factory=list)  # env steps / s
    errors: list[str] = field(default_factory=list)

    @property
    def best(self) -> float:
        return max(self.rates, default=float("nan"))


def steady_rate(points: list[tuple[float, float]], skip: int) -> float:
    """Env steps per second between point ``skip`` and the last one, from ``(step, SPS)``
    points where SPS is the rate since training started (so its time is ``step / SPS``)."""
    if len(points) < skip + 2:
        raise ValueError(f"{len(points)} logged points; need more than {skip + 1}")
    (s0, r0), (s1, r1) = points[skip], points[-1]
    return (s1 - s0) / (s1 / r1 - s0 / r0)


def metrics_points(path: Path) -> list[tuple[float, float]]:
    with path.open() as f:
        return [(float(r["step"]), float(r["charts/SPS"])) for r in csv.DictReader(f)]


def printed_points(text: str) -> list[tuple[float, float]]:
    return [(float(a.replace(",", "")), float(b.replace(",", ""))) for a, b in
            PROGRESS.findall(text)]  # fmt: skip


def run_once(loop: str, root: Path, threads: int, work: Path, skip: int) -> float:
    """Train ``loop`` from checkout ``root``; its steady-state env steps per second."""
    _, overrides, steps = LOOPS[loop]
    env = {**os.environ, "PYTHONPATH": str(root), "OMP_NUM_THREADS": str(threads)}
    out = Path(tempfile.mkdtemp(dir=work))
    if overrides is not None:
        cmd = [sys.executable, *TRAIN, *overrides, f"total_timesteps={steps}",
               f"torch_threads={threads}", f"hydra.run.dir={out}"]  # fmt: skip
    else:
        script = next(s for s in POPGYM_SCRIPTS if (root / s).is_file())
        cmd = [sys.executable, script, "--env", "RepeatPreviousEasy", "--steps", str(steps),
               "--threads", str(threads), "--out", str(out)]  # fmt: skip
    proc = subprocess.run(cmd, cwd=root, env=env, capture_output=True, text=True, timeout=1800)
    if proc.returncode != 0:
        raise RuntimeError(f"exit {proc.returncode}: {proc.stderr.strip().splitlines()[-1:]}")
    if overrides is not None:
        return steady_rate(metrics_points(out / "metrics.csv"), skip)
    return steady_rate(printed_points(proc.stdout), 1)


def worktree(commit: str, where: Path) -> Path:
    """A detached checkout of ``commit`` under ``where``."""
    path = where / f"base_{commit}"
    subprocess.run(["git", "worktree", "add", "--detach", "-f", str(path), commit], cwd=ROOT,
                   check=True, capture_output=True)  # fmt: skip
    return path


def measure(args: argparse.Namespace, base: Path, work: Path) -> list[Measure]:
    sides = {"base": base, "this": ROOT}
    found = {(loop, side): Measure(loop, side, LOOPS[loop][0]) for loop in args.loops
             for side in sides}  # fmt: skip
    for rep in range(args.repeats):
        for loop in args.loops:
            for side, root in sides.items():
                m = found[(loop, side)]
                try:
                    m.rates.append(run_once(loop, root, args.threads, work, args.skip))
                    rate = f"{m.rates[-1]:,.0f} env steps/s"
                except Exception as exc:  # noqa: BLE001 - report it and go on
                    m.errors.append(f"{type(exc).__name__}: {exc}")
                    rate = m.errors[-1]
                print(f"  repeat {rep + 1} {loop:<17} {side:<5} {rate}", flush=True)
    return list(found.values())


def report(found: list[Measure], commit: str) -> list[dict]:
    rows = []
    print(f"\nbest of repeats, env steps/s (agent-steps/s), this checkout against {commit}")
    for loop in dict.fromkeys(m.loop for m in found):
        base, this = (next(m for m in found if m.loop == loop and m.side == s)
                      for s in ("base", "this"))  # fmt: skip
        ratio = this.best / base.best
        rows.append({"loop": loop, "agents": this.agents, "base": base.best, "this": this.best,
                     "ratio": ratio, "base_rates": base.rates, "this_rates": this.rates,
                     "errors": base.errors + this.errors})  # fmt: skip
        print(
            f"  {loop:<17} base {base.best:8,.0f} ({base.best * base.agents:8,.0f})   this "
            f"{this.best:8,.0f} ({this.best * this.agents:8,.0f})   {ratio:.2f}x"
        )
    return rows


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--commit", required=True, help="the earlier commit to measure against")
    p.add_argument("--loops", nargs="+", choices=list(LOOPS), default=list(LOOPS))
    p.add_argument("--threads", type=int, default=1, help="torch threads of every run")
    p.add_argument("--repeats", type=int, default=3, help="runs per loop and checkout")
    p.add_argument("--skip", type=int, default=4, help="log rows left out at the start")
    p.add_argument("--json", default=None, help="also write the results here")
    args = p.parse_args(argv)
    if min(args.threads, args.repeats) < 1 or args.skip < 0:
        p.error("--threads and --repeats must be >= 1 and --skip >= 0")
    return args


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    with tempfile.TemporaryDirectory(prefix="versus_") as tmp:
        work = Path(tmp)
        base = worktree(args.commit, work)
        try:
            found = measure(args, base, work)
        finally:
            subprocess.run(["git", "worktree", "remove", "--force", str(base)], cwd=ROOT,
                           capture_output=True)  # fmt: skip
    rows = report(found, args.commit)
    if args.json:
        out = {"commit": args.commit, "threads": args.threads, "repeats": args.repeats,
               "loops": rows, "measures": [asdict(m) for m in found]}  # fmt: skip
        Path(args.json).write_text(json.dumps(out, indent=1) + "\n")
    return 0 if not any(r["errors"] for r in rows) else 1


if __name__ == "__main__":
    raise SystemExit(main())
