"""Train a marlgrid learner on POPGym environments and report POPGym's MMER.

    python experiments/popgym.py --env RepeatPreviousEasy --memory gru --steps 200000 --seed 0
    python experiments/popgym.py --env popgym-BattleshipEasy-v0 --num-envs 32 --set lr=0.0001
    python experiments/popgym.py --sweep --envs RepeatPreviousEasy,CountRecallEasy \\
        --memories gru,none --seeds 0,1,2 --steps 500000 --out runs/popgym_sweep
    python experiments/popgym.py --env MortarMayhem-Grid-v0 --memory gru --steps 1000000

One run trains the agent preset (``--agent``, default ``conf/agent/ppo_popgym.yaml``; ``--memory``
and ``--set key=value`` override it) on ``--num-envs`` copies of the env, wrapped as POPGym's
baselines are (``Antialias(PreviousAction(env))``; ``--no-previous-action``, ``--no-antialias``,
``--discrete-action`` change that; ``--box-action-bins K`` offers K evenly spaced values per
dimension of a continuous action, which POPGym's pendulum tasks need). It writes
``<out>/<Env>/<memory>/seed_<seed>.csv`` (``step``, ``batch_mean_return``: the mean return of
the episodes that ended in each training batch) and a ``.json`` beside it (settings, MMER,
time), and prints the MMER with the batch size: one PPO update (``num_envs x num_steps`` env
steps) unless ``--batch-steps`` pools updates into batches of that many env steps (needed for
learners that update every few steps, e.g. ``--agent conf/agent/drqn.yaml --discrete-action``).

Memory Gym's grid tasks (``MortarMayhem-Grid-v0``, ``MysteryPath-Grid-v0``, from
:mod:`marlgrid.tasks.memory_gym_env`) run the same way; their pixel frames set
``network.tile_size`` before ``--set`` applies.

``--sweep`` runs every env x memory x seed cell, skipping cells already finished with the same
settings (a cell is finished once its ``.json`` exists; one finished with other settings stops
the sweep: choose another ``--out``), then writes ``<out>/summary.csv`` and ``<out>/summary.md``:
MMER mean +- std over seeds per env and memory (:mod:`marlgrid.tasks.popgym_env`).
"""

from __future__ import annotations

import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
if __name__ == "__main__":  # run as a script, this file would shadow the popgym package
    sys.path[:] = [p for p in sys.path if Path(p or ".").resolve() != HERE]

import argparse  # noqa: E402
import csv  # noqa: E402
import dataclasses  # noqa: E402
import json  # noqa: E402
import math  # noqa: E402
import time  # noqa: E402
from collections.abc import Sequence  # noqa: E402
from typing import Any  # noqa: E402

ROOT = HERE.parent
DEFAULT_PRESET = ROOT / "conf" / "agent" / "ppo_popgym.yaml"


# --------------------------------------------------------------------------------------------------
# Agent preset
# --------------------------------------------------------------------------------------------------


def load_agent_preset(path: Path, memory: str | None = None, overrides: Sequence[str] = ()) -> Any:
    """The learner config of a ``conf/agent`` preset file: its ``defaults`` chain (sibling
    presets, then the algorithm's schema), then ``memory`` (``network.memory``), then
    ``key=value`` overrides. A bad key or value raises naming it."""
    from omegaconf import OmegaConf
    from omegaconf.errors import OmegaConfBaseException

    from marlgrid.agents.learner import LEARNERS, config_from_dict, load_builtin_learners

    load_builtin_learners()

    def layers(p: Path) -> list[Any]:
        if not p.is_file():
            raise FileNotFoundError(f"agent preset {p} not found")
        node = OmegaConf.load(p)
        out: list[Any] = []
        for entry in node.pop("defaults", []):
            if str(entry).endswith("_schema"):  # the algorithm's schema: its name gives algo
                out.append(OmegaConf.create({"algo": str(entry).removesuffix("_schema")}))
            elif entry != "_self_":
                out += layers(p.parent / f"{entry}.yaml")
        return [*out, node]

    parts = layers(Path(path))
    algo = next((str(n.algo) for n in reversed(parts) if "algo" in n), None)
    if algo is None:
        raise ValueError(f"agent preset {path} names no algorithm (no '<algo>_schema' default)")
    if algo not in LEARNERS:
        raise ValueError(f"unknown learner algorithm {algo!r}; registered: {sorted(LEARNERS)}")
    schema = OmegaConf.structured(LEARNERS[algo].config)
    extra = [OmegaConf.from_dotlist([f"network.memory={memory}"])] if memory else []
    try:
        merged = OmegaConf.merge(schema, *parts, *extra, OmegaConf.from_dotlist(list(overrides)))
    except OmegaConfBaseException as err:
        raise ValueError(f"agent preset {path}: {err}") from None
    cfg = config_from_dict(OmegaConf.to_container(merged))
    cfg.validate()
    return cfg


