"""Old module paths kept importable after the package was regrouped by role.

``import marlgrid.engine`` (and ``from marlgrid.follower import FollowerPolicy``, ...) still work:
the old name becomes an alias of the module at its new home (the same module object), with a
``DeprecationWarning`` naming the new path.
"""

from __future__ import annotations

import importlib
import importlib.abc
import importlib.machinery
import sys
import warnings
from types import ModuleType

_RUNS = ("run_dir", "checkpoint", "saved_run", "extend", "launch", "logger", "resources",
         "memory_budget", "network_size", "sweep_stop", "transfer",
         "transfer_conditions")  # fmt: skip

#: old module path -> its home now
MOVED: dict[str, str] = {
    **{
        f"marlgrid.{m}": f"marlgrid.core.{m}"
        for m in ("kernels", "engine", "layout", "rules", "atlas")
    },
    **{
        f"marlgrid.{m}": f"marlgrid.policies.{m}"
        for m in ("baselines", "goal_seeker", "follower", "hallway_ends")
    },  # fmt: skip
    **{f"marlgrid.{m}": f"marlgrid.metrics.{m}" for m in ("social", "following")},
    **{f"marlgrid.agents.training.{m}": f"marlgrid.agents.bookkeeping.{m}" for m in _RUNS},
}


class _AliasLoader(importlib.abc.Loader):
    def __init__(self, new: str) -> None:
        self.new = new
        self.home_spec: importlib.machinery.ModuleSpec | None = None

    def create_module(self, spec: importlib.machinery.ModuleSpec) -> ModuleType:
        warnings.warn(f"{spec.name} moved to {self.new}; import it from there",
                      DeprecationWarning, stacklevel=2)  # fmt: skip
        module = importlib.import_module(self.new)
        self.home_spec = module.__spec__
        return module

    def exec_module(self, module: ModuleType) -> None:
        """The module at its new home is already executed; only its own spec is put back (the
        import system sets the alias's on it)."""
        module.__spec__ = self.home_spec


class _MovedFinder(importlib.abc.MetaPathFinder):
    def find_spec(self, name: str, path: object = None, target: object = None):  # noqa: ANN201
        new = MOVED.get(name)
        if new is None:
            return None
        return importlib.machinery.ModuleSpec(name, _AliasLoader(new))


def install() -> None:
    """Put the alias finder on ``sys.meta_path`` once."""
    if not any(isinstance(finder, _MovedFinder) for finder in sys.meta_path):
        sys.meta_path.insert(0, _MovedFinder())
