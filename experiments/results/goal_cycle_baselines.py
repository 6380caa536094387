"""Scripted baselines of the canonical goal cycle: what random actions, playing safe, perfect
reward-blind navigation, the ideal discoverer and the oracle score, alone and beside oracles.

    OMP_NUM_THREADS=1 python experiments/results/goal_cycle_baselines.py \
        --csv experiments/results/goal_cycle_baselines.csv

Tasks: ``MarlGrid-GoalCycle-13x13-3Agents-v0`` (3 tiles, or ``--n-goals``; clutter 0.15,
ghost mode) at 7x7 with 100-step episodes (the small scale of the presets) and at 13x13 with
250 steps (full scale), each at penalty 1.5 (canonical) and 0 (or ``--penalties``).
4 tiles: ``--n-goals 4 --penalties 1.5 --csv experiments/results/goal_cycle_baselines_4tiles.csv``.
Conditions: ``all_agents`` (the three agents play the
policy; an episode's value is the mean over its agents) and ``beside_oracles`` (agent_0, the
novice's slot, plays it beside two oracles; an episode's value is agent_0's); with
``--conditions alone``, ``alone`` (one agent in ``MarlGrid-GoalCycle-13x13-v0``, the solo
novice's setup: ``--conditions alone --csv experiments/results/goal_cycle_baselines_alone.csv``).
``--oracle-epsilon E`` makes the two oracles of ``beside_oracles`` take a uniformly random
action with probability E each step (R8's noisy experts; the condition reads
``beside_oracles_eps_E``; one more row, ``noisy_oracle``, is an oracle as noisy in agent_0's
slot): ``--scales small --penalties 1.5 --conditions beside_oracles --oracle-epsilon 0.3
--csv experiments/results/goal_cycle_baselines_eps_0.3.csv``.
Every row plays
the same ``--episodes`` fresh layouts (env ``i`` seeded ``--seed + i``), all at once in one
batch. Per episode: the return, the tile entries that paid (``rewards``) and the wrong ones
(``penalties``: each costs the penalty, nothing at penalty 0); each as a mean with a Student-t
95% interval over episodes.
``expected_return`` is what the entries counted imply for the two reward-blind policies:
``play_safe`` scores its first tile (1 where it reached one), ``reward_blind`` 1 for the first
tile plus ``0.5 + (1 - penalty) / 4`` for every later entry with 3 tiles (see
:mod:`marlgrid.policies.baselines`).
"""

from __future__ import annotations

import argparse
import csv
import os
import time
from pathlib import Path

os.environ.setdefault("OMP_NUM_THREADS", "1")

import numpy as np  # noqa: E402

import marlgrid  # noqa: E402
from marlgrid.analysis.stats import t_interval  # noqa: E402
from marlgrid.constants import CYCLE_TILE  # noqa: E402
from marlgrid.policies import make_policy  # noqa: E402

ENV_ID = "MarlGrid-GoalCycle-13x13-3Agents-v0"
#: the same task with one agent, for the ``alone`` condition (a solo novice's setup)
SOLO_ENV_ID = "MarlGrid-GoalCycle-13x13-v0"
POLICIES = ("random", "play_safe", "reward_blind", "discoverer", "oracle")
#: with ``--oracle-epsilon``, one more row: an oracle as noisy as the partners in the novice's slot
NOISY_ORACLE = "noisy_oracle"
#: (map side, episode length): the presets' small and full scales
SCALES = ((7, 100), (13, 250))
PENALTIES = (1.5, 0.0)
CONDITIONS = ("all_agents", "beside_oracles")
#: every condition ``--conditions`` takes (``alone``: one agent in the one-agent env)
ALL_CONDITIONS = (*CONDITIONS, "alone")
FIELDS = [
    "size",
    "max_steps",
    "n_goals",
    "penalty",
    "condition",
    "policy",
    "episodes",
    "return_mean",
    "return_low",
    "return_high",
    "rewards_mean",
    "rewards_low",
    "rewards_high",
    "penalties_mean",
    "penalties_low",
    "penalties_high",
    "expected_return",
]


