"""Finding training runs on disk and grouping them into conditions.

A run directory (as :class:`~marlgrid.agents.training.trainer.Trainer` and
``experiments/train.py`` write it) holds ``metrics.csv``, ``train.log``, ``config.json`` (the
resolved config, :func:`read_config`; runs from before it have only Hydra's record) and
``.hydra/{config,hydra,overrides}.yaml``; a sweep
directory ``runs/multirun/<name>`` holds ``<overrides>/seed_<seed>`` run directories and Hydra's
``multirun.yaml``. A *condition* is a set of runs that differ only in their seed: by default the
run's Hydra overrides minus the keys Hydra leaves out of the directory name (``seed``,
``logger.*``, ...), plus the experiment ``name``.

Nothing is dropped silently: :func:`find_runs` returns every run with its status (complete,
unfinished, no metrics) and the runs a sweep should hold but does not (:class:`Missing`).
"""

from __future__ import annotations

import csv
import json
import os
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any

from marlgrid.analysis.curves import AnalysisError

SEED_DIR = re.compile(r"seed_(-?\d+)")
COMPLETE, UNFINISHED, NO_METRICS = "complete", "unfinished", "no metrics"
#: a run's resolved config as plain JSON data, written by the trainer beside its checkpoints
CONFIG_FILE = "config.json"
#: the composed config ``experiments/train.py`` writes (all a run from before config.json has)
HYDRA_CONFIG = ".hydra/config.yaml"


@dataclass(frozen=True)
class Run:
    """One run directory.

    ``overrides`` are the defining overrides (sorted ``key=value`` strings, as in Hydra's
    ``override_dirname``); ``status`` is :data:`COMPLETE`, :data:`UNFINISHED` or
    :data:`NO_METRICS`, ``detail`` says why in words.
    """

    path: Path
    root: Path
    seed: int | None
    name: str
    overrides: tuple[str, ...]
    status: str
    detail: str
    config: dict[str, Any] = field(default_factory=dict, repr=False, compare=False)
    choices: dict[str, Any] = field(default_factory=dict, repr=False, compare=False)
    all_overrides: tuple[str, ...] = field(default=(), repr=False, compare=False)

    @property
    def key(self) -> tuple[str, ...]:
        """What defines the run apart from its seed."""
        return (f"name={self.name}", *(o for o in self.overrides if not o.startswith("name=")))


@dataclass(frozen=True)
class Missing:
    """A run that a sweep (or the seeds of its other conditions) implies but that is absent."""

    root: Path
    key: tuple[str, ...]
    seed: int
    path: Path


@dataclass
class Condition:
    """Runs that share a condition key; ``label`` names it in tables and legends."""

    key: tuple[str, ...]
    label: str
    runs: list[Run]

    @property
    def seeds(self) -> list[int | None]:
        return [r.seed for r in self.runs]


@dataclass
class RunSet:
    """What :func:`find_runs` found: every run directory and the expected runs that are absent."""

    runs: list[Run]
    missing: list[Missing]


def find_runs(paths: Sequence[str | Path]) -> RunSet:
    """Every run directory in ``paths`` (each a sweep directory, a folder of runs or one run).

    Raises :class:`AnalysisError` when a path does not exist or nothing in ``paths`` is a run.
    """
    runs: list[Run] = []
    missing: list[Missing] = []
    seen: set[Path] = set()
    for given in paths:
        root = Path(given)
        if not root.is_dir():
            raise AnalysisError(f"{root} does not exist or is not a directory")
        found = [d for d in _run_dirs(root) if d.resolve() not in seen]
        seen.update(d.resolve() for d in found)
        here = [_read_run(d, root) for d in found]
        runs += here
        missing += _missing(root, here)
    if not runs:
        shown = ", ".join(str(p) for p in paths)
        raise AnalysisError(
            f"no runs found in {shown}: a run directory holds metrics.csv, {CONFIG_FILE} or "
            ".hydra/ (e.g. runs/multirun/<name>/<overrides>/seed_0)"
        )
    return RunSet(runs, missing)


