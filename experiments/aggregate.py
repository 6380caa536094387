"""Aggregate seeded runs: curves and a final-performance table with per-seed values and intervals.

    python experiments/aggregate.py runs/multirun/<name> --out experiments/results/<page>
    python experiments/aggregate.py runs/multirun/a runs/multirun/b --metric episodic_return \
        --group-by agent --last 20 --threshold 0.9 --smooth 5 --welch a b --out ...
    python experiments/aggregate.py runs/multirun/<name> --evaluate 100 --greedy --out ...

Runs (each ``.../seed_<k>`` directory with ``metrics.csv``, ``config.json`` and ``.hydra/``;
``--evaluate`` loads them with :class:`marlgrid.agents.bookkeeping.saved_run.SavedRun`) are grouped
into conditions by their Hydra overrides minus the seed (or by ``--group-by`` keys). Per condition,
on a shared step grid (each run interpolated, never extrapolated past its last step) and at the end
of training (the mean of each run's last ``--last`` logged values, or with ``--evaluate N`` the
mean return of N episodes of each run's newest checkpoint on fresh layouts):

- every run's own final value (the table's ``per seed`` column, ``<out>_runs.csv``);
- the mean over seeds with its **Student-t** 95% interval, at any number of seeds (the table's
  ``interval`` column says ``t``);
- from 5 seeds up, also the interquartile mean (IQM) with a **stratified bootstrap** interval
  (seeds resampled within the condition): rliable's when the ``rliable`` extra is installed, else
  scipy's (``--backend auto``, the default; ``--backend scipy|rliable`` forces one);
- with ``--threshold X``, each run's first env step at which its metric, smoothed over
  ``--smooth`` logged values (full windows only), reaches X (``--below``: falls to X or below),
  with the mean over the runs that got there and the count of those that never did;
- with ``--welch A B`` (condition labels or key parts, repeatable), Welch's t and two-sided p
  between the two conditions' final values.

Unfinished runs are left out unless ``--include-unfinished``; runs left out and runs a sweep lacks
are listed, never dropped silently. A ``metrics.csv`` row whose step or metric cell is not a
number is skipped and listed (file, line, column and the text); ``--strict`` makes any of these
(a run left out or missing, a row skipped) exit 1, after the outputs are written.

Writes ``<out>.png`` (curves: the mean with its t-band, or ``--curve-stat iqm``), ``<out>.md``
(the table, the figure, Welch's tests and the runs left out), ``<out>_final.csv``,
``<out>_runs.csv`` (one line per run: its final value and steps to the threshold),
``<out>_curves.csv`` and, with ``--welch``, ``<out>_welch.csv``. With ``--merge`` the three CSVs
keep the conditions they already hold that this call does not aggregate (a page's analysis
rerun after some run directories are gone), the figure shows those too, and the page lists them;
Welch's tests are between conditions aggregated now. ``--borrow STEM CONDITION`` (with
``--merge``) adds a condition from another page's outputs, e.g. a baseline arm whose runs are
gone. Installed, the command is
``marlgrid-aggregate``.
"""

from __future__ import annotations

import argparse
import csv
import json
import shlex
import sys
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import replace
from pathlib import Path

import numpy as np

from marlgrid.analysis import Aggregate, AnalysisError, Run, aggregate, read_curve
from marlgrid.analysis.merge import borrow_rows, merge_into
from marlgrid.analysis.report import (
    FinalRow,
    WelchResult,
    markdown_table,
    plot_curves,
    read_curves_csv,
    welch_between,
    welch_markdown,
    write_curves_csv,
    write_final_csv,
    write_runs_csv,
    write_welch_csv,
)
from marlgrid.analysis.stats import BACKENDS, IQM_MIN_RUNS, METHODS, resolve_backend, steps_to

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
        "welch": Path(f"{stem}_welch.csv"),
    }