def play(
    size: int,
    max_steps: int,
    penalty: float,
    players: list[str],
    episodes: int,
    seed: int,
    n_goals: int = 3,
    epsilons: list[float] | None = None,
) -> dict[str, np.ndarray]:
    """One episode in each of ``episodes`` envs of ``n_goals`` tiles with agent ``k`` playing
    ``players[k]`` (one player: the one-agent env) with random-action chance ``epsilons[k]``
    (default 0): per-agent arrays ``(episodes, agents)`` of returns and of paid and wrong tile
    entries."""
    env_id = SOLO_ENV_ID if len(players) == 1 else ENV_ID
    vec = marlgrid.make_vec(
        env_id, episodes, size=size, max_steps=max_steps, penalty=penalty, n_goals=n_goals
    )
    epsilons = epsilons or [0.0] * len(players)
    policies = [make_policy(name, seed=seed + 7919 * k, epsilon=eps)
                for k, (name, eps) in enumerate(zip(players, epsilons, strict=True))]  # fmt: skip
    vec.reset(seed=seed)
    engine = vec.engine  # stepped directly: no autoreset, so the last step's entries count too
    shape = (episodes, vec.num_agents)
    returns, paid, wrong = np.zeros(shape), np.zeros(shape), np.zeros(shape)
    actions = np.zeros(shape, dtype=np.int64)
    rows = np.arange(episodes)[:, None]
    for _ in range(max_steps):  # goal cycles never terminate: every env ends at max_steps
        for k, policy in enumerate(policies):
            actions[:, k] = policy.scripted_actions(engine, k)
        before = engine.pos.copy()
        engine.step(actions)
        moved = (engine.pos != before).any(axis=2)
        entered = moved & (
            engine.grid[rows, engine.pos[..., 0], engine.pos[..., 1], 0] == CYCLE_TILE
        )
        returns += engine.rewards
        paid += entered & (engine.rewards > 0)
        wrong += entered & (engine.rewards <= 0)
    assert engine.truncated.all(), "every episode ends at max_steps"
    return {"return": returns, "rewards": paid, "penalties": wrong}


def expected_return(policy: str, entries: np.ndarray, penalty: float, n_goals: int = 3) -> float:
    """What the entries counted imply for a reward-blind policy (NaN for the others, and for
    ``reward_blind`` with other than 3 tiles, where the formula below does not hold)."""
    if policy == "play_safe":
        return float(np.mean(entries > 0))
    if policy == "reward_blind" and n_goals == 3:
        later = np.maximum(entries - 1, 0)
        return float(np.mean((entries > 0) + later * (0.5 + (1 - penalty) / 4)))
    return float("nan")


