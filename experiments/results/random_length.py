"""A uniformly random policy's episode length and return: the chance level of the DRQN page.

    OMP_NUM_THREADS=1 python experiments/results/random_length.py \
        --csv experiments/results/drqn_random_length.csv

One row per (env, step limit): the mean episode length and return of ``random`` (the scripted
policy of :mod:`marlgrid.policies`) over ``--episodes`` episodes per env copy, each copy's first
episodes counted alike, so short episodes are not favoured over long ones; with the Student-t
95% interval of the length over all those episodes.
"""

from __future__ import annotations

import argparse
from pathlib import Path

import numpy as np

from marlgrid.analysis.report import show_and_write_rows
from marlgrid.analysis.stats import t_interval
from marlgrid.config import check_int
from marlgrid.policies import make_policy
from marlgrid.registry import make_vec

#: (env id, step limit): the cluttered room of the blog's protocol, and the page's first setup
SETUPS = (("MarlGrid-Cluttered-11x11-v0", 400), ("MarlGrid-Cluttered-11x11-v0", 100),
          ("MarlGrid-Empty-8x8-v0", 100))  # fmt: skip


def measure(env_id: str, max_steps: int, episodes: int, num_envs: int, seed: int) -> dict:
    """Mean length and return of a random policy: the first ``episodes`` of each env copy."""
    episodes = check_int("episodes", episodes, low=1)
    num_envs = check_int("num_envs", num_envs, low=1)
    vec = make_vec(env_id, num_envs, max_steps=max_steps)
    if vec.num_agents != 1:
        raise ValueError(f"{env_id} has {vec.num_agents} agents; this baseline plays one")
    policy = make_policy("random", seed)
    vec.reset(seed=seed)
    lengths: list[list[int]] = [[] for _ in range(num_envs)]
    returns: list[list[float]] = [[] for _ in range(num_envs)]
    actions = np.zeros((num_envs, 1), dtype=np.int64)
    while min(len(x) for x in lengths) < episodes:
        actions[:, 0] = policy.scripted_actions(vec.engine, 0)
        *_, infos = vec.step(actions)
        if "_episode" in infos:
            for n in np.flatnonzero(infos["_episode"]):
                lengths[n].append(int(infos["episode"]["l"][n]))
                returns[n].append(float(infos["episode"]["r"][n, 0]))
    ls = np.array([x[:episodes] for x in lengths], dtype=np.float64).ravel()
    rs = np.array([x[:episodes] for x in returns], dtype=np.float64).ravel()
    low, high = t_interval(ls)
    return {"env": env_id, "max_steps": max_steps, "episodes": len(ls),
            "mean_length": round(float(ls.mean()), 2), "length_low": round(low, 2),
            "length_high": round(high, 2), "reached_goal": round(float((ls < max_steps).mean()), 4),
            "mean_return": round(float(rs.mean()), 4)}  # fmt: skip


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--episodes", type=int, default=25, help="per env copy")
    parser.add_argument("--num-envs", type=int, default=8)
    parser.add_argument("--seed", type=int, default=2024)
    parser.add_argument("--csv", type=Path)
    args = parser.parse_args(argv)
    rows = [measure(e, t, args.episodes, args.num_envs, args.seed) for e, t in SETUPS]
    show_and_write_rows(rows, args.csv)


if __name__ == "__main__":
    main()
