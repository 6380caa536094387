"""Scripted baselines of R6's transfer conditions: what random actions and scripted policies score
in agent_0's slot of each condition that ``evaluate.py`` plays the frozen agents in, beside the
same partners or alone.

    OMP_NUM_THREADS=1 python experiments/results/transfer_baselines.py --episodes 200 \
        --seed 777 --csv experiments/results/social_r6_baselines.csv

Conditions: the registered ``social_transfer`` suite (:mod:`marlgrid.agents.bookkeeping.transfer`)
and R6's primary condition, the 4-tile goal cycle at 7x7 / 100 steps beside two oracles and
alone (named as ``evaluate.py --transfer ... --partners oracle|none`` names them). Policies in
agent_0's slot: ``random`` everywhere; in the goal cycles also ``play_safe``, ``reward_blind``,
``discoverer`` and ``oracle``; in FourRooms and the maze also ``goal_seeker``. Each row: the
mean return, correct and wrong entries of agent_0 over ``--episodes`` episodes
(:func:`marlgrid.analysis.chance.play_scripted`), the return with its Student-t 95% interval.
"""

from __future__ import annotations

import argparse
from pathlib import Path

from marlgrid.agents.bookkeeping.transfer import CONDITIONS, TransferCondition
from marlgrid.analysis.chance import play_scripted
from marlgrid.analysis.report import show_and_write_rows
from marlgrid.analysis.stats import t_interval

GC4 = "MarlGrid-GoalCycle-13x13-4Goals-3Agents-v0"
SMALL = {"size": 7, "max_steps": 100}
#: R6's primary condition, beside two oracles and alone
PRIMARY = (
    TransferCondition(f"{GC4}/oracle", GC4, {"agent_1": "oracle", "agent_2": "oracle"}, SMALL),
    TransferCondition(f"{GC4}/none", GC4, {}, SMALL),
)
GOAL_CYCLE = ("random", "play_safe", "reward_blind", "discoverer", "oracle")
NAVIGATION = ("random", "goal_seeker")


def policies_for(condition: TransferCondition) -> tuple[str, ...]:
    return GOAL_CYCLE if "GoalCycle" in condition.target else NAVIGATION


def measure(condition: TransferCondition, policy: str, episodes: int, seed: int) -> dict:
    """agent_0 playing ``policy`` in ``condition`` (alone: a one-agent env)."""
    settings = dict(condition.settings)
    if not condition.partners:
        settings["n_agents"] = 1
    players = {"agent_0": policy, **condition.partners}
    rows, _ = play_scripted(
        condition.target, settings, players, list(condition.partners), episodes, seed
    )
    returns = rows["return"][:, 0]
    low, high = t_interval(returns)
    return {
        "condition": condition.name,
        "policy": policy,
        "episodes": episodes,
        "return": round(float(returns.mean()), 4),
        "return_low": round(low, 4),
        "return_high": round(high, 4),
        "correct": round(float(rows["rewards"][:, 0].mean()), 4),
        "wrong": round(float(rows["penalties"][:, 0].mean()), 4),
    }


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--episodes", type=int, default=200)
    parser.add_argument("--seed", type=int, default=777)
    parser.add_argument("--csv", type=Path)
    args = parser.parse_args(argv)
    if args.episodes < 2:
        parser.error(f"--episodes must be >= 2 (an interval needs two), got {args.episodes}")
    conditions = (*PRIMARY, *CONDITIONS["social_transfer"])
    rows = [
        measure(condition, policy, args.episodes, args.seed)
        for condition in conditions
        for policy in policies_for(condition)
    ]
    show_and_write_rows(rows, args.csv)


if __name__ == "__main__":
    main()
