"""Export a trained run's policies as a small expert file: weights and configs, without the
optimizer or the heads only a loss term trains (a next-view decoder).

    python experiments/export_expert.py runs/multirun/expert_curriculum/scale=small/seed_0 \
        experiments/experts/goal_cycle_7x7_curriculum_seed0.pt
    python experiments/export_expert.py RUN_OR_CHECKPOINT OUT.pt --learners expert_1 expert_2

A run directory exports its newest checkpoint (found by
:class:`marlgrid.agents.bookkeeping.saved_run.SavedRun`). The file plays as frozen experts:
``roles=novice_with_trained_experts 'roles.agent_1.checkpoint="OUT.pt"'``. Installed, the command
is ``marlgrid-export-expert``.

Nothing is written for a checkpoint whose learners could not be played (a saved config that fails
the checks a fresh one gets, NaN or infinite weights), nor onto the source checkpoint or into a
run's ``checkpoints/`` folder (the run would take the file for its own newest checkpoint); the
command prints one line ``error: ...`` and exits 1. The file is written atomically.
"""

from __future__ import annotations

import argparse
from pathlib import Path

from marlgrid.agents.bookkeeping.checkpoint import CheckpointError, export_policies
from marlgrid.agents.bookkeeping.saved_run import SavedRun, SavedRunError
from marlgrid.config import ConfigError


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("target", type=Path, help="run directory or checkpoint file")
    parser.add_argument("out", type=Path, help="the expert file to write (.pt)")
    parser.add_argument("--learners", nargs="+", help="learners to keep (default: all)")
    parser.add_argument("--note", help="a line stored in the file (what it is, how it was made)")
    parser.add_argument(
        "--overwrite",
        action="store_true",
        help="replace an existing file at out (never by default)",
    )
    args = parser.parse_args(argv)
    if args.out.suffix != ".pt":
        parser.error(f"out must end in .pt, got {args.out}")
    if args.out.exists() and not args.overwrite:
        raise SystemExit(
            f"error: refusing to overwrite the existing file {args.out}; pass --overwrite to "
            "replace it, or choose another path"
        )
    try:
        source = SavedRun(args.target).checkpoint
        written = export_policies(source, args.out, args.learners, args.note)
    except (SavedRunError, CheckpointError, ConfigError) as exc:
        raise SystemExit(f"error: {exc}") from None
    size = written.stat().st_size / 1e6
    print(f"{source} -> {written} ({size:.1f} MB)")


if __name__ == "__main__":
    main()
