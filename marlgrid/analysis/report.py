"""Outputs of an aggregation: the final-performance table (Markdown, CSV), curve CSV and figure."""

from __future__ import annotations

import csv
import math
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from marlgrid.analysis.stats import BAND_FIELDS, Bands


@dataclass(frozen=True)
class FinalRow:
    """One condition's final performance: per-run values and their statistics."""

    label: str
    key: tuple[str, ...]
    seeds: list[int | None]
    runs: list[Path]
    values: np.ndarray
    stats: dict[str, float]  # Bands.at(0)


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


def markdown_table(rows: Sequence[FinalRow], definition: str, digits: int | None = None) -> str:
    """The final-performance table; its header says what "final" is (``definition``).
    ``digits`` decimals, by default :func:`table_digits`."""
    digits = table_digits(rows) if digits is None else digits
    lines = [
        f"| condition | n seeds | mean ({definition}) | 95% CI | IQM | IQM 95% CI |",
        "|---|---:|---:|---|---:|---|",
    ]
    for row in rows:
        s = row.stats
        lines.append(
            f"| {row.label} | {s['n']} | {_fmt(s['mean'], digits)} | "
            f"{_interval(s['mean_low'], s['mean_high'], digits)} | {_fmt(s['iqm'], digits)} | "
            f"{_interval(s['iqm_low'], s['iqm_high'], digits)} |"
        )
    return "\n".join(lines)


FINAL_COLUMNS = (
    "condition", "n_seeds", "seeds", "mean", "mean_ci_low", "mean_ci_high", "iqm",
    "iqm_ci_low", "iqm_ci_high", "key",
)  # fmt: skip


def write_final_csv(path: Path, rows: Sequence[FinalRow]) -> None:
    """The table as CSV (full precision; seeds ``;``-separated; ``key`` the full condition)."""
    with path.open("w", newline="") as f:
        writer = csv.writer(f)
        writer.writerow(FINAL_COLUMNS)
        for row in rows:
            s = row.stats
            writer.writerow([
                row.label, s["n"], ";".join(str(x) for x in row.seeds), s["mean"],
                s["mean_low"], s["mean_high"], s["iqm"], s["iqm_low"], s["iqm_high"],
                ",".join(row.key),
            ])  # fmt: skip


def write_runs_csv(path: Path, rows: Sequence[FinalRow]) -> None:
    """One line per run: condition, seed, run directory and its final value."""
    with path.open("w", newline="") as f:
        writer = csv.writer(f)
        writer.writerow(("condition", "seed", "run", "final"))
        for row in rows:
            for seed, run, value in zip(row.seeds, row.runs, row.values, strict=True):
                writer.writerow([row.label, seed, str(run), float(value)])


def write_curves_csv(path: Path, curves: Sequence[CurveSet]) -> None:
    """Per condition and grid step: runs with a value, mean and IQM with their intervals."""
    with path.open("w", newline="") as f:
        writer = csv.writer(f)
        writer.writerow(("condition", "step", "n", "mean", "mean_ci_low", "mean_ci_high", "iqm",
                         "iqm_ci_low", "iqm_ci_high"))  # fmt: skip
        for c in curves:
            for i, step in enumerate(c.grid):
                p = c.bands.at(i)
                writer.writerow([c.label, float(step), *(p[k] for k in BAND_FIELDS)])


def plot_curves(
    path: Path, curves: Sequence[CurveSet], ylabel: str, stat: str = "mean", title: str = ""
) -> None:
    """A PNG of each condition's ``stat`` (``mean`` or ``iqm``) with its shaded 95% interval."""
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
    ax.set_ylabel(f"{ylabel} ({'IQM' if stat == 'iqm' else 'mean'} over seeds, 95% CI)")
    if title:
        ax.set_title(title, fontsize=9)
    ax.legend(fontsize=8)
    ax.grid(alpha=0.3)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)
