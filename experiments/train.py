"""Train agents in a marlgrid environment (Hydra entry point).

    python experiments/train.py                                 # the default experiment
    python experiments/train.py agent=ppo_gru env=goal_cycle_13x13 seed=3
    python experiments/train.py agent=drqn                      # recurrent DQN instead of PPO
    python experiments/train.py env.settings.penalty=0.5        # any env setting, no '+' needed
    python experiments/train.py curriculum=penalty_anneal       # penalty 0 -> 1.5 over 200k steps
    python experiments/train.py -m agent.lr=0.001,0.0003 hydra/launcher=joblib    # a sweep

Run directories are named by the overrides that define the run, then the seed:
``runs/<name>/seed_<seed>`` for the default run, ``runs/<name>/<overrides>/seed_<seed>`` otherwise
(e.g. ``runs/default/agent=ppo_gru,env=goal_cycle_13x13/seed_3``), and
``runs/multirun/<name>/<overrides>/seed_<seed>`` for sweep jobs. Overrides that do not change
what is trained (``resume``, ``extend``, ``logger.*``, ``torch_threads``, ``checkpoint_every``,
``keep_checkpoints``, ``video``, ``video_every``, ``eval_every``, ``eval_episodes``) are left out
of the name. A run directory holds the composed config (``.hydra/``), the resolved one as plain
data (``config.json``), ``metrics.csv``, TensorBoard events, checkpoints, videos and
``train.log``.

Running the same command again resumes from the newest checkpoint, or says the run is complete.
The same command with ``total_timesteps=N extend=true`` trains the run on to ``N`` steps: the
new total names another directory, so when that one holds no checkpoint the run is looked up
beside it (:mod:`marlgrid.agents.bookkeeping.extend`: the run of the same overrides, total aside)
and continued in its own directory; no such run, or several, is an error (pick one with
``"hydra.run.dir='<run dir>'"``, quoted so for Hydra and the shell). Every setting is checked
before a folder is made; a run directory is locked while a process trains in it. SIGINT
(Ctrl-C) or SIGTERM: the current update finishes, a checkpoint is written, and the exit code is
130 or 143. A signal to a sweep (``-m``) reaches every job, in whatever process the launcher
runs it: each checkpoints and stops, jobs not started yet do not start, and the sweep exits 130
or 143 once they have; rerunning the command resumes them.

A single run ends with a summary (:mod:`experiments.run_summary`): the final return beside the
env's scripted baselines, where the metrics, TensorBoard events, checkpoints and video are, and
the commands that evaluate the run and train it on; a sweep job prints its final return.

Installed (``pip install -e .``), the same entry point is the ``marlgrid-train`` command; either
way the configs come from the checkout's ``conf/`` (:data:`CONF_DIR`). The trainer also writes
the resolved config as ``config.json``, which
:class:`marlgrid.agents.bookkeeping.saved_run.SavedRun` reads back.
"""

from __future__ import annotations

import os
import signal
import sys
import time
from pathlib import Path

import hydra
from hydra.core.config_store import ConfigStore
from hydra.core.hydra_config import HydraConfig
from hydra.types import RunMode
from omegaconf import DictConfig, OmegaConf

from experiments.run_summary import run_summary, sweep_job_line
from experiments.schemas import (
    agent_schema,
    check_bool_overrides,
    check_group_overrides,
    check_nothing_dropped,
    plugin_overrides,
    train_schema,
)
from marlgrid.agents.bookkeeping.checkpoint import CheckpointError
from marlgrid.agents.bookkeeping.extend import run_to_extend
from marlgrid.agents.bookkeeping.launch import resolve_paths
from marlgrid.agents.bookkeeping.run_dir import (
    DiskFullError,
    RunLockedError,
    StopRequest,
    job_subdir,
    remove_fresh_dirs,
    replace_atomically,
)
from marlgrid.agents.bookkeeping.sweep_stop import SweepStop, mark, marked_signal
from marlgrid.agents.learner import LEARNERS, load_builtin_learners
from marlgrid.agents.training.callbacks import Callback
from marlgrid.agents.training.curriculum import ScheduleConfig
from marlgrid.agents.training.trainer import Interrupted, TrainConfig, Trainer
from marlgrid.config import ConfigError
from marlgrid.plugins import load_plugins

#: Hydra's config directory, the checkout's conf/ (absolute: the marlgrid-train console script
#: imports this module as experiments.train, where a relative path would name a package)
CONF_DIR = Path(__file__).resolve().parents[1] / "conf"
#: when this process (or the sweep that launched it) started: folders made later are "fresh"
STARTED_ENV = "MARLGRID_TRAIN_STARTED"
STARTED = float(os.environ.setdefault(STARTED_ENV, repr(time.time() - 1.0)))

load_builtin_learners()
store = ConfigStore.instance()
# free-form dicts (env.settings, curriculum, agent.network.memory_kwargs) take keys without '+'
store.store(name="train_schema", node=train_schema())
store.store(name="schedule_schema", node=ScheduleConfig)  # a curriculum preset's schedules


def store_learner_schemas() -> None:
    """One schema per algorithm, plugins' included: ``agent=<preset>`` is checked by it."""
    for algo, spec in LEARNERS.items():
        store.store(group="agent", name=f"{algo}_schema", node=agent_schema(spec.config))


store_learner_schemas()
if not OmegaConf.has_resolver("run_subdir"):
    OmegaConf.register_new_resolver("run_subdir", job_subdir)


