"""Plot learning curves from run directories, with scripted-policy baselines.

    python experiments/plot_curves.py runs/default/seed_0 --baselines \
        --out experiments/results/default_run.png

Each run's ``metrics.csv`` gives the return per update; ``--baselines`` plays the first run's env
(its saved config, :func:`marlgrid.analysis.runs.read_config`) with scripted policies, every agent
playing the same one, and draws their mean returns: ``random`` in every env, in a goal cycle
also the ``oracle`` and the ``discoverer``, in the memory test (the T-maze) the ``cue_reader``
and the memoryless ``cue_blind`` (:mod:`marlgrid.policies.hallway_ends`), in Empty,
FourRooms, Maze and Cluttered the ``goal_seeker``; DoorKey has no scripted player that knows
its task, and the command says so.
"""

from __future__ import annotations

import argparse
from pathlib import Path

import numpy as np

from marlgrid.analysis.curves import CurveError, read_curve, smooth
from marlgrid.analysis.runs import read_config

__all__ = ["BASELINE_MEANINGS", "CurveError", "main", "read_curve", "scripted_baselines", "smooth"]


#: scripted policies that need a goal cycle (they read its tiles)
GOAL_CYCLE_POLICIES = ("oracle", "discoverer")
#: what each baseline is, in a few words (for summaries a newcomer reads)
BASELINE_MEANINGS = {
    "random": "uniform actions",
    "oracle": "knows the order",
    "discoverer": "learns the order from its rewards",
    "goal_seeker": "the oracle: walks to the goal",
    "cue_reader": "the oracle: remembers the cue",
    "cue_blind": "memoryless: always the top end",
}


def baseline_policies(env) -> tuple[str, ...]:
    """The scripted baselines ``env`` (a marlgrid PettingZoo env) can be played by: ``random``,
    then the env's own (:attr:`~marlgrid.base.MarlGridEnv.task_policies`) or a goal cycle's."""
    own = tuple(env.task_policies) or (GOAL_CYCLE_POLICIES if env.rules.n_goals >= 2 else ())
    return ("random", *own)


def scripted_baselines(env_id: str, settings: dict, episodes: int = 50) -> dict[str, float]:
    """Mean return per agent of each of :func:`baseline_policies` over ``episodes`` episodes."""
    import marlgrid
    from marlgrid.episode import run_episode
    from marlgrid.policies import make_policy

    env = marlgrid.make(env_id, **settings)
    out = {}
    for name in baseline_policies(env):
        returns = [
            np.mean(
                list(
                    run_episode(
                        env,
                        dict.fromkeys(env.possible_agents, make_policy(name, s)),
                        seed=10_000 + s,
                    ).returns.values()
                )
            )
            for s in range(episodes)
        ]
        out[name] = float(np.mean(returns))
    return out


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("runs", nargs="+", type=Path)
    parser.add_argument("--metric", default="charts/episodic_return")
    parser.add_argument("--smooth", type=int, default=5)
    parser.add_argument("--baselines", action="store_true")
    parser.add_argument("--out", type=Path, default=Path("curves.png"))
    args = parser.parse_args(argv)
    try:
        curves = [(run, *read_curve(run, args.metric)) for run in args.runs]
    except CurveError as err:
        parser.error(str(err))
    if not any(len(values) for _, _, values in curves):
        parser.error(f"metric {args.metric!r} has no values in {[str(r) for r in args.runs]}")

    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(7, 4))
    for run, steps, values in curves:
        ax.plot(steps, smooth(values, args.smooth), label=str(run))
    if args.baselines:
        env = (read_config(args.runs[0]) or {}).get("env") or {}
        if "id" not in env:
            parser.error(f"--baselines: {args.runs[0]} has no saved config naming its env")
        drawn = scripted_baselines(env["id"], env.get("settings") or {})
        if list(drawn) == ["random"]:
            print(f"baselines: {env['id']} has no scripted player that knows its task "
                  "(see marlgrid.base.MarlGridEnv.task_policies); it gets random only")  # fmt: skip
        for (name, value), style in zip(drawn.items(), ("--", ":", "-."), strict=False):
            ax.axhline(value, color="grey", linestyle=style, label=f"{name} policy ({value:.2f})")
            print(f"{name} policy: mean return {value:.3f}")
    ax.set_xlabel("environment steps")
    ax.set_ylabel(args.metric.split("/")[-1].replace("_", " "))
    ax.legend(fontsize=8)
    ax.grid(alpha=0.3)
    fig.tight_layout()
    args.out.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(args.out, dpi=120)
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
