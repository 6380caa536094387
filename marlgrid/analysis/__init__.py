"""Aggregating training runs: curves and final performance over seeds with confidence intervals.

- :mod:`~marlgrid.analysis.runs`: find run directories, their seeds and status, group them into
  conditions, list the runs a sweep should hold but does not;
- :mod:`~marlgrid.analysis.curves`: read ``metrics.csv`` curves, smooth, align on a step grid;
- :mod:`~marlgrid.analysis.stats`: mean and IQM with bootstrap intervals (scipy or rliable);
- :mod:`~marlgrid.analysis.report`: the Markdown/CSV table, curve CSV and figure;
- :func:`aggregate` ties them together (``experiments/aggregate.py`` is its command line).

Needs numpy, scipy and PyYAML (``pip install 'marlgrid[plot]'``); matplotlib for figures; not
torch.
"""

from marlgrid.analysis.curves import (
    AnalysisError,
    CurveError,
    align,
    metric_columns,
    read_curve,
    smooth,
    step_grid,
)
from marlgrid.analysis.pipeline import Aggregate, LeftOut, aggregate, resolve_metric
from marlgrid.analysis.runs import Condition, Missing, Run, RunSet, find_runs, group_runs
from marlgrid.analysis.stats import Bands, bands, iqm

__all__ = [
    "Aggregate",
    "AnalysisError",
    "Bands",
    "Condition",
    "CurveError",
    "LeftOut",
    "Missing",
    "Run",
    "RunSet",
    "aggregate",
    "align",
    "bands",
    "find_runs",
    "group_runs",
    "iqm",
    "metric_columns",
    "read_curve",
    "resolve_metric",
    "smooth",
    "step_grid",
]
