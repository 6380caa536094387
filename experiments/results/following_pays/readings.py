"""The following-pays page's pass rule read arm by arm: ``readings.csv``.

From the per-seed table (``pass_rule.csv``: each seed's measures against the bars) and the
greedy evaluation (``eval.csv``), one row per rule and pair of arms the plan names: how many
seeds follow (rule 1), social against solo greedy returns (rule 2, Welch), the next-view loss
against none on ``trail_expert_excess`` (rule 3, Welch), following at the higher penalty and
without the slope (rule 5). Student-t 95% intervals of the means; a rule whose arms do not have
the plan's 5 seeds yet reads ``pending``.
"""

from __future__ import annotations

import csv
from pathlib import Path

import numpy as np

from marlgrid.analysis.stats import t_interval, welch

SEEDS = 5  #: seeds per arm in the plan
#: the plan's extension rule: an arm whose mean training return over its last WINDOW env steps
#: is more than RISE above that over the WINDOW before is extended to 15M steps before reading
WINDOW, RISE = 1_000_000, 0.05
EXTENSION_HEADER = ["arm", "seeds", "last_window", "window_before", "ratio", "still_rising"]
HEADER = ["rule", "arm", "other", "seeds", "seeds_other", "value", "low", "high",
          "value_other", "low_other", "high_other", "t", "p", "reading"]  # fmt: skip


def _rows(path: Path) -> list[dict[str, str]]:
    with path.open(newline="") as f:
        return list(csv.DictReader(f))


def greedy_returns(eval_csv: Path) -> dict[str, dict[str, float]]:
    """arm -> seed -> the novice's greedy return (runs named ``.../<arm>/seed_<k>``)."""
    out: dict[str, dict[str, float]] = {}
    for row in _rows(eval_csv):
        if row["mode"] != "greedy":
            continue
        arm, seed = Path(row["run"]).parts[-2:]
        out.setdefault(arm, {})[seed.removeprefix("seed_")] = float(row["return"])
    return out


def _summary(values: list[float]) -> list[object]:
    low, high = t_interval(np.array(values)) if len(values) > 1 else (float("nan"),) * 2
    mean = float(np.mean(values)) if values else float("nan")
    return [round(mean, 4), round(low, 4), round(high, 4)]


def _compare(rule: str, arm: str, other: str, a: list[float], b: list[float], better: str,
             same: str) -> list[object]:  # fmt: skip
    t, p = welch(np.array(a), np.array(b))
    if len(a) < SEEDS or len(b) < SEEDS:
        reading = f"pending ({len(a)} and {len(b)} of {SEEDS} seeds)"
    else:
        reading = better if (p < 0.05 and np.mean(a) > np.mean(b)) else same
    return [rule, arm, other, len(a), len(b), *_summary(a), *_summary(b), round(t, 4),
            round(p, 6), reading]  # fmt: skip


def _follow_counts(table: list[dict[str, str]], arm: str) -> tuple[int, int]:
    rows = [r for r in table if r["arm"] == arm]
    return len(rows), sum(r["following_emerges"] == "True" for r in rows)


def readings(pass_rule_csv: Path, eval_csv: Path) -> list[list[object]]:
    """The rows of ``readings.csv`` (:data:`HEADER`) for the arms present."""
    table = _rows(pass_rule_csv)
    greedy = greedy_returns(eval_csv)
    arms = list(dict.fromkeys(r["arm"] for r in table))
    out: list[list[object]] = []

    def returns(arm: str) -> list[float]:
        return [v for _, v in sorted(greedy.get(arm, {}).items())]

    def measure(arm: str, name: str) -> list[float]:
        return [float(r[name]) for r in table if r["arm"] == arm]

    for arm in (a for a in arms if a.startswith("social")):  # rule 1 (and 5a's bars)
        n, k = _follow_counts(table, arm)
        rule = "5_survives" if arm == "social_to_1.5" else "1_emerges"
        need = SEEDS - 1
        if n < SEEDS:
            reading = f"pending ({k} of {n} seeds follow; {SEEDS} planned)"
        elif rule == "1_emerges":
            reading = "following emerges" if k >= need else "following does not emerge"
        else:
            reading = "following survives" if k >= need else "following does not survive"
        out.append([rule, arm, "", n, "", *_summary(returns(arm)), "", "", "", "", "",
                    f"{reading}; greedy return of the seeds: mean, t-interval"])  # fmt: skip
    for social, solo in (("social", "solo"), ("social_7x7", "solo_7x7")):
        if social in arms and solo in arms:
            out.append(_compare("2_social_beats_solo", social, solo, returns(social),
                                returns(solo), "social beats solo", "not shown"))  # fmt: skip
    if "social_aux" in arms and "social" in arms:
        out.append(_compare("3_loss_helps", "social_aux", "social",
                            measure("social_aux", "trail_expert_excess"),
                            measure("social", "trail_expert_excess"),
                            "the loss helps following", "not shown"))  # fmt: skip
    if "social_p1.5" in arms and "social" in arms:
        n, k = _follow_counts(table, "social_p1.5")
        n0, k0 = _follow_counts(table, "social")
        if n < SEEDS or n0 < SEEDS:
            reading = f"pending ({k} of {n} seeds of social_p1.5 follow)"
        else:
            needs = k0 >= SEEDS - 1 and k <= 1
            reading = "following needs the slope" if needs else "not shown"
        out.append(["5_needs_slope", "social_p1.5", "social", n, n0,
                    *_summary(returns("social_p1.5")), *_summary(returns("social")), "", "",
                    reading])  # fmt: skip
    return out


def windows(steps: np.ndarray, values: np.ndarray) -> tuple[float, float]:
    """The mean of ``values`` over the last :data:`WINDOW` env steps of a run and over the
    window before it (NaN values skipped)."""
    end = steps[-1]
    last = values[steps > end - WINDOW]
    before = values[(steps > end - 2 * WINDOW) & (steps <= end - WINDOW)]

    def mean(x: np.ndarray) -> float:  # NaN for a window without values (a short run)
        return float(np.nanmean(x)) if np.isfinite(x).any() else float("nan")

    return mean(last), mean(before)


def extension_rows(curves: dict[str, list[tuple[np.ndarray, np.ndarray]]]) -> list[list[object]]:
    """The extension rule per arm (:data:`EXTENSION_HEADER`) from each seed's training-return
    curve ``(steps, values)``: the means over seeds of both windows, their ratio, and whether
    the arm still rises (last > (1 + RISE) * before)."""
    out = []
    for arm, runs in curves.items():
        pairs = np.array([windows(s, v) for s, v in runs])
        last, before = float(pairs[:, 0].mean()), float(pairs[:, 1].mean())
        ratio = last / before if before else float("nan")
        out.append([arm, len(runs), round(last, 4), round(before, 4), round(ratio, 4),
                    bool(last > (1 + RISE) * before)])  # fmt: skip
    return out