def evaluated_return(
    episodes: int, greedy: bool, seed: int, num_envs: int
) -> Callable[[Run], float]:
    """A run's final value: the mean return of its trained agents over ``episodes`` episodes of
    its newest checkpoint (as ``experiments/evaluate.py`` plays them), cached in the run
    directory. A run that cannot be played stops the command with one line ``error: ...``."""
    from marlgrid.agents.bookkeeping.checkpoint import CheckpointError
    from marlgrid.agents.bookkeeping.saved_run import SavedRun, SavedRunError
    from marlgrid.config import ConfigError

    mode = "greedy" if greedy else "sampled"

    def value(run: Run) -> float:
        try:
            saved_run = SavedRun(run.path)
            ckpt = saved_run.checkpoint
            cache = run.path / f"aggregate_eval_{mode}_{episodes}ep_seed{seed}.json"
            if cache.is_file():
                saved = json.loads(cache.read_text())
                if saved.get("checkpoint") == ckpt.name:
                    return float(saved["mean_return"])
            policies = saved_run.policies(greedy)
        except (SavedRunError, CheckpointError, ConfigError) as exc:
            raise SystemExit(f"error: --evaluate {run.path}: {exc}") from None
        returns = policies.evaluate(episodes, seed, num_envs)
        mean = float(returns[:, policies.learner_columns].mean())
        print(f"{ckpt}: mean return {mean:.3f} over {episodes} {mode} episodes")
        cache.write_text(json.dumps({"checkpoint": ckpt.name, "mean_return": mean}) + "\n")
        return mean

    return value


def report_lines(result: Aggregate) -> list[str]:
    """One line per run left out, per run missing from a sweep, per row skipped for a cell that
    is not a number, and per seed that a condition holds more than once (runs that differ in
    settings the grouping leaves out)."""
    lines = [f"left out: {x.path}: {x.reason}" for x in result.left_out]
    lines += [f"skipped row: {cell}" for cell in result.skipped]
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


def with_steps_to(result: Aggregate, threshold: float, window: int, below: bool) -> None:
    """Fill each final row's ``steps_to``: every run's first step at ``threshold`` (smoothed
    over ``window`` logged values of the aggregated metric)."""
    for i, (condition, row) in enumerate(zip(result.conditions, result.finals, strict=True)):
        found = [
            steps_to(*read_curve(run.path, result.metric), threshold, window=window, below=below)
            for run in condition.runs
        ]
        result.finals[i] = replace(row, steps_to=np.array(found, dtype=float))


def find_row(rows: list[FinalRow], name: str) -> FinalRow:
    """The condition ``name`` names: its label, its full key, or one of its key's parts."""
    exact = [r for r in rows if name in (r.label, ",".join(r.key))]
    found = exact or [r for r in rows if name in r.key or name in r.label.split(",")]
    if len(found) != 1:
        how = "matches no condition" if not found else f"matches {len(found)} conditions"
        raise AnalysisError(
            f"--welch condition {name!r} {how}; the conditions are {[r.label for r in rows]}"
        )
    return found[0]


def earlier_labels(final_csv: Path) -> dict[str, str]:
    """The label each condition's full key had in an earlier ``<out>_final.csv`` (none: {})."""
    if not final_csv.is_file():
        return {}
    with final_csv.open(newline="", encoding="utf-8") as f:
        return {row["key"]: row["condition"] for row in csv.DictReader(f)}


def relabelled(result: Aggregate, labels: dict[str, str]) -> Aggregate:
    """``result`` with each condition whose full key is in ``labels`` under that label: a label
    names what differs between the conditions present, so it shifts with the set of runs."""
    finals = [replace(r, label=labels.get(",".join(r.key), r.label)) for r in result.finals]
    curves = [replace(c, label=f.label) for c, f in zip(result.curves, finals, strict=True)]
    return replace(result, finals=finals, curves=curves)


def check_borrow(borrow: Sequence[Sequence[str]], result: Aggregate) -> None:
    """Each ``(stem, condition)`` to borrow is in that stem's final CSV and not aggregated here;
    :class:`AnalysisError` says which is not, before any output is written."""
    for stem, label in borrow:
        if any(row.label == label for row in result.finals):
            raise AnalysisError(f"--borrow {stem} {label}: {label!r} is aggregated here")
        source = outputs(Path(stem))["final"]
        found = sorted(earlier_labels(source).values())
        if label not in found:
            raise AnalysisError(f"--borrow: {source} has no condition {label!r}; it has {found}")


