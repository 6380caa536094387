"""Aggregate seeded runs: curves and a final-performance table with bootstrap confidence intervals.

    python experiments/aggregate.py runs/multirun/<name> --out experiments/results/<page>
    python experiments/aggregate.py runs/multirun/a runs/multirun/b --metric episodic_return \
        --group-by agent --last 20 --method bca --out experiments/results/<page>
    python experiments/aggregate.py runs/multirun/<name> --evaluate 100 --greedy --out ...

Runs (each ``.../seed_<k>`` directory with ``metrics.csv``, ``config.json`` and ``.hydra/``;
``--evaluate`` loads them with :class:`marlgrid.agents.training.saved_run.SavedRun`) are grouped
into conditions by their Hydra overrides minus the seed (or by ``--group-by`` keys). Per condition:
mean and interquartile mean (IQM) over seeds with 95% bootstrap intervals (seeds resampled within
the condition; ``--backend rliable`` uses rliable's stratified bootstrap), on a shared step grid
(each run interpolated, never extrapolated past its last step) and at the end of training (the
mean of each run's last ``--last`` logged values, or with ``--evaluate N`` the mean return of N
episodes of each run's newest checkpoint on fresh layouts). Unfinished runs are left out unless
``--include-unfinished``; runs left out and runs a sweep lacks are listed, never dropped silently.

Writes ``<out>.png`` (curves with shaded intervals), ``<out>.md`` (the table, the figure and the
list of runs left out), ``<out>_final.csv``, ``<out>_runs.csv`` (one line per run) and
``<out>_curves.csv``. Installed, the command is ``marlgrid-aggregate``.
"""

from __future__ import annotations

import argparse
import json
import shlex
import sys
from collections import Counter
from collections.abc import Callable
from pathlib import Path

from marlgrid.analysis import Aggregate, AnalysisError, Run, aggregate
from marlgrid.analysis.report import (
    markdown_table,
    plot_curves,
    write_curves_csv,
    write_final_csv,
    write_runs_csv,
)
from marlgrid.analysis.stats import BACKENDS, METHODS

SUFFIXES = (".md", ".png", ".csv")


def outputs(out: Path) -> dict[str, Path]:
    """The files written for ``--out`` (a path stem; a trailing .md/.png/.csv is dropped)."""
    stem = str(out)[: -len(out.suffix)] if out.suffix in SUFFIXES else str(out)
    return {
        "png": Path(f"{stem}.png"),
        "md": Path(f"{stem}.md"),
        "final": Path(f"{stem}_final.csv"),
        "runs": Path(f"{stem}_runs.csv"),
        "curves": Path(f"{stem}_curves.csv"),
    }


def evaluated_return(
    episodes: int, greedy: bool, seed: int, num_envs: int
) -> Callable[[Run], float]:
    """A run's final value: the mean return of its trained agents over ``episodes`` episodes of
    its newest checkpoint (as ``experiments/evaluate.py`` plays them), cached in the run
    directory."""
    from marlgrid.agents.training.saved_run import SavedRun

    mode = "greedy" if greedy else "sampled"

    def value(run: Run) -> float:
        saved_run = SavedRun(run.path)
        ckpt = saved_run.checkpoint
        cache = run.path / f"aggregate_eval_{mode}_{episodes}ep_seed{seed}.json"
        if cache.is_file():
            saved = json.loads(cache.read_text())
            if saved.get("checkpoint") == ckpt.name:
                return float(saved["mean_return"])
        policies = saved_run.policies(greedy)
        returns = policies.evaluate(episodes, seed, num_envs)
        mean = float(returns[:, policies.learner_columns].mean())
        print(f"{ckpt}: mean return {mean:.3f} over {episodes} {mode} episodes")
        cache.write_text(json.dumps({"checkpoint": ckpt.name, "mean_return": mean}) + "\n")
        return mean

    return value


def report_lines(result: Aggregate) -> list[str]:
    """One line per run left out, per run missing from a sweep, and per seed that a condition
    holds more than once (runs that differ in settings the grouping leaves out)."""
    lines = [f"left out: {x.path}: {x.reason}" for x in result.left_out]
    for m in result.missing:
        lines.append(f"missing: {m.path} ({','.join(m.key)}, seed {m.seed}): no such run")
    for c in result.conditions:
        for seed, count in sorted(Counter(c.seeds).items(), key=lambda sc: str(sc[0])):
            if seed is not None and count > 1:
                paths = ", ".join(str(r.path) for r in c.runs if r.seed == seed)
                lines.append(
                    f"repeated seed: {c.label} holds seed {seed} {count} times ({paths}); they "
                    "differ in settings the grouping leaves out: group by them too, or pass "
                    "one sweep folder"
                )
    return lines


