"""Running trainings away from the launching process: absolute paths and a loopback local Ray.

- :func:`resolve_paths` turns a run's directory and every frozen role's ``checkpoint`` (of the
  main roles and of every stream's) into absolute paths, relative ones taken from the directory the
  command was launched in (Hydra records it as ``hydra.runtime.cwd`` while it composes each job's
  config on the submitting machine, so a job that runs on a Ray worker or a SLURM node, in another
  working directory, still finds them). :func:`absolute_checkpoints` does the checkpoints alone,
  for a config or its plain data (a saved run's config, read back from another directory).
- :class:`LocalRay` is a Hydra callback for the ``hydra/launcher=ray_local`` preset: it keeps the
  Ray instance that Hydra's Ray launcher starts on this machine bound to loopback (127.0.0.1), with
  no auth-token file and no usage reporting, keeps the sweep's signal handlers through
  ``ray.init`` (so a signal stops every job with a checkpoint, :mod:`.sweep_stop`), and shuts
  Ray down when the sweep ends.

Neither imports Ray; Hydra is needed only for :class:`LocalRay`.
"""

from __future__ import annotations

import dataclasses
import functools
import os
import signal
import sys
import threading
import warnings
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

try:
    from hydra.experimental.callback import Callback
except ModuleNotFoundError:  # Hydra is only needed for the callback (extra "train")
    Callback = object  # type: ignore[misc,assignment]

__all__ = ["LOCAL_RAY_ENV", "LocalRay", "absolute", "absolute_checkpoints", "resolve_paths"]

#: environment of a Ray instance kept on this machine. Ray reads these when it is imported and
#: when it starts: without the first it binds to the machine's network address even when told
#: 127.0.0.1; without the second it writes a token to ~/.ray/auth_token; the third stops it from
#: reporting usage over the network.
LOCAL_RAY_ENV = {
    "RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER": "0",
    "RAY_AUTH_MODE": "disabled",
    "RAY_USAGE_STATS_ENABLED": "0",
}


def absolute(path: str | Path, base: str | Path) -> Path:
    """``path`` with ``~`` expanded, joined to ``base`` if relative (``base`` made absolute)."""
    p = Path(os.path.expanduser(str(path)))
    if p.is_absolute():
        return p
    return Path(os.path.expanduser(str(base))).absolute() / p


def resolve_paths(cfg: Any, run_dir: str | Path, base: str | Path) -> tuple[Any, Path]:
    """``(cfg, run_dir)`` with the run directory and every role checkpoint made absolute
    (:func:`absolute_checkpoints`); relative paths are joined to ``base``, the launch directory
    (``HydraConfig.get().runtime.cwd`` in a Hydra job)."""
    return absolute_checkpoints(cfg, base), absolute(run_dir, base)


def absolute_checkpoints(cfg: Any, base: str | Path) -> Any:
    """``cfg`` with every frozen role's ``checkpoint`` (in ``roles`` and in each of ``streams``)
    absolute, relative ones joined to ``base``.

    ``cfg`` is a :class:`~marlgrid.agents.training.trainer.TrainConfig` or its plain data (a
    mapping, as ``config.json`` holds it); its streams and roles may be dataclasses or mappings.
    Nothing is changed in place: a copy comes back where a path changed, else ``cfg`` itself.
    """
    changes: dict[str, Any] = {}
    roles = _absolute_roles(_get(cfg, "roles"), base)
    if roles is not None:
        changes["roles"] = roles
    streams = _get(cfg, "streams")
    streams = dict(streams) if isinstance(streams, Mapping) else {}
    moved = False
    for name, stream in streams.items():
        roles = _absolute_roles(_get(stream, "roles"), base)
        if roles is not None:
            streams[name], moved = _replace(stream, roles=roles), True
    if moved:
        changes["streams"] = streams
    return _replace(cfg, **changes) if changes else cfg


def _absolute_roles(roles: Any, base: str | Path) -> dict[str, Any] | None:
    """``roles`` (agent id -> role) with absolute checkpoints; None when none changed."""
    if not isinstance(roles, Mapping):
        return None
    out, changed = dict(roles), False
    for agent, role in roles.items():
        ckpt = _get(role, "checkpoint")
        if isinstance(ckpt, str | Path) and str(ckpt):
            full = str(absolute(ckpt, base))
            if full != str(ckpt):
                out[agent], changed = _replace(role, checkpoint=full), True
    return out if changed else None


def _get(obj: Any, name: str) -> Any:
    """Field ``name`` of a dataclass or entry ``name`` of a mapping (None when absent)."""
    return obj.get(name) if isinstance(obj, Mapping) else getattr(obj, name, None)


def _replace(obj: Any, **changes: Any) -> Any:
    """A copy of a dataclass or a mapping with ``changes``."""
    return {**obj, **changes} if isinstance(obj, Mapping) else dataclasses.replace(obj, **changes)


class LocalRay(Callback):
    """Hydra callback: the sweep's Ray instance stays on this machine and leaves nothing behind.

    ``on_multirun_start`` runs in the launching process before the Ray launcher imports and starts
    Ray; it sets :data:`LOCAL_RAY_ENV` (the loopback switch always, the others unless already set)
    and wraps ``ray.init`` so that the sweep's SIGINT/SIGTERM handlers survive it.
    ``on_multirun_end`` shuts down a Ray this process still has initialized, so its raylet, GCS and
    workers exit with the sweep, also when Hydra runs inside a longer-lived process.
    """

    def __init__(self, shutdown: bool = True) -> None:
        self.shutdown = shutdown
        self._ray_init: Callable[..., Any] | None = None  # ray.init before it was wrapped

    def on_multirun_start(self, config: Any = None, **kwargs: Any) -> None:
        os.environ["RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER"] = "0"
        for key, value in LOCAL_RAY_ENV.items():
            os.environ.setdefault(key, value)
        self._warn_if_imported_early()
        import ray  # after the variables above: Ray reads them when imported

        self._ray_init = ray.init
        ray.init = _keeping_signal_handlers(ray.init)

    def _warn_if_imported_early(self) -> None:
        constants = sys.modules.get("ray._private.ray_constants")
        if constants is not None and getattr(constants, "ENABLE_RAY_CLUSTER", False):
            warnings.warn(
                "ray was imported before the sweep started, so it may bind to this machine's "
                "network address instead of 127.0.0.1; export RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER=0 "
                "before starting Python",
                RuntimeWarning,
                stacklevel=3,
            )

    def on_multirun_end(self, config: Any = None, **kwargs: Any) -> None:
        ray = sys.modules.get("ray")
        if ray is not None and self._ray_init is not None:
            ray.init, self._ray_init = self._ray_init, None
        if self.shutdown and ray is not None and ray.is_initialized():
            ray.shutdown()


def _keeping_signal_handlers(init: Callable[..., Any]) -> Callable[..., Any]:
    """``init`` that puts back the SIGINT and SIGTERM handlers it replaced.

    ``ray.init`` installs handlers of its own (a Python one that exits and a native one that
    aborts), which would kill the sweep's parent at a signal instead of letting
    :class:`~marlgrid.agents.bookkeeping.sweep_stop.SweepStop` stop every job with a checkpoint.
    """

    @functools.wraps(init)
    def wrapped(*args: Any, **kwargs: Any) -> Any:
        handlers = {sig: signal.getsignal(sig) for sig in (signal.SIGINT, signal.SIGTERM)}
        try:
            return init(*args, **kwargs)
        finally:
            if threading.current_thread() is threading.main_thread():
                for sig, handler in handlers.items():
                    if handler is not None:
                        signal.signal(sig, handler)

    return wrapped