# --------------------------------------------------------------------------------------------------
# One cell: train, write the curve and the record
# --------------------------------------------------------------------------------------------------


def cell_settings(args: argparse.Namespace, env_id: str, memory: str, seed: int) -> dict:
    """Everything that defines one run (compared when a sweep resumes), JSON-ready."""
    from marlgrid.tasks.memory_gym_env import network_overrides

    cfg = load_agent_preset(args.agent, memory, [*network_overrides(env_id), *args.set])
    cfg.validate(num_slots=args.num_envs)
    batch_steps = args.batch_steps
    if batch_steps is None:
        if not hasattr(cfg, "num_steps"):
            raise SystemExit(f"--batch-steps is needed for {cfg.algo} (it has no rollout length)")
        batch_steps = args.num_envs * cfg.num_steps
    return json.loads(
        json.dumps(
            {
                "env_id": env_id,
                "memory": memory,
                "seed": seed,
                "steps": args.steps,
                "num_envs": args.num_envs,
                "batch_size": batch_steps,
                "wrappers": wrappers(args),
                "agent": dataclasses.asdict(cfg),
            }
        )
    )


def wrappers(args: argparse.Namespace) -> dict[str, Any]:
    return {
        "previous_action": not args.no_previous_action,
        "antialias": not args.no_antialias,
        "discrete_action": args.discrete_action,
        "box_action_bins": args.box_action_bins,
    }


def cell_paths(out: Path, env_id: str, memory: str, seed: int) -> tuple[Path, Path]:
    folder = out / short_name(env_id) / memory
    return folder / f"seed_{seed}.csv", folder / f"seed_{seed}.json"


def short_name(env_id: str) -> str:
    return env_id.removeprefix("popgym-").removesuffix("-v0")


