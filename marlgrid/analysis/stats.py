"""Statistics over seeds: the mean with its Student-t interval, the IQM with a bootstrap
interval, Welch's test and the first step a curve reaches a threshold.

:func:`bands` is what :func:`marlgrid.analysis.aggregate` (and so ``experiments/aggregate.py``)
computes per condition, for every curve point and for the final values:

- the **mean** with a **Student-t** interval, ``mean +- t(n - 1) * sd / sqrt(n)``, at any number
  of runs (a percentile bootstrap over 3 seeds is just their ``[min, max]``);
- the **IQM** with a **stratified bootstrap** interval (runs resampled within the condition,
  Agarwal et al. 2021 with one task) only from :data:`IQM_MIN_RUNS` runs up; below that the IQM
  interval is NaN. Backends: ``rliable`` (its ``StratifiedBootstrap`` via
  ``get_interval_estimates``, the optional ``marlgrid[rliable]`` extra), ``scipy``
  (:func:`scipy.stats.bootstrap`) and ``auto`` (rliable when installed, else scipy); methods
  ``percentile`` or ``bca``.

The IQM is the mean of the middle half: ``scipy.stats.trim_mean(x, 0.25)`` (rliable's
``aggregate_iqm``), which drops ``floor(n / 4)`` values at each end (with fewer than 4 runs it is
the mean). With one run there is no interval (NaN); with identical values the interval is that
value. :func:`t_interval` and :func:`welch` are the same statistics for one set of values (the
result pages' scripts use them); :func:`steps_to` is a run's first step at a threshold.
"""

from __future__ import annotations

import importlib.util
import inspect
import warnings
from dataclasses import dataclass

import numpy as np

from marlgrid.analysis.curves import AnalysisError

BACKENDS = ("auto", "scipy", "rliable")
METHODS = ("percentile", "bca")
#: from this many runs per condition the IQM gets its bootstrap interval (DESIGN.md section 7)
IQM_MIN_RUNS = 5
#: resampled values held in memory at once by the scipy backend
_BATCH_VALUES = 4_000_000


#: the per-point arrays of :class:`Bands`, in CSV column order
BAND_FIELDS = ("n", "mean", "mean_low", "mean_high", "iqm", "iqm_low", "iqm_high")


@dataclass(frozen=True)
class Bands:
    """Per point (arrays of one length): runs with a value, the mean with its Student-t interval
    and the IQM with its bootstrap interval (NaN below :data:`IQM_MIN_RUNS` runs).

    A point where any run lacks a value is NaN throughout (means over changing sets of runs
    would jump); ``n`` still counts the runs that have one there.
    """

    n: np.ndarray
    mean: np.ndarray
    mean_low: np.ndarray
    mean_high: np.ndarray
    iqm: np.ndarray
    iqm_low: np.ndarray
    iqm_high: np.ndarray

    def at(self, i: int) -> dict[str, float]:
        """Point ``i`` as a dict of floats (``n`` as int)."""
        out: dict[str, float] = {name: float(getattr(self, name)[i]) for name in BAND_FIELDS[1:]}
        return {"n": int(self.n[i]), **out}


def iqm(values: np.ndarray, axis: int = -1) -> np.ndarray:
    """Interquartile mean along ``axis`` (see the module docstring)."""
    from scipy.stats import trim_mean

    return trim_mean(values, 0.25, axis=axis)


def resolve_backend(backend: str) -> str:
    """``scipy`` or ``rliable``: ``auto`` is rliable when it is installed, else scipy."""
    if backend != "auto":
        return backend
    try:
        found = importlib.util.find_spec("rliable") is not None
    except ValueError:  # a module entry set to None (as tests do to hide a package)
        found = False
    return "rliable" if found else "scipy"