def write_tables(
    files: dict[str, Path],
    result: Aggregate,
    threshold: float | None,
    merge: bool,
    borrow: Sequence[Sequence[str]] = (),
) -> list[str]:
    """The final, per-run and curve CSVs; with ``merge``, merged by condition into the existing
    ones (:mod:`marlgrid.analysis.merge`), and each borrowed ``(stem, condition)`` merged in
    from that stem's CSVs. Returns the conditions kept from the existing ones or borrowed."""
    writers = {
        "final": lambda path: write_final_csv(path, result.finals, threshold),
        "runs": lambda path: write_runs_csv(path, result.finals),
        "curves": lambda path: write_curves_csv(path, result.curves),
    }
    kept: list[str] = []
    for name, write in writers.items():
        if not merge:
            write(files[name])
            continue
        kept += [c for c in merge_into(files[name], "condition", write) if c not in kept]
    for stem, label in borrow:
        for name in writers:
            borrow_rows(outputs(Path(stem))[name], files[name], "condition", label)
        kept = [c for c in kept if c != label] + [f"{label} (from {stem})"]
    return kept


def page(
    result: Aggregate,
    files: dict[str, Path],
    args: argparse.Namespace,
    argv: list[str],
    tests: list[WelchResult],
    kept: Sequence[str] = (),
) -> str:
    """The Markdown page: how it was made, the figure, the table, Welch's tests and what was
    left out."""
    stat = "IQM" if args.curve_stat == "iqm" else "mean"
    band = "bootstrap" if args.curve_stat == "iqm" else "Student-t"
    n_runs = len(result.runs)
    table = markdown_table(
        result.finals, result.definition, threshold=args.threshold, below=args.below
    )
    parts = [
        f"# {result.metric}: {len(result.conditions)} condition(s), {n_runs} run(s)",
        "",
        f"Made by `python experiments/aggregate.py {shlex.join(argv)}`.",
        "",
        f"![curves]({files['png'].name})",
        "",
        f"Curves: {stat} over seeds of `{result.metric}` with its 95% {band} band (trailing "
        f"mean over {args.smooth} logged value(s) per run), each run interpolated onto "
        f"{len(result.grid)} steps and never extrapolated past its last step; a point is drawn "
        "where every seed of the condition has a value.",
        "",
        table,
        "",
        f"Per run, {result.definition} (`per seed`, in seed order). 95% CI of the mean: "
        f"Student-t with n - 1 degrees of freedom (`interval` t). IQM (mean of the middle 50% of "
        f"seeds) with a 95% stratified-bootstrap CI over seeds only from {IQM_MIN_RUNS} seeds up "
        f"(`-` below): {args.method}, {args.resamples} resamples, "
        f"{resolve_backend(args.backend)}, seed {args.seed}.",
    ]
    if args.threshold is not None:
        parts += [
            "",
            f"Steps to {args.threshold:g}: each run's first logged env step at which the mean of "
            f"its last {args.smooth} logged value(s) of `{result.metric}` is "
            f"{'at or below' if args.below else 'at or above'} {args.threshold:g} (`never`: it "
            "never was); the mean is over the runs that got there.",
        ]
    if tests:
        parts += ["", "## Welch's test of the final values", "", welch_markdown(tests)]
    if kept:
        parts += [
            "",
            "## Conditions kept from the earlier outputs",
            "",
            "Their runs are not here; the CSVs and the figure keep them as they were (`--merge`): "
            + ", ".join(f"`{name}`" for name in kept)
            + ".",
        ]
    lines = report_lines(result)
    if lines:
        title = "## Runs left out or missing, rows skipped"
        parts += ["", title, "", *(f"- {line}" for line in lines)]
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
        "--pool-over", default="",
        help="comma-separated config keys the runs of one condition may differ in (by default "
        "they may differ only in the seed and bookkeeping; other differences are refused)",
    )  # fmt: skip
    parser.add_argument(
        "--last", type=int, default=10, help="logged values averaged for a run's final value"
    )
    parser.add_argument("--points", type=int, default=100, help="curve grid points")
    parser.add_argument("--smooth", type=int, default=1, help="curve moving-average window")
    parser.add_argument("--curve-stat", choices=("mean", "iqm"), default="mean")
    parser.add_argument("--include-unfinished", action="store_true")
    parser.add_argument(
        "--backend",
        choices=BACKENDS,
        default="auto",
        help="IQM bootstrap (5+ seeds): auto = rliable when installed, else scipy",
    )
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
    parser.add_argument(
        "--threshold",
        type=float,
        default=None,
        help="steps_to column: each run's first env step where the metric, smoothed over "
        "--smooth values, reaches this",
    )
    parser.add_argument(
        "--below", action="store_true", help="--threshold is reached at or below it"
    )
    parser.add_argument(
        "--welch",
        nargs=2,
        action="append",
        default=[],
        metavar=("A", "B"),
        help="Welch's t-test between the final values of conditions A and B (repeatable)",
    )
    parser.add_argument("--title", default="")
    parser.add_argument(
        "--merge",
        action="store_true",
        help="keep the conditions of the existing --out CSVs that this call does not aggregate "
        "(their runs gone); the figure shows them all",
    )
    parser.add_argument(
        "--borrow",
        nargs=2,
        action="append",
        default=[],
        metavar=("STEM", "CONDITION"),
        help="with --merge: also show CONDITION from another page's outputs at STEM (e.g. "
        "experiments/results/social_r3_episodic_return name=r3_alone_aux; repeatable)",
    )
    parser.add_argument(
        "--strict",
        action="store_true",
        help="exit 1 when a run is left out or missing, or a metrics.csv row was skipped",
    )
    args = parser.parse_args(argv)  # fmt: skip
    if args.evaluate < 0 or args.eval_envs < 1:
        parser.error("--evaluate must be >= 0 and --eval-envs >= 1")
    if args.below and args.threshold is None:
        parser.error("--below needs --threshold")
    if args.borrow and not args.merge:
        parser.error("--borrow needs --merge (the borrowed condition is merged into --out)")

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
            pool_over=[k.strip() for k in args.pool_over.split(",") if k.strip()],
        )  # fmt: skip
    except AnalysisError as err:
        parser.error(str(err))

    files = outputs(args.out)
    if args.merge:  # the conditions keep the labels they had in the outputs merged into
        result = relabelled(result, earlier_labels(files["final"]))
    try:
        check_borrow(args.borrow, result)
        if args.threshold is not None:
            with_steps_to(result, args.threshold, args.smooth, args.below)
        tests = [welch_between(find_row(result.finals, a), find_row(result.finals, b))
                 for a, b in args.welch]  # fmt: skip
    except AnalysisError as err:
        parser.error(str(err))

    files["png"].parent.mkdir(parents=True, exist_ok=True)
    try:
        kept = write_tables(files, result, args.threshold, args.merge, args.borrow)
    except AnalysisError as err:
        parser.error(str(err))
    curves = read_curves_csv(files["curves"]) if args.merge else result.curves
    ylabel = result.metric.rsplit("/", 1)[-1].replace("_", " ")
    plot_curves(files["png"], curves, ylabel, args.curve_stat, args.title)
    files["md"].write_text(page(result, files, args, argv, tests, kept), encoding="utf-8")
    if tests:
        write_welch_csv(files["welch"], tests)
    else:
        files.pop("welch")

    print(markdown_table(result.finals, result.definition, threshold=args.threshold,
                         below=args.below))  # fmt: skip
    for w in tests:
        print(f"Welch: {w.a} (n={w.n_a}, mean {w.mean_a:.4g}) vs {w.b} (n={w.n_b}, mean "
              f"{w.mean_b:.4g}): t = {w.t:.4g}, p = {w.p:.4g}")  # fmt: skip
    for line in report_lines(result):
        print(line, file=sys.stderr)
    if kept:
        print(f"kept from the earlier outputs (runs not here): {', '.join(kept)}")
    print("wrote " + ", ".join(str(p) for p in files.values()))
    if args.strict and (result.left_out or result.missing or result.skipped):
        sys.exit(1)


if __name__ == "__main__":
    main()
