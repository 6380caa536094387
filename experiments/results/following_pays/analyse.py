"""The following-pays page's analysis: evaluation, curves, the pass rule's table and the figure.

    python experiments/results/following_pays/analyse.py     # writes runs/following_pays/analysis
    python experiments/results/following_pays/analyse.py --out experiments/results/following_pays \
        --overwrite                                          # the page's committed data

For each arm folder under ``--runs`` (``social``, ``solo``, ...) with finished runs: each run
plays 200 episodes from the page's layout seed 4900 (``experts_eval.py``, the novice greedy and
sampled, beside its oracles; merged into ``eval.csv``) and is **kept**: its config, the tail of
its ``train.log`` and the curve columns of its ``metrics.csv`` (every 10th row, and every row of
the last 100) go to ``<out>/kept/<arm>/seed_<k>/``, so that a later session can add seeds after
the run directories are gone. ``aggregate.py`` then draws the curves and per-seed finals of the
return and of the novice's following measures from every kept run, and this script writes
``pass_rule.csv`` (each seed's measures against the plan's bars), ``readings.csv`` (the rule
read arm by arm: ``readings.py``) and ``curves_<map>.png`` (the
arms with the scripted controls of ``controls.csv`` as lines). Writing into a folder under
``experiments/`` that already holds these files needs ``--overwrite`` (committed page data are
never replaced by accident; the default folder is scratch), and runs of one
arm whose configs differ in anything but the seed are refused, naming the keys.
"""

from __future__ import annotations

import argparse
import csv
import sys
from collections.abc import Sequence
from pathlib import Path

import numpy as np

from experiments.results import study
from experiments.results.following_pays.readings import (
    EXTENSION_HEADER,
    extension_rows,
    readings,
)
from experiments.results.following_pays.readings import HEADER as READINGS_HEADER
from experiments.results.study import check_poolable, finished, run, shown
from marlgrid.analysis.curves import CurveError, read_curve
from marlgrid.analysis.report import read_curves_csv, write_csv
from marlgrid.analysis.stats import IQM_MIN_RUNS

HERE = Path(__file__).resolve().parent
ROOT = study.ROOT
#: curve name -> metrics.csv column (the novice is agent_0)
CURVES = {
    "return": "charts/episodic_return",
    "order_expert": "social/order_expert_agent_0",
    "trail_expert_excess": "social/trail_expert_excess_agent_0",
}
#: map of each arm -> the controls.csv setting its bars and lines come from
ARM_SETTING = {
    "social": "9x9_150_p0.5",
    "solo": "9x9_150_p0.5",
    "social_aux": "9x9_150_p0.5",
    "social_7x7": "7x7_100_p0.5",
    "solo_7x7": "7x7_100_p0.5",
    "social_7x7_rl": "7x7_100_p0.5",
    "social_to_1.5": "9x9_150_p1.5",
    "social_p1.5": "9x9_150_p1.5",
}
#: arms whose final policies are kept (the start of social_to_1.5)
EXPORTED = ("social",)
#: arms the plan's extension rule does not concern (a 5M-step continuation of another arm)
NOT_EXTENDED = ("social_to_1.5",)
#: per arm, the config keys its seeds differ in by design (each starts from its own seed's run)
PER_SEED = {"social_to_1.5": ("init_from",)}
OUTPUTS = (
    "pass_rule.csv",
    "readings.csv",
    "extension.csv",
    *(f"curves_{s}.png" for s in dict.fromkeys(ARM_SETTING.values())),
)


def controls(path: Path) -> dict[tuple[str, str], dict[str, float]]:
    """controls.csv rows by (setting, novice)."""
    with path.open(newline="") as f:
        return {
            (r["setting"], r["novice"]): {k: float(v) for k, v in r.items() if _number(v)}
            for r in csv.DictReader(f)
        }


def _number(text: str) -> bool:
    try:
        float(text)
    except ValueError:
        return False
    return True


