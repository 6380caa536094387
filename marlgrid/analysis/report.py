"""Outputs of an aggregation: the final-performance table (Markdown, CSV) with per-seed values,
steps to a threshold and Welch's tests, the curve CSV and the figure.

``experiments/aggregate.py`` writes these from :func:`marlgrid.analysis.aggregate`'s result; the
statistics themselves are :mod:`marlgrid.analysis.stats`'.
"""

from __future__ import annotations

import csv
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from marlgrid.analysis.merge import merge_into
from marlgrid.analysis.stats import BAND_FIELDS, IQM_MIN_RUNS, Bands, welch


@dataclass(frozen=True)
class FinalRow:
    """One condition's final performance: per-run values and their statistics; ``steps_to``
    (when a threshold was asked for) each run's first step at it, NaN where it never got there."""

    label: str
    key: tuple[str, ...]
    seeds: list[int | None]
    runs: list[Path]
    values: np.ndarray
    stats: dict[str, float]  # Bands.at(0)
    steps_to: np.ndarray | None = None


@dataclass(frozen=True)
class WelchResult:
    """Welch's two-sided test of equal means between two conditions' final values."""

    a: str
    b: str
    n_a: int
    n_b: int
    mean_a: float
    mean_b: float
    t: float
    p: float


def welch_between(a: FinalRow, b: FinalRow) -> WelchResult:
    """Welch's test between the final values of ``a`` and ``b`` (NaN below 2 runs a side)."""
    t, p = welch(a.values, b.values)
    return WelchResult(
        a.label, b.label, len(a.values), len(b.values), float(np.mean(a.values)),
        float(np.mean(b.values)), t, p,
    )  # fmt: skip


@dataclass(frozen=True)
class CurveSet:
    """One condition's aligned curves on the shared grid and their bands."""

    label: str
    grid: np.ndarray
    bands: Bands


def final_of(curve_values: np.ndarray, last: int) -> float:
    """A run's final performance: the mean of its last ``last`` logged values."""
    if len(curve_values) == 0:
        return float("nan")
    return float(np.mean(curve_values[-last:]))


def _fmt(value: float, digits: int) -> str:
    return "n/a" if not math.isfinite(value) else f"{value:.{digits}f}"


def _interval(low: float, high: float, digits: int) -> str:
    if not (math.isfinite(low) and math.isfinite(high)):
        return "n/a"
    return f"[{low:.{digits}f}, {high:.{digits}f}]"


def format_steps(step: float) -> str:
    """An env step count in three significant digits (``58.4k``, ``102k``, ``1.25M``);
    ``never`` for NaN."""
    if not math.isfinite(step):
        return "never"
    for scale, suffix in ((1e6, "M"), (1e3, "k")):
        if abs(step) >= scale:
            value = step / scale
            decimals = max(0, 2 - math.floor(math.log10(abs(value))))
            return f"{value:.{decimals}f}{suffix}"
    return f"{step:.0f}"


def steps_summary(steps_to: np.ndarray) -> str:
    """Per seed, then the mean over the runs that got there and how many never did:
    ``58.4k / never / 73.0k (mean 65.7k; never: 1 of 3)``."""
    per_seed = " / ".join(format_steps(float(x)) for x in steps_to)
    reached = steps_to[np.isfinite(steps_to)]
    mean = format_steps(float(reached.mean())) if len(reached) else "n/a"
    return f"{per_seed} (mean {mean}; never: {len(steps_to) - len(reached)} of {len(steps_to)})"


def interval_kind(n: int) -> str:
    """What the table's intervals are for a condition of ``n`` runs."""
    if n < 2:
        return "n/a"
    return "t" if n < IQM_MIN_RUNS else "t; IQM bootstrap"


def per_seed(values: np.ndarray, digits: int) -> str:
    """The runs' final values, ``" / "``-separated, in seed order."""
    return " / ".join(_fmt(float(v), digits) for v in values)


def table_digits(rows: Sequence[FinalRow], digits: int = 3) -> int:
    """Decimals for a table: ``digits``, plus as many as values below 1 need to keep
    ``digits`` significant ones (a KL of 0.00046 prints as 0.000462, not 0.000)."""
    values = [
        abs(v)
        for row in rows
        for key in ("mean", "mean_low", "mean_high", "iqm", "iqm_low", "iqm_high")
        if math.isfinite(v := float(row.stats[key])) and v != 0.0
    ]
    if not values or max(values) >= 1:
        return digits
    return digits + math.floor(-math.log10(max(values)))


def threshold_header(threshold: float, below: bool = False) -> str:
    """The steps-to column's header."""
    return f"env steps to {'<=' if below else '>='} {threshold:g} (per seed)"


