"""Evaluate saved policies: mean return over N episodes with a 95% confidence interval.

    python experiments/evaluate.py runs/default/seed_0 --episodes 100
    python experiments/evaluate.py runs/default/seed_0/checkpoints/ckpt_000000293.pt --greedy \
        --videos 2

The run is loaded by :class:`marlgrid.agents.bookkeeping.saved_run.SavedRun`: its own configuration
(``config.json``, or ``.hydra/config.yaml`` for a run from before it) says which env and roles to
use; the newest checkpoint of a run directory is taken unless a checkpoint file is given. A run
with a curriculum is evaluated under the rules its curriculum had reached at the checkpoint;
``--rule NAME=VALUE`` sets any rule instead (``--rule penalty=1.5``). Installed, the command is
``marlgrid-evaluate``. A run or checkpoint that cannot be played (a missing or corrupt file, a
saved config that fails the checks a fresh one gets, NaN weights, a frozen role's checkpoint
gone) stops it with one line ``error: ...`` and exit status 1, before any episode is played.

Zero-shot transfer (:mod:`marlgrid.agents.bookkeeping.transfer`): ``--transfer ENV_ID``
(repeatable) plays the run's trained agent, frozen, as agent_0 of another env beside
``--partners`` (repeatable: ``oracle``, ``goal_seeker``, ``none`` for alone, or one name per
partner, ``oracle,random``), its observation settings carried from the checkpoint;
``--conditions social_transfer`` runs the transfer suite (4-tile goal cycle beside oracles,
FourRooms and Maze beside goal_seeker experts, each alone). ``--table out.csv`` / ``out.md``
writes the table (it is printed too); ``--target-setting NAME=VALUE`` (``agent.NAME=VALUE`` for
an agent setting) and ``--rule`` change the target envs::

    python experiments/evaluate.py runs/default/seed_0 --conditions social_transfer \
        --episodes 100 --greedy --table results/transfer.csv
    python experiments/evaluate.py runs/default/seed_0 --transfer MarlGrid-FourRooms-3Agents-v0 \
        --partners goal_seeker --partners none
"""

from __future__ import annotations

import argparse
import csv
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import yaml

from marlgrid.agents.bookkeeping.checkpoint import CheckpointError
from marlgrid.agents.bookkeeping.saved_run import SavedRun, SavedRunError
from marlgrid.agents.bookkeeping.transfer import (
    CONDITIONS,
    TransferCondition,
    partners_from_text,
    run_conditions,
)
from marlgrid.analysis.stats import t_interval
from marlgrid.config import ConfigError
from marlgrid.core.rules import Rules


def mean_ci(values: np.ndarray) -> tuple[float, float]:
    """Mean and the half-width of its Student-t 95% confidence interval (NaN below 2 values)."""
    low, high = t_interval(values)
    return float(np.mean(values)), (high - low) / 2


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


def rule_override(text: str) -> tuple[str, Any]:
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


def env_setting(text: str) -> tuple[str, Any]:
    """An argparse type: ``NAME=VALUE`` (``agent.NAME=VALUE``), a YAML value."""
    name, sep, value = text.partition("=")
    if not sep or not name or name.count(".") > 1 or (name.count(".") and name[:6] != "agent."):
        raise argparse.ArgumentTypeError(f"expected NAME=VALUE or agent.NAME=VALUE, got {text!r}")
    return name, yaml.safe_load(value)


#: transfer table columns, in order (``checkpoint`` is left out of the markdown table)
COLUMNS = ("condition", "target", "map", "trained_map", "partners", "role", "greedy", "metric",
           "mean", "low", "high", "n", "checkpoint")  # fmt: skip


def write_table(rows: Sequence[Mapping[str, Any]], path: Path) -> Path:
    """Write transfer ``rows`` as CSV (``.csv``) or a markdown table (``.md``)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    if path.suffix == ".md":
        path.write_text(markdown_table(rows) + "\n")
        return path
    with path.open("w", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=COLUMNS)
        writer.writeheader()
        writer.writerows({c: row.get(c) for c in COLUMNS} for row in rows)
    return path


def markdown_table(rows: Sequence[Mapping[str, Any]]) -> str:
    """Transfer ``rows`` as a markdown table: condition, the map played, metric, mean, 95%
    interval, n; a map other than the one the run trained on is marked ``(trained: ...)``."""
    lines = ["| condition | map | metric | mean | 95% CI | n |", "|---|---|---|---:|---|---:|"]
    for r in rows:
        ci = f"[{r['low']:.3f}, {r['high']:.3f}]"
        where = r.get("map", "")
        if r.get("trained_map") and r.get("trained_map") != where:
            where = f"{where} (trained: {r['trained_map']})"
        lines.append(
            f"| {r['condition']} | {where} | {r['metric']} | {r['mean']:.3f} | {ci} | {r['n']} |"
        )
    return "\n".join(lines)


def transfer(args: argparse.Namespace, rules: dict[str, Any]) -> list[dict[str, Any]]:
    """Run the transfer conditions the flags ask for; print (and write) their table."""
    settings: dict[str, Any] = dict(rules)
    for name, value in args.target_setting:
        if name.startswith("agent."):
            settings.setdefault("agent", {})[name[6:]] = value
        else:
            settings[name] = value
    bad = [str(p) for p in args.table if p.suffix not in (".csv", ".md")]
    if bad:
        raise ConfigError(f"--table files must end in .csv or .md, got {bad}")
    if args.partners and not args.transfer:
        raise ConfigError("--partners applies to --transfer envs; give --transfer ENV_ID")
    conditions = [c for name in args.conditions for c in CONDITIONS[name]]
    for target in args.transfer:
        for text in args.partners or ["none"]:
            partners = partners_from_text(target, text, "agent_0")
            conditions.append(TransferCondition(f"{target}/{text}", target, partners))
    rows = run_conditions(
        args.target, conditions, args.episodes, args.seed, args.greedy, settings,
        num_envs=args.num_envs,
    )  # fmt: skip
    print(markdown_table(rows))
    for path in args.table:
        print(f"table: {write_table(rows, path)}")
    return rows


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
        type=rule_override,
        action="append",
        default=[],
        metavar="NAME=VALUE",
        help="play under this rule (any Rules field, e.g. penalty=1.5); repeatable",
    )
    group = parser.add_argument_group("zero-shot transfer")
    group.add_argument("--transfer", action="append", default=[], metavar="ENV_ID",
                       help="play the trained agent in this env instead; repeatable")  # fmt: skip
    group.add_argument("--partners", action="append", default=[], metavar="NAMES",
                       help="oracle | goal_seeker | none | NAME,NAME,...; repeatable")  # fmt: skip
    group.add_argument("--conditions", action="append", default=[], choices=sorted(CONDITIONS),
                       help="a named set of transfer conditions")  # fmt: skip
    group.add_argument("--target-setting", type=env_setting, action="append", default=[],
                       metavar="NAME=VALUE", help="a target env setting; repeatable")  # fmt: skip
    group.add_argument("--table", action="append", default=[], type=Path, metavar="PATH",
                       help="write the transfer table (.csv or .md); repeatable")  # fmt: skip
    args = parser.parse_args(argv)
    rules = dict(args.rule)
    try:
        if args.transfer or args.conditions:
            transfer(args, rules)
        else:
            evaluate(
                args.target, args.episodes, args.greedy, args.num_envs, args.seed, args.videos,
                rules,
            )  # fmt: skip
    except (SavedRunError, CheckpointError, ConfigError) as exc:
        raise SystemExit(f"error: {exc}") from None


if __name__ == "__main__":
    main()
