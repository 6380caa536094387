"""Running trainings away from the launching process: absolute paths and a loopback local Ray.

- :func:`resolve_paths` turns a run's directory and every frozen role's ``checkpoint`` into absolute
  paths, relative ones taken from the directory the command was launched in (Hydra records it as
  ``hydra.runtime.cwd`` while it composes each job's config on the submitting machine, so a job that
  runs on a Ray worker or a SLURM node, in another working directory, still finds them).
- :class:`LocalRay` is a Hydra callback for the ``hydra/launcher=ray_local`` preset: it keeps the
  Ray instance that Hydra's Ray launcher starts on this machine bound to loopback (127.0.0.1), with
  no auth-token file and no usage reporting, and shuts it down when the sweep ends.

Neither imports Ray; Hydra is needed only for :class:`LocalRay`.
"""

from __future__ import annotations

import dataclasses
import os
import sys
import warnings
from collections.abc import Mapping
from pathlib import Path
from typing import Any

try:
    from hydra.experimental.callback import Callback
except ModuleNotFoundError:  # Hydra is only needed for the callback (extra "train")
    Callback = object  # type: ignore[misc,assignment]

__all__ = ["LOCAL_RAY_ENV", "LocalRay", "absolute", "resolve_paths"]

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
    """``(cfg, run_dir)`` with the run directory and every role checkpoint made absolute.

    ``cfg`` is a :class:`~marlgrid.agents.training.trainer.TrainConfig` (or any dataclass with a
    ``roles`` mapping of :class:`~marlgrid.agents.training.roles.RoleConfig` or dicts); relative
    paths are joined to
    ``base``, the launch directory (``HydraConfig.get().runtime.cwd`` in a Hydra job). The config
    is not changed in place: a copy comes back with new ``roles`` entries where a path changed.
    """
    new_roles: dict[str, Any] = {}
    changed = False
    for agent, role in dict(getattr(cfg, "roles", None) or {}).items():
        ckpt = role.get("checkpoint") if isinstance(role, Mapping) else role.checkpoint
        if ckpt:
            full = str(absolute(ckpt, base))
            if full != str(ckpt):
                changed = True
                if isinstance(role, Mapping):
                    role = {**role, "checkpoint": full}
                else:
                    role = dataclasses.replace(role, checkpoint=full)
        new_roles[agent] = role
    if changed:
        cfg = dataclasses.replace(cfg, roles=new_roles)
    return cfg, absolute(run_dir, base)


class LocalRay(Callback):
    """Hydra callback: the sweep's Ray instance stays on this machine and leaves nothing behind.

    ``on_multirun_start`` runs in the launching process before the Ray launcher imports and starts
    Ray; it sets :data:`LOCAL_RAY_ENV` (the loopback switch always, the others unless already set).
    ``on_multirun_end`` shuts down a Ray this process still has initialized, so its raylet, GCS and
    workers exit with the sweep, also when Hydra runs inside a longer-lived process.
    """

    def __init__(self, shutdown: bool = True) -> None:
        self.shutdown = shutdown

    def on_multirun_start(self, config: Any = None, **kwargs: Any) -> None:
        os.environ["RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER"] = "0"
        for key, value in LOCAL_RAY_ENV.items():
            os.environ.setdefault(key, value)
        constants = sys.modules.get("ray._private.ray_constants")
        if constants is not None and getattr(constants, "ENABLE_RAY_CLUSTER", False):
            warnings.warn(
                "ray was imported before the sweep started, so it may bind to this machine's "
                "network address instead of 127.0.0.1; export RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER=0 "
                "before starting Python",
                RuntimeWarning,
                stacklevel=2,
            )

    def on_multirun_end(self, config: Any = None, **kwargs: Any) -> None:
        ray = sys.modules.get("ray")
        if self.shutdown and ray is not None and ray.is_initialized():
            ray.shutdown()
