"""Export a trained run's policies as a small expert file (weights and configs, no optimizer).

    python experiments/export_expert.py runs/multirun/expert_curriculum/scale=small/seed_0 \
        experiments/experts/goal_cycle_7x7_curriculum_seed0.pt
    python experiments/export_expert.py RUN_OR_CHECKPOINT OUT.pt --learners expert_1 expert_2

A run directory exports its newest checkpoint. The file plays as frozen experts:
``roles=novice_with_trained_experts 'roles.agent_1.checkpoint="OUT.pt"'``.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:  # run as a script: experiments.evaluate must be importable
    sys.path.insert(0, str(ROOT))

from experiments.evaluate import newest_checkpoint  # noqa: E402
from marlgrid.agents.training.checkpoint import CheckpointError, export_policies  # noqa: E402


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("target", type=Path, help="run directory or checkpoint file")
    parser.add_argument("out", type=Path, help="the expert file to write (.pt)")
    parser.add_argument("--learners", nargs="+", help="learners to keep (default: all)")
    parser.add_argument("--note", help="a line stored in the file (what it is, how it was made)")
    args = parser.parse_args(argv)
    if args.out.suffix != ".pt":
        parser.error(f"out must end in .pt, got {args.out}")
    source = newest_checkpoint(args.target)
    try:
        written = export_policies(source, args.out, args.learners, args.note)
    except CheckpointError as exc:
        raise SystemExit(str(exc)) from None
    size = written.stat().st_size / 1e6
    print(f"{source} -> {written} ({size:.1f} MB)")


if __name__ == "__main__":
    main()
