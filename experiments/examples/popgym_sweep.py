"""Train marlgrid learners on POPGym environments with the trainer and report POPGym's MMER.

    python experiments/examples/popgym_sweep.py --env RepeatPreviousEasy --memory gru --steps 200000
    python experiments/examples/popgym_sweep.py --env popgym-BattleshipEasy-v0 --num-envs 32 \
        --set lr=0.0001
    python experiments/examples/popgym_sweep.py --sweep --envs RepeatPreviousEasy,CountRecallEasy \\
        --memories gru,none --seeds 0,1,2 --steps 500000 --out runs/popgym_sweep
    python experiments/examples/popgym_sweep.py --env MortarMayhem-Grid-v0 --memory gru \
        --steps 1000000

One run trains the agent preset (``--agent``, default ``conf/agent/ppo_popgym.yaml``; ``--memory``
and ``--set key=value`` override it) on ``--num-envs`` copies of the env, wrapped as POPGym's
baselines are (``Antialias(PreviousAction(env))``; ``--no-previous-action``, ``--no-antialias``,
``--discrete-action`` change that; ``--box-action-bins K`` offers K evenly spaced values per
dimension of a continuous action, which POPGym's pendulum tasks need).

Every (env, memory, seed) cell is an ordinary training run of
:class:`~marlgrid.agents.training.trainer.Trainer`, the driver ``experiments/train.py`` uses, in
the run directory ``<out>/<Env>/<memory>/seed_<seed>``: ``metrics.csv`` (one row per PPO update),
``checkpoints/``, ``train.log``, ``config.json``, and ``popgym.json`` (the cell's settings). The
same training from ``experiments/train.py``::

    python experiments/train.py env.id=popgym:RepeatPreviousEasy agent=ppo_popgym \\
        agent.network.memory=gru total_timesteps=200000 video=false

``--steps`` counts env steps over all envs, trained in whole updates (PPO: ``num_envs x
num_steps`` env steps each): a count that is not a multiple is rounded up, and the line that
starts the cell says so; fewer steps than one update is refused, naming the minimum.

Rerunning a command resumes each unfinished cell from its newest checkpoint and skips finished
ones; SIGINT or SIGTERM finishes the current update, writes a checkpoint and exits 130 or 143. A
cell that was run with other settings stops the command, naming what differs (choose another
``--out``, or ``--restart`` to train those cells again from scratch).

The MMER is computed from each run's ``metrics.csv`` (:mod:`marlgrid.analysis.mmer`): the mean
return of the episodes that ended in each training batch, maximised over training. A batch is
one PPO update (``num_envs x num_steps`` env steps) unless ``--batch-steps`` pools updates into
batches of that many env steps (needed for learners that update every few steps, e.g.
``--agent conf/agent/drqn.yaml --discrete-action``; the trainer logs them every 64 steps per env,
so choose a multiple of ``64 x num_envs``). Each cell prints its MMER with the batch size.

Memory Gym's grid tasks (``MortarMayhem-Grid-v0``, ``MysteryPath-Grid-v0``, from
:mod:`marlgrid.tasks.memory_gym_env`) run the same way; their pixel frames set
``network.tile_size`` before ``--set`` applies.

``--sweep`` runs every env x memory x seed cell, then writes ``<out>/summary.csv`` and
``<out>/summary.md``: MMER mean +- std over seeds per env and memory.
"""

from __future__ import annotations

import argparse
import csv
import dataclasses
import json
import math
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
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

    from experiments.schemas import agent_schema
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
    schema = agent_schema(LEARNERS[algo].config)  # network.memory_kwargs.<option>=... adds one
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


def cell_dir(out: Path, env_id: str, memory: str, seed: int) -> Path:
    """The run directory of one cell."""
    return out / short_name(env_id) / memory / f"seed_{seed}"


def short_name(env_id: str) -> str:
    return env_id.removeprefix("popgym-").removesuffix("-v0")


#: the cell's settings in its run directory (what a rerun must share)
SETTINGS_FILE = "popgym.json"


def env_source_id(env_id: str) -> str:
    """The trainer's ``env.id`` of a resolved POPGym or Memory Gym id
    (:mod:`marlgrid.agents.training.env_sources`): ``popgym:<Name>``, ``memorygym:<id>``."""
    from marlgrid.tasks.memory_gym_env import resolve_memory_gym_id

    if resolve_memory_gym_id(env_id) is not None:
        return f"memorygym:{env_id}"
    return f"popgym:{short_name(env_id)}"


