"""Evaluate saved policies: mean return over N episodes with a 95% confidence interval.

    python experiments/evaluate.py runs/default/seed_0 --episodes 100
    python experiments/evaluate.py runs/default/seed_0/checkpoints/ckpt_000000293.pt --greedy \
        --videos 2

The run's own configuration (``.hydra/config.yaml``) says which env and roles to use; the newest
checkpoint of a run directory is taken unless a checkpoint file is given. A run with a curriculum
is evaluated under the rules its curriculum had reached at the checkpoint; ``--rule NAME=VALUE``
sets any rule instead (``--rule penalty=1.5``).
"""

from __future__ import annotations

import argparse
import math
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import yaml
from omegaconf import OmegaConf

from marlgrid.agents.training.checkpoint import list_checkpoints, load_checkpoint
from marlgrid.agents.training.curriculum import checkpoint_rules
from marlgrid.agents.training.evaluation import evaluate_groups, record_groups_video
from marlgrid.agents.training.roles import build_groups, resolve_roles
from marlgrid.agents.training.trainer import TrainConfig, learner_configs
from marlgrid.config import ConfigError
from marlgrid.rules import Rules


def newest_checkpoint(target: Path) -> Path:
    """``target`` itself if it is a file, else the newest checkpoint of the run directory."""
    if target.is_file():
        return target
    if not target.is_dir():
        raise SystemExit(f"{target} is neither a run directory nor a checkpoint file")
    found = list_checkpoints(target / "checkpoints")
    if not found:
        raise SystemExit(f"no checkpoints in {target / 'checkpoints'}")
    return found[-1]


def load_run(target: Path) -> tuple[TrainConfig, Path]:
    """The training config and the checkpoint file for a run directory or a checkpoint file."""
    ckpt = newest_checkpoint(target)
    run_dir = target if target.is_dir() else target.parent.parent
    config_file = run_dir / ".hydra" / "config.yaml"
    if not config_file.exists():
        raise SystemExit(f"{config_file} not found: is {run_dir} a training run directory?")
    schema = OmegaConf.structured(TrainConfig)
    OmegaConf.set_struct(schema.env.settings, False)
    cfg = OmegaConf.to_object(OmegaConf.merge(schema, OmegaConf.load(config_file)))
    return cfg, ckpt


def mean_ci(values: np.ndarray) -> tuple[float, float]:
    """Mean and the half-width of its normal-approximation 95% confidence interval."""
    if len(values) < 2:
        return float(np.mean(values)), float("nan")
    return float(values.mean()), 1.96 * float(values.std(ddof=1)) / math.sqrt(len(values))


@dataclass
class SavedRun:
    """A run's checkpoint rebuilt for acting: its env settings, groups and scripted policies."""

    cfg: TrainConfig
    checkpoint: Path
    stage: dict[str, Any]  # the rules played under (the curriculum's, then the overrides)
    settings: dict[str, Any]  # the env settings with ``stage`` applied
    agents: list[str]
    roles: dict[str, Any]
    groups: list[Any]
    scripted: dict[str, Any]


def load_policies(target: Path, greedy: bool, rules: dict[str, Any] | None = None) -> SavedRun:
    """The trained groups of a run directory (its newest checkpoint) or a checkpoint file,
    frozen, under the rules its curriculum had reached (``rules`` override them); greedy
    learners take the likeliest action."""
    import marlgrid

    cfg, ckpt = load_run(target)
    payload = load_checkpoint(ckpt)
    stage = {**checkpoint_rules(cfg.curriculum, payload), **(rules or {})}
    settings = {**cfg.env.settings, **stage}
    vec = marlgrid.make_vec(cfg.env.id, 1, **settings)
    configs = learner_configs(cfg)
    roles = resolve_roles(cfg.roles, vec.possible_agents, sorted(configs))
    groups, scripted = build_groups(roles, vec, configs, cfg.seed)
    for g in groups:
        if g.train:  # a trained learner: its weights come from the checkpoint
            g.learner.load_state_dict(payload["learners"][g.name])
            g.train = False
        g.explore = g.explore and not greedy
    return SavedRun(cfg, ckpt, stage, settings, list(vec.possible_agents), roles, groups, scripted)


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
    run = load_policies(target, greedy, rules)
    cfg, ckpt, stage, settings = run.cfg, run.checkpoint, run.stage, run.settings
    groups, scripted, roles = run.groups, run.scripted, run.roles
    returns = evaluate_groups(
        cfg.env.id, settings, groups, scripted, episodes, seed, num_envs, explore=None
    )
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
        video = record_groups_video(cfg.env.id, settings, groups, scripted, path, seed + i)
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
    evaluate(args.target, args.episodes, args.greedy, args.num_envs, args.seed, args.videos, rules)


if __name__ == "__main__":
    main()