def group_runs(runs: Sequence[Run], group_by: Sequence[str] = ()) -> list[Condition]:
    """Runs grouped by their key (default) or by the values of the ``group_by`` keys.

    A ``group_by`` key is looked up in the run's overrides, then its config-group choices
    (``agent``, ``env``), then its composed config (dotted, e.g. ``agent.lr``). Labels leave out
    what every condition shares.
    """
    groups: dict[tuple[str, ...], list[Run]] = {}
    for run in runs:
        key = tuple(f"{k}={lookup(run, k)}" for k in group_by) if group_by else run.key
        groups.setdefault(key, []).append(run)
    keys = list(groups)
    common = set.intersection(*(set(k) for k in keys)) if len(keys) > 1 else set()
    out = []
    for key in sorted(keys):
        label = ",".join(p for p in key if p not in common) or ",".join(key)
        members = sorted(groups[key], key=lambda r: (r.seed is None, r.seed or 0, str(r.path)))
        out.append(Condition(key, label, members))
    return out


#: config keys that may differ between the seeds of one condition: the seed, bookkeeping that
#: does not change what is trained (resume, extend, logging, videos, torch threads)
PER_RUN_KEYS = ("seed", "resume", "extend", "torch_threads", "video", "video_every", "logger")


#: run-config keys added after runs were saved without them, and the value such a run had
ADDED_KEYS: dict[str, Any] = {"plugins": []}


def config_differences(
    configs: Sequence[Mapping[str, Any]], allowed: Sequence[str] = ()
) -> list[str]:
    """The dotted config keys whose values differ between ``configs`` (runs to be pooled as
    one condition), :data:`PER_RUN_KEYS` and the ``allowed`` keys (and what lies below them)
    aside; a key of :data:`ADDED_KEYS` that a config lacks counts as its value there."""
    flat = [{**ADDED_KEYS, **_flatten(c)} for c in configs]
    keys = sorted({k for f in flat for k in f})
    free = (*PER_RUN_KEYS, *allowed)
    kept = [k for k in keys if not any(k == p or k.startswith(p + ".") for p in free)]
    return [k for k in kept if len({json.dumps(f.get(k), sort_keys=True) for f in flat}) > 1]


def _flatten(config: Mapping[str, Any], prefix: str = "") -> dict[str, Any]:
    out: dict[str, Any] = {}
    for key, value in config.items():
        if isinstance(value, Mapping) and value:
            out.update(_flatten(value, f"{prefix}{key}."))
        else:
            out[f"{prefix}{key}"] = value
    return out


def check_poolable(condition: Condition, pool_over: Sequence[str] = ()) -> None:
    """Refuse to pool a condition's runs whose configs differ beyond :data:`PER_RUN_KEYS` and
    ``pool_over`` (e.g. a reduced-budget rerun beside the full runs): :class:`AnalysisError`
    names the keys."""
    differ = config_differences([r.config for r in condition.runs if r.config], pool_over)
    if differ:
        runs = [str(r.path) for r in condition.runs]
        raise AnalysisError(
            f"condition {condition.label!r}: its runs' configs differ in {differ}, so they are "
            f"not seeds of one condition; analyse them apart, or pool them on purpose with "
            f"--pool-over {','.join(differ)} (runs: {runs})"
        )


def lookup(run: Run, key: str) -> str:
    """The value of ``key`` for ``run`` as text (see :func:`group_runs`)."""
    for override in reversed(run.all_overrides):
        name, sep, value = override.partition("=")
        if sep and name.lstrip("+~") == key:
            return value
    if key in run.choices:
        return str(run.choices[key])
    node: Any = run.config
    for part in key.split("."):
        if not isinstance(node, dict) or part not in node:
            raise AnalysisError(
                f"group-by key {key!r} is not set in {run.path}: not among its overrides, config "
                f"groups ({sorted(run.choices)}) or composed config keys ({sorted(run.config)})"
            )
        node = node[part]
    return str(node)


# -- reading one run -----------------------------------------------------------------------------


def config_path(run_dir: str | Path) -> Path | None:
    """The file a run's config is read from: ``config.json``, else ``.hydra/config.yaml``
    (None when the run has neither)."""
    for name in (CONFIG_FILE, HYDRA_CONFIG):
        if (Path(run_dir) / name).is_file():
            return Path(run_dir) / name
    return None


def read_config(run_dir: str | Path) -> dict[str, Any] | None:
    """A run's config as plain data, from :func:`config_path` (None when it has none).

    The whole library reads configs through this (torch-free) function;
    :class:`~marlgrid.agents.bookkeeping.saved_run.SavedRun` builds on it. Interpolations of a Hydra
    record (``learners.expert_1: ${agent}``) are resolved when OmegaConf is installed. Raises
    :class:`AnalysisError` naming the file when it cannot be read.
    """
    path = config_path(run_dir)
    if path is None:
        return None
    if path.name == CONFIG_FILE:
        try:
            data = json.loads(path.read_text(encoding="utf-8"))
        except (UnicodeDecodeError, ValueError) as exc:
            raise AnalysisError(f"{path} is not valid JSON: {exc}") from None
    else:
        data = _resolved(_yaml(path), path)
    if not isinstance(data, dict):
        raise AnalysisError(f"{path} holds no config mapping (found {type(data).__name__})")
    return data