def train_config(settings: dict, threads: int = 1, restart: bool = False) -> Any:
    """The :class:`~marlgrid.agents.training.train_config.TrainConfig` of one cell."""
    from marlgrid.agents.learner import config_from_dict
    from marlgrid.agents.training.train_config import EnvConfig, LoggerConfig, TrainConfig

    return TrainConfig(
        env=EnvConfig(
            id=env_source_id(settings["env_id"]),
            num_envs=settings["num_envs"],
            settings=dict(settings["wrappers"]),
        ),
        agent=config_from_dict(settings["agent"]),
        logger=LoggerConfig(csv=True, tensorboard=False, print_every=0, progress=False),
        name="popgym",
        seed=settings["seed"],
        total_timesteps=settings["steps"],
        video=False,  # these envs have no renderer
        resume=not restart,
        torch_threads=threads,
    )


def iteration_env_steps(settings: dict) -> int:
    """Env steps of one trainer iteration of a cell (all envs; PPO: one update of
    ``num_envs x num_steps``): the unit ``--steps`` is trained in."""
    from marlgrid.agents.training.train_config import iteration_steps

    return iteration_steps(train_config(settings)) * settings["num_envs"]


def planned_steps(settings: dict) -> int:
    """Env steps a cell trains: ``--steps`` rounded up to whole iterations (as the trainer
    does). Fewer than one iteration raises :class:`ValueError` naming the minimum."""
    steps, per = settings["steps"], iteration_env_steps(settings)
    if steps < per:
        raise ValueError(
            f"--steps {steps:,} is less than one update of {per:,} env steps (--num-envs "
            f"{settings['num_envs']} x {per // settings['num_envs']} steps per env): the minimum "
            f"is --steps {per}"
        )
    return math.ceil(steps / per) * per


def steps_note(settings: dict) -> str:
    """``"training N steps"``, saying how ``--steps`` was rounded up to whole updates."""
    steps, planned = settings["steps"], planned_steps(settings)
    if planned == steps:
        return f"training {steps:,} steps"
    per = iteration_env_steps(settings)
    return (
        f"training {planned:,} steps (--steps {steps:,} rounded up to {planned // per} whole "
        f"updates of {per:,} env steps)"
    )


def cell_finished(run_dir: Path, cfg: Any) -> bool:
    """True when the newest checkpoint of ``run_dir`` is that of the run's last iteration."""
    from marlgrid.agents.bookkeeping.checkpoint import list_checkpoints
    from marlgrid.agents.training.train_config import iteration_steps

    found = list_checkpoints(run_dir / "checkpoints")
    if not found:
        return False
    per_iteration = iteration_steps(cfg) * cfg.env.num_envs
    last = max(1, math.ceil(cfg.total_timesteps / per_iteration))
    return int(found[-1].stem.removeprefix("ckpt_")) >= last


def check_settings(settings: dict, run_dir: Path) -> None:
    """Refuse a cell whose run directory was trained with other settings, naming what differs."""
    path = run_dir / SETTINGS_FILE
    if not path.is_file():
        return
    old = json.loads(path.read_text())["settings"]
    if old != settings:
        diff = sorted(k for k in settings.keys() | old.keys() if settings.get(k) != old.get(k))
        raise SystemExit(
            f"{run_dir} was run with other settings ({', '.join(diff)} differ); use another "
            "--out, remove that cell, or --restart to train it again"
        )


def cell_record(settings: dict, run_dir: Path) -> dict:
    """A cell's results, read from its ``metrics.csv``: MMER, its batches' curve, env steps
    trained and wall time (acting and updates, summed over the iterations)."""
    from marlgrid.analysis.mmer import batch_mean_returns, read_metrics

    metrics = run_dir / "metrics.csv"
    rows = read_metrics(metrics) if metrics.is_file() else []
    curve = batch_mean_returns(rows, settings["batch_size"])
    wall = sum(
        t
        for row in rows
        for t in (row.get("charts/rollout_time", 0.0), row.get("charts/update_time", 0.0))
        if not math.isnan(t)
    )
    return {
        "settings": settings,
        "run_dir": str(run_dir),
        "mmer": max((v for _, v in curve), default=math.nan),
        "curve": curve,
        "batches": len(rows),
        "batches_with_episodes": len(curve),
        "env_steps": int(rows[-1]["step"]) if rows else 0,
        "wall_s": wall,
    }


def _write_settings(settings: dict, run_dir: Path) -> None:
    run_dir.mkdir(parents=True, exist_ok=True)
    tmp = run_dir / f".{SETTINGS_FILE}.tmp"
    tmp.write_text(json.dumps({"settings": settings}, indent=1))
    tmp.replace(run_dir / SETTINGS_FILE)


