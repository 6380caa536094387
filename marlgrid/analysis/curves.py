"""Learning curves from ``metrics.csv``: reading, smoothing and aligning on a step grid."""

from __future__ import annotations

import csv
import math
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np

#: a curve: the logged steps (increasing) and the metric's values at them
Curve = tuple[np.ndarray, np.ndarray]


class AnalysisError(ValueError):
    """Runs, metrics or settings that cannot be aggregated; the message says why."""


class CurveError(AnalysisError):
    """A run directory or metric that cannot be read; the message says why."""


def metric_columns(run_dir: Path) -> list[str]:
    """The metric columns of ``run_dir/metrics.csv`` (``step`` left out), in file order."""
    path = run_dir / "metrics.csv"
    if not run_dir.is_dir():
        raise CurveError(f"run directory {run_dir} does not exist")
    if not path.is_file():
        raise CurveError(f"{run_dir} is not a run directory: it has no metrics.csv")
    with path.open(newline="") as f:
        header = next(csv.reader(f), [])
    return [c for c in header if c != "step"]


@dataclass(frozen=True)
class BadCell:
    """A cell of a ``metrics.csv`` that is not a number (:func:`read_curve` skips its row)."""

    path: Path
    line: int  # line of the file (the header is line 1)
    column: str
    text: str

    def __str__(self) -> str:
        return (
            f"{self.path} line {self.line}, column {self.column}: {self.text!r} is not a number "
            "(row skipped)"
        )


def read_metrics(path: str | Path) -> list[dict[str, float]]:
    """The rows of ``metrics.csv`` (``path``: the file or its run directory) as floats; an empty
    or non-numeric cell reads as NaN."""
    path = Path(path)
    if path.is_dir():
        path = path / "metrics.csv"
    with path.open(newline="") as f:
        rows = list(csv.DictReader(f))
    return [{k: _float(v) for k, v in row.items() if k is not None} for row in rows]


def _number(value: str | None) -> float | None:
    """A cell as a float: NaN when empty, None when it is not a number."""
    if value in (None, ""):
        return math.nan
    try:
        return float(value)
    except ValueError:
        return None


def _float(value: str | None) -> float:
    number = _number(value)
    return math.nan if number is None else number


def read_curve(run_dir: Path, metric: str, bad: list[BadCell] | None = None) -> Curve:
    """Steps and values of ``metric`` in ``run_dir/metrics.csv`` (rows without it skipped).

    A row whose ``step`` or ``metric`` cell is not a number is skipped too, and reported in
    ``bad`` (when given) as a :class:`BadCell` naming the file, line and column. Raises
    :class:`CurveError` when the run has no ``metrics.csv`` or no column ``metric`` (naming the
    available ones).
    """
    columns = metric_columns(run_dir)
    path = run_dir / "metrics.csv"
    if metric not in columns:
        shown = sorted(columns)
        raise CurveError(f"metric {metric!r} is not in {path}; available metrics: {shown}")
    steps, values = [], []
    with path.open(newline="") as f:
        reader = csv.DictReader(f)
        for row in reader:
            if row.get(metric) in (None, ""):  # not logged in this row
                continue
            cells = {c: _number(row.get(c)) for c in ("step", metric)}
            wrong = [c for c, v in cells.items() if v is None or (c == "step" and math.isnan(v))]
            if wrong:
                if bad is not None:
                    bad += [BadCell(path, reader.line_num, c, row.get(c) or "") for c in wrong]
                continue
            if not math.isnan(cells[metric]):
                steps.append(cells["step"])
                values.append(cells[metric])
    return np.array(steps), np.array(values)


def smooth(values: np.ndarray, window: int) -> np.ndarray:
    """Trailing moving average over ``window`` values (the first ones average what there is)."""
    if window <= 1 or len(values) < window:
        return values
    kernel = np.ones(window) / window
    head = np.cumsum(values[: window - 1]) / np.arange(1, window)
    return np.concatenate([head, np.convolve(values, kernel, mode="valid")])


def step_grid(curves: Sequence[Curve], points: int) -> np.ndarray:
    """A step grid shared by ``curves``: every step any of them logged when there are no more
    than ``points`` such steps, else ``points`` evenly spaced steps from the earliest first step
    to the latest last step."""
    if points < 2:
        raise AnalysisError(f"grid points must be >= 2, got {points}")
    logged = [steps for steps, _ in curves if len(steps)]
    if not logged:
        raise AnalysisError("no curve has any logged value")
    union = np.unique(np.concatenate(logged)).astype(float)
    if len(union) <= points:
        return union
    return np.linspace(float(union[0]), float(union[-1]), points)


def align(curves: Sequence[Curve], grid: np.ndarray) -> np.ndarray:
    """``(runs, len(grid))``: each curve linearly interpolated onto ``grid``; NaN before a run's
    first and after its last logged step (no extrapolation)."""
    out = np.full((len(curves), len(grid)), np.nan)
    for i, (steps, values) in enumerate(curves):
        if len(steps):
            out[i] = np.interp(grid, steps, values, left=np.nan, right=np.nan)
    return out
