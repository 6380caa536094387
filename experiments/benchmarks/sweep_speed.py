"""Throughput of a seed sweep on this machine: lanes (runs at once) x torch threads per run.

A result page runs 5 seeds per condition. This trains ``--seeds`` seeds of one loop (an
``experiments/train.py`` run as a page starts it) in each layout of ``--layouts`` (``LxT``:
``L`` runs at a time, ``T`` torch threads each; a new run starts when one ends, as a joblib
sweep with ``n_jobs=L`` does) and reports the sweep's total rate: env steps (and agent-steps)
of all its runs over the wall time from the first start to the last end, start-up included.
Layouts run one after another, so each has the machine to itself.

    python experiments/benchmarks/sweep_speed.py                       # canonical, 1x2 2x1 2x2
    python experiments/benchmarks/sweep_speed.py --loop scripted_experts --layouts 2x1 1x2
    python experiments/benchmarks/sweep_speed.py --json experiments/results/sweep_speed.json

See README.md beside this file ("Sweep throughput").
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from experiments.benchmarks.versus_commit import LOOPS, TRAIN

ROOT = Path(__file__).resolve().parents[2]


def parse_layout(text: str) -> tuple[int, int]:
    try:
        lanes, threads = (int(x) for x in text.lower().split("x"))
    except ValueError:
        msg = f"a layout is LANESxTHREADS such as 2x1, got {text!r}"
        raise argparse.ArgumentTypeError(msg) from None
    if lanes < 1 or threads < 1:
        raise argparse.ArgumentTypeError(f"lanes and threads must be >= 1, got {text!r}")
    return lanes, threads


def one_run(loop: str, seed: int, threads: int, steps: int, out: Path) -> None:
    _, overrides, _ = LOOPS[loop]
    if overrides is None:
        raise ValueError(f"{loop} is not a train.py loop")
    env = {**os.environ, "OMP_NUM_THREADS": str(threads)}
    cmd = [sys.executable, *TRAIN, *overrides, f"total_timesteps={steps}", f"seed={seed}",
           f"torch_threads={threads}", f"hydra.run.dir={out / f'seed_{seed}'}"]  # fmt: skip
    proc = subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True, timeout=3600)
    if proc.returncode != 0:
        raise RuntimeError(f"seed {seed}: exit {proc.returncode}: {proc.stderr[-400:]}")


def sweep(loop: str, seeds: int, lanes: int, threads: int, steps: int) -> dict:
    """Run the sweep in one layout; its wall time and rates."""
    with tempfile.TemporaryDirectory(prefix="sweep_") as tmp, ThreadPoolExecutor(lanes) as pool:
        t0 = time.perf_counter()
        jobs = [pool.submit(one_run, loop, s, threads, steps, Path(tmp)) for s in range(seeds)]
        for job in jobs:
            job.result()
        wall = time.perf_counter() - t0
    agents = LOOPS[loop][0]
    env_steps = seeds * steps
    return {"layout": f"{lanes}x{threads}", "lanes": lanes, "threads": threads, "seeds": seeds,
            "env_steps": env_steps, "wall_s": wall, "env_steps_per_s": env_steps / wall,
            "agent_steps_per_s": env_steps * agents / wall}  # fmt: skip


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--loop", default="canonical", choices=[k for k, v in LOOPS.items() if v[1]])
    p.add_argument("--layouts", nargs="+", type=parse_layout, default=[(1, 2), (2, 1), (2, 2)])
    p.add_argument("--seeds", type=int, default=5)
    p.add_argument("--steps", type=int, default=None, help="env steps per run (loop default)")
    p.add_argument("--json", default=None)
    args = p.parse_args(argv)
    steps = args.steps or LOOPS[args.loop][2]
    rows = []
    for lanes, threads in args.layouts:
        print(f"  {args.loop}: {args.seeds} seeds as {lanes} lane(s) x {threads} thread(s)",
              flush=True)  # fmt: skip
        rows.append(sweep(args.loop, args.seeds, lanes, threads, steps))
        r = rows[-1]
        print(f"    {r['wall_s']:.0f} s: {r['env_steps_per_s']:,.0f} env steps/s, "
              f"{r['agent_steps_per_s']:,.0f} agent-steps/s", flush=True)  # fmt: skip
    best = max(rows, key=lambda r: r["agent_steps_per_s"])
    print(f"\nfastest layout: {best['layout']} (lanes x threads)")
    for r in rows:
        print(f"  {r['layout']}: {r['agent_steps_per_s'] / best['agent_steps_per_s']:.2f}x")
    if args.json:
        Path(args.json).write_text(json.dumps({"loop": args.loop, "rows": rows}, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
