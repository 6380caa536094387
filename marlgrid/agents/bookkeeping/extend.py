"""The run that ``extend=true`` continues.

``total_timesteps`` is part of a run directory's name (a 4k and an 8k run are different runs),
so ``name=d2 total_timesteps=8192 extend=true`` after a 4096-step run names a directory that
holds nothing. :func:`run_to_extend` then finds the earlier run of the same settings: among the
run directories ``seed_<seed>`` and ``*/seed_<seed>`` of the same parent (``runs/<name>`` for a
single run, the sweep directory for a sweep job), the one whose saved overrides
(``.hydra/overrides.yaml``) are this job's once the keys left out of directory names and
``total_timesteps`` are dropped, and that holds a checkpoint. None, or several, is a
:class:`~marlgrid.config.ConfigError`: an extend never silently starts from zero.

Nothing here imports Hydra: ``experiments/train.py`` passes the job's overrides and Hydra's
``override_dirname.exclude_keys`` as plain data.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from pathlib import Path

from marlgrid.agents.bookkeeping.checkpoint import list_checkpoints, load_checkpoint
from marlgrid.analysis.curves import AnalysisError
from marlgrid.analysis.runs import _defining, _yaml
from marlgrid.config import ConfigError

__all__ = ["OVERRIDES_FILE", "PICK_RUN_DIR", "run_to_extend"]

#: where ``experiments/train.py`` records a run's task overrides
OVERRIDES_FILE = Path(".hydra") / "overrides.yaml"
#: how to name a run directory on the command line: the single quotes keep Hydra from reading
#: the ``=`` and ``,`` of its name, the double quotes keep them from the shell
PICK_RUN_DIR = "\"hydra.run.dir='<run dir>'\""


def run_to_extend(
    run_dir: Path,
    parent: Path | None,
    seed: int,
    overrides: Sequence[str],
    exclude_keys: Iterable[str],
    total_timesteps: int,
) -> tuple[Path, str | None]:
    """The directory an ``extend=true`` job trains in, and a line saying so (None: as named).

    ``run_dir`` is the job's directory; when it holds a checkpoint it is the run. Otherwise the
    run is looked up under ``parent`` (None: the job's directory was given by hand, so there is
    nowhere else to look) as the module docstring says. Raises :class:`ConfigError` when no run
    or several match.
    """
    if _checkpoints(run_dir):
        return run_dir, None
    if parent is None:
        raise ConfigError(
            f"extend=true: {run_dir} holds no checkpoint, so there is no run to extend there. "
            f"Give the run's own directory ({PICK_RUN_DIR}), or leave extend out to start a new "
            "run"
        )
    dropped = {*exclude_keys, "seed", "total_timesteps"}
    wanted = _defining(overrides, dropped)
    found = [d for d in _candidates(parent, seed) if _saved_overrides(d, dropped) == wanted]
    shown = ", ".join(wanted) or "no overrides"
    if not found:
        raise ConfigError(
            f"extend=true: no run to extend. {run_dir} holds no checkpoint, and no run directory "
            f"seed_{seed} or */seed_{seed} of {parent} with a checkpoint was trained with these "
            f"overrides ({shown}; total_timesteps aside). Leave extend out to start a new run, "
            f"or give the run's directory: {PICK_RUN_DIR}"
        )
    if len(found) > 1:
        listed = "; ".join(str(d) for d in found)
        raise ConfigError(
            f"extend=true: {len(found)} runs match these overrides ({shown}): {listed}. "
            f"Pick one with {PICK_RUN_DIR} (quoted so)"
        )
    (target,) = found
    saved = load_checkpoint(_checkpoints(target)[-1])
    return target, (
        f"extend=true: continuing {target} (saved at {int(saved['global_step'])} steps) to "
        f"{total_timesteps} steps"
    )


def _checkpoints(run_dir: Path) -> list[Path]:
    return list_checkpoints(Path(run_dir) / "checkpoints")


def _candidates(parent: Path, seed: int) -> list[Path]:
    """Run directories ``seed_<seed>`` and ``*/seed_<seed>`` of ``parent`` with a checkpoint."""
    name = f"seed_{seed}"
    dirs = [parent / name, *sorted(parent.glob(f"*/{name}"))]
    return [d for d in dirs if d.is_dir() and _checkpoints(d)]


def _saved_overrides(run_dir: Path, dropped: set[str]) -> tuple[str, ...] | None:
    """The run's recorded overrides without the ``dropped`` keys (None without a record)."""
    try:
        saved = _yaml(run_dir / OVERRIDES_FILE)
    except AnalysisError as exc:
        raise ConfigError(f"extend=true: cannot compare with {run_dir}: {exc}") from None
    if not isinstance(saved, list):
        return None
    return _defining([str(o) for o in saved], dropped)
