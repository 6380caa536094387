"""Per-arm means with Student-t intervals, and Welch's tests between arms, from evaluation CSVs.

    python experiments/results/eval_compare.py experiments/results/social_r1_eval.csv \
        --metric return --metric rewards --welch r1/penalty_0 r1/penalty_1.5 \
        --out experiments/results/social_r1_compare

The rows (``experts_eval.py``'s CSVs: ``run``, ``mode`` and metric columns) of one ``--mode``
are grouped by arm: the two folders above a run's ``seed_<k>`` (``runs/r1/penalty_0/seed_3`` is
arm ``r1/penalty_0``). Writes ``<out>_t.csv`` (per arm and metric: the seeds, each seed's value,
the mean and its Student-t 95% interval, NaN below 2 seeds) and, with ``--welch A B``
(repeatable), ``<out>_welch.csv`` (per pair and metric: both means, Welch's t and two-sided p).
"""

from __future__ import annotations

import argparse
import csv
import re
from collections import defaultdict
from pathlib import Path

from marlgrid.analysis.report import write_csv
from marlgrid.analysis.stats import t_interval, welch

SEED_DIR = re.compile(r"seed_(\d+)$")


class CompareError(ValueError):
    """Input that cannot be compared: the message names it and what is allowed."""


def arm_of(run: str) -> tuple[str, int]:
    """``(arm, seed)`` of a run path ``.../<page>/<arm>/seed_<k>``."""
    path = Path(run)
    match = SEED_DIR.match(path.name)
    if match is None or len(path.parts) < 3:
        raise CompareError(f"run {run!r} is not a .../<page>/<arm>/seed_<k> path")
    return f"{path.parent.parent.name}/{path.parent.name}", int(match.group(1))


def read_arms(
    paths: list[Path], metrics: list[str], mode: str
) -> dict[str, dict[str, dict[int, float]]]:
    """metric -> arm -> seed -> value, from the rows of ``mode``."""
    out: dict[str, dict[str, dict[int, float]]] = {m: defaultdict(dict) for m in metrics}
    for path in paths:
        if not path.is_file():
            raise CompareError(f"{path} does not exist")
        with path.open(newline="", encoding="utf-8") as f:
            rows = list(csv.DictReader(f))
        for row in rows:
            if row.get("mode") != mode:
                continue
            arm, seed = arm_of(row["run"])
            for metric in metrics:
                if metric not in row:
                    raise CompareError(
                        f"{path} has no column {metric!r}; its columns: {', '.join(row)}"
                    )
                if seed in out[metric][arm]:
                    raise CompareError(f"{arm} seed {seed} appears twice ({path})")
                out[metric][arm][seed] = float(row[metric])
    if not any(out[m] for m in metrics):
        raise CompareError(f"no rows of mode {mode!r} in {', '.join(map(str, paths))}")
    return out


def interval_rows(values: dict[str, dict[str, dict[int, float]]]) -> list[list[object]]:
    rows: list[list[object]] = []
    for metric, arms in values.items():
        for arm in sorted(arms):
            seeds = sorted(arms[arm])
            data = [arms[arm][s] for s in seeds]
            low, high = t_interval(data)  # NaN below 2 seeds
            per_seed = " ".join(f"{s}:{v:.4g}" for s, v in zip(seeds, data, strict=True))
            mean = sum(data) / len(data)
            rows.append(
                [arm, metric, len(data), per_seed, *(round(v, 4) for v in (mean, low, high))]
            )
    return rows


def welch_rows(
    values: dict[str, dict[str, dict[int, float]]], pairs: list[tuple[str, str]]
) -> list[list[object]]:
    rows: list[list[object]] = []
    for metric, arms in values.items():
        for a, b in pairs:
            for arm in (a, b):
                if arm not in arms:
                    raise CompareError(
                        f"--welch arm {arm!r} is not in the CSVs; arms: {sorted(arms)}"
                    )
            xa, xb = list(arms[a].values()), list(arms[b].values())
            t, p = welch(xa, xb)  # NaN where a side has one seed
            means = (sum(xa) / len(xa), sum(xb) / len(xb))
            # p to 4 significant digits: a tiny p rounded to 4 places would read as 0
            rows.append([a, b, metric, *(round(v, 4) for v in (*means, t)), float(f"{p:.4g}")])
    return rows


def write(path: Path, header: tuple[str, ...], rows: list[list[object]]) -> None:
    print(f"wrote {write_csv(path, header, rows)}")


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("csvs", type=Path, nargs="+")
    parser.add_argument("--metric", action="append", help="a column (repeatable; default return)")
    parser.add_argument("--mode", default="greedy", choices=("greedy", "sampled"))
    parser.add_argument("--welch", nargs=2, action="append", default=[], metavar=("A", "B"))
    parser.add_argument("--out", type=Path, required=True, help="path stem of the outputs")
    args = parser.parse_args(argv)
    try:
        values = read_arms(args.csvs, args.metric or ["return"], args.mode)
        pairs = [tuple(p) for p in args.welch]
        welch_table = welch_rows(values, pairs)  # every arm checked before anything is written
    except CompareError as exc:
        raise SystemExit(f"error: {exc}") from None
    header = ("arm", "metric", "seeds", "per_seed", "mean", "t_low", "t_high")
    write(Path(f"{args.out}_t.csv"), header, interval_rows(values))
    if pairs:
        header = ("a", "b", "metric", "mean_a", "mean_b", "welch_t", "p")
        write(Path(f"{args.out}_welch.csv"), header, welch_table)


if __name__ == "__main__":
    main()
