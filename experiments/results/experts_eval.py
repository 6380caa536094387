"""Goal-cycle runs evaluated frozen: return, correct entries and penalties per agent-episode.

    python experiments/results/experts_eval.py runs/multirun/expert_recipe/seed_* \
        --episodes 200 --seed 777 --rule penalty=1.5 --csv experiments/results/experts_eval.csv

Each run's newest checkpoint, or an exported expert file (``experiments/experts/*.pt``), plays
``--episodes`` fresh layouts (seeds from ``--seed``), its learners greedy and then sampled, under
the rules the run's curriculum had reached with the ``--rule`` overrides on top (the pass rule of
``experts.md`` plays at penalty 1.5 whatever stage a run ended at) and the ``--setting``
overrides of other env settings on top of those (e.g. ``--setting size=13 --setting
max_steps=250``: a 7x7 run played on the canonical map). One CSV row per run and mode:
the means over every agent-episode of the run's learners and, beside each, the agents' own means,
with the env steps the run logged and its training wall time (``train.log``).
With ``--partners`` the row also holds the same for the agents the run did not train (scripted or
frozen experts) in the same episodes: a novice and its experts side by side. With ``--merge``
the rows go into the existing ``--csv``, replacing the rows of the runs evaluated now and keeping
the others (runs whose directories are gone).
"""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

import numpy as np

from experiments.evaluate import env_setting, rule_override
from marlgrid.agents.bookkeeping.checkpoint import CheckpointError
from marlgrid.agents.bookkeeping.logger import evaluation_bar
from marlgrid.agents.bookkeeping.saved_run import SavedRun, SavedRunError
from marlgrid.agents.training.env_sources import make_env_source
from marlgrid.agents.training.evaluation import acting_copies
from marlgrid.agents.training.rollout import MultiAgentRollout
from marlgrid.agents.training.social_observer import SocialObserver
from marlgrid.analysis import AnalysisError
from marlgrid.analysis.report import show_and_write_rows
from marlgrid.analysis.runs import last_step, wall_seconds
from marlgrid.config import ConfigError

METRICS = ("return", "rewards", "penalties")


def episode_metrics(
    run: Path, greedy: bool, episodes: int, seed: int, rules: dict[str, Any]
) -> tuple[dict[str, np.ndarray], dict[str, np.ndarray]]:
    """``(episodes, agents)`` arrays of :data:`METRICS` for the run playing frozen: the
    learners' columns, and in the same episodes the other agents' (scripted or frozen)."""
    played = SavedRun(run).policies(greedy, rules)
    vec = make_env_source(played.cfg.env.id, min(16, episodes), played.settings)
    observer = SocialObserver(vec, experts=[])
    rollout = MultiAgentRollout(
        vec, acting_copies(played.groups, None), played.scripted, seed=seed, observers=[observer]
    )
    rows: dict[str, list[np.ndarray]] = {m: [] for m in METRICS}
    bar = evaluation_bar(f"{run.name} {'greedy' if greedy else 'sampled'}", episodes)
    while sum(len(r) for r in rows["return"]) < episodes:
        rollout.collect(16)
        ended = observer.tracker.pop()
        for m in METRICS:
            rows[m].append(ended[m])
        if bar is not None:
            bar.update(len(ended["return"]))
    if bar is not None:
        bar.close()
    learners = played.learner_columns
    others = [k for k in range(len(played.agents)) if k not in learners]
    every = {m: np.concatenate(rows[m])[:episodes] for m in METRICS}
    return (
        {m: every[m][:, learners] for m in METRICS},
        {m: every[m][:, others] for m in METRICS},
    )


def _means(values: dict[str, np.ndarray], prefix: str = "") -> dict[str, object]:
    """Each metric's mean over agent-episodes and per agent ("" where there is no agent)."""
    row: dict[str, object] = {}
    for m, arr in values.items():
        if not arr.size:  # a run whose every agent trained has no partners
            row[f"{prefix}{m}"] = row[f"{prefix}{m}_per_agent"] = ""
            continue
        row[f"{prefix}{m}"] = round(float(arr.mean()), 4)
        row[f"{prefix}{m}_per_agent"] = " ".join(f"{v:.3f}" for v in arr.mean(0))
    return row


def run_cost(run: Path) -> dict[str, object]:
    """The run's logged env steps and its training wall time from ``train.log`` (empty for an
    exported expert file, which keeps neither)."""
    wall = wall_seconds(run) if run.is_dir() else None
    if wall is None or not (run / "metrics.csv").is_file():
        return {"env_steps": "", "wall_s": ""}
    return {"env_steps": last_step(run / "metrics.csv"), "wall_s": round(wall, 1)}


def summary_rows(
    run: Path, episodes: int, seed: int, rules: dict[str, Any], partners: bool = False
) -> list[dict[str, object]]:
    """One row per mode (greedy, sampled): each metric's mean over the learners' agent-episodes
    and per agent; with ``partners``, the same for the other agents as ``partners_*`` columns."""
    out = []
    for mode in ("greedy", "sampled"):
        greedy = mode == "greedy"
        row: dict[str, object] = {"run": str(run), "mode": mode, "episodes": episodes}
        row.update(run_cost(run))
        learners, others = episode_metrics(run, greedy, episodes, seed, rules)
        row.update(_means(learners))
        if partners:
            row.update(_means(others, "partners_"))
        out.append(row)
    return out


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("runs", type=Path, nargs="+")
    parser.add_argument("--episodes", type=int, default=200)
    parser.add_argument("--seed", type=int, default=777, help="first layout seed")
    parser.add_argument(
        "--rule", type=rule_override, action="append", default=[], metavar="NAME=VALUE",
        help="a rule the runs play under (repeatable)",
    )  # fmt: skip
    parser.add_argument(
        "--setting", type=env_setting, action="append", default=[], metavar="NAME=VALUE",
        help="an env setting the runs play under instead of their own, e.g. size=13 (repeatable)",
    )  # fmt: skip
    parser.add_argument("--csv", type=Path)
    parser.add_argument(
        "--merge",
        action="store_true",
        help="merge into --csv: the rows of the runs evaluated now replace theirs, the others stay",
    )
    parser.add_argument(
        "--partners", action="store_true", help="also the agents the run did not train"
    )
    args = parser.parse_args(argv)
    try:
        if args.episodes < 1:
            raise ConfigError(f"--episodes must be >= 1, got {args.episodes}")
        if args.merge and args.csv is None:
            raise ConfigError("--merge needs --csv")
        nested = [name for name, _ in args.setting if "." in name]
        if nested:
            raise ConfigError(
                f"--setting {nested[0]}: only top-level env settings (size, max_steps, ...) "
                "can be set here"
            )
        rules = {**dict(args.rule), **dict(args.setting)}
        for run in args.runs:  # every run readable before the first is played
            SavedRun(run).train_config  # noqa: B018
        rows = [
            r
            for run in args.runs
            for r in summary_rows(run, args.episodes, args.seed, rules, args.partners)
        ]
        show_and_write_rows(rows, args.csv, "run" if args.merge else None)
    except (SavedRunError, CheckpointError, ConfigError, AnalysisError) as exc:
        raise SystemExit(f"error: {exc}") from None


if __name__ == "__main__":
    main()
