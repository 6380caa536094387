"""Mean and interquartile mean (IQM) over seeds with bootstrap confidence intervals.

Each condition is bootstrapped on its own (runs are resampled within the condition, the
stratified bootstrap of Agarwal et al. 2021 with one task). Two backends:

- ``scipy`` (default): :func:`scipy.stats.bootstrap`, ``percentile`` or ``bca`` intervals;
- ``rliable``: rliable's ``StratifiedBootstrap`` via ``get_interval_estimates`` (the optional
  ``marlgrid[rliable]`` extra), imported only when asked for.

The IQM is the mean of the middle half: ``scipy.stats.trim_mean(x, 0.25)`` (rliable's
``aggregate_iqm``), which drops ``floor(n / 4)`` values at each end (with fewer than 4 runs it is
the mean). With one run there is no interval (NaN); with identical values the interval is that
value.
"""

from __future__ import annotations

import inspect
import warnings
from dataclasses import dataclass

import numpy as np

from marlgrid.analysis.curves import AnalysisError

BACKENDS = ("scipy", "rliable")
METHODS = ("percentile", "bca")
#: resampled values held in memory at once by the scipy backend
_BATCH_VALUES = 4_000_000


#: the per-point arrays of :class:`Bands`, in CSV column order
BAND_FIELDS = ("n", "mean", "mean_low", "mean_high", "iqm", "iqm_low", "iqm_high")


@dataclass(frozen=True)
class Bands:
    """Per point (arrays of one length): runs with a value, mean and IQM with their intervals.

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
    """Mean and IQM over runs with bootstrap intervals, per column of ``values`` ``(runs,
    points)`` (NaN: no value); a 1-D ``values`` is one point."""
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
    lows, highs = [nan.copy(), nan.copy()], [nan.copy(), nan.copy()]
    if runs >= 2:
        flat = full & (np.ptp(np.where(full, data, 0.0), axis=0) == 0)
        for k, centre in enumerate((mean, mid)):  # identical values: the interval is the value
            lows[k][flat] = highs[k][flat] = centre[flat]
        spread = full & ~flat
        if spread.any():
            interval = _BACKEND_FUNCS[backend](data[:, spread], method, resamples, confidence, seed)
            for k in range(2):
                lows[k][spread], highs[k][spread] = interval[k]
    return Bands(n, mean, lows[0], highs[0], mid, lows[1], highs[1])


def _scipy(
    data: np.ndarray, method: str, resamples: int, confidence: float, seed: int
) -> list[tuple[np.ndarray, np.ndarray]]:
    """[(low, high) of the mean, (low, high) of the IQM] for ``data`` ``(runs, points)``."""
    from scipy.stats import bootstrap

    runs, points = data.shape
    batch = max(1, _BATCH_VALUES // (runs * points))
    rng_arg = "rng" if "rng" in inspect.signature(bootstrap).parameters else "random_state"
    out = []
    for k, statistic in enumerate((_mean, iqm)):
        with warnings.catch_warnings():  # BCa on a degenerate bootstrap distribution: NaN
            warnings.simplefilter("ignore")
            result = bootstrap(
                (data.T,), statistic, n_resamples=resamples, batch=batch, vectorized=True,
                axis=-1, confidence_level=confidence, method="BCa" if method == "bca" else method,
                **{rng_arg: np.random.default_rng([seed, k])},
            )  # fmt: skip
        ci = result.confidence_interval
        out.append((np.asarray(ci.low, dtype=float), np.asarray(ci.high, dtype=float)))
    return out


def _rliable(
    data: np.ndarray, method: str, resamples: int, confidence: float, seed: int
) -> list[tuple[np.ndarray, np.ndarray]]:
    """As :func:`_scipy`, with rliable's stratified bootstrap (runs x one task x points)."""
    try:
        from rliable import library as rly
    except ImportError as exc:
        raise AnalysisError(
            f"backend 'rliable' needs the rliable package ({exc}): pip install "
            "'marlgrid[rliable]', or use the default backend 'scipy'"
        ) from None
    points = data.shape[1]

    def statistics(scores: np.ndarray) -> np.ndarray:
        per_run = scores[:, 0, :]
        return np.concatenate([per_run.mean(axis=0), iqm(per_run, axis=0)])

    with warnings.catch_warnings():  # arch 7.2 warns that rliable passes random_state
        warnings.filterwarnings("ignore", "random_state is deprecated", FutureWarning)
        _, intervals = rly.get_interval_estimates(
            {"condition": data[:, None, :]}, statistics, method=method, reps=resamples,
            confidence_interval_size=confidence, random_state=np.random.RandomState(seed),
        )  # fmt: skip
    ci = np.asarray(intervals["condition"], dtype=float).reshape(2, 2 * points)
    return [(ci[0, :points], ci[1, :points]), (ci[0, points:], ci[1, points:])]


def _mean(values: np.ndarray, axis: int = -1) -> np.ndarray:
    return np.mean(values, axis=axis)


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
    res = stats.ttest_ind(x, y, equal_var=False)
    return float(res.statistic), float(res.pvalue)