def page(result: Aggregate, files: dict[str, Path], args: argparse.Namespace, argv: list[str]):
    """The Markdown page: how it was made, the figure, the table and what was left out."""
    stat = "IQM" if args.curve_stat == "iqm" else "mean"
    n_runs = len(result.runs)
    parts = [
        f"# {result.metric}: {len(result.conditions)} condition(s), {n_runs} run(s)",
        "",
        f"Made by `python experiments/aggregate.py {shlex.join(argv)}`.",
        "",
        f"![curves]({files['png'].name})",
        "",
        f"Curves: {stat} over seeds of `{result.metric}` (trailing mean over {args.smooth} "
        f"logged value(s) per run), each run interpolated onto {len(result.grid)} steps and "
        "never extrapolated past its last step; a point is drawn where every seed of the "
        "condition has a value.",
        "",
        markdown_table(result.finals, result.definition),
        "",
        f"Per run, {result.definition}; the table gives their mean and IQM over the "
        f"condition's seeds. 95% CIs: {args.method} bootstrap over seeds within each "
        f"condition ({args.resamples} resamples, {args.backend}, seed {args.seed}). IQM: mean "
        "of the middle 50% of seeds (with fewer than 4 seeds, the mean).",
    ]
    lines = report_lines(result)
    if lines:
        parts += ["", "## Runs left out or missing", "", *(f"- {line}" for line in lines)]
    return "\n".join(parts) + "\n"


def main(argv: list[str] | None = None) -> None:
    argv = list(sys.argv[1:] if argv is None else argv)
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("paths", nargs="+", type=Path, help="sweep directories or run dirs")
    parser.add_argument(
        "--metric",
        default="charts/episodic_return",
        help="metrics.csv column (or its last /-part, e.g. episodic_return)",
    )
    parser.add_argument("--out", type=Path, required=True, help="path stem of the outputs")
    parser.add_argument("--group-by", default="", help="comma-separated keys, e.g. agent,env")
    parser.add_argument(
        "--last", type=int, default=10, help="logged values averaged for a run's final value"
    )
    parser.add_argument("--points", type=int, default=100, help="curve grid points")
    parser.add_argument("--smooth", type=int, default=1, help="curve moving-average window")
    parser.add_argument("--curve-stat", choices=("mean", "iqm"), default="mean")
    parser.add_argument("--include-unfinished", action="store_true")
    parser.add_argument("--backend", choices=BACKENDS, default="scipy")
    parser.add_argument("--method", choices=METHODS, default="percentile")
    parser.add_argument("--resamples", type=int, default=10_000)
    parser.add_argument("--confidence", type=float, default=0.95)
    parser.add_argument("--seed", type=int, default=0, help="bootstrap random seed")
    parser.add_argument(
        "--evaluate",
        type=int,
        default=0,
        metavar="EPISODES",
        help="final value = mean return of this many episodes of each run's "
        "newest checkpoint (0: from metrics.csv)",
    )
    parser.add_argument("--greedy", action="store_true", help="--evaluate with greedy actions")
    parser.add_argument("--eval-seed", type=int, default=12345)
    parser.add_argument("--eval-envs", type=int, default=16)
    parser.add_argument("--title", default="")
    parser.add_argument(
        "--strict", action="store_true", help="exit 1 when a run is left out or missing"
    )
    args = parser.parse_args(argv)  # fmt: skip
    if args.evaluate < 0 or args.eval_envs < 1:
        parser.error("--evaluate must be >= 0 and --eval-envs >= 1")

    final_value, definition = None, None
    if args.evaluate:
        final_value = evaluated_return(args.evaluate, args.greedy, args.eval_seed, args.eval_envs)
        mode = "greedy" if args.greedy else "sampled"
        definition = (
            f"final = mean return of {args.evaluate} {mode} episodes of the newest checkpoint "
            f"on fresh layouts, env seeds from {args.eval_seed}"
        )
    group_by = [k.strip() for k in args.group_by.split(",") if k.strip()]
    try:
        result = aggregate(
            args.paths, args.metric, group_by=group_by, last=args.last, points=args.points,
            smooth=args.smooth, include_unfinished=args.include_unfinished,
            backend=args.backend, method=args.method, resamples=args.resamples,
            confidence=args.confidence, seed=args.seed, final_value=final_value,
            final_definition=definition,
        )  # fmt: skip
    except AnalysisError as err:
        parser.error(str(err))

    files = outputs(args.out)
    files["png"].parent.mkdir(parents=True, exist_ok=True)
    ylabel = result.metric.rsplit("/", 1)[-1].replace("_", " ")
    plot_curves(files["png"], result.curves, ylabel, args.curve_stat, args.title)
    files["md"].write_text(page(result, files, args, argv), encoding="utf-8")
    write_final_csv(files["final"], result.finals)
    write_runs_csv(files["runs"], result.finals)
    write_curves_csv(files["curves"], result.curves)

    print(markdown_table(result.finals, result.definition))
    for line in report_lines(result):
        print(line, file=sys.stderr)
    print("wrote " + ", ".join(str(p) for p in files.values()))
    if args.strict and (result.left_out or result.missing):
        sys.exit(1)


if __name__ == "__main__":
    main()
