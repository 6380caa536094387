"""The refresh page's analysis: the KL of each update, its ratio, the held-out return, the recipe.

    python experiments/results/refresh_goal_cycle/analyse.py    # into a scratch folder
    python experiments/results/refresh_goal_cycle/analyse.py \
        --out experiments/results/refresh_goal_cycle --overwrite   # the page's committed data

For the solo arms (``refresh_2``, ``refresh_off``): every finished run is kept
(:func:`experiments.results.study.keep`) and plays 200 held-out layouts from seed 5000 greedy and
sampled (``experts_eval.py``, merged into ``eval.csv``); ``aggregate.py`` gives each kept run's
run mean of ``losses/approx_kl_batch`` and ``losses/approx_kl`` (every logged update) and its
return curve; ``ratio.csv`` holds each run's minibatch KL over its whole-rollout KL; and
``welch.csv`` the plan's three comparisons (rules 1-3: the whole-rollout KL, the ratio, the
greedy return). For ``recipe_refresh_off``: each finished run is kept and evaluated on the
expert library's held-out layouts beside the discoverer (``held_out.py``, seed bases
7000-10000, 400 layouts each, one CSV per run) and on the development layouts (seed 777,
``recipe_eval_777.csv``) to compare with the recipe's committed seeds. Writing into a folder under
``experiments/`` that already holds these tables needs ``--overwrite``.
"""

from __future__ import annotations

import argparse
import csv
import sys
from pathlib import Path

import numpy as np
from scipy import stats

from experiments.results import study
from experiments.results.study import check_poolable, finished, run, shown
from marlgrid.analysis.report import write_csv

HERE = Path(__file__).resolve().parent
SOLO_ARMS = ("refresh_2", "refresh_off")
RECIPE_ARM = "recipe_refresh_off"
#: curve name -> metrics.csv column, and how many logged values make a run's final value
CURVES = {
    "return": ("charts/episodic_return", 20),
    "kl_batch": ("losses/approx_kl_batch", 100_000),  # the run mean: every update
    "kl_minibatch": ("losses/approx_kl", 100_000),
}
HELD_OUT_BASES = ("7000", "8000", "9000", "10000")
OUTPUTS = ("ratio.csv", "welch.csv")


def finals(path: Path) -> dict[str, float]:
    """run -> final value, from an aggregate ``_runs.csv``."""
    with path.open(newline="") as f:
        return {Path(r["run"]).name: float(r["final"]) for r in csv.DictReader(f)}


def greedy_returns(path: Path, arm: str) -> dict[str, float]:
    """seed folder -> greedy return of ``arm``'s runs in ``eval.csv``."""
    with path.open(newline="") as f:
        return {Path(r["run"]).name: float(r["return"]) for r in csv.DictReader(f)
                if r["mode"] == "greedy" and Path(r["run"]).parent.name == arm}  # fmt: skip