def check_options(backend: str, method: str, resamples: int, confidence: float) -> None:
    """Raise :class:`AnalysisError` naming a bad bootstrap option and what is allowed."""
    if backend not in BACKENDS:
        raise AnalysisError(f"backend must be one of {BACKENDS}, got {backend!r}")
    if method not in METHODS:
        raise AnalysisError(f"bootstrap method must be one of {METHODS}, got {method!r}")
    if isinstance(resamples, bool) or not isinstance(resamples, int) or resamples < 100:
        raise AnalysisError(f"bootstrap resamples must be an integer >= 100, got {resamples!r}")
    if not 0 < confidence < 1:
        raise AnalysisError(f"confidence level must be in (0, 1), got {confidence!r}")


def bands(
    values: np.ndarray,
    *,
    backend: str = "scipy",
    method: str = "percentile",
    resamples: int = 10_000,
    confidence: float = 0.95,
    seed: int = 0,
) -> Bands:
    """Mean (Student-t interval) and IQM (bootstrap interval from :data:`IQM_MIN_RUNS` runs) over
    runs, per column of ``values`` ``(runs, points)`` (NaN: no value); a 1-D ``values`` is one
    point."""
    check_options(backend, method, resamples, confidence)
    data = np.asarray(values, dtype=float)
    if data.ndim == 1:
        data = data[:, None]
    if data.ndim != 2:
        raise AnalysisError(f"values must be (runs,) or (runs, points), got shape {data.shape}")
    runs, points = data.shape
    nan = np.full(points, np.nan)
    n = np.isfinite(data).sum(axis=0)
    full = (n == runs) & (runs > 0)
    mean, mid = nan.copy(), nan.copy()
    if full.any():
        mean[full] = data[:, full].mean(axis=0)
        mid[full] = iqm(data[:, full], axis=0)
    mean_low, mean_high, iqm_low, iqm_high = (nan.copy() for _ in range(4))
    flat = full & (np.ptp(np.where(full, data, 0.0), axis=0) == 0)
    spread = full & ~flat
    if runs >= 2:  # identical values: the interval is the value
        mean_low[flat] = mean_high[flat] = mean[flat]
        if spread.any():
            half = _t_half_widths(data[:, spread], confidence)
            mean_low[spread], mean_high[spread] = mean[spread] - half, mean[spread] + half
    if runs >= IQM_MIN_RUNS:
        iqm_low[flat] = iqm_high[flat] = mid[flat]
        if spread.any():
            run = _BACKEND_FUNCS[resolve_backend(backend)]
            iqm_low[spread], iqm_high[spread] = run(
                data[:, spread], method, resamples, confidence, seed
            )
    return Bands(n, mean, mean_low, mean_high, mid, iqm_low, iqm_high)


def _t_half_widths(data: np.ndarray, confidence: float) -> np.ndarray:
    """Half-width of the Student-t interval of the mean of each column of ``data`` (runs >= 2)."""
    from scipy import stats

    runs = data.shape[0]
    sem = data.std(axis=0, ddof=1) / np.sqrt(runs)
    return stats.t.ppf(0.5 + confidence / 2, runs - 1) * sem


