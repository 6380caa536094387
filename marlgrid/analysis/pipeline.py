"""From run directories to curves and a final-performance table per condition."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from marlgrid.analysis.curves import (
    AnalysisError,
    BadCell,
    CurveError,
    align,
    metric_columns,
    read_curve,
    step_grid,
)
from marlgrid.analysis.curves import smooth as smooth_values
from marlgrid.analysis.report import CurveSet, FinalRow, final_of
from marlgrid.analysis.runs import (
    NO_METRICS,
    UNFINISHED,
    Condition,
    Missing,
    Run,
    check_poolable,
    find_runs,
    group_runs,
)
from marlgrid.analysis.stats import bands, check_options


@dataclass(frozen=True)
class LeftOut:
    """A run that was found but not aggregated, and why."""

    path: Path
    reason: str


@dataclass
class Aggregate:
    """Everything :func:`aggregate` computed; ``left_out``, ``missing`` and ``skipped`` (the
    non-numeric cells whose rows were left out of the curves) are for the report."""

    metric: str
    definition: str
    grid: np.ndarray
    conditions: list[Condition]
    curves: list[CurveSet]
    finals: list[FinalRow]
    left_out: list[LeftOut]
    missing: list[Missing]
    skipped: list[BadCell] = field(default_factory=list)

    @property
    def runs(self) -> list[Run]:
        return [r for c in self.conditions for r in c.runs]


def resolve_metric(metric: str, columns: Sequence[str]) -> str:
    """``metric`` if it is a column, else the one column whose last ``/`` part is ``metric``
    (``episodic_return`` -> ``charts/episodic_return``); :class:`AnalysisError` names the
    available columns otherwise."""
    if metric in columns:
        return metric
    short = [c for c in columns if c.rsplit("/", 1)[-1] == metric]
    if len(short) == 1:
        return short[0]
    hint = f" ({len(short)} match {metric!r}: {short})" if short else ""
    raise AnalysisError(
        f"metric {metric!r} is not in metrics.csv of any run{hint}; available metrics: "
        f"{sorted(columns)}"
    )


def aggregate(
    paths: Sequence[str | Path],
    metric: str = "charts/episodic_return",
    *,
    group_by: Sequence[str] = (),
    last: int = 10,
    points: int = 100,
    smooth: int = 1,
    include_unfinished: bool = False,
    backend: str = "scipy",
    method: str = "percentile",
    resamples: int = 10_000,
    confidence: float = 0.95,
    seed: int = 0,
    final_value: Callable[[Run], float] | None = None,
    final_definition: str | None = None,
    pool_over: Sequence[str] = (),
) -> Aggregate:
    """Read the runs in ``paths``, group them into conditions and compute, per condition, the
    mean and IQM of ``metric`` over seeds with bootstrap intervals, on a shared step grid and at
    the end of training.

    A run's final value is the mean of its last ``last`` logged values (unsmoothed), or
    ``final_value(run)`` when given (then ``final_definition`` describes it). ``smooth`` (a
    trailing moving average per run) applies to the curves only. Unfinished runs are left out
    unless ``include_unfinished``; the runs of one condition must have the same config but for
    the seed, bookkeeping and the ``pool_over`` keys (else :class:`AnalysisError` names the
    keys); every run left out and every missing one is listed, and so is
    every row skipped for a step or ``metric`` cell that is not a number (``skipped``).
    """
    check_options(backend, method, resamples, confidence)
    for name, value, low in (("last", last, 1), ("points", points, 2), ("smooth", smooth, 1)):
        if isinstance(value, bool) or not isinstance(value, int) or value < low:
            raise AnalysisError(f"{name} must be an integer >= {low}, got {value!r}")
    found = find_runs(paths)
    usable, left_out = [], []
    for run in found.runs:
        if run.status == NO_METRICS:
            left_out.append(LeftOut(run.path, run.detail))
        elif run.status == UNFINISHED and not include_unfinished:
            left_out.append(LeftOut(run.path, f"{run.detail} (include_unfinished keeps it)"))
        else:
            usable.append(run)
    if not usable:
        reasons = "; ".join(f"{x.path}: {x.reason}" for x in left_out)
        raise AnalysisError(f"no usable runs in {[str(p) for p in paths]}: {reasons}")
    columns = {run.path: metric_columns(run.path) for run in usable}
    metric = resolve_metric(metric, sorted({c for cols in columns.values() for c in cols}))
    kept, curves, skipped = [], {}, []
    for run in usable:
        if metric not in columns[run.path]:
            left_out.append(LeftOut(run.path, f"metric {metric!r} not logged"))
            continue
        steps, values = read_curve(run.path, metric, skipped)
        if not len(values):
            left_out.append(LeftOut(run.path, f"no values of {metric!r} (empty or NaN)"))
            continue
        kept.append(run)
        curves[run.path] = (steps, values)
    if not kept:
        reasons = "; ".join(f"{x.path}: {x.reason}" for x in left_out)
        raise CurveError(f"no run has values of {metric!r}: {reasons}")

    conditions = group_runs(kept, group_by)
    for condition in conditions:
        check_poolable(condition, pool_over)
    grid = step_grid(list(curves.values()), points)
    options = {"backend": backend, "method": method, "resamples": resamples,
               "confidence": confidence, "seed": seed}  # fmt: skip
    curve_sets, finals = [], []
    for c in conditions:
        shown = [(curves[r.path][0], smooth_values(curves[r.path][1], smooth)) for r in c.runs]
        curve_sets.append(CurveSet(c.label, grid, bands(align(shown, grid), **options)))
        if final_value is None:
            values = np.array([final_of(curves[r.path][1], last) for r in c.runs])
        else:
            values = np.array([final_value(r) for r in c.runs], dtype=float)
        stats = bands(values, **options).at(0)
        finals.append(FinalRow(c.label, c.key, c.seeds, [r.path for r in c.runs], values, stats))
    if final_value is None:
        short = metric.rsplit("/", 1)[-1]
        what = f"last logged `{short}`" if last == 1 else f"mean of last {last} logged `{short}`"
        final_definition = f"final = {what}"
    return Aggregate(
        metric, final_definition or "final value", grid, conditions, curve_sets, finals,
        left_out, found.missing, skipped,
    )  # fmt: skip
