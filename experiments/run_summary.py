"""What a finished training run learned, and where it is: the lines ``experiments/train.py``
prints at the end of a single run.

- the final return (``charts/episodic_return``, the mean of the last :data:`LAST` updates that
  ended an episode) and the last greedy evaluation's (``eval/return``) where one was logged;
- the env's scripted baselines measured now, :data:`BASELINE_EPISODES` episodes each at the
  run's env settings (:func:`experiments.plot_curves.scripted_baselines`: ``random`` in every
  marlgrid env, ``oracle`` and ``discoverer`` in goal cycles, the ``cue_reader`` oracle and the
  memoryless ``cue_blind`` in the memory test), each with what it is in a few words;
- where ``metrics.csv``, the TensorBoard events, the checkpoints and the video are;
- the command that evaluates the run and the one that trains it on (``extend=true`` with twice
  the steps).

A sweep job prints one line (:func:`sweep_job_line`): its directory and final return.
"""

from __future__ import annotations

import math
import shlex
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from experiments.plot_curves import BASELINE_MEANINGS, scripted_baselines
from marlgrid.agents.bookkeeping.checkpoint import list_checkpoints
from marlgrid.agents.training.env_sources import is_marlgrid_id
from marlgrid.analysis.curves import CurveError, read_curve

__all__ = ["BASELINE_EPISODES", "LAST", "run_summary", "sweep_job_line"]

#: updates the final return averages
LAST = 10
#: episodes each scripted baseline plays (about 1-10 s in all; the memoryless T-maze baseline's
#: 0.5 successes then carry a standard error of 0.07)
BASELINE_EPISODES = 50
RETURN, EVAL_RETURN = "charts/episodic_return", "eval/return"
EXPERIMENTS = Path(__file__).resolve().parent
#: task overrides the continue command sets itself
CONTINUE_KEYS = ("total_timesteps", "extend")


def run_summary(
    cfg: Any,
    run_dir: Path,
    last_metrics: dict[str, float],
    overrides: Sequence[str],
    program: str,
) -> list[str]:
    """The summary lines of the run ``cfg`` trained in ``run_dir``.

    ``last_metrics`` are the run's last (used without ``metrics.csv``), ``overrides`` the
    command's own (Hydra's task overrides, plus ``hydra.run.dir`` where it was given), and
    ``program`` how the command started train.py (``marlgrid-train`` or the script's path).
    """
    lines = [f"summary of {_shown(run_dir)} ({cfg.env.id}, {cfg.total_timesteps} steps):"]
    lines.append(f"  return       {_final_return(run_dir, last_metrics)}")
    evaluated = _last_value(run_dir, EVAL_RETURN, 1)
    if evaluated is not None:
        lines.append(f"  eval return  {evaluated:.3f} (greedy, the last evaluation)")
    lines.append(f"  baselines    {_baselines(cfg)}")
    metrics = run_dir / "metrics.csv"
    if metrics.is_file():
        lines.append(f"  metrics      {_shown(metrics)}")
    if (run_dir / "tensorboard").is_dir():
        events = shlex.quote(_shown(run_dir / "tensorboard"))
        lines.append(f"  TensorBoard  tensorboard --logdir {events}")
    checkpoints = list_checkpoints(run_dir / "checkpoints")
    if checkpoints:
        lines.append(f"  checkpoints  {_shown(checkpoints[-1])} (the newest)")
    videos = sorted((run_dir / "videos").glob("*.mp4"), key=lambda p: p.stat().st_mtime)
    if videos:
        lines.append(f"  video        {_shown(videos[-1])}")
    elif not cfg.video:
        lines.append("  video        none (video=false)")
    lines.append(f"  evaluate     {_evaluate_command(run_dir, program)}")
    lines.append(f"  continue     {_continue_command(cfg, overrides, program)}")
    return lines


def sweep_job_line(run_dir: Path, last_metrics: dict[str, float]) -> str:
    """One line for a sweep job: its directory and final return."""
    return f"{_shown(run_dir)}: return {_final_return(run_dir, last_metrics)}"


def _final_return(run_dir: Path, last_metrics: dict[str, float]) -> str:
    mean = _last_value(run_dir, RETURN, LAST)
    if mean is not None:
        return f"{mean:.3f} ({RETURN}, the mean of the last {LAST} updates that ended episodes)"
    value = last_metrics.get(RETURN, math.nan)
    if not math.isnan(value):
        return f"{value:.3f} ({RETURN} of the last update)"
    return "none yet: no episode ended"


def _last_value(run_dir: Path, metric: str, last: int) -> float | None:
    """The mean of the last ``last`` logged values of ``metric`` (None without any)."""
    if not (run_dir / "metrics.csv").is_file():
        return None
    try:
        _, values = read_curve(run_dir, metric)
    except CurveError:  # the run never logged it
        return None
    return float(values[-last:].mean()) if len(values) else None


def _baselines(cfg: Any) -> str:
    if not is_marlgrid_id(cfg.env.id):
        return f"none measured: {cfg.env.id} is not a marlgrid env"
    try:
        drawn = scripted_baselines(cfg.env.id, dict(cfg.env.settings), BASELINE_EPISODES)
    except Exception as exc:  # the run is done: a failed measurement is reported, not raised
        return f"not measured ({type(exc).__name__}: {exc})"
    described = {name: BASELINE_MEANINGS.get(name) for name in drawn}
    values = ", ".join(
        f"{name} {value:.3f}" + (f" ({described[name]})" if described[name] else "")
        for name, value in drawn.items()
    )
    rules = ", not the curriculum's last stage" if cfg.curriculum else ""
    return (
        f"{values} (scripted, every agent playing it, {BASELINE_EPISODES} episodes each at the "
        f"env's settings{rules})"
    )


def _evaluate_command(run_dir: Path, program: str) -> str:
    if program == "marlgrid-train":
        head = "marlgrid-evaluate"
    else:
        head = f"python {shlex.quote(_shown(EXPERIMENTS / 'evaluate.py'))}"
    return f"{head} {shlex.quote(_shown(run_dir))} --episodes 100 --greedy"


def _continue_command(cfg: Any, overrides: Sequence[str], program: str) -> str:
    kept = [o for o in overrides if o.partition("=")[0].lstrip("+~") not in CONTINUE_KEYS]
    args = [*kept, f"total_timesteps={2 * cfg.total_timesteps}", "extend=true"]
    if program != "marlgrid-train":
        program = f"python {shlex.quote(_shown(Path(program)))}"
    return " ".join([program, *map(_shell_word, args)])


def _shell_word(arg: str) -> str:
    """``arg`` as a shell word: as is where safe, in double quotes where it holds Hydra's single
    quotes (``"hydra.run.dir='runs/a=1,b=2/seed_0'"``), else :func:`shlex.quote`'s form."""
    if shlex.quote(arg) == arg:
        return arg
    if not any(c in arg for c in '"$`\\!'):
        return f'"{arg}"'
    return shlex.quote(arg)


def _shown(path: Path) -> str:
    """``path`` relative to the working directory when inside it, else absolute."""
    path = Path(path).absolute()
    try:
        return str(path.relative_to(Path.cwd()))
    except ValueError:
        return str(path)