def _scipy(
    data: np.ndarray, method: str, resamples: int, confidence: float, seed: int
) -> tuple[np.ndarray, np.ndarray]:
    """(low, high) of the IQM of ``data`` ``(runs, points)``, by :func:`scipy.stats.bootstrap`."""
    from scipy.stats import bootstrap

    runs, points = data.shape
    batch = max(1, _BATCH_VALUES // (runs * points))
    rng_arg = "rng" if "rng" in inspect.signature(bootstrap).parameters else "random_state"
    with warnings.catch_warnings():  # BCa on a degenerate bootstrap distribution: NaN
        warnings.simplefilter("ignore")
        result = bootstrap(
            (data.T,), iqm, n_resamples=resamples, batch=batch, vectorized=True, axis=-1,
            confidence_level=confidence, method="BCa" if method == "bca" else method,
            **{rng_arg: np.random.default_rng([seed, 1])},
        )  # fmt: skip
    ci = result.confidence_interval
    return np.asarray(ci.low, dtype=float), np.asarray(ci.high, dtype=float)


def _rliable(
    data: np.ndarray, method: str, resamples: int, confidence: float, seed: int
) -> tuple[np.ndarray, np.ndarray]:
    """As :func:`_scipy`, with rliable's stratified bootstrap (runs x one task x points)."""
    try:
        from rliable import library as rly
    except ImportError as exc:
        raise AnalysisError(
            f"backend 'rliable' needs the rliable package ({exc}): pip install "
            "'marlgrid[rliable]', or use the backend 'scipy'"
        ) from None

    def statistics(scores: np.ndarray) -> np.ndarray:
        return iqm(scores[:, 0, :], axis=0)

    with warnings.catch_warnings():  # arch 7.2 warns that rliable passes random_state
        warnings.filterwarnings("ignore", "random_state is deprecated", FutureWarning)
        _, intervals = rly.get_interval_estimates(
            {"condition": data[:, None, :]}, statistics, method=method, reps=resamples,
            confidence_interval_size=confidence, random_state=np.random.RandomState(seed),
        )  # fmt: skip
    ci = np.asarray(intervals["condition"], dtype=float).reshape(2, data.shape[1])
    return ci[0], ci[1]


_BACKEND_FUNCS = {"scipy": _scipy, "rliable": _rliable}


def t_interval(values: np.ndarray, confidence: float = 0.95) -> tuple[float, float]:
    """Student-t interval of the mean of ``values`` (NaNs dropped): ``mean +- t * sd / sqrt(n)``
    with ``n - 1`` degrees of freedom. NaN for fewer than 2 values; the value itself when all
    values are equal."""
    from scipy import stats

    x = np.asarray(values, dtype=np.float64).ravel()
    x = x[~np.isnan(x)]
    if x.size < 2:
        return float("nan"), float("nan")
    mean, sem = float(x.mean()), float(stats.sem(x))
    if sem == 0.0:
        return mean, mean
    low, high = stats.t.interval(confidence, x.size - 1, loc=mean, scale=sem)
    return float(low), float(high)


def welch(a: np.ndarray, b: np.ndarray) -> tuple[float, float]:
    """Welch's two-sided t-test of equal means (unequal variances): ``(t, p)``; NaN where either
    side has fewer than 2 values."""
    from scipy import stats

    x, y = (np.asarray(v, dtype=np.float64).ravel() for v in (a, b))
    x, y = x[~np.isnan(x)], y[~np.isnan(y)]
    if x.size < 2 or y.size < 2:
        return float("nan"), float("nan")
    with warnings.catch_warnings():  # one side without spread: exact, yet scipy warns
        warnings.filterwarnings("ignore", "Precision loss occurred", RuntimeWarning)
        res = stats.ttest_ind(x, y, equal_var=False)
    return float(res.statistic), float(res.pvalue)


def steps_to(
    steps: np.ndarray, values: np.ndarray, threshold: float, *, window: int = 1, below: bool = False
) -> float:
    """The first logged step at which the mean of the last ``window`` logged values reaches
    ``threshold`` (``>=``, or ``<=`` with ``below``, for a metric where lower is better); NaN when
    it never does. Only full windows count: the first candidate is the ``window``-th value.
    (``experiments/aggregate.py --threshold`` uses its ``--smooth`` as the window.)"""
    if isinstance(window, bool) or not isinstance(window, int) or window < 1:
        raise AnalysisError(f"threshold window must be an integer >= 1, got {window!r}")
    x, y = np.asarray(steps, dtype=float), np.asarray(values, dtype=float)
    if x.shape != y.shape or x.ndim != 1:
        raise AnalysisError(f"steps and values must be 1-D of one length, got {x.shape}, {y.shape}")
    if len(y) < window:
        return float("nan")
    trailing = np.convolve(y, np.ones(window) / window, mode="valid")
    slack = 1e-9 * max(1.0, abs(threshold))  # a mean of values equal to it counts as reaching it
    hit = trailing <= threshold + slack if below else trailing >= threshold - slack
    where = np.flatnonzero(hit)
    return float(x[where[0] + window - 1]) if len(where) else float("nan")