def _callbacks(settings: dict, progress: bool) -> list[Any]:
    """The cell's record (its settings, beside the ``config.json`` the trainer writes) and
    progress lines."""
    from marlgrid.agents.training.callbacks import Callback

    label = f"{short_name(settings['env_id'])} {settings['memory']} seed {settings['seed']}"
    every = max(settings["steps"] // 10, 1)

    class RunRecord(Callback):
        def on_training_start(self, trainer: Any) -> None:  # the run is accepted (locked)
            _write_settings(settings, trainer.run_dir)

    class Progress(Callback):
        def on_training_start(self, trainer: Any) -> None:
            self.next = (trainer.global_step // every + 1) * every

        def on_update_end(self, trainer: Any, metrics: dict[str, float]) -> bool:
            step = trainer.global_step
            if step >= self.next:
                self.next = (step // every + 1) * every
                print(
                    f"  {label}: step {step:>9,d}  batch return "
                    f"{metrics.get('charts/episodic_return', math.nan):+.3f}  "
                    f"{metrics.get('charts/SPS', math.nan):,.0f} steps/s",
                    flush=True,
                )
            return True

    return [RunRecord(), Progress()] if progress else [RunRecord()]


def run_cell(
    settings: dict,
    out: Path,
    progress: bool = True,
    threads: int = 1,
    restart: bool = False,
    callbacks: Sequence[Any] = (),
    stop: Any = None,
) -> dict:
    """Train one cell in its run directory (resuming it if possible); returns its record.
    ``callbacks`` join the trainer's; SIGINT/SIGTERM raise
    :class:`~marlgrid.agents.training.trainer.Interrupted` after a checkpoint."""
    from marlgrid.agents.training.trainer import Trainer

    run_dir = cell_dir(out, settings["env_id"], settings["memory"], settings["seed"])
    if not restart:
        check_settings(settings, run_dir)
    cfg = train_config(settings, threads, restart)
    trainer = Trainer(cfg, run_dir, [*_callbacks(settings, progress), *callbacks], stop=stop)
    trainer.run()
    return cell_record(settings, run_dir)


# --------------------------------------------------------------------------------------------------
# Sweep summary
# --------------------------------------------------------------------------------------------------


def summarize(records: list[dict], out: Path) -> list[dict]:
    """Per (env, memory): MMER mean +- std over seeds, mean wall time and env steps per second;
    per memory: its speed over all envs. Writes ``summary.csv`` and ``summary.md``."""
    from marlgrid.analysis.mmer import mmer_over_seeds

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
        "num_envs x num_steps), from each run's metrics.csv. Wall time and steps/s cover "
        "training (acting and updates, summed over the logged iterations), not start-up.\n"
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
    p.add_argument(
        "--restart", action="store_true",
        help="train the cells again from scratch (their checkpoints and metrics are replaced)",
    )  # fmt: skip
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
    cells = [cell_settings(args, e, m, s) for e in envs for m in memories for s in seeds]
    for settings in cells:  # --steps below one update: refused before any training
        planned_steps(settings)
    return cells


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    try:
        cells = plan_cells(args)
    except (ValueError, FileNotFoundError, ImportError) as err:
        raise SystemExit(f"error: {err}") from None
    from marlgrid.agents.bookkeeping.checkpoint import CheckpointError
    from marlgrid.agents.bookkeeping.run_dir import RunLockedError
    from marlgrid.agents.training.trainer import Interrupted
    from marlgrid.config import ConfigError

    dirs = [cell_dir(args.out, s["env_id"], s["memory"], s["seed"]) for s in cells]
    if not args.restart:  # a cell run with other settings stops the command before any training
        for settings, run_dir in zip(cells, dirs, strict=True):
            check_settings(settings, run_dir)
    records = []
    for i, (settings, run_dir) in enumerate(zip(cells, dirs, strict=True), 1):
        name = f"{short_name(settings['env_id'])} {settings['memory']} seed {settings['seed']}"
        cfg = train_config(settings, args.threads)
        if not args.restart and cell_finished(run_dir, cfg):
            record = cell_record(settings, run_dir)
            print(f"[{i}/{len(cells)}] {name}: finished, MMER {record['mmer']:.3f} (skipped)")
        else:
            print(f"[{i}/{len(cells)}] {name}: {steps_note(settings)}", flush=True)
            try:
                record = run_cell(
                    settings, args.out, not args.quiet, args.threads, restart=args.restart
                )
            except Interrupted as exc:
                print(f"{name}: stopped; rerun the same command to resume", flush=True)
                return exc.exit_code
            except KeyboardInterrupt:  # a second signal: the newest checkpoint stays
                print(f"{name}: interrupted; rerun the same command to resume", flush=True)
                return 130
            except (ConfigError, CheckpointError, RunLockedError) as exc:
                raise SystemExit(f"error: {name}: {exc}") from None
        records.append(record)
        print(
            f"MMER {record['mmer']:.3f}: {name}, max over {record['batches_with_episodes']} "
            f"batches of {settings['batch_size']:,} env steps ({record['wall_s']:.0f} s) -> "
            f"{run_dir}",
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