def bars(path: Path) -> dict[str, tuple[float, float]]:
    """The plan's bars per setting (``controls.py --bars``): order, trail excess."""
    with path.open(newline="") as f:
        return {
            r["setting"]: (float(r["order_bar"]), float(r["trail_bar"])) for r in csv.DictReader(f)
        }


def keep(run_dir: Path, kept: Path) -> None:
    """Keep what the page needs of a finished run (:func:`experiments.results.study.keep`):
    the curve columns, and the final policy of the arms in :data:`EXPORTED`."""
    note = f"following_pays {kept.parent.name} {kept.name}: the final policy"
    study.keep(run_dir, kept, CURVES.values(), note if kept.parent.name in EXPORTED else None)


def final_values(path: Path) -> dict[str, float]:
    """run dir -> final value from an aggregate ``_runs.csv``."""
    with path.open(newline="") as f:
        return {r["run"]: float(r["final"]) for r in csv.DictReader(f)}


def curves_of(arm: str) -> dict[str, str]:
    """The curves of ``arm``: the following measures only where there are experts."""
    return CURVES if arm.startswith("social") else {"return": CURVES["return"]}


def pass_rule_rows(arms: dict[str, list[Path]], out: Path) -> list[list[object]]:
    """One row per run: its training return and measures against the plan's bars."""
    rows, bar = [], bars(HERE / "bars.csv")
    for arm, runs in arms.items():
        order_bar, trail_bar = bar[ARM_SETTING[arm]]
        finals = {name: final_values(out / f"{arm}_{name}_runs.csv") for name in curves_of(arm)}
        for r in runs:
            key = str(r)
            value = {name: finals.get(name, {}).get(key, float("nan")) for name in CURVES}
            order, trail = value["order_expert"], value["trail_expert_excess"]
            follows = (
                bool(order >= order_bar and trail >= trail_bar) if "order_expert" in finals else ""
            )
            seed = r.name.removeprefix("seed_")
            rows.append([arm, seed, round(value["return"], 4), round(order, 4), order_bar,
                         round(trail, 4), trail_bar, follows])  # fmt: skip
    return rows