def row(size: int, max_steps: int, penalty: float, condition: str, policy: str,
        episodes: int, seed: int, n_goals: int = 3,
        oracle_epsilon: float = 0.0) -> dict[str, object]:  # fmt: skip
    players = {"all_agents": [policy] * 3, "beside_oracles": [policy, "oracle", "oracle"],
               "alone": [policy]}[condition]  # fmt: skip
    epsilons = None
    if oracle_epsilon and condition == "beside_oracles":  # the partners are noisy oracles
        epsilons = [0.0, oracle_epsilon, oracle_epsilon]
        condition = f"beside_oracles_eps_{oracle_epsilon:g}"
        if policy == NOISY_ORACLE:  # the novice's slot plays as noisily as its partners
            players[0], epsilons[0] = "oracle", oracle_epsilon
    found = play(size, max_steps, penalty, players, episodes, seed, n_goals, epsilons)
    out: dict[str, object] = {
        "size": size,
        "max_steps": max_steps,
        "n_goals": n_goals,
        "penalty": penalty,
        "condition": condition,
        "policy": policy,
        "episodes": episodes,
    }
    agents = slice(None) if condition == "all_agents" else slice(0, 1)
    for key, values in found.items():
        per_episode = values[:, agents].mean(axis=1)
        low, high = t_interval(per_episode)
        out |= {f"{key}_mean": per_episode.mean(), f"{key}_low": low, f"{key}_high": high}
    entries = (found["rewards"] + found["penalties"])[:, agents]
    out["expected_return"] = expected_return(policy, entries.ravel(), penalty, n_goals)
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--episodes", type=int, default=200, help="fresh layouts per row")
    parser.add_argument("--seed", type=int, default=2024, help="env i is seeded seed + i")
    parser.add_argument(
        "--csv", type=Path, help="output (default: this script's .csv, for the default rows only)"
    )
    parser.add_argument("--n-goals", type=int, default=3, help="tiles per map (4: transfer)")
    parser.add_argument(
        "--penalties", type=float, nargs="+", default=list(PENALTIES), help="penalties played"
    )
    parser.add_argument(
        "--conditions", nargs="+", default=list(CONDITIONS), choices=ALL_CONDITIONS,
        help="who plays (alone: one agent in the one-agent env)",
    )  # fmt: skip
    parser.add_argument(
        "--oracle-epsilon", type=float, default=0.0,
        help="beside_oracles: the oracles' chance of a random action each step, in [0, 1]",
    )  # fmt: skip
    parser.add_argument(
        "--scales", nargs="+", default=["small", "full"], choices=["small", "full"],
        help="small: 7x7 / 100 steps; full: 13x13 / 250 steps",
    )  # fmt: skip
    args = parser.parse_args()
    if not 0.0 <= args.oracle_epsilon <= 1.0:
        parser.error(f"--oracle-epsilon must be in [0, 1] (got {args.oracle_epsilon})")
    chosen = (args.n_goals, args.penalties, args.conditions, args.oracle_epsilon, args.scales)
    defaults = chosen == (3, list(PENALTIES), list(CONDITIONS), 0.0, ["small", "full"])
    if args.csv is None and not defaults:
        parser.error("give --csv for rows other than the default ones (3 tiles, penalties 1.5 and "
                     "0, conditions all_agents and beside_oracles, noiseless oracles, both "
                     "scales): they would overwrite "
                     f"{Path(__file__).with_suffix('.csv').name}")  # fmt: skip
    args.csv = args.csv or Path(__file__).with_suffix(".csv")
    rows = []
    scales = [scale for name, scale in zip(("small", "full"), SCALES, strict=True)
              if name in args.scales]  # fmt: skip
    for size, max_steps in scales:
        for penalty in args.penalties:
            for condition in args.conditions:
                noisy = args.oracle_epsilon and condition == "beside_oracles"
                extra = (NOISY_ORACLE,) if noisy else ()
                for policy in (*POLICIES, *extra):
                    start = time.perf_counter()
                    rows.append(row(size, max_steps, penalty, condition, policy,
                                    args.episodes, args.seed, args.n_goals,
                                    args.oracle_epsilon))  # fmt: skip
                    r = rows[-1]
                    print(
                        f"{size}x{size} {max_steps} steps, {args.n_goals} tiles, "
                        f"penalty {penalty}, {r['condition']:14} "
                        f"{policy:12} return {r['return_mean']:6.2f} "
                        f"[{r['return_low']:6.2f}, {r['return_high']:6.2f}] rewards "
                        f"{r['rewards_mean']:5.2f} penalties {r['penalties_mean']:5.2f} "
                        f"({time.perf_counter() - start:.0f} s)",
                        flush=True,
                    )
    with args.csv.open("w", newline="") as f:
        writer = csv.DictWriter(f, FIELDS)
        writer.writeheader()
        for r in rows:
            writer.writerow({k: f"{v:.4f}" if isinstance(v, float) else v for k, v in r.items()})
    print(f"wrote {args.csv} ({len(rows)} rows)")


if __name__ == "__main__":
    main()
