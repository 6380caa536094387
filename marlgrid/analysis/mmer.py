"""POPGym's MMER (max-mean episodic reward) from a run's ``metrics.csv``.

For each training batch, the mean return of the episodes that ended in it; the maximum of these
means over training; reported as mean +- std over seeds (several trials). A batch is by default
one row of ``metrics.csv``: one trainer iteration, which for PPO is one update of
``num_envs * num_steps`` env steps. Rows can be pooled into batches of a set number of env steps
(``batch_steps``) for learners that update every few steps (DRQN). Say the batch size with the
numbers. A batch in which no episode ended has no mean and is skipped. The maximum is optimistic,
and more so with small batches.

The rows are mappings with the env step (``step``, the ``metrics.csv`` column, or
``global_step``), the mean return of the episodes that ended since the previous row
(``charts/episodic_return``, NaN when none did) and their number (``charts/episodes``, needed
only to pool rows)::

    from marlgrid.analysis.mmer import mmer, read_metrics

    rows = read_metrics("runs/popgym/RepeatPreviousEasy/gru/seed_0")  # a run directory
    best = mmer(rows)  # batches of one update

Needs numpy only (no torch).
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence

import numpy as np

from marlgrid.analysis.curves import read_metrics
from marlgrid.config import check_int

__all__ = [
    "EPISODES_KEY",
    "RETURN_KEY",
    "batch_mean_returns",
    "mmer",
    "mmer_over_seeds",
    "read_metrics",
]

#: the metric a row records (mean return of the episodes that ended since the previous row)
RETURN_KEY = "charts/episodic_return"
#: how many episodes that mean is over
EPISODES_KEY = "charts/episodes"


def _step(row: Mapping[str, float]) -> int:
    return int(row["step"] if "step" in row else row["global_step"])


def batch_mean_returns(
    rows: Sequence[Mapping[str, float]], batch_steps: int | None = None
) -> list[tuple[int, float]]:
    """``(step, mean episodic return)`` of every training batch in which an episode ended.

    By default a batch is one row (a trainer iteration; PPO: one update). With ``batch_steps``,
    rows are pooled into batches of that many env steps (the rows whose step falls in
    ``(k * batch_steps, (k + 1) * batch_steps]``, their means weighted by episode counts; the
    step reported is the batch's last row)."""
    if batch_steps is not None:
        check_int("batch_steps", batch_steps, low=1)
    out: list[tuple[int, float]] = []
    pool: dict[int, list[float]] = {}  # batch -> [last step, return sum, episodes]
    for row in rows:
        value, step = float(row.get(RETURN_KEY, math.nan)), _step(row)
        if math.isnan(value):
            continue
        if batch_steps is None:
            out.append((step, value))
            continue
        n = float(row[EPISODES_KEY])
        entry = pool.setdefault((step - 1) // batch_steps, [0.0, 0.0, 0.0])
        entry[0], entry[1], entry[2] = step, entry[1] + value * n, entry[2] + n
    out += [(int(last), total / n) for last, total, n in pool.values()]
    return out


def mmer(rows: Sequence[Mapping[str, float]], batch_steps: int | None = None) -> float:
    """Max over training of the per-batch mean episodic return (batches as in
    :func:`batch_mean_returns`); NaN if no episode ended."""
    means = [value for _, value in batch_mean_returns(rows, batch_steps)]
    return max(means) if means else math.nan


def mmer_over_seeds(values: Sequence[float]) -> tuple[float, float]:
    """``(mean, std)`` of per-seed MMERs; the std is the population one (``ddof=0``), 0 for a
    single seed. NaN values (runs in which no episode ended) raise."""
    arr = np.asarray(values, dtype=np.float64)
    if arr.size == 0:
        raise ValueError("mmer_over_seeds needs at least one value")
    if np.isnan(arr).any():
        raise ValueError(f"an MMER is NaN (no episode ended in that run): {list(values)}")
    return float(arr.mean()), float(arr.std())
