"""What following pays: scripted novices beside two oracles, per map, with the following measures.

    OMP_NUM_THREADS=1 python experiments/results/following_pays/controls.py \
        --csv experiments/results/following_pays/controls.csv \
        --bars experiments/results/following_pays/bars.csv

agent_0 is blind to the tiles (``hide: [cycle_tile]``; the scripted policies read the engine,
so only the learner is really blind) beside two scripted oracles. Each row: one novice on one
setting, ``--episodes`` episodes from layout seed ``--seed``: its return (mean and Student-t
95% interval), penalties, and its mean of the following measures of
:mod:`marlgrid.metrics.following`
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

``--rl-experts`` plays the same novices beside the expert library's two 7x7 RL experts (frozen,
sampling; every agent sees its last reward and action, as they were trained) instead of the
oracles, on the 7x7 setting only: the controls of the page's ``social_7x7_rl`` arm (its trail
bar halfway from the random novice's excess, which is well above 0 there).
"""

from __future__ import annotations

import argparse
from pathlib import Path

import numpy as np
from scipy import stats

from marlgrid.analysis.chance import play_scripted
from marlgrid.analysis.report import show_and_write_rows, write_csv
from marlgrid.policies import ScriptedPolicy, make_policy
from marlgrid.policies.follower import FollowerPolicy

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
    assert agents.index("agent_0") == 0
    return novice_row(setting, novice, rows, episodes, seed)


def novice_row(setting: str, novice: str, rows: dict, episodes: int, seed: int) -> dict:
    """The CSV row of agent_0 (column 0) from social-metric ``rows`` ``(episodes, 3)``: its
    return with a t-interval, :data:`METRICS`, and its two experts' mean return."""
    ret = rows["return"][:, 0]
    low, high = t_interval(ret)
    out = {"setting": setting, "novice": novice, "episodes": episodes, "layout_seed": seed,
           "return": round(float(ret.mean()), 4), "return_low": round(low, 4),
           "return_high": round(high, 4)}  # fmt: skip
    for name in METRICS:
        out[name] = round(float(np.nanmean(rows[name][:, 0])), 4)
    out["oracles_return"] = round(float(rows["return"][:, 1:].mean()), 4)
    return out


RL_EXPERTS = ("experiments/experts/goal_cycle_7x7_3agents_expert_seed0.pt",
              "experiments/experts/goal_cycle_7x7_3agents_expert_seed1.pt")  # fmt: skip


def rl_rows(policy: ScriptedPolicy, episodes: int, seed: int) -> dict[str, np.ndarray]:
    """The social metrics ``(episodes, 3)`` of ``policy`` as agent_0 (blind to the tiles)
    beside the two frozen RL experts on the 7x7 setting."""
    from marlgrid.agents.training.env_sources import make_env_source
    from marlgrid.agents.training.evaluation import acting_copies
    from marlgrid.agents.training.roles import RoleConfig, build_groups
    from marlgrid.agents.training.rollout import MultiAgentRollout
    from marlgrid.agents.training.social_observer import SocialObserver

    env_id, settings = SETTINGS["7x7_100_p0.5"]
    settings = {**settings, "agent": {"extras": ["reward", "action"]},
                "agents": [{"hide": ["cycle_tile"]}, {}, {}]}  # fmt: skip
    vec = make_env_source(env_id, 16, settings)
    roles = {f"agent_{k + 1}": RoleConfig("frozen", checkpoint=f) for k, f in enumerate(RL_EXPERTS)}
    groups, _ = build_groups(roles, vec, {}, seed)
    observer = SocialObserver(vec, experts=list(roles))
    rollout = MultiAgentRollout(
        vec, acting_copies(groups, None), {"agent_0": policy}, seed=seed, observers=[observer]
    )
    found: dict[str, list[np.ndarray]] = {}
    while sum(len(v) for v in found.get("return", [])) < episodes:
        rollout.collect(16)
        for name, values in observer.tracker.pop().items():
            found.setdefault(name, []).append(values)
    return {name: np.concatenate(v)[:episodes] for name, v in found.items()}


def measure_rl(novice: str, policy: ScriptedPolicy, episodes: int, seed: int) -> dict:
    """agent_0's row for ``novice`` beside the RL experts (as :func:`measure`; the last column
    is then the RL experts' return)."""
    rows = rl_rows(policy, episodes, seed)
    return novice_row("7x7_100_p0.5_rl_experts", novice, rows, episodes, seed)


def bars(rows: list[dict], trail_from_random: bool = False) -> list[list[object]]:
    """Per setting: the order and trail bars of the page's pass rule (the trail bar half the
    locked follower's excess, or with ``trail_from_random`` halfway from the random novice's:
    beside the RL experts a random novice's excess is well above 0)."""
    by = {(r["setting"], r["novice"]): r for r in rows}
    out = []
    for setting in dict.fromkeys(r["setting"] for r in rows):
        random, locked = by[(setting, "random")], by[(setting, "locked")]
        order = round((random["order_expert"] + locked["order_expert"]) / 2, 3)
        floor = random["trail_expert_excess"] if trail_from_random else 0.0
        out.append([setting, order, round((floor + locked["trail_expert_excess"]) / 2, 3)])
    return out


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--episodes", type=int, default=200)
    parser.add_argument("--seed", type=int, default=4900, help="layout seed (the page's)")
    parser.add_argument("--settings", nargs="*", choices=sorted(SETTINGS), default=list(SETTINGS))
    parser.add_argument("--csv", type=Path)
    parser.add_argument("--bars", type=Path)
    parser.add_argument("--rl-experts", action="store_true", help="beside the 7x7 RL experts")
    args = parser.parse_args(argv)
    if args.rl_experts:
        rows = [measure_rl(name, policy, args.episodes, args.seed)
                for name, policy in novices(args.seed).items()]  # fmt: skip
        show_and_write_rows(rows, args.csv)
        if args.bars:
            write_csv(args.bars, ["setting", "order_bar", "trail_bar"], bars(rows, True))
        return
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
