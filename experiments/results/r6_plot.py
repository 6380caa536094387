"""R6's figure: each frozen agent's mean greedy return with its Student-t 95% interval in the
primary transfer condition (4 tiles, 7x7 / 100 steps, penalty 1.5), beside 4-tile oracles and
alone, with the scripted baselines of the same setting as lines.

    python experiments/results/r6_plot.py   # social_r6_transfer_t.csv -> social_r6_transfer.png

Reads ``social_r6_transfer_t.csv`` (``derived_tables.py``) and ``social_r6_baselines.csv``.
"""

from __future__ import annotations

import argparse
import csv
from pathlib import Path

RESULTS = Path(__file__).resolve().parent
#: the primary condition's two settings, as the tables name them
SETTINGS = {
    "MarlGrid-GoalCycle-13x13-4Goals-3Agents-v0/oracle": "beside 4-tile oracles",
    "MarlGrid-GoalCycle-13x13-4Goals-3Agents-v0/none": "alone",
}
#: the agents in the original's claimed order, best first, with their labels
AGENTS = {
    "r3_social_aux": "social-aux (R3 A)",
    "r3_alone_aux": "solo + loss (R3 C)",
    "r1_penalty_1.5": "solo (R1)",
    "goal_cycle_7x7_3agents_expert": "3-tile expert",
    "r5_bc": "imitation (R5)",
}
BASELINES = ("random", "play_safe", "discoverer")


class PlotError(ValueError):
    """Input the figure cannot be drawn from: the message names it."""


def bars(rows: list[dict[str, str]]) -> dict[str, dict[str, tuple[float, float, float]]]:
    """``{setting: {agent: (mean, t_low, t_high)}}`` of the primary condition's rows."""
    found: dict[str, dict[str, tuple[float, float, float]]] = {s: {} for s in SETTINGS}
    for row in rows:
        if row["condition"] in SETTINGS and row["agent"] in AGENTS:
            values = (float(row["mean"]), float(row["t_low"]), float(row["t_high"]))
            found[row["condition"]][row["agent"]] = values
    for setting, agents in found.items():
        missing = [a for a in AGENTS if a not in agents]
        if missing:
            raise PlotError(f"no row of {setting!r} for agents {missing} in the transfer table")
    return found


def plot(table: Path, baselines: Path, out: Path) -> Path:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    with table.open(newline="") as f:
        found = bars(list(csv.DictReader(f)))
    with baselines.open(newline="") as f:
        lines = {r["policy"]: float(r["return"]) for r in csv.DictReader(f)
                 if r["condition"] in SETTINGS and r["policy"] in BASELINES}  # fmt: skip
    fig, ax = plt.subplots(figsize=(8, 4.2))
    width = 0.38
    for k, (setting, label) in enumerate(SETTINGS.items()):
        mean, low, high = zip(*(found[setting][a] for a in AGENTS), strict=True)
        means = list(mean)
        errors = [[m - lo for m, lo in zip(mean, low, strict=True)],
                  [hi - m for m, hi in zip(mean, high, strict=True)]]  # fmt: skip
        xs = [i + (k - 0.5) * width for i in range(len(AGENTS))]
        ax.bar(xs, means, width, yerr=errors, capsize=3, label=label)
    for policy, style in zip(BASELINES, (":", "--", "-."), strict=True):
        if policy in lines:
            ax.axhline(lines[policy], color="grey", linestyle=style, linewidth=1,
                       label=f"{policy.replace('_', ' ')} ({lines[policy]:g})")  # fmt: skip
    ax.set_xticks(range(len(AGENTS)), list(AGENTS.values()), fontsize=8)
    ax.set_ylabel("greedy return (mean over seeds, 95% t-interval)")
    ax.set_title("R6: 4 tiles, 7x7 / 100 steps, penalty 1.5 (frozen agents)", fontsize=10)
    ax.legend(fontsize=7, loc="lower left")
    fig.tight_layout()
    fig.savefig(out, dpi=110)
    plt.close(fig)
    return out


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--table", type=Path, default=RESULTS / "social_r6_transfer_t.csv")
    parser.add_argument("--baselines", type=Path, default=RESULTS / "social_r6_baselines.csv")
    parser.add_argument("--out", type=Path, default=RESULTS / "social_r6_transfer.png")
    args = parser.parse_args(argv)
    print(f"wrote {plot(args.table, args.baselines, args.out)}")


if __name__ == "__main__":
    main()
