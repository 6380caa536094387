"""The figure of ``experts.md``: return, correct entries, penalties and the curriculum's penalty
against env steps, recipe beside control, from the committed curve CSVs alone.

    python experiments/results/experts_plot.py     # writes experiments/results/experts_curves.png

Reads ``experts_train_<metric>_curves.csv`` (``aggregate.py``'s output: the mean over seeds with
its Student-t 95% band) and draws the scripted baselines of the same setup
(``goal_cycle_baselines.csv``: 7x7, 100 steps, 3 tiles, penalty 1.5, every agent scripted) on
the return panel.
"""

from __future__ import annotations

import argparse
import csv
from collections import defaultdict
from pathlib import Path

RESULTS = Path(__file__).resolve().parent
#: metric stem -> panel title
PANELS = {
    "episodic_return": "return per agent-episode",
    "rewards": "correct entries per agent-episode",
    "penalties": "penalised entries per agent-episode (0 while the penalty is 0)",
    "penalty": "penalty of a wrong tile (curriculum)",
}
#: condition label in the curve CSVs -> legend label
ARMS = {
    "name=goal_cycle_expert": "recipe: penalty annealed 0 -> 1.5",
    "name=goal_cycle_expert_fixed_penalty": "control: penalty 1.5 throughout",
}
BASELINES = ("discoverer", "reward_blind", "play_safe", "random")


def read_curves(path: Path) -> dict[str, list[tuple[float, float, float, float]]]:
    """Per condition, (step, mean, low, high) rows in file order."""
    out: dict[str, list[tuple[float, float, float, float]]] = defaultdict(list)
    with path.open(newline="", encoding="utf-8") as f:
        for row in csv.DictReader(f):
            values = (row["step"], row["mean"], row["mean_ci_low"], row["mean_ci_high"])
            out[row["condition"]].append(tuple(float(v) for v in values))  # type: ignore[arg-type]
    return out


def baselines(path: Path) -> dict[str, float]:
    """The scripted policies' mean return at 7x7 / 100 steps / 3 tiles / penalty 1.5."""
    with path.open(newline="", encoding="utf-8") as f:
        return {
            r["policy"]: float(r["return_mean"])
            for r in csv.DictReader(f)
            if (r["size"], r["max_steps"], r["n_goals"], r["condition"])
            == ("7", "100", "3", "all_agents")
            and float(r["penalty"]) == 1.5
            and r["policy"] in BASELINES
        }


def plot(results: Path, out: Path) -> Path:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(2, 2, figsize=(11, 7.5), sharex=True)
    for ax, (stem, title) in zip(axes.flat, PANELS.items(), strict=True):
        curves = read_curves(results / f"experts_train_{stem}_curves.csv")
        for condition, label in ARMS.items():
            rows = curves.get(condition)
            if not rows:
                continue
            step, mean, low, high = zip(*rows, strict=True)
            (line,) = ax.plot(step, mean, label=label)
            ax.fill_between(step, low, high, color=line.get_color(), alpha=0.2)
        if stem == "episodic_return":
            for policy, value in baselines(results / "goal_cycle_baselines.csv").items():
                ax.axhline(value, ls=":", lw=1, color="gray")
                ax.annotate(policy, (0, value), fontsize=7, color="gray", va="bottom")
        ax.set_title(title, fontsize=10)
        ax.grid(alpha=0.3)
    for ax in axes[1]:
        ax.set_xlabel("env steps")
    axes[0, 0].legend(fontsize=8, loc="lower right")
    fig.suptitle("Goal-cycle experts, 7x7 / 100 steps: mean over seeds, 95% Student-t band")
    fig.tight_layout()
    fig.savefig(out, dpi=110)
    plt.close(fig)
    return out


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", type=Path, default=RESULTS / "experts_curves.png")
    args = parser.parse_args(argv)
    print(f"wrote {plot(RESULTS, args.out)}")


if __name__ == "__main__":
    main()