def markdown_table(
    rows: Sequence[FinalRow],
    definition: str,
    digits: int | None = None,
    *,
    threshold: float | None = None,
    below: bool = False,
) -> str:
    """The final-performance table; its header says what "final" is (``definition``).
    ``digits`` decimals, by default :func:`table_digits`. Every row gives the per-seed values and
    the mean with its Student-t 95% CI; the IQM and its bootstrap CI from
    :data:`~marlgrid.analysis.stats.IQM_MIN_RUNS` seeds up ("-" below); with ``threshold`` a
    column of each run's steps to it."""
    digits = table_digits(rows) if digits is None else digits
    steps = threshold is not None and any(row.steps_to is not None for row in rows)
    header = (
        f"| condition | n seeds | per seed | mean ({definition}) | 95% CI | interval | IQM | "
        "IQM 95% CI |"
    )
    rule = "|---|---:|---|---:|---|---|---:|---|"
    if steps:
        header += f" {threshold_header(float(threshold), below)} |"
        rule += "---|"
    lines = [header, rule]
    for row in rows:
        s = row.stats
        if s["n"] >= IQM_MIN_RUNS:
            mid = f"{_fmt(s['iqm'], digits)} | {_interval(s['iqm_low'], s['iqm_high'], digits)}"
        else:
            mid = "- | -"
        line = (
            f"| {row.label} | {s['n']} | {per_seed(row.values, digits)} | "
            f"{_fmt(s['mean'], digits)} | {_interval(s['mean_low'], s['mean_high'], digits)} | "
            f"{interval_kind(s['n'])} | {mid} |"
        )
        if steps:
            line += f" {steps_summary(row.steps_to) if row.steps_to is not None else 'n/a'} |"
        lines.append(line)
    return "\n".join(lines)


def welch_markdown(results: Sequence[WelchResult], digits: int = 3) -> str:
    """Welch's tests as a Markdown table."""
    lines = ["| A | B | n A | n B | mean A | mean B | Welch's t | p (two-sided) |",
             "|---|---|---:|---:|---:|---:|---:|---:|"]  # fmt: skip
    for w in results:
        lines.append(
            f"| {w.a} | {w.b} | {w.n_a} | {w.n_b} | {_fmt(w.mean_a, digits)} | "
            f"{_fmt(w.mean_b, digits)} | {_fmt(w.t, digits)} | {_fmt(w.p, digits)} |"
        )
    return "\n".join(lines)


FINAL_COLUMNS = (
    "condition", "n_seeds", "seeds", "mean", "mean_ci_low", "mean_ci_high", "iqm",
    "iqm_ci_low", "iqm_ci_high", "key", "interval", "per_seed", "threshold", "steps_to_reached",
    "steps_to_mean", "steps_to_per_seed",
)  # fmt: skip


def _steps_cells(row: FinalRow, threshold: float | None) -> list[object]:
    if threshold is None or row.steps_to is None:
        return ["", "", "", ""]
    reached = row.steps_to[np.isfinite(row.steps_to)]
    mean = float(reached.mean()) if len(reached) else float("nan")
    shown = ";".join("never" if not math.isfinite(x) else f"{x:.0f}" for x in row.steps_to)
    return [threshold, len(reached), mean, shown]


def write_final_csv(path: Path, rows: Sequence[FinalRow], threshold: float | None = None) -> None:
    """The table as CSV (full precision; seeds and per-seed values ``;``-separated; ``key`` the
    full condition; ``interval``: ``t`` for the mean's CI, plus the IQM's bootstrap from 5 seeds;
    ``iqm`` empty below 5 seeds, as in the table;
    the ``steps_to_*`` columns filled when a threshold was asked for)."""
    with path.open("w", newline="") as f:
        writer = csv.writer(f)
        writer.writerow(FINAL_COLUMNS)
        for row in rows:
            s = row.stats
            iqm = s["iqm"] if s["n"] >= IQM_MIN_RUNS else ""  # as the table: none below 5 seeds
            writer.writerow([
                row.label, s["n"], ";".join(str(x) for x in row.seeds), s["mean"],
                s["mean_low"], s["mean_high"], iqm, s["iqm_low"], s["iqm_high"],
                ",".join(row.key), interval_kind(s["n"]),
                ";".join(repr(float(v)) for v in row.values), *_steps_cells(row, threshold),
            ])  # fmt: skip


def write_runs_csv(path: Path, rows: Sequence[FinalRow]) -> None:
    """One line per run: condition, seed, run directory, its final value and (when a threshold
    was asked for) its first step at it, or ``never``."""
    with path.open("w", newline="") as f:
        writer = csv.writer(f)
        writer.writerow(("condition", "seed", "run", "final", "steps_to"))
        for row in rows:
            steps = row.steps_to if row.steps_to is not None else [None] * len(row.values)
            for seed, run, value, step in zip(row.seeds, row.runs, row.values, steps, strict=True):
                shown = (
                    "" if step is None else "never" if not math.isfinite(step) else f"{step:.0f}"
                )
                writer.writerow([row.label, seed, str(run), float(value), shown])