def welch_row(name: str, a: list[float], b: list[float]) -> list[object]:
    """Welch's test of ``a`` (refresh_2) against ``b`` (refresh_off): means, n, t, p."""
    if len(a) < 2 or len(b) < 2:
        return [name, np.mean(a) if a else "", np.mean(b) if b else "", len(a), len(b), "", ""]
    t, p = stats.ttest_ind(a, b, equal_var=False)
    return [name, round(float(np.mean(a)), 6), round(float(np.mean(b)), 6), len(a), len(b),
            round(float(t), 4), round(float(p), 4)]  # fmt: skip


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=Path, default=study.ROOT / "runs/refresh_goal_cycle")
    parser.add_argument("--out", type=Path, default=study.ROOT / "runs/refresh_goal_cycle/analysis")
    parser.add_argument("--episodes", type=int, default=200)
    parser.add_argument("--skip-eval", action="store_true")
    parser.add_argument("--overwrite", action="store_true")
    args = parser.parse_args(argv)
    args.out.mkdir(parents=True, exist_ok=True)
    committed = args.out.resolve().is_relative_to(study.ROOT / "experiments")
    there = [n for n in OUTPUTS if (args.out / n).exists()]
    if committed and there and not args.overwrite:
        sys.exit(f"{args.out} already holds {there}; pass --overwrite to replace them")
    py = sys.executable
    done = {a: finished(sorted((args.runs / a).glob("seed_*"))) for a in (*SOLO_ARMS, RECIPE_ARM)}
    columns = [c for c, _ in CURVES.values()]
    for arm, runs in done.items():
        for r in runs:
            study.keep(r, args.out / "kept" / arm / r.name, columns)
    solo = [shown(r) for a in SOLO_ARMS for r in done[a]]
    if solo and not args.skip_eval:
        run([py, "experiments/results/experts_eval.py", *solo, "--episodes", str(args.episodes),
             "--seed", "5000", "--csv", str(args.out / "eval.csv"), "--merge"])  # fmt: skip
    recipe = [shown(r) for r in done[RECIPE_ARM]]
    if recipe and not args.skip_eval:
        run([py, "experiments/results/experts_eval.py", *recipe, "--episodes", "200", "--seed",
             "777", "--rule", "penalty=1.5", "--csv", str(args.out / "recipe_eval_777.csv"),
             "--merge"])  # fmt: skip
        for r in done[RECIPE_ARM]:
            bases = [x for b in HELD_OUT_BASES for x in ("--seed-base", b)]
            run([py, "experiments/results/held_out.py", shown(r), *bases, "--episodes", "400",
                 "--rule", "penalty=1.5",
                 "--csv", str(args.out / f"recipe_held_out_{r.name}.csv")])  # fmt: skip
    kept = {a: sorted((args.out / "kept" / a).glob("seed_*")) for a in SOLO_ARMS}
    if not all(kept.values()):
        print(f"no finished runs of {[a for a, k in kept.items() if not k]} yet: no comparison")
        return
    values: dict[str, dict[str, dict[str, float]]] = {}
    for arm, runs in kept.items():
        check_poolable(runs)
        values[arm] = {}
        for name, (column, last) in CURVES.items():
            stem = str(args.out / f"{arm}_{name}")
            run([py, "experiments/aggregate.py", *map(str, runs), "--metric", column,
                 "--last", str(last), "--out", stem])  # fmt: skip
            for own in (".md", ".png"):
                Path(stem + own).unlink(missing_ok=True)
            values[arm][name] = finals(Path(stem + "_runs.csv"))
    ratio_rows, ratios = [], {}
    for arm in SOLO_ARMS:
        kl, mini = values[arm]["kl_batch"], values[arm]["kl_minibatch"]
        ratios[arm] = {s: mini[s] / kl[s] for s in kl if s in mini and kl[s] > 0}
        ratio_rows += [[arm, s.removeprefix("seed_"), mini[s], kl[s], ratios[arm][s]]
                       for s in sorted(ratios[arm])]  # fmt: skip
    write_csv(args.out / "ratio.csv", ["arm", "seed", "kl_minibatch", "kl_batch", "ratio"],
              ratio_rows)  # fmt: skip
    greedy = (
        {a: greedy_returns(args.out / "eval.csv", a) for a in SOLO_ARMS}
        if (args.out / "eval.csv").exists() else {a: {} for a in SOLO_ARMS}
    )  # fmt: skip
    compared = {
        "kl_batch": {a: list(values[a]["kl_batch"].values()) for a in SOLO_ARMS},
        "ratio": {a: list(ratios[a].values()) for a in SOLO_ARMS},
        "greedy_return": {a: list(greedy[a].values()) for a in SOLO_ARMS},
    }
    header = ["measure", "refresh_2_mean", "refresh_off_mean", "refresh_2_n", "refresh_off_n",
              "welch_t", "welch_p"]  # fmt: skip
    rows = [welch_row(m, v["refresh_2"], v["refresh_off"]) for m, v in compared.items()]
    write_csv(args.out / "welch.csv", header, rows)
    print(f"wrote {args.out / 'ratio.csv'} and {args.out / 'welch.csv'}")


if __name__ == "__main__":
    main()
