"""Experts on held-out layouts, paired per layout with a scripted baseline.

    OMP_NUM_THREADS=1 python experiments/results/held_out.py experiments/experts/*_expert*.pt \
        --seed-base 7000 --seed-base 8000 --episodes 400 --rule penalty=1.5 \
        --csv experiments/results/experts_held_out.csv

Each expert file (or run directory) plays ``--episodes`` episodes greedy from each layout seed
base (batches of 16 envs, env ``i`` of a batch seeded from the base; goal-cycle episodes all
last ``max_steps`` and draw no random numbers after their reset, so the k-th episode of any
policy is played on the same layout), under the run's own settings with the ``--rule``
overrides. The ``--baseline`` scripted policy (default: the discoverer) then plays every agent
of the same env on the same layouts. One CSV row per expert: the learners' mean return per
agent-episode with its Student-t 95% interval over layouts, the baseline's on the same
layouts, and their ratio (mean over mean) with a paired bootstrap 95% interval over layouts
(10,000 resamples, seed 0). The evaluation protocol of ``experiments/results/README.md``:
design choices are compared on the development layouts (seed 777); acceptances are measured
here, on seed bases no page used before.
"""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

import numpy as np
from scipy import stats

from experiments.evaluate import env_setting, rule_override
from experiments.results.experts_eval import episode_metrics
from marlgrid.agents.bookkeeping.saved_run import SavedRun
from marlgrid.analysis.chance import play_scripted
from marlgrid.analysis.report import show_and_write_rows

BATCH = 16


def expert_returns(run: Path, episodes: int, seed: int, rules: dict[str, Any]) -> np.ndarray:
    """Per layout: the mean return of the run's learners, greedy."""
    learners, _ = episode_metrics(run, True, episodes, seed, rules)
    return learners["return"].mean(axis=1)


def baseline_returns(
    run: Path, baseline: str, episodes: int, seed: int, rules: dict[str, Any]
) -> np.ndarray:
    """Per layout: the mean return, over the run's learner slots, of ``baseline`` playing every
    agent of the run's env under the same settings."""
    played = SavedRun(run).policies(True, rules)
    agents = list(played.agents)
    rows, _ = play_scripted(
        played.cfg.env.id, played.settings, dict.fromkeys(agents, baseline), [], episodes, seed,
        num_envs=BATCH,
    )  # fmt: skip
    return rows["return"][:, played.learner_columns].mean(axis=1)


def t_interval(values: np.ndarray) -> tuple[float, float]:
    half = stats.t.ppf(0.975, len(values) - 1) * values.std(ddof=1) / np.sqrt(len(values))
    return float(values.mean() - half), float(values.mean() + half)


def ratio_interval(expert: np.ndarray, baseline: np.ndarray) -> tuple[float, float]:
    """Paired bootstrap 95% interval of mean(expert) / mean(baseline) over layouts."""
    found = stats.bootstrap(
        (expert, baseline), lambda e, b: e.mean() / b.mean(), paired=True, vectorized=False,
        n_resamples=10_000, random_state=0, method="percentile",
    )  # fmt: skip
    return float(found.confidence_interval.low), float(found.confidence_interval.high)


def row(run: Path, bases: list[int], episodes: int, baseline: str, rules: dict) -> dict:
    expert = np.concatenate([expert_returns(run, episodes, b, rules) for b in bases])
    base = np.concatenate([baseline_returns(run, baseline, episodes, b, rules) for b in bases])
    e_low, e_high = t_interval(expert)
    ratio = expert.mean() / base.mean()
    r_low, r_high = ratio_interval(expert, base)
    return {
        "expert": str(run), "seed_bases": " ".join(map(str, bases)), "layouts": len(expert),
        "return": round(float(expert.mean()), 4), "return_low": round(e_low, 4),
        "return_high": round(e_high, 4), "baseline": baseline,
        "baseline_return": round(float(base.mean()), 4), "ratio": round(float(ratio), 4),
        "ratio_low": round(r_low, 4), "ratio_high": round(r_high, 4),
    }  # fmt: skip


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("runs", type=Path, nargs="+", help="expert files or run directories")
    parser.add_argument("--seed-base", type=int, action="append", required=True, dest="bases")
    parser.add_argument("--episodes", type=int, default=400, help="layouts per seed base")
    parser.add_argument("--baseline", default="discoverer")
    parser.add_argument("--rule", type=rule_override, action="append", default=[])
    parser.add_argument("--setting", type=env_setting, action="append", default=[])
    parser.add_argument("--csv", type=Path)
    args = parser.parse_args(argv)
    if args.episodes < 2 or args.episodes % BATCH:
        parser.error(
            f"--episodes must be a multiple of {BATCH} (whole batches), got {args.episodes}"
        )
    rules = {**dict(args.rule), **dict(args.setting)}
    for run in args.runs:  # every expert readable before the first is played
        SavedRun(run).train_config  # noqa: B018
    rows = [row(run, args.bases, args.episodes, args.baseline, rules) for run in args.runs]
    show_and_write_rows(rows, args.csv)


if __name__ == "__main__":
    main()
