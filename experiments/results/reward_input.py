"""Tables and figure of ``reward_input.md`` from its three runs (seeds 0, 1, 2).

    python experiments/results/reward_input.py RUN_0 RUN_1 RUN_2 [--episodes 200]

Writes, beside this file, ``reward_input_runs.csv`` (per seed: the training return, rewards and
penalties per episode over the last 40 logged updates; the final checkpoint's sampled and greedy
return at penalty 1.5 on fresh layouts, mean of the three agents), ``reward_input_curves.csv``
(return and penalty per logged update) and ``reward_input.png`` (the curves beside the scripted
baselines of ``goal_cycle_baselines.csv``).
"""

from __future__ import annotations

import argparse
import csv
import math
from pathlib import Path

import numpy as np

from marlgrid.agents.bookkeeping.saved_run import SavedRun
from marlgrid.analysis.curves import read_metrics

HERE = Path(__file__).resolve().parent
LAST = 40  # logged updates averaged for the training columns
EVAL_SEED = 777


def _finite(rows: list[dict[str, str]], key: str) -> list[tuple[int, float]]:
    out = []
    for r in rows:
        try:
            v = float(r.get(key, ""))
        except ValueError:
            continue
        if not math.isnan(v):
            out.append((int(float(r["step"])), v))
    return out


def _baselines() -> dict[str, float]:
    with open(HERE / "goal_cycle_baselines.csv") as f:
        rows = [
            r
            for r in csv.DictReader(f)
            if r["size"] == "7" and r["condition"] == "all_agents" and float(r["penalty"]) == 1.5
        ]
    return {r["policy"]: float(r["return_mean"]) for r in rows}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("runs", nargs="+", type=Path)
    parser.add_argument("--episodes", type=int, default=200)
    args = parser.parse_args()
    table, curves = [], []
    for run in args.runs:
        saved = SavedRun(run)
        seed = saved.train_config.seed
        rows = read_metrics(run / "metrics.csv")
        train = {k: [v for _, v in _finite(rows, k)][-LAST:] for k in
                 ("charts/episodic_return", "social/rewards", "social/penalties")}  # fmt: skip
        returns = {
            mode: saved.policies(mode == "greedy", {"penalty": 1.5}).evaluate(
                args.episodes, EVAL_SEED, 16
            )
            for mode in ("sampled", "greedy")
        }
        table.append(
            {
                "seed": seed,
                "env_steps": int(float(rows[-1]["step"])),
                "train_return": np.mean(train["charts/episodic_return"]),
                "train_rewards": np.mean(train["social/rewards"]),
                "train_penalties": np.mean(train["social/penalties"]),
                "eval_sampled": returns["sampled"].mean(),
                "eval_greedy": returns["greedy"].mean(),
                "eval_episodes": args.episodes,
            }
        )
        penalty = dict(_finite(rows, "curriculum/penalty"))
        for step, value in _finite(rows, "charts/episodic_return"):
            curves.append({"seed": seed, "env_step": step, "return": value,
                           "penalty": penalty.get(step, float("nan"))})  # fmt: skip
        print(table[-1])
    for name, data in (("reward_input_runs.csv", table), ("reward_input_curves.csv", curves)):
        with open(HERE / name, "w", newline="") as f:
            w = csv.DictWriter(f, fieldnames=list(data[0]))
            w.writeheader()
            for row in data:
                w.writerow({k: f"{v:.4f}" if isinstance(v, float) else v for k, v in row.items()})
    _plot(curves, _baselines())


def _plot(curves: list[dict[str, float]], baselines: dict[str, float]) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(7, 4))
    for seed in sorted({c["seed"] for c in curves}):
        pts = [(c["env_step"], c["return"]) for c in curves if c["seed"] == seed]
        x, y = np.array(pts).T
        k = 20
        smooth = np.convolve(y, np.ones(k) / k, mode="valid")
        ax.plot(x[k - 1 :], smooth, label=f"seed {seed}")
    for name, style in (("reward_blind", "--"), ("discoverer", ":"), ("play_safe", "-.")):
        ax.axhline(baselines[name], color="grey", ls=style, lw=1, label=f"{name} (scripted)")
    ax.set_xlabel("env steps")
    ax.set_ylabel("training return per agent (20-update mean)")
    ax.set_title("PPO-LSTM with reward input, staged penalty 0 -> 1.5, 7x7 3 agents")
    ax.legend(fontsize=7, loc="upper left")
    fig.tight_layout()
    fig.savefig(HERE / "reward_input.png", dpi=110)


if __name__ == "__main__":
    main()
