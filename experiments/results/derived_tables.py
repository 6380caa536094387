"""Tables derived from committed CSVs alone, for numbers the result pages quote.

    python experiments/results/derived_tables.py

- ``popgym_by_memory.csv`` (for ``popgym.md``): per memory core, from ``popgym_summary.csv``, the
  mean over the eight tasks of the MMER means, the sweep's training wall time over its 24 runs
  (each cell's mean wall time times its seeds), the env steps over them and their ratio, and the
  steps per second against the memoryless core's;
- ``social/experts_correct_share.csv`` (for ``social_expert_curriculum.md``): per condition, the
  mean rewards and penalties per agent-episode over seeds (from ``experts_rewards_runs.csv`` and
  ``experts_penalties_runs.csv``) and the correct share of entries, rewards / (rewards +
  penalties).
"""

from __future__ import annotations

import csv
from collections import defaultdict
from pathlib import Path

RESULTS = Path(__file__).resolve().parent


def read(path: Path) -> list[dict[str, str]]:
    with path.open(newline="", encoding="utf-8") as f:
        return list(csv.DictReader(f))


def write(path: Path, header: tuple[str, ...], rows: list[list[object]]) -> None:
    with path.open("w", newline="", encoding="utf-8") as f:
        writer = csv.writer(f)
        writer.writerow(header)
        writer.writerows(rows)
    print(f"wrote {path.relative_to(RESULTS)} ({len(rows)} rows)")


def popgym_by_memory() -> None:
    cells: dict[str, list[dict[str, str]]] = defaultdict(list)
    for row in read(RESULTS / "popgym_summary.csv"):
        cells[row["memory"]].append(row)
    totals = {}
    for memory, rows in cells.items():
        wall = sum(float(r["wall_s_mean"]) * int(r["seeds"]) for r in rows)
        steps = sum(int(r["steps"]) * int(r["seeds"]) for r in rows)
        mean = sum(float(r["mmer_mean"]) for r in rows) / len(rows)
        totals[memory] = (len(rows), mean, wall, steps, steps / wall)
    base = totals["none"][4]
    out = [[m, *t, t[4] / base] for m, t in totals.items()]
    header = ("memory", "tasks", "mmer_mean_over_tasks", "wall_s", "env_steps", "steps_per_s",
              "steps_per_s_vs_memoryless")  # fmt: skip
    write(RESULTS / "popgym_by_memory.csv", header, out)


def experts_correct_share() -> None:
    means: dict[str, dict[str, float]] = defaultdict(dict)
    for what in ("rewards", "penalties"):
        groups: dict[str, list[float]] = defaultdict(list)
        for row in read(RESULTS / "social" / f"experts_{what}_runs.csv"):
            groups[row["condition"]].append(float(row["final"]))
        for condition, values in groups.items():
            means[condition][what] = sum(values) / len(values)
    out = [
        [c, m["rewards"], m["penalties"], m["rewards"] / (m["rewards"] + m["penalties"])]
        for c, m in means.items()
    ]
    header = ("condition", "rewards_mean", "penalties_mean", "correct_share")
    write(RESULTS / "social" / "experts_correct_share.csv", header, out)


def main() -> None:
    popgym_by_memory()
    experts_correct_share()


if __name__ == "__main__":
    main()