def show_and_write_rows(
    rows: Sequence[Mapping[str, object]], path: Path | None = None, merge_by: str | None = None
) -> None:
    """Print each row as ``key=value`` pairs (floats to 3 decimals) and, given ``path``, write the
    rows there as CSV at full precision (the first row's keys are the header; no rows with a
    ``path`` raise ValueError rather than leave an older file in place). With ``merge_by`` (a
    column), the rows are merged into an existing file by that column instead
    (:func:`marlgrid.analysis.merge.merge_into`: its other rows stay)."""
    for row in rows:
        print(
            "  ".join(
                f"{k}={v:.3f}" if isinstance(v, float) else f"{k}={v}" for k, v in row.items()
            )
        )
    if path is not None and not rows:
        raise ValueError(f"no rows to write to {path}")
    if path is None:
        return

    def write(target: Path) -> None:
        with Path(target).open("w", newline="") as f:
            writer = csv.DictWriter(f, fieldnames=list(rows[0]))
            writer.writeheader()
            writer.writerows(rows)

    if merge_by is None:
        write(path)
        return
    kept = merge_into(Path(path), merge_by, write)
    if kept:
        print(f"kept the rows of {len(kept)} {merge_by}(s) not evaluated now: {', '.join(kept)}")


def write_csv(path: str | Path, header: Sequence[str], rows: Sequence[Sequence[object]]) -> Path:
    """Write ``rows`` under ``header`` as CSV at ``path``; returns the path."""
    path = Path(path)
    with path.open("w", newline="", encoding="utf-8") as f:
        writer = csv.writer(f)
        writer.writerow(header)
        writer.writerows(rows)
    return path


def write_welch_csv(path: Path, results: Sequence[WelchResult]) -> None:
    """Welch's tests, one line per pair of conditions."""
    header = ("a", "b", "n_a", "n_b", "mean_a", "mean_b", "welch_t", "p")
    write_csv(
        path, header, [[w.a, w.b, w.n_a, w.n_b, w.mean_a, w.mean_b, w.t, w.p] for w in results]
    )


CURVE_COLUMNS = (
    "condition", "step", "n", "mean", "mean_ci_low", "mean_ci_high", "iqm", "iqm_ci_low",
    "iqm_ci_high",
)  # fmt: skip


def write_curves_csv(path: Path, curves: Sequence[CurveSet]) -> None:
    """Per condition and grid step: runs with a value, mean and IQM with their intervals."""
    with path.open("w", newline="") as f:
        writer = csv.writer(f)
        writer.writerow(CURVE_COLUMNS)
        for c in curves:
            for i, step in enumerate(c.grid):
                p = c.bands.at(i)
                writer.writerow([c.label, float(step), *(p[k] for k in BAND_FIELDS)])


def read_curves_csv(path: Path) -> list[CurveSet]:
    """The curves :func:`write_curves_csv` wrote, one per condition in file order."""
    rows: dict[str, list[list[float]]] = {}
    with path.open(newline="") as f:
        for row in csv.DictReader(f):
            rows.setdefault(row["condition"], []).append([float(row[c]) for c in CURVE_COLUMNS[1:]])
    curves = []
    for label, values in rows.items():
        table = np.array(values)
        bands = Bands(*(table[:, i + 1] for i in range(len(BAND_FIELDS))))
        curves.append(CurveSet(label, table[:, 0], bands))
    return curves


def plot_curves(
    path: Path, curves: Sequence[CurveSet], ylabel: str, stat: str = "mean", title: str = ""
) -> None:
    """A PNG of each condition's ``stat`` (``mean`` or ``iqm``) with its shaded 95% interval
    (Student-t for the mean; the IQM's bootstrap band needs 5 seeds)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(7, 4))
    for c in curves:
        centre = getattr(c.bands, stat)
        low, high = getattr(c.bands, f"{stat}_low"), getattr(c.bands, f"{stat}_high")
        runs = int(c.bands.n.max()) if len(c.bands.n) else 0
        (line,) = ax.plot(c.grid, centre, label=f"{c.label} (n={runs})")
        ax.fill_between(c.grid, low, high, color=line.get_color(), alpha=0.2, linewidth=0)
    ax.set_xlabel("environment steps")
    band = "IQM over seeds, 95% bootstrap CI" if stat == "iqm" else "mean over seeds, 95% t-CI"
    ax.set_ylabel(f"{ylabel} ({band})")
    if title:
        ax.set_title(title, fontsize=9)
    ax.legend(fontsize=8)
    ax.grid(alpha=0.3)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)
