"""Evaluate saved policies: mean return over N episodes with a 95% confidence interval.

    python experiments/evaluate.py runs/default/seed_0 --episodes 100
    python experiments/evaluate.py runs/default/seed_0/checkpoints/ckpt_000000293.pt --greedy \
        --videos 2

The run is loaded by :class:`marlgrid.agents.training.saved_run.SavedRun`: its own configuration
(``config.json``, or ``.hydra/config.yaml`` for a run from before it) says which env and roles to
use; the newest checkpoint of a run directory is taken unless a checkpoint file is given. A run
with a curriculum is evaluated under the rules its curriculum had reached at the checkpoint;
``--rule NAME=VALUE`` sets any rule instead (``--rule penalty=1.5``). Installed, the command is
``marlgrid-evaluate``.
"""

from __future__ import annotations

import argparse
import math
from pathlib import Path
from typing import Any

import numpy as np
import yaml

from marlgrid.agents.training.checkpoint import CheckpointError
from marlgrid.agents.training.saved_run import SavedRun, SavedRunError
from marlgrid.config import ConfigError
from marlgrid.rules import Rules


def mean_ci(values: np.ndarray) -> tuple[float, float]:
    """Mean and the half-width of its normal-approximation 95% confidence interval."""
    if len(values) < 2:
        return float(np.mean(values)), float("nan")
    return float(values.mean()), 1.96 * float(values.std(ddof=1)) / math.sqrt(len(values))


def evaluate(
    target: Path,
    episodes: int,
    greedy: bool,
    num_envs: int,
    seed: int,
    videos: int,
    rules: dict[str, Any] | None = None,
) -> np.ndarray:
    """Print the mean return of every agent over ``episodes`` episodes; returns them all.
    ``rules`` override the env's rules (by default those the run's curriculum had reached)."""
    run = SavedRun(target).policies(greedy, rules)
    cfg, ckpt, stage, roles = run.cfg, run.checkpoint, run.stage, run.roles
    returns = run.evaluate(episodes, seed, num_envs)
    under = ", ".join(f"{k}={v!r}" for k, v in stage.items())
    print(
        f"{ckpt} on {cfg.env.id}{f' ({under})' if under else ''}: {episodes} episodes, "
        f"{'greedy' if greedy else 'sampled'}"
    )
    for k, agent in enumerate(run.agents):
        mean, half = mean_ci(returns[:, k])
        print(f"  {agent} ({roles[agent].kind}): mean return {mean:.3f} +/- {half:.3f} (95% CI)")
    for i in range(videos):
        path = ckpt.parent.parent / "videos" / f"eval_{ckpt.stem}_{i}.mp4"
        video = run.record_video(path, seed + i)
        print(f"  video: {video}")
    return returns


def _int_at_least(low: int):
    """An argparse type: an integer >= ``low`` (argparse names the flag in its error)."""

    def parse(text: str) -> int:
        try:
            value = int(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"expected an integer, got {text!r}") from None
        if value < low:
            raise argparse.ArgumentTypeError(f"must be >= {low}, got {value}")
        return value

    parse.__name__ = f"integer >= {low}"
    return parse


def _rule(text: str) -> tuple[str, Any]:
    """An argparse type: ``NAME=VALUE``, a :class:`~marlgrid.Rules` field and a YAML value."""
    name, sep, value = text.partition("=")
    if not sep or not name:
        raise argparse.ArgumentTypeError(f"expected NAME=VALUE, got {text!r}")
    parsed = yaml.safe_load(value)
    try:
        Rules().replace(**{name: parsed})
    except ConfigError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None
    return name, parsed


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("target", type=Path, help="run directory or checkpoint file")
    parser.add_argument("--episodes", type=_int_at_least(1), default=100)
    parser.add_argument("--greedy", action="store_true", help="learners take the likeliest action")
    parser.add_argument("--num-envs", type=_int_at_least(1), default=16)
    parser.add_argument("--seed", type=_int_at_least(0), default=12345)
    parser.add_argument(
        "--videos", type=_int_at_least(0), default=0, help="also record this many episodes"
    )
    parser.add_argument(
        "--rule",
        type=_rule,
        action="append",
        default=[],
        metavar="NAME=VALUE",
        help="play under this rule (any Rules field, e.g. penalty=1.5); repeatable",
    )
    args = parser.parse_args(argv)
    rules = dict(args.rule)
    try:
        evaluate(
            args.target, args.episodes, args.greedy, args.num_envs, args.seed, args.videos, rules
        )
    except (SavedRunError, CheckpointError) as exc:
        raise SystemExit(f"error: {exc}") from None


if __name__ == "__main__":
    main()
