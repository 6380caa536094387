"""How far the following measures separate a follower from chance, by map size.

    OMP_NUM_THREADS=1 python experiments/results/following_chance.py \
        --csv experiments/results/following_chance.csv

On the 3-agent goal cycle (3 tiles, penalty 1.5, clutter 0.15, ghost mode) with two scripted
oracles as agent_1 and agent_2, agent_0 plays in turn a uniformly random policy (the chance
level), the scripted ``follower`` locked on one expert (knows nothing of tiles: the positive
control), the ``switching_follower`` (the follower's old rule, ``leader="nearest_each_step"``:
re-picks the nearest agent every step, copying both experts' entries out of order) and the
``oracle`` (enters tiles for its own reasons), for each map size and episode length given. One
row per size and novice policy: agent_0's mean of the following measures (``follow_expert``,
``repeat_expert``, its time-shuffled level and the excess, ``order_expert``,
``trail_expert_excess``) and of ``expert_in_view`` and its return, over ``--episodes`` episodes
(:func:`marlgrid.analysis.chance.social_levels`). The rows of ``switching_follower`` are the
rows this script wrote as ``follower`` before the follower locked on one leader. A map where
the follower's ``follow_expert`` and ``repeat_expert_excess`` stand well above the random
novice's, and the oracle's ``repeat_expert_excess`` near zero, is one where the measures can
show following.
"""

from __future__ import annotations

import argparse
from pathlib import Path

from marlgrid.analysis.chance import social_levels
from marlgrid.analysis.report import show_and_write_rows
from marlgrid.policies import ScriptedPolicy, make_policy
from marlgrid.policies.follower import FollowerPolicy

ENV_ID = "MarlGrid-GoalCycle-13x13-3Agents-v0"
NOVICES = ("random", "follower", "switching_follower", "oracle")
METRICS = ("return", "follow_expert", "repeat_expert", "repeat_expert_shuffled",
           "repeat_expert_excess", "expert_in_view", "expert_distance", "order_expert",
           "trail_expert_excess")  # fmt: skip
#: (map side, episode length)
SIZES = ((7, 100), (13, 250), (19, 400))


def measure(size: int, max_steps: int, novice: str, episodes: int, seed: int) -> dict[str, object]:
    """agent_0's means of :data:`METRICS` as ``novice`` beside two oracles."""
    experts = {a: make_policy("oracle", seed + k) for k, a in enumerate(("agent_1", "agent_2"))}
    policy: ScriptedPolicy = (
        FollowerPolicy(seed, leader="nearest_each_step")
        if novice == "switching_follower"
        else make_policy(novice, seed)
    )
    found = social_levels(
        ENV_ID, {"size": size, "max_steps": max_steps}, experts, policy,
        episodes=episodes, seed=seed,
    )  # fmt: skip
    return {"size": size, "max_steps": max_steps, "novice": novice, "episodes": episodes,
            **{m: round(found[m], 4) for m in METRICS}}  # fmt: skip


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--episodes", type=int, default=96)
    parser.add_argument("--seed", type=int, default=2024)
    parser.add_argument("--csv", type=Path)
    args = parser.parse_args(argv)
    rows = [measure(s, t, n, args.episodes, args.seed) for s, t in SIZES for n in NOVICES]
    show_and_write_rows(rows, args.csv)


if __name__ == "__main__":
    main()
