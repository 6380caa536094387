"""What following pays: scripted novices beside two oracles, per map, with the following measures.

    OMP_NUM_THREADS=1 python experiments/results/following_pays/controls.py \
        --csv experiments/results/following_pays/controls.csv \
        --bars experiments/results/following_pays/bars.csv

agent_0 is blind to the tiles (``hide: [cycle_tile]``; the scripted policies read the engine,
so only the learner is really blind) beside two scripted oracles. Each row: one novice on one
setting, ``--episodes`` episodes from layout seed ``--seed``: its return (mean and Student-t
95% interval), penalties, and its mean of the following measures of :mod:`marlgrid.following`
(``order_expert`` over the whole episode, ``trail_expert`` and its time-shuffled excess,
``repeat_expert_excess``, the distance to the nearest expert). Novices:

* ``random`` (chance), ``play_safe`` (one tile, then still: the floor a learner must beat);
* ``locked``: the follower locked on one expert (careful following, the positive control);
* ``switching``: the follower re-picking the nearest expert each step (sloppy);
* ``noisy``: the locked follower with 10% random actions (sloppy);
* ``lagging``: the locked follower 30 steps behind its leader (following with a long lag);
* ``oracle``: enters tiles in order for its own reasons (a self-cycler, no following).

A setting where the sloppy followers earn more than play safe offers a learner a slope toward
following; one where they earn less does not, whatever careful following pays.

``--bars`` writes the page's pass-rule bars per setting: ``order_expert`` halfway from the
random novice's to the locked follower's, ``trail_expert_excess`` half the locked follower's.
"""

from __future__ import annotations

import argparse
from pathlib import Path

import numpy as np
from scipy import stats

from marlgrid.analysis.chance import play_scripted
from marlgrid.analysis.report import show_and_write_rows, write_csv
from marlgrid.follower import FollowerPolicy
from marlgrid.policies import ScriptedPolicy, make_policy

#: setting name -> (env id, settings): the maps of the following-pays page
SETTINGS = {
    "9x9_150_p0.5": ("MarlGrid-GoalCycle-9x9-3Agents-v0", {}),
    "7x7_100_p0.5": (
        "MarlGrid-GoalCycle-13x13-3Agents-v0",
        {"size": 7, "max_steps": 100, "penalty": 0.5},
    ),  # fmt: skip
    "9x9_150_p1.5": ("MarlGrid-GoalCycle-9x9-3Agents-v0", {"penalty": 1.5}),
    "13x13_250_p0.25": ("MarlGrid-GoalCycle-13x13-Penalty0.25-3Agents-v0", {}),
    "13x13_250_p1.5": ("MarlGrid-GoalCycle-13x13-3Agents-v0", {}),
}
METRICS = ("penalties", "order_expert", "trail_expert", "trail_expert_excess",
           "repeat_expert_excess", "expert_distance")  # fmt: skip


def novices(seed: int) -> dict[str, ScriptedPolicy]:
    """The scripted novices of the module docstring, seeded with ``seed``."""
    return {
        "random": make_policy("random", seed),
        "play_safe": make_policy("play_safe", seed),
        "locked": FollowerPolicy(seed),
        "switching": FollowerPolicy(seed, leader="nearest_each_step"),
        "noisy": FollowerPolicy(seed, epsilon=0.1),
        "lagging": FollowerPolicy(seed, lag=30),
        "oracle": make_policy("oracle", seed),
    }


def t_interval(values: np.ndarray) -> tuple[float, float]:
    """Student-t 95% interval of the mean of ``values``."""
    half = stats.t.ppf(0.975, len(values) - 1) * values.std(ddof=1) / np.sqrt(len(values))
    return float(values.mean() - half), float(values.mean() + half)


def measure(setting: str, novice: str, policy: ScriptedPolicy, episodes: int, seed: int) -> dict:
    """agent_0's row for ``novice`` on ``setting``."""
    env_id, settings = SETTINGS[setting]
    blind = {**settings, "agents": [{"hide": ["cycle_tile"]}, {}, {}]}
    experts = {a: make_policy("oracle", seed + 1 + k) for k, a in enumerate(("agent_1", "agent_2"))}
    rows, agents = play_scripted(
        env_id, blind, {**experts, "agent_0": policy}, list(experts), episodes, seed
    )
    col = agents.index("agent_0")
    ret = rows["return"][:, col]
    low, high = t_interval(ret)
    out = {"setting": setting, "novice": novice, "episodes": episodes, "layout_seed": seed,
           "return": round(float(ret.mean()), 4), "return_low": round(low, 4),
           "return_high": round(high, 4)}  # fmt: skip
    for name in METRICS:
        values = rows[name][:, col]
        out[name] = round(float(np.nanmean(values)), 4)
    out["oracles_return"] = round(float(rows["return"][:, 1:].mean()), 4)
    return out


def bars(rows: list[dict]) -> list[list[object]]:
    """Per setting: the order and trail bars of the page's pass rule."""
    by = {(r["setting"], r["novice"]): r for r in rows}
    out = []
    for setting in dict.fromkeys(r["setting"] for r in rows):
        random, locked = by[(setting, "random")], by[(setting, "locked")]
        order = round((random["order_expert"] + locked["order_expert"]) / 2, 3)
        out.append([setting, order, round(locked["trail_expert_excess"] / 2, 3)])
    return out


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--episodes", type=int, default=200)
    parser.add_argument("--seed", type=int, default=4900, help="layout seed (the page's)")
    parser.add_argument("--settings", nargs="*", choices=sorted(SETTINGS), default=list(SETTINGS))
    parser.add_argument("--csv", type=Path)
    parser.add_argument("--bars", type=Path)
    args = parser.parse_args(argv)
    rows = [
        measure(setting, name, policy, args.episodes, args.seed)
        for setting in args.settings
        for name, policy in novices(args.seed).items()
    ]
    show_and_write_rows(rows, args.csv)
    if args.bars:
        write_csv(args.bars, ["setting", "order_bar", "trail_bar"], bars(rows))


if __name__ == "__main__":
    main()
