"""A run's training either side of a resume with ``extend=true`` (experts.md, parts 11 and 12).

    python experiments/results/restart_window.py \
        runs/experts/goal_cycle_expert_13x13_warm_16m/seed_1 --restart 8000000 --since 7600000 \
        --csv experiments/results/experts_part11_restart.csv

Writes each logged row from ``--since`` on (the training return, the penalty, the learning rate
and the entropy coefficient), then two summary rows: the mean training return over the last
``--last`` logged values up to ``--restart`` (the step the run was extended from) and over the
last ``--last`` logged values of the run. Rows whose training return is not a number (no
episode ended in that update) are left out.
"""

from __future__ import annotations

import argparse
import math
from pathlib import Path

from marlgrid.analysis.curves import read_metrics
from marlgrid.analysis.report import write_csv

COLUMNS = (
    "charts/episodic_return",
    "curriculum/penalty",
    "charts/learning_rate",
    "charts/ent_coef",
)
HEADER = ("row", "run", "step", "episodic_return", "penalty", "learning_rate", "ent_coef")


def window_rows(run: Path, restart: int, since: int, last: int) -> list[list[object]]:
    """The logged rows from ``since`` on, then the two means (see the module's docstring)."""
    if last < 1:
        raise SystemExit(f"--last must be at least 1 (got {last})")
    rows = [
        r for r in read_metrics(run) if not math.isnan(r.get("charts/episodic_return", math.nan))
    ]
    before = [r for r in rows if r["step"] <= restart]
    if len(before) < last or len(rows) - len(before) < 1:
        raise SystemExit(
            f"{run}: needs {last} logged returns up to --restart {restart} and one after it "
            f"(has {len(before)} and {len(rows) - len(before)})"
        )
    out: list[list[object]] = [
        ["logged", str(run), int(r["step"]), *(r.get(c, "") for c in COLUMNS)]
        for r in rows
        if r["step"] >= since
    ]
    for label, window in (("mean_before_restart", before[-last:]), ("mean_at_end", rows[-last:])):
        mean = sum(r["charts/episodic_return"] for r in window) / len(window)
        out.append([label, str(run), int(window[-1]["step"]), round(mean, 4), "", "", ""])
    return out


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("run", type=Path)
    parser.add_argument("--restart", type=int, required=True, help="the step it was extended from")
    parser.add_argument("--since", type=int, default=0, help="the first logged step to write")
    parser.add_argument("--last", type=int, default=20, help="logged values in each mean")
    parser.add_argument("--csv", type=Path, required=True)
    args = parser.parse_args(argv)
    rows = window_rows(args.run, args.restart, args.since, args.last)
    print(f"wrote {write_csv(args.csv, HEADER, rows)} ({len(rows)} rows)")


if __name__ == "__main__":
    main()
