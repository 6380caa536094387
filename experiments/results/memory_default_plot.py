"""Learning curves with 95% CIs over seeds, a per-run CSV summary and a markdown table.

    python experiments/results/memory_default_plot.py \
        --line PPO-LSTM=runs/mem_lstm --line PPO-GRU=runs/mem_gru \
        --line "memoryless PPO=runs/mem_mlp" \
        --out experiments/results/memory_default.png \
        --csv experiments/results/memory_default_runs.csv

Each ``--line LABEL=DIR`` names a directory holding ``seed_<k>`` run directories (one per seed).
Per run: the final return is the mean of ``charts/episodic_return`` over the last ``--last``
updates; the greedy evaluation is read from ``eval_greedy.txt`` in the run directory (the output
of ``experiments/evaluate.py RUN_DIR --episodes 100 --greedy``), if present. Per line, means
come with Student-t 95% confidence intervals over seeds. The random, discoverer (learns the
order by trial within each episode) and oracle (privileged) scripted policies are played on the
first run's env (``--baseline-episodes`` episodes, fresh layouts).
"""

from __future__ import annotations

import argparse
import csv
import math
import re
import sys
from datetime import UTC, datetime
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))  # the repository root
from experiments.plot_curves import read_curve, smooth  # noqa: E402

METRIC = "charts/episodic_return"
#: Two-sided 97.5% Student-t quantiles by degrees of freedom (normal beyond the table).
T975 = {1: 12.706, 2: 4.303, 3: 3.182, 4: 2.776, 5: 2.571, 6: 2.447, 7: 2.365, 8: 2.306, 9: 2.262}
EVAL_LINE = re.compile(r"mean return (-?[0-9.]+) \+/- (-?[0-9.]+|nan)")


def t_ci(values) -> tuple[float, float]:
    """Mean and the half-width of its Student-t 95% confidence interval (nan for one value)."""
    values = np.asarray(values, dtype=float)
    if len(values) < 2:
        return float(values.mean()), float("nan")
    t = T975.get(len(values) - 1, 1.96)
    return float(values.mean()), t * float(values.std(ddof=1)) / math.sqrt(len(values))


def read_eval(run_dir: Path) -> tuple[float, float]:
    """Mean greedy return and its 95% CI from ``eval_greedy.txt`` (nan if missing)."""
    path = run_dir / "eval_greedy.txt"
    if not path.is_file():
        return float("nan"), float("nan")
    match = EVAL_LINE.search(path.read_text())
    if match is None:
        raise SystemExit(f"{path} has no 'mean return X +/- Y' line")
    return float(match.group(1)), float(match.group(2))


def wall_seconds(run_dir: Path) -> float:
    """Seconds from the composed config's write to the last metrics row (a run's wall time)."""
    start = (run_dir / ".hydra" / "config.yaml").stat().st_mtime
    return (run_dir / "metrics.csv").stat().st_mtime - start