def figure(arms: Sequence[str], out: Path, table: dict) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    lines = {"locked": "locked follower", "switching": "switching follower",
             "noisy": "noisy follower", "play_safe": "play safe", "random": "random"}  # fmt: skip
    fig, axes = plt.subplots(1, len(CURVES), figsize=(5 * len(CURVES), 4))
    setting = ARM_SETTING[arms[0]]
    colours = plt.rcParams["axes.prop_cycle"].by_key()["color"]
    for ax, (name, column) in zip(axes, CURVES.items(), strict=True):
        for i, arm in enumerate(arms):
            path = out / f"{arm}_{name}_curves.csv"
            for c in read_curves_csv(path) if path.exists() else []:
                n = int(np.nanmax(c.bands.n))
                if n >= IQM_MIN_RUNS:  # from 5 seeds: the mean with its t-interval
                    ax.plot(c.grid, c.bands.mean, color=colours[i], label=f"{arm} (n={n})")
                    ax.fill_between(c.grid, c.bands.mean_low, c.bands.mean_high,
                                    color=colours[i], alpha=0.2)  # fmt: skip
            if not path.exists() or n < IQM_MIN_RUNS:  # below: each seed's own curve
                seeds = sorted((out / "kept" / arm).glob("seed_*"))
                for k, run_dir in enumerate(seeds):
                    try:
                        steps, values = read_curve(run_dir, column)
                    except CurveError:  # an arm without experts has no following measures
                        continue
                    label = f"{arm} ({len(seeds)} seeds, one line each)" if k == 0 else None
                    ax.plot(steps, values, color=colours[i], linewidth=0.8, label=label)
        key = "return" if name == "return" else name
        for style, (novice, label) in zip(("--", ":", "-.", "--", ":"), lines.items(), strict=True):
            value = table[(setting, novice)][key]
            ax.axhline(value, color="grey", linestyle=style, linewidth=1)
            ax.text(0.99, value, label, transform=ax.get_yaxis_transform(), fontsize=7,
                    color="grey", ha="right", va="bottom")  # fmt: skip
        ax.set_xlabel("env steps")
        ax.set_title(name)
    axes[0].legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(out / "curves.png", dpi=100)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=Path, default=ROOT / "runs/following_pays")
    parser.add_argument("--out", type=Path, default=ROOT / "runs/following_pays/analysis")
    parser.add_argument("--arms", nargs="*", default=list(ARM_SETTING), choices=list(ARM_SETTING))
    parser.add_argument("--episodes", type=int, default=200)
    parser.add_argument("--seed", type=int, default=4900, help="layout seed (the page's)")
    parser.add_argument("--skip-eval", action="store_true")
    parser.add_argument("--include-unfinished", action="store_true", help="curves only")
    parser.add_argument("--overwrite", action="store_true")
    args = parser.parse_args(argv)
    args.out.mkdir(parents=True, exist_ok=True)
    committed = args.out.resolve().is_relative_to(ROOT / "experiments")
    there = [n for n in OUTPUTS if (args.out / n).exists()]
    if committed and there and not args.overwrite:
        sys.exit(f"{args.out} already holds {there}; pass --overwrite to replace them")
    live = {a: sorted((args.runs / a).glob("seed_*")) for a in args.arms}
    done = {a: finished(runs) for a, runs in live.items()}
    py = sys.executable
    if not args.skip_eval:
        every = [shown(r) for runs in done.values() for r in runs]
        if every:
            run([py, "experiments/results/experts_eval.py", *every,
                 "--episodes", str(args.episodes), "--seed", str(args.seed), "--partners",
                 "--csv", str(args.out / "eval.csv"), "--merge"])  # fmt: skip
    for arm, runs in done.items():
        for r in runs:
            keep(r, args.out / "kept" / arm / r.name)
    source = {a: live[a] for a in args.arms} if args.include_unfinished else {
        a: sorted((args.out / "kept" / a).glob("seed_*")) for a in args.arms}  # fmt: skip
    arms = {a: runs for a, runs in source.items() if runs}
    if not arms:
        sys.exit(f"no finished runs under {args.runs}/<arm>/seed_* for arms {args.arms}")
    table = controls(HERE / "controls.csv")
    for arm, runs in arms.items():
        check_poolable(runs, PER_SEED.get(arm, ()))
        extra = ["--include-unfinished"] if args.include_unfinished else []
        for name, column in curves_of(arm).items():
            stem = str(args.out / f"{arm}_{name}")
            pool = [f"--pool-over={','.join(PER_SEED[arm])}"] if arm in PER_SEED else []
            run([py, "experiments/aggregate.py", *map(str, runs), "--metric", column,
                 "--last", "20", "--out", stem, *extra, *pool])  # fmt: skip
            for own in (".md", ".png"):  # aggregate's own table and figure: the page has its own
                Path(stem + own).unlink(missing_ok=True)
    header = ["arm", "seed", "training_return", "order_expert", "order_bar",
              "trail_expert_excess", "trail_bar", "following_emerges"]  # fmt: skip
    write_csv(args.out / "pass_rule.csv", header, pass_rule_rows(arms, args.out))
    curves = {a: [read_curve(r, CURVES["return"]) for r in runs]
              for a, runs in arms.items() if a not in NOT_EXTENDED}  # fmt: skip
    write_csv(args.out / "extension.csv", EXTENSION_HEADER, extension_rows(curves))
    if (args.out / "eval.csv").exists():  # the rule read arm by arm (readings.py)
        rows = readings(args.out / "pass_rule.csv", args.out / "eval.csv")
        write_csv(args.out / "readings.csv", READINGS_HEADER, rows)
    for setting in dict.fromkeys(ARM_SETTING[a] for a in arms):
        drawn = [a for a in arms if ARM_SETTING[a] == setting]
        figure(drawn, args.out, table)
        (args.out / "curves.png").rename(args.out / f"curves_{setting}.png")


if __name__ == "__main__":
    main()