def run_cell(settings: dict, out: Path, progress: bool = True) -> dict:
    """Train one cell; writes its CSV and then its JSON record (the finished marker)."""
    from marlgrid.agents.learner import config_from_dict
    from marlgrid.agents.training.rollout import train_on_vector_env
    from marlgrid.tasks.popgym_env import batch_mean_returns, make_vector_env, mmer

    env_id, memory, seed = settings["env_id"], settings["memory"], settings["seed"]
    csv_path, json_path = cell_paths(out, env_id, memory, seed)
    csv_path.parent.mkdir(parents=True, exist_ok=True)
    envs = make_vector_env(env_id, settings["num_envs"], **settings["wrappers"])
    cfg = config_from_dict(settings["agent"])
    total, report_every = settings["steps"], max(settings["steps"] // 10, 1)
    next_report = [report_every]

    def log(metrics: dict[str, float], step: int) -> None:
        if progress and step >= next_report[0]:
            next_report[0] += report_every
            print(
                f"  {short_name(env_id)} {memory} seed {seed}: step {step:>9,d}  "
                f"batch return {metrics['charts/episodic_return']:+.3f}  "
                f"{metrics['charts/SPS']:,.0f} steps/s",
                flush=True,
            )

    t0 = time.perf_counter()
    history = train_on_vector_env(envs, cfg, total, seed=seed, log_fn=log)
    wall = time.perf_counter() - t0
    envs.close()
    rows = batch_mean_returns(history, settings["batch_size"])
    tmp = csv_path.with_suffix(".csv.tmp")
    with tmp.open("w", newline="") as f:
        writer = csv.writer(f)
        writer.writerow(["step", "batch_mean_return"])
        writer.writerows(rows)
    tmp.replace(csv_path)
    record = {
        "settings": settings,
        "mmer": mmer(history, settings["batch_size"]),
        "batches": len(history),
        "batches_with_episodes": len(rows),
        "env_steps": int(history[-1]["global_step"]) if history else 0,
        "wall_s": wall,
    }
    tmp = json_path.with_suffix(".json.tmp")
    tmp.write_text(json.dumps(record, indent=1))
    tmp.replace(json_path)
    return record


def finished_record(settings: dict, out: Path) -> dict | None:
    """The record of a finished cell with these settings; None if not run yet. A cell finished
    with other settings raises, naming what differs."""
    _, json_path = cell_paths(out, settings["env_id"], settings["memory"], settings["seed"])
    if not json_path.is_file():
        return None
    record = json.loads(json_path.read_text())
    if record["settings"] != settings:
        old = record["settings"]
        diff = sorted(k for k in settings.keys() | old.keys() if settings.get(k) != old.get(k))
        raise SystemExit(
            f"{json_path} was run with other settings ({', '.join(diff)} differ); "
            "use another --out or remove that cell"
        )
    return record


# --------------------------------------------------------------------------------------------------
# Sweep summary
# --------------------------------------------------------------------------------------------------


def summarize(records: list[dict], out: Path) -> list[dict]:
    """Per (env, memory): MMER mean +- std over seeds, mean wall time and env steps per second;
    per memory: its speed over all envs. Writes ``summary.csv`` and ``summary.md``."""
    from marlgrid.tasks.popgym_env import mmer_over_seeds

    groups: dict[tuple[str, str], list[dict]] = {}
    for r in records:
        s = r["settings"]
        groups.setdefault((short_name(s["env_id"]), s["memory"]), []).append(r)
    rows = []
    for (env, memory), rs in groups.items():
        values = [r["mmer"] for r in rs]
        nan = any(math.isnan(v) for v in values)
        mean, std = (math.nan, math.nan) if nan else mmer_over_seeds(values)
        s = rs[0]["settings"]
        wall = sum(r["wall_s"] for r in rs)
        rows.append(
            {
                "env": env,
                "memory": memory,
                "seeds": len(rs),
                "steps": min(r["env_steps"] for r in rs),  # trained: whole updates
                "batch_size": s["batch_size"],
                "mmer_mean": mean,
                "mmer_std": std,
                "mmer_per_seed": " ".join(f"{v:.3f}" for v in values),
                "wall_s_mean": wall / len(rs),
                "steps_per_s": sum(r["env_steps"] for r in rs) / wall,
            }
        )
    with (out / "summary.csv").open("w", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=list(rows[0]))
        writer.writeheader()
        writer.writerows(rows)
    lines = [
        "| env | memory | seeds | env steps | batch size | MMER (mean +- std) | per seed "
        "| wall per run (s) | env steps/s |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    lines += [
        f"| {r['env']} | {r['memory']} | {r['seeds']} | {r['steps']:,} | {r['batch_size']:,} "
        f"| {r['mmer_mean']:.3f} +- {r['mmer_std']:.3f} | {r['mmer_per_seed']} "
        f"| {r['wall_s_mean']:.0f} | {r['steps_per_s']:,.0f} |"
        for r in rows
    ]
    lines += ["", "| memory | runs | env steps | wall (s) | env steps/s |", "|---|---|---|---|---|"]
    for memory in dict.fromkeys(r["memory"] for r in rows):
        rs = [r for r in records if r["settings"]["memory"] == memory]
        steps, wall = sum(r["env_steps"] for r in rs), sum(r["wall_s"] for r in rs)
        lines.append(f"| {memory} | {len(rs)} | {steps:,} | {wall:,.0f} | {steps / wall:,.0f} |")
    note = (
        "\nMMER: max over training of the per-batch mean episodic return, mean +- std "
        "(population) over seeds; batch size in env steps (by default one PPO update, "
        "num_envs x num_steps). Wall time and steps/s cover training (acting and updates), "
        "not start-up.\n"
    )
    (out / "summary.md").write_text("\n".join(lines) + "\n" + note)
    return rows


# --------------------------------------------------------------------------------------------------
# Command line
# --------------------------------------------------------------------------------------------------


def _csv_list(text: str) -> list[str]:
    return [t.strip() for t in text.split(",") if t.strip()]


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("--env", default="RepeatPreviousEasy", help="POPGym or Memory Gym env name/id")
    p.add_argument("--memory", default=None, help="memory core (default: the preset's)")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--sweep", action="store_true", help="run --envs x --memories x --seeds")
    p.add_argument("--envs", type=_csv_list, default=None, help="sweep: comma-separated envs")
    p.add_argument("--memories", type=_csv_list, default=None, help="sweep: comma-separated")
    p.add_argument("--seeds", type=_csv_list, default=None, help="sweep: comma-separated ints")
    p.add_argument("--steps", type=int, default=200_000, help="env steps per run (all envs)")
    p.add_argument("--num-envs", type=int, default=16)
    p.add_argument(
        "--batch-steps", type=int, default=None,
        help="env steps per MMER batch (default: one PPO update, num_envs x num_steps)",
    )  # fmt: skip
    p.add_argument("--agent", type=Path, default=DEFAULT_PRESET, help="agent preset YAML")
    p.add_argument("--set", nargs="*", default=[], metavar="KEY=VALUE", help="preset overrides")
    p.add_argument("--no-previous-action", action="store_true")
    p.add_argument("--no-antialias", action="store_true")
    p.add_argument("--discrete-action", action="store_true", help="MultiDiscrete -> Discrete")
    p.add_argument(
        "--box-action-bins", type=int, default=None, metavar="K",
        help="continuous (Box) actions as K evenly spaced values per dimension (e.g. pendulum)",
    )  # fmt: skip
    p.add_argument("--out", type=Path, default=Path("runs/popgym"), help="output folder")
    p.add_argument("--threads", type=int, default=1, help="torch CPU threads")
    p.add_argument("--quiet", action="store_true", help="no progress lines")
    args = p.parse_args(argv)
    for name in ("steps", "num_envs", "threads", "batch_steps"):
        if getattr(args, name) is not None and getattr(args, name) < 1:
            p.error(f"--{name.replace('_', '-')} must be >= 1, got {getattr(args, name)}")
    if args.box_action_bins is not None and args.box_action_bins < 2:
        p.error(f"--box-action-bins must be >= 2, got {args.box_action_bins}")
    if not args.sweep and (args.envs or args.memories or args.seeds):
        p.error("--envs, --memories and --seeds need --sweep (one run: --env, --memory, --seed)")
    return args


def plan_cells(args: argparse.Namespace) -> list[dict]:
    """The settings of every cell the command asks for (one, or the sweep's grid)."""
    from marlgrid.tasks.popgym_env import make_env, resolve_env_id

    if args.sweep:
        envs = [resolve_env_id(e) for e in (args.envs or [args.env])]
        memories = args.memories or [load_agent_preset(args.agent, None, args.set).network.memory]
        try:
            seeds = [int(s) for s in (args.seeds or [args.seed])]
        except ValueError as err:
            raise ValueError(f"--seeds must be comma-separated integers: {err}") from None
    else:
        envs = [resolve_env_id(args.env)]
        memories = [args.memory or load_agent_preset(args.agent, None, args.set).network.memory]
        seeds = [args.seed]
    for env_id in envs:  # a bad wrapper choice (continuous actions, no bins) fails before training
        make_env(env_id, **wrappers(args)).close()
    return [cell_settings(args, e, m, s) for e in envs for m in memories for s in seeds]


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    try:
        cells = plan_cells(args)
    except (ValueError, FileNotFoundError, ImportError) as err:
        raise SystemExit(f"error: {err}") from None
    import torch

    torch.set_num_threads(args.threads)
    records = []
    for i, settings in enumerate(cells, 1):
        name = f"{short_name(settings['env_id'])} {settings['memory']} seed {settings['seed']}"
        record = finished_record(settings, args.out) if args.sweep else None
        if record is not None:
            print(f"[{i}/{len(cells)}] {name}: finished, MMER {record['mmer']:.3f} (skipped)")
        else:
            print(f"[{i}/{len(cells)}] {name}: training {settings['steps']:,} steps", flush=True)
            record = run_cell(settings, args.out, progress=not args.quiet)
        records.append(record)
        csv_path, _ = cell_paths(args.out, settings["env_id"], settings["memory"], settings["seed"])
        print(
            f"MMER {record['mmer']:.3f}: {name}, max over {record['batches_with_episodes']} "
            f"batches of {settings['batch_size']:,} env steps ({record['wall_s']:.0f} s) -> "
            f"{csv_path}",
            flush=True,
        )
    if args.sweep:
        for r in summarize(records, args.out):
            print(
                f"{r['env']:<28} {r['memory']:<8} MMER {r['mmer_mean']:.3f} +- "
                f"{r['mmer_std']:.3f} over {r['seeds']} seeds"
            )
        print(f"table: {args.out / 'summary.md'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