def started(run_dir: Path) -> str:
    """UTC time the composed config was written (the run's start; maps a run to a code version)."""
    stamp = (run_dir / ".hydra" / "config.yaml").stat().st_mtime
    return datetime.fromtimestamp(stamp, tz=UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def baselines(run_dir: Path, episodes: int) -> dict[str, tuple[float, float]]:
    from omegaconf import OmegaConf

    import marlgrid
    from marlgrid.policies import make_policy, run_episode

    cfg = OmegaConf.load(run_dir / ".hydra" / "config.yaml")
    env = marlgrid.make(cfg.env.id, **OmegaConf.to_container(cfg.env.settings))
    out = {}
    for name in ("random", "discoverer", "oracle"):
        returns = []
        for s in range(episodes):
            policies = dict.fromkeys(env.possible_agents, make_policy(name, s))
            returns.append(np.mean(list(run_episode(env, policies, seed=20_000 + s).values())))
        returns = np.array(returns)
        out[name] = (float(returns.mean()), 1.96 * float(returns.std(ddof=1)) / math.sqrt(episodes))
    return out


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--line", action="append", required=True, help="LABEL=DIR of seed_* runs")
    parser.add_argument(
        "--last", type=int, default=50, help="updates averaged for the final return"
    )
    parser.add_argument("--smooth", type=int, default=10)
    parser.add_argument("--baseline-episodes", type=int, default=100)
    parser.add_argument("--title", default="")
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--csv", type=Path, required=True)
    args = parser.parse_args(argv)

    lines = []
    for spec in args.line:
        label, _, folder = spec.partition("=")
        runs = sorted(Path(folder).glob("seed_*"), key=lambda p: int(p.name.split("_")[1]))
        if not runs:
            parser.error(f"no seed_* run directories in {folder}")
        lines.append((label, runs))

    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    rows, table = [], []
    fig, ax = plt.subplots(figsize=(7, 4))
    for label, runs in lines:
        curves = [read_curve(run, METRIC) for run in runs]
        n = min(len(v) for _, v in curves)
        steps = curves[0][0][:n]
        stacked = np.stack([smooth(v[:n], args.smooth) for _, v in curves])
        mean = stacked.mean(axis=0)
        if len(runs) > 1:
            half = (
                T975.get(len(runs) - 1, 1.96) * stacked.std(axis=0, ddof=1) / math.sqrt(len(runs))
            )
        else:
            half = np.zeros_like(mean)
        (drawn,) = ax.plot(steps, mean, label=f"{label} ({len(runs)} seeds)")
        ax.fill_between(steps, mean - half, mean + half, color=drawn.get_color(), alpha=0.2)
        finals, evals = [], []
        for run, (_, values) in zip(runs, curves, strict=True):
            final = float(np.mean(values[-args.last :]))
            ev, ev_ci = read_eval(run)
            finals.append(final)
            evals.append(ev)
            rows.append(
                {
                    "line": label,
                    "run": str(run),
                    "seed": int(run.name.split("_")[1]),
                    "final_return": round(final, 3),
                    "eval_greedy_return": round(ev, 3),
                    "eval_greedy_ci95": round(ev_ci, 3),
                    "wall_s": round(wall_seconds(run)),
                    "started_utc": started(run),
                }
            )
        table.append((label, len(runs), t_ci(finals), t_ci(evals)))

    base = baselines(lines[0][1][0], args.baseline_episodes)
    for (name, (value, _)), style in zip(base.items(), ("--", "-.", ":"), strict=True):
        ax.axhline(value, color="grey", linestyle=style, label=f"{name} policy ({value:.2f})")
    ax.set_xlabel("environment steps")
    ax.set_ylabel(f"episode return (mean of {args.smooth} updates)")
    if args.title:
        ax.set_title(args.title, fontsize=9)
    ax.legend(fontsize=8)
    ax.grid(alpha=0.3)
    fig.tight_layout()
    args.out.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(args.out, dpi=120)
    print(f"wrote {args.out}")

    args.csv.parent.mkdir(parents=True, exist_ok=True)
    with args.csv.open("w", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=list(rows[0]))
        writer.writeheader()
        writer.writerows(rows)
    print(f"wrote {args.csv}")

    print(
        f"\n| line | seeds | final return (last {args.last} updates) | greedy eval (100 episodes) |"
    )
    print("|---|---|---|---|")
    for label, n, (fm, fh), (em, eh) in table:
        print(f"| {label} | {n} | {fm:.2f} +/- {fh:.2f} | {em:.2f} +/- {eh:.2f} |")
    for label, n, (fm, fh), _ in table:
        t = T975.get(n - 1, 1.96) if n > 1 else float("nan")
        print(f"{label}: {n} seeds, t = {t:.3f}, interval [{fm - fh:.2f}, {fm + fh:.2f}]")
    for name, (value, half) in base.items():
        episodes = args.baseline_episodes
        label = f"{name} policy (scripted, {episodes} episodes)"
        print(f"| {label} | - | {value:.2f} +/- {half:.2f} | - |")


if __name__ == "__main__":
    main()
