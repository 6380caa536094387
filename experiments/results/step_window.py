"""Each run's mean training metrics over a window of env steps (experts.md, part 23).

    python experiments/results/step_window.py runs/experts/<arm>/seed_1 ... \
        --start 1000000 --end 1500000 --csv experiments/results/experts_part23_window.csv
    python experiments/results/step_window.py runs/experts/<arm>/seed_1 ... \
        --last 500000 --csv experiments/results/experts_part24_window.csv

(``--last N``: each run's own window, its last ``N`` env steps up to the last step it logged.)

One row per run: the logged rows with ``start <= step <= end`` whose training return is a
number (an update where no episode ended logs none), their count, and the mean of the
training return, correct entries, penalised entries and the curriculum's penalty over them.
"""

from __future__ import annotations

import argparse
import math
from pathlib import Path

from marlgrid.analysis.curves import read_metrics
from marlgrid.analysis.report import write_csv
from marlgrid.analysis.runs import last_step

COLUMNS = {
    "charts/episodic_return": "episodic_return",
    "social/rewards": "rewards",
    "social/penalties": "penalties",
    "curriculum/penalty": "penalty",
}
HEADER = ("run", "start", "end", "logged", *COLUMNS.values())


def window_means(run: Path, start: int, end: int) -> list[object]:
    """``run``'s row: its logged rows in ``[start, end]`` and their means (NaN where a column
    is missing); refuses a window with no logged return."""
    rows = [
        r
        for r in read_metrics(run)
        if start <= r["step"] <= end and not math.isnan(r.get("charts/episodic_return", math.nan))
    ]
    if not rows:
        raise SystemExit(f"{run}: no logged training return between steps {start} and {end}")
    means = [round(sum(r.get(c, math.nan) for r in rows) / len(rows), 4) for c in COLUMNS]
    return [str(run), start, end, len(rows), *means]


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("runs", type=Path, nargs="+")
    parser.add_argument("--start", type=int, help="first env step of the window")
    parser.add_argument("--end", type=int, help="last env step of the window")
    parser.add_argument("--last", type=int, help="instead: each run's last N env steps logged")
    parser.add_argument("--csv", type=Path, required=True)
    args = parser.parse_args(argv)
    fixed = args.start is not None and args.end is not None
    if fixed == (args.last is not None) or (args.start is None) != (args.end is None):
        parser.error("give either --start and --end, or --last")
    if fixed and args.end < args.start:
        parser.error(f"--end ({args.end}) must not be before --start ({args.start})")
    if args.last is not None and args.last < 0:
        parser.error(f"--last must be >= 0, got {args.last}")
    rows = []
    for run in args.runs:
        if fixed:
            start, end = args.start, args.end
        else:
            end = last_step(run / "metrics.csv")
            if end is None:
                raise SystemExit(f"{run}: metrics.csv has no rows")
            start = end - args.last
        rows.append(window_means(run, start, end))
    print(f"wrote {write_csv(args.csv, HEADER, rows)} ({len(rows)} rows)")


if __name__ == "__main__":
    main()