def _resolved(data: Any, path: Path) -> Any:
    """``data`` with its OmegaConf interpolations resolved (as is without any, or without
    OmegaConf)."""
    if "${" not in json.dumps(data, default=str):
        return data
    try:
        from omegaconf import OmegaConf
    except ImportError:  # pragma: no cover - OmegaConf comes with Hydra (the train extra)
        return data
    try:
        return OmegaConf.to_container(OmegaConf.create(data), resolve=True)
    except Exception as exc:  # OmegaConf's own errors: an unknown key or resolver
        raise AnalysisError(f"{path}: cannot resolve its interpolations: {exc}") from None


def _run_dirs(root: Path) -> list[Path]:
    if _is_run_dir(root):
        return [root]
    out = []
    for dirpath, dirnames, _ in os.walk(root):
        here = Path(dirpath)
        if here != root and _is_run_dir(here):
            out.append(here)
            dirnames.clear()
            continue
        dirnames[:] = sorted(d for d in dirnames if not d.startswith("."))
    return out


def _is_run_dir(path: Path) -> bool:
    has_files = any((path / name).is_file() for name in ("metrics.csv", CONFIG_FILE))
    has_files = has_files or (path / ".hydra").is_dir()
    return has_files or SEED_DIR.fullmatch(path.name) is not None


def _read_run(path: Path, root: Path) -> Run:
    hydra_dir = path / ".hydra"
    config = read_config(path) or {}
    hydra = (_yaml(hydra_dir / "hydra.yaml") or {}).get("hydra", {})
    all_overrides = tuple(str(o) for o in (_yaml(hydra_dir / "overrides.yaml") or []))
    exclude = set(_exclude_keys(hydra)) | {"seed"}
    if (hydra_dir / "overrides.yaml").is_file():
        overrides = _defining(all_overrides, exclude)
    else:  # no Hydra record: the folder above the seed names the condition
        parent = path.parent.relative_to(root) if path != root else Path()
        overrides = (str(parent),) if str(parent) != "." else ()
    seed = config.get("seed")
    if not isinstance(seed, int):
        match = SEED_DIR.fullmatch(path.name)
        seed = int(match.group(1)) if match else None
    name = str(config.get("name", root.name))
    status, detail = _status(path, config)
    choices = hydra.get("runtime", {}).get("choices", {}) or {}
    return Run(path, root, seed, name, overrides, status, detail, config, choices, all_overrides)


def _defining(overrides: Sequence[str], exclude: set[str]) -> tuple[str, ...]:
    """The overrides that name a run's directory (Hydra's ``override_dirname`` rule), sorted."""
    kept = []
    for override in overrides:
        key = override.partition("=")[0].lstrip("+~")
        if key not in exclude:
            kept.append(override)
    return tuple(sorted(kept))


def _exclude_keys(hydra: dict[str, Any]) -> list[str]:
    job = hydra.get("job", {}) or {}
    return list(job.get("config", {}).get("override_dirname", {}).get("exclude_keys", []) or [])


def _status(path: Path, config: dict[str, Any]) -> tuple[str, str]:
    metrics = path / "metrics.csv"
    if not metrics.is_file():
        return NO_METRICS, "no metrics.csv: the run never logged an update"
    last = last_step(metrics)
    if last is None:
        return NO_METRICS, "metrics.csv has no rows"
    log = path / "train.log"
    text = log.read_text(encoding="utf-8", errors="replace") if log.is_file() else ""
    total = config.get("total_timesteps")
    if isinstance(total, int) and last >= total:
        return COMPLETE, f"complete at step {last}"
    if "run stopped by a callback" in text:
        return COMPLETE, f"stopped early by a callback at step {last}"
    if total is None and "run complete" in text:
        return COMPLETE, f"complete at step {last}"
    of = f" of {total}" if total is not None else ""
    return UNFINISHED, f"unfinished: last logged step {last}{of}"


def last_step(metrics: Path) -> int | None:
    """The last env step a ``metrics.csv`` logged (None when it has no rows)."""
    with metrics.open(newline="") as f:
        rows = list(csv.DictReader(f))
    try:
        return int(float(rows[-1]["step"])) if rows else None
    except (KeyError, TypeError, ValueError):
        raise AnalysisError(f"{metrics} has no readable 'step' column") from None


