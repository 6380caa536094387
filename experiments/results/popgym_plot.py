"""The POPGym page's figure and table from a sweep's ``summary.csv``.

    python experiments/results/popgym_plot.py runs/popgym_table/summary.csv \\
        --png experiments/results/popgym_mmer.png --csv experiments/results/popgym_summary.csv

Draws MMER (mean over seeds) per memory core and env as an annotated heat map, prints the
memory x env table in Markdown (mean +- std, and each core's mean over the envs), and copies the
summary to ``--csv``.
"""

from __future__ import annotations

import argparse
import csv
import shutil
from pathlib import Path

import numpy as np


def read_summary(path: Path) -> tuple[list[str], list[str], dict[tuple[str, str], dict]]:
    """Envs and memories in the order the sweep wrote them, and each (memory, env) row."""
    with path.open(newline="") as f:
        rows = list(csv.DictReader(f))
    if not rows:
        raise SystemExit(f"{path} has no rows")
    envs = list(dict.fromkeys(r["env"] for r in rows))
    memories = list(dict.fromkeys(r["memory"] for r in rows))
    return envs, memories, {(r["memory"], r["env"]): r for r in rows}


def markdown(envs: list[str], memories: list[str], cells: dict[tuple[str, str], dict]) -> str:
    def short(env: str) -> str:
        return env.removesuffix("Easy")

    lines = [
        "| memory | " + " | ".join(short(e) for e in envs) + " | mean over envs |",
        "|---" * (len(envs) + 2) + "|",
    ]
    for m in memories:
        values = [cells.get((m, e)) for e in envs]
        text = [f"{float(v['mmer_mean']):.2f} +- {float(v['mmer_std']):.2f}" if v else "-"
                for v in values]  # fmt: skip
        means = [float(v["mmer_mean"]) for v in values if v]
        overall = f"{np.mean(means):.3f}" if len(means) == len(envs) else "-"
        lines.append(f"| {m} | " + " | ".join(text) + f" | {overall} |")
    return "\n".join(lines)


def heat_map(
    envs: list[str], memories: list[str], cells: dict[tuple[str, str], dict], png: Path
) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    grid = np.full((len(memories), len(envs)), np.nan)
    for i, m in enumerate(memories):
        for j, e in enumerate(envs):
            if (m, e) in cells:
                grid[i, j] = float(cells[(m, e)]["mmer_mean"])
    fig, ax = plt.subplots(figsize=(1.3 * len(envs) + 2, 0.45 * len(memories) + 1.5))
    image = ax.imshow(grid, cmap="viridis", vmin=-1, vmax=1, aspect="auto")
    for i in range(len(memories)):
        for j in range(len(envs)):
            if np.isfinite(grid[i, j]):
                color = "black" if grid[i, j] > 0.3 else "white"
                ax.text(j, i, f"{grid[i, j]:.2f}", ha="center", va="center", color=color, size=8)
    ax.set_xticks(range(len(envs)), [e.removesuffix("Easy") for e in envs], rotation=30, ha="right")
    ax.set_yticks(range(len(memories)), memories)
    fig.colorbar(image, ax=ax, label="MMER (mean over seeds)")
    fig.tight_layout()
    fig.savefig(png, dpi=120)
    plt.close(fig)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "summary", type=Path, help="summary.csv of experiments/examples/popgym_sweep.py --sweep"
    )
    parser.add_argument("--png", type=Path, required=True)
    parser.add_argument("--csv", type=Path, default=None, help="copy the summary here")
    args = parser.parse_args()
    envs, memories, cells = read_summary(args.summary)
    heat_map(envs, memories, cells, args.png)
    if args.csv is not None:
        shutil.copyfile(args.summary, args.csv)
    print(markdown(envs, memories, cells))


if __name__ == "__main__":
    main()
