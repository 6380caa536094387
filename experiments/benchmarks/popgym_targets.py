"""Sample-efficiency targets of recurrent PPO on POPGym's easiest memory tasks, with a preset.

Each target trains the agent preset (default ``conf/agent/ppo_popgym.yaml``, GRU core) on one
env for exactly its step budget through ``experiments/examples/popgym_sweep.py`` (a trainer run) and
passes when the MMER (the best per-batch mean episodic return, batches of one PPO update) reaches
the threshold within the budget. Targets (seed 0):

===========================  ==========  ==================
env                          MMER        within (env steps)
===========================  ==========  ==================
RepeatPreviousEasy           >= 0.9      250,000
RepeatFirstEasy              >= 0.9      150,000
PositionOnlyCartPoleEasy     >= 0.9      100,000
===========================  ==========  ==================

This is a long benchmark, not a test (on a loaded 2-core machine the POPGym-sized preset runs at
a few hundred env steps/s, so the three runs take about half an hour or more).

    python experiments/benchmarks/popgym_targets.py
    python experiments/benchmarks/popgym_targets.py --only RepeatFirstEasy --seed 1
    python experiments/benchmarks/popgym_targets.py --set network.hidden_size=64 \\
        network.trunk_sizes=[64] network.head_sizes=[64,64]

It prints one line per target (MMER, first step at which the threshold was reached, wall time,
PASS or FAIL) and exits 1 if any target fails. Runs go to ``--out`` (default
``runs/popgym_targets``) as ``experiments/examples/popgym_sweep.py`` writes them: a trainer run
directory
``<out>/<env>/<memory>/seed_<seed>`` (``metrics.csv``, checkpoints, ``popgym.json``), whose
``metrics.csv`` gives the MMER and the curve (:mod:`marlgrid.analysis.mmer`); a run trains from
scratch (``--restart``) over an earlier one's directory with the same env, memory and seed.
"""

from __future__ import annotations

import argparse
import json
import math
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
POPGYM_CLI = ROOT / "experiments" / "examples" / "popgym_sweep.py"
DEFAULT_PRESET = ROOT / "conf" / "agent" / "ppo_popgym.yaml"


@dataclass(frozen=True)
class Target:
    """An env, an MMER threshold and the env-step budget it must be reached within."""

    env: str
    threshold: float
    steps: int


TARGETS = (
    Target("RepeatPreviousEasy", 0.9, 250_000),
    Target("RepeatFirstEasy", 0.9, 150_000),
    Target("PositionOnlyCartPoleEasy", 0.9, 100_000),
)


def first_step_at(curve: list[tuple[int, float]], threshold: float) -> int | None:
    """The env step of the first batch whose mean return reaches ``threshold``; None if none."""
    return next((step for step, value in curve if value >= threshold), None)


def read_cell(run_dir: Path) -> dict:
    """A cell run by ``experiments/examples/popgym_sweep.py``: its MMER and ``(step, batch mean
    return)``
    curve from ``metrics.csv`` (batches as its ``popgym.json`` says) and its wall time (acting
    and updates, summed over the logged iterations)."""
    from marlgrid.analysis.mmer import batch_mean_returns, read_metrics

    settings = json.loads((run_dir / "popgym.json").read_text())["settings"]
    rows = read_metrics(run_dir)
    curve = batch_mean_returns(rows, settings["batch_size"])
    times = [r.get(k, 0.0) for r in rows for k in ("charts/rollout_time", "charts/update_time")]
    return {
        "mmer": max((v for _, v in curve), default=math.nan),
        "curve": curve,
        "wall_s": sum(t for t in times if not math.isnan(t)),
    }


def run_target(target: Target, args: argparse.Namespace) -> dict:
    """Train one target in a subprocess; returns its MMER, first step at threshold and verdict."""
    cmd = [
        sys.executable, str(POPGYM_CLI), "--env", target.env, "--steps", str(target.steps),
        "--seed", str(args.seed), "--agent", str(args.agent), "--out", str(args.out), "--quiet",
        "--threads", str(args.threads), "--restart",
    ]  # fmt: skip
    if args.set:
        cmd += ["--set", *args.set]
    subprocess.run(cmd, check=True, cwd=ROOT)
    folder = args.out / target.env
    runs = sorted(p.parent for p in folder.glob(f"*/seed_{args.seed}/popgym.json"))
    if len(runs) != 1:
        raise SystemExit(f"expected one run directory under {folder}, found {len(runs)}")
    record = read_cell(runs[0])
    first = first_step_at(record["curve"], target.threshold)
    return {
        "env": target.env,
        "mmer": record["mmer"],
        "first_step": first,
        "wall_s": record["wall_s"],
        "passed": first is not None and first <= target.steps,
    }


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    names = [t.env for t in TARGETS]
    p.add_argument("--only", nargs="*", default=names, choices=names, help="targets to run")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--agent", type=Path, default=DEFAULT_PRESET, help="agent preset YAML")
    p.add_argument("--set", nargs="*", default=[], metavar="KEY=VALUE", help="preset overrides")
    p.add_argument("--out", type=Path, default=Path("runs/popgym_targets"), help="output folder")
    p.add_argument("--threads", type=int, default=1, help="torch CPU threads")
    args = p.parse_args(argv)
    if args.seed < 0:
        p.error(f"--seed must be >= 0, got {args.seed}")
    if args.threads < 1:
        p.error(f"--threads must be >= 1, got {args.threads}")
    args.out = args.out.resolve()
    return args


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    results = []
    for target in (t for t in TARGETS if t.env in args.only):
        print(f"{target.env}: MMER >= {target.threshold} within {target.steps:,} steps ...",
              flush=True)  # fmt: skip
        r = run_target(target, args)
        results.append(r)
        reached = "never" if r["first_step"] is None else f"at {r['first_step']:,}"
        verdict = "PASS" if r["passed"] else "FAIL"
        print(
            f"  {verdict}  MMER {r['mmer']:.3f}, {target.threshold} reached {reached} "
            f"({r['wall_s']:.0f} s)",
            flush=True,
        )
    passed = sum(r["passed"] for r in results)
    print(f"{passed}/{len(results)} targets passed (seed {args.seed}, preset {args.agent.name})")
    return 0 if passed == len(results) else 1


if __name__ == "__main__":
    sys.exit(main())