class SaveHydraConfig(Callback):
    """Writes ``.hydra/{config,hydra,overrides}.yaml`` once the run has been accepted (locked,
    resumable), so a refused start never rewrites another run's record."""

    def __init__(self, cfg: DictConfig) -> None:
        self.cfg = cfg

    def on_training_start(self, trainer: Trainer) -> None:
        out = trainer.run_dir / ".hydra"
        out.mkdir(parents=True, exist_ok=True)
        hydra_cfg = HydraConfig.instance().cfg
        files = {
            "config.yaml": self.cfg,
            "hydra.yaml": hydra_cfg,
            "overrides.yaml": OmegaConf.create(list(HydraConfig.get().overrides.task)),
        }
        for name, node in files.items():  # atomically: a full disk leaves no empty file
            text = OmegaConf.to_yaml(node).encode("utf-8")
            replace_atomically(out / name, lambda f, text=text: f.write(text))


def _job_parent(run_dir: Path, subdir: str) -> Path | None:
    """The folder run directories are named in: ``run_dir`` without its ``subdir`` levels
    (:func:`job_subdir`); None when ``run_dir`` does not end with them (given by hand)."""
    levels = Path(subdir).parts
    if run_dir.parts[-len(levels) :] != levels:
        return None
    return run_dir.parents[len(levels) - 1]


def _command_overrides(hc: DictConfig) -> list[str]:
    """The command's overrides as typed: the task's, and ``hydra.run.dir`` where given."""
    given = [o for o in hc.overrides.hydra if o.startswith("hydra.run.dir=")]
    return [*hc.overrides.task, *given]


def _fail(message: str) -> None:
    """A clear one-line error: exit 1 in a single run; raise in a sweep (Hydra reports it)."""
    if HydraConfig.get().mode == RunMode.MULTIRUN:
        raise ConfigError(message)
    print(f"error: {message}", file=sys.stderr, flush=True)
    sys.exit(1)


@hydra.main(version_base="1.3", config_path=str(CONF_DIR), config_name="train")
def main(cfg: DictConfig) -> float:
    hc = HydraConfig.get()
    run_dir = Path(hc.runtime.output_dir)
    sweep = hc.mode == RunMode.MULTIRUN
    top = hc.sweep.dir if sweep else os.getcwd()
    stopped = marked_signal() if sweep else None
    if stopped is not None:  # the sweep was stopped before this job began
        remove_fresh_dirs(run_dir, STARTED, top)
        print(f"sweep stopped by {signal.Signals(stopped).name}: {run_dir} not started")
        return float("nan")
    stop = StopRequest()
    job_dir = run_dir  # the folder Hydra made for this job
    with stop:
        try:
            load_plugins(list(cfg.get("plugins") or []))  # named in a preset too
            check_bool_overrides(cfg, hc.overrides.task)  # OmegaConf reads yes/1 as true
            config: TrainConfig = OmegaConf.to_object(cfg)
            check_nothing_dropped(cfg, config)  # a '+key=...' the config does not hold
            # absolute run directory and checkpoint paths: jobs may run on other machines
            config, run_dir = resolve_paths(config, run_dir, base=hc.runtime.cwd)
            if config.extend and config.resume:  # the run may be named by its old total
                parent = _job_parent(run_dir, job_subdir(hc.job.override_dirname, config.seed))
                exclude = list(hc.job.config.override_dirname.exclude_keys)
                run_dir, note = run_to_extend(
                    run_dir, parent, config.seed, list(hc.overrides.task), exclude,
                    config.total_timesteps,
                )  # fmt: skip
                if note is not None:
                    remove_fresh_dirs(job_dir, STARTED, top)
                    print(note, flush=True)
            trainer = Trainer(config, run_dir, callbacks=[SaveHydraConfig(cfg)], stop=stop)
        except BaseException as exc:
            # Nothing was written: remove the folders Hydra made for this job (empty ones only).
            remove_fresh_dirs(job_dir, STARTED, top)
            if isinstance(exc, ConfigError | CheckpointError):
                _fail(str(exc))
            if isinstance(exc, KeyboardInterrupt):
                sys.exit(stop.exit_code)
            raise
        try:
            metrics = trainer.run()
        except Interrupted as exc:
            if not sweep:
                sys.exit(exc.exit_code)
            # a sweep's job: stop the other jobs too, and return (a launcher would cut short
            # the jobs still checkpointing if this one raised); the sweep exits with the code
            mark(exc.signum)
            return float("nan")
        except KeyboardInterrupt:
            sys.exit(stop.exit_code)
        except (RunLockedError, CheckpointError, ConfigError, DiskFullError) as exc:
            _fail(str(exc))
    if sweep:
        print(sweep_job_line(run_dir, metrics), flush=True)
    else:
        summary = run_summary(config, run_dir, metrics, _command_overrides(hc), _program())
        print("\n".join(summary), flush=True)
    return float(metrics.get("charts/episodic_return", float("nan")))


def _program() -> str:
    """How this process was started: ``marlgrid-train`` or the path of train.py."""
    name = Path(sys.argv[0]).name
    return "marlgrid-train" if name == "marlgrid-train" else str(Path(__file__).resolve())


def cli() -> None:
    """The command line: :func:`main`; a sweep (``-m``) is held in a :class:`SweepStop`, so a
    signal to this process stops every job wherever the launcher runs it (each checkpoints),
    and the sweep exits 130 or 143 once they all have."""
    overrides = [a for a in sys.argv[1:] if not a.startswith("-")]
    try:
        load_plugins(plugin_overrides(overrides))  # before Hydra: a plugin learner's schema
        store_learner_schemas()
        check_group_overrides(CONF_DIR, overrides)
    except ConfigError as exc:
        sys.exit(f"error: {exc}")
    if not any(a in ("-m", "--multirun") or a == "hydra.mode=MULTIRUN" for a in sys.argv[1:]):
        main()
        return
    with SweepStop() as stop:
        main()
    if stop.signum is not None:
        sys.exit(128 + stop.signum)


if __name__ == "__main__":
    cli()
