"""Student-t intervals and Welch's tests from the per-run CSVs committed beside the result pages.

    python experiments/results/t_intervals.py          # rewrites every <stem>_t.csv / _welch.csv

The pages' first tables gave percentile-bootstrap intervals over 3 seeds, which are just the
seeds' [min, max]. This recomputes every condition's interval as ``aggregate.py`` now does
(:func:`marlgrid.analysis.stats.bands`: the mean with its Student-t 95% interval; the IQM with a
stratified-bootstrap interval from 5 seeds up, scipy's, 10,000 resamples, seed 0) from the
committed per-run values alone, so no run directory is needed:

- every ``*_runs.csv`` that ``aggregate.py`` wrote (columns ``condition, seed, run, final``) under
  ``experiments/results/``, and the hand-made ones in :data:`CUSTOM` (their condition and value
  columns named there);
- writes ``<stem>_t.csv`` beside it (one line per condition and value column) and
  ``<stem>_welch.csv`` (Welch's t and two-sided p for every pair of conditions).

A ``_runs.csv`` whose ``<stem>_final.csv`` already gives Student-t intervals (an ``interval``
column: ``aggregate.py``'s output since it computes them) is left alone, so its own
``_welch.csv`` is not overwritten.
"""

from __future__ import annotations

import csv
import itertools
import math
from pathlib import Path

import numpy as np

from marlgrid.analysis.report import write_csv
from marlgrid.analysis.stats import bands, welch

RESULTS = Path(__file__).resolve().parent
#: hand-made per-run CSVs: file -> (condition column, value columns)
CUSTOM = {
    "memory_default_runs.csv": ("line", ("final_return_last20", "eval_greedy_return")),
    "memory_3tiles_runs.csv": ("line", ("final_return", "eval_greedy_return")),
}
T_COLUMNS = (
    "condition", "value", "n", "seeds", "per_seed", "mean", "sd", "t_half_width", "t_low",
    "t_high", "iqm", "iqm_low", "iqm_high", "interval",
)  # fmt: skip
WELCH_COLUMNS = ("a", "b", "value", "n_a", "n_b", "mean_a", "mean_b", "welch_t", "p")


def read_runs(path: Path) -> tuple[str, tuple[str, ...], list[dict[str, str]]] | None:
    """(condition column, value columns, rows) of a per-run CSV; None for another kind of CSV."""
    with path.open(newline="", encoding="utf-8") as f:
        rows = list(csv.DictReader(f))
    if path.name in CUSTOM:
        condition, values = CUSTOM[path.name]
        return condition, values, rows
    if rows and {"condition", "seed", "final"} <= set(rows[0]):
        return "condition", ("final",), rows
    return None


def has_t_intervals(runs_csv: Path) -> bool:
    """Whether ``aggregate.py`` wrote t-intervals beside this per-run CSV (its ``_final.csv``
    has an ``interval`` column)."""
    final = runs_csv.with_name(runs_csv.name[: -len("_runs.csv")] + "_final.csv")
    if not final.exists():
        return False
    with final.open(newline="", encoding="utf-8") as f:
        return "interval" in next(csv.reader(f), [])


def by_condition(rows: list[dict[str, str]], column: str) -> dict[str, list[dict[str, str]]]:
    """Rows grouped by ``column``, in first-seen order."""
    out: dict[str, list[dict[str, str]]] = {}
    for row in rows:
        out.setdefault(row[column], []).append(row)
    return out


def _number(cell: str) -> float:
    try:
        return float(cell)
    except ValueError:
        return math.nan


def t_rows(groups: dict[str, list[dict[str, str]]], value: str) -> list[list[object]]:
    """One ``_t.csv`` line per condition for the value column ``value``."""
    out = []
    for label, rows in groups.items():
        x = np.array([_number(r[value]) for r in rows])
        x = x[np.isfinite(x)]
        if not len(x):
            continue
        s = bands(x).at(0)
        sd = float(x.std(ddof=1)) if len(x) > 1 else math.nan
        kind = "n/a" if len(x) < 2 else "t" if len(x) < 5 else "t; IQM bootstrap"
        out.append([
            label, value, len(x), ";".join(r["seed"] for r in rows),
            " / ".join(f"{v:.6g}" for v in x), s["mean"], sd, s["mean_high"] - s["mean"],
            s["mean_low"], s["mean_high"], s["iqm"], s["iqm_low"], s["iqm_high"], kind,
        ])  # fmt: skip
    return out


def welch_rows(groups: dict[str, list[dict[str, str]]], value: str) -> list[list[object]]:
    """Welch's test between every pair of conditions, for the value column ``value``."""
    out = []
    for (a, rows_a), (b, rows_b) in itertools.combinations(groups.items(), 2):
        x, y = (np.array([_number(r[value]) for r in rows]) for rows in (rows_a, rows_b))
        x, y = x[np.isfinite(x)], y[np.isfinite(y)]
        if len(x) < 2 or len(y) < 2 or np.ptp(x) == np.ptp(y) == 0:
            continue  # no test without two values a side, or without any spread
        t, p = welch(x, y)
        out.append([a, b, value, len(x), len(y), float(x.mean()), float(y.mean()), t, p])
    return out


def write(path: Path, header: tuple[str, ...], rows: list[list[object]]) -> None:
    write_csv(path, header, rows)


def main() -> None:
    for path in sorted(RESULTS.rglob("*_runs.csv")):
        found = read_runs(path)
        if found is None or (path.name not in CUSTOM and has_t_intervals(path)):
            continue
        condition, values, rows = found
        groups = by_condition(rows, condition)
        stem = path.with_name(path.name[: -len("_runs.csv")])
        t_out = [line for value in values for line in t_rows(groups, value)]
        welch_out = [line for value in values for line in welch_rows(groups, value)]
        write(stem.with_name(stem.name + "_t.csv"), T_COLUMNS, t_out)
        print(f"{path.relative_to(RESULTS)}: {len(t_out)} interval(s)", end="")
        if welch_out:
            write(stem.with_name(stem.name + "_welch.csv"), WELCH_COLUMNS, welch_out)
            print(f", {len(welch_out)} Welch test(s)", end="")
        print()


if __name__ == "__main__":
    main()