def _yaml(path: Path) -> Any:
    if not path.is_file():
        return None
    try:
        import yaml
    except ImportError as exc:  # pragma: no cover - PyYAML comes with the plot and train extras
        raise AnalysisError(f"reading {path} needs PyYAML: pip install 'marlgrid[plot]'") from exc
    try:
        return yaml.safe_load(path.read_text(encoding="utf-8"))
    except yaml.YAMLError as exc:
        raise AnalysisError(f"{path} is not valid YAML: {exc}") from None


# -- runs a sweep should hold ---------------------------------------------------------------------


def _missing(root: Path, runs: Sequence[Run]) -> list[Missing]:
    """Expected (key, seed) pairs absent in ``root``: every key found there with every seed found
    there, plus every job of the sweep that ``root/multirun.yaml`` describes."""
    found = {(r.key, r.seed) for r in runs}
    seeds = {r.seed for r in runs if r.seed is not None}
    expected = {(r.key, s) for r in runs for s in seeds}
    expected |= _sweep_jobs(root)
    condition_dirs = {r.key: r.path.parent for r in runs if r.path != root}
    out = []
    for key, seed in sorted(expected - found, key=lambda ks: (ks[0], ks[1])):
        # beside the condition's other seeds; for a condition with none, the trainer's naming
        # (<overrides>/seed_<seed>, before its escaping of '/' and shortening of long names)
        folder = condition_dirs.get(key, root / ",".join(key[1:]))
        out.append(Missing(root, key, seed, folder / f"seed_{seed}"))
    return out


def _sweep_jobs(root: Path) -> set[tuple[tuple[str, ...], int]]:
    """(key, seed) of every job of the basic-sweeper sweep recorded in ``root/multirun.yaml``
    (empty without one, without Hydra, or for another sweeper)."""
    record = _yaml(root / "multirun.yaml")
    if not isinstance(record, dict):
        return set()
    hydra = record.get("hydra", {}) or {}
    sweeper = (hydra.get("sweeper", {}) or {}).get("_target_", "")
    if not sweeper.endswith("BasicSweeper"):
        return set()
    try:
        from hydra._internal.core_plugins.basic_sweeper import BasicSweeper
        from hydra.core.override_parser.overrides_parser import OverridesParser
    except ImportError:
        return set()
    params = (hydra.get("sweeper", {}) or {}).get("params") or {}
    task = [f"{k}={v}" for k, v in params.items()]
    task += [str(o) for o in (hydra.get("overrides", {}) or {}).get("task", [])]
    try:
        parsed = OverridesParser.create().parse_overrides(task)
        batches = BasicSweeper.split_arguments(parsed, None)
    except Exception:  # an override this Hydra cannot parse: fall back to the seeds found
        return set()
    exclude = set(_exclude_keys(hydra)) | {"seed"}
    jobs = set()
    for job in (j for batch in batches for j in batch):
        values = {o.partition("=")[0].lstrip("+~"): o.partition("=")[2] for o in job}
        try:
            seed = int(values.get("seed", record.get("seed")))
        except (TypeError, ValueError):
            continue
        name = values.get("name", record.get("name", root.name))
        jobs.add(((f"name={name}", *_defining(job, exclude)), seed))
    return jobs


#: a ``train.log`` line: its time and its message
LOG_TIME = re.compile(r"^(\d{4}-\d\d-\d\d \d\d:\d\d:\d\d,\d{3}) INFO (.*)$")


def wall_seconds(run_dir: str | Path) -> float | None:
    """A run's training wall time from its ``train.log``: first to last message of each session,
    summed (a rerun of a complete run, which only says so, adds nothing; a run trained on with
    ``extend=true`` starts a session); None without a log."""
    log = Path(run_dir) / "train.log"
    if not log.is_file():
        return None
    total, start, last, extending = 0.0, None, None, False
    for line in log.read_text(encoding="utf-8", errors="replace").splitlines():
        m = LOG_TIME.match(line)
        if not m or "is complete" in m.group(2):
            continue
        t = datetime.strptime(m.group(1), "%Y-%m-%d %H:%M:%S,%f").timestamp()
        # a session starts; "extending the run" starts one whose "resumed from" follows it
        starts = m.group(2).startswith(("training ", "resumed from", "extending the run"))
        if starts and not (extending and m.group(2).startswith("resumed from")):
            if start is not None:
                total += last - start
            start = t
        extending = m.group(2).startswith("extending the run")
        last = t
    if start is not None:
        total += last - start
    return total
