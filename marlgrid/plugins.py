"""Outside code: modules that register envs, scripted policies, loss terms, memory cores or
learners, imported by name before a run's config is checked.

A run names its plugins (``plugins=[myext]`` on the command line, ``TrainConfig.plugins`` in
Python); the name is saved with the run, so whatever reads the run back (``SavedRun``,
``evaluate.py``, ``export_expert.py``, ``extend=true``) imports the same modules first. An
installed package can declare its module in the entry-point group ``marlgrid.plugins``
(``[project.entry-points."marlgrid.plugins"] myext = "myext"``): such modules load with every
call of :func:`load_plugins`, named or not.
"""

from __future__ import annotations

import importlib
import re
from collections.abc import Iterable
from importlib.metadata import entry_points
from types import ModuleType

from marlgrid.config import ConfigError

#: the entry-point group of installed plugins
ENTRY_POINT_GROUP = "marlgrid.plugins"
_MODULE = re.compile(r"[A-Za-z_]\w*(\.[A-Za-z_]\w*)*")
_loaded: dict[str, ModuleType] = {}


def check_plugin_names(names: object) -> list[str]:
    """``names`` as a list of dotted module names; :class:`ConfigError` names a bad one."""
    if names is None:
        return []
    if isinstance(names, str) or not isinstance(names, Iterable):
        raise ConfigError(f"plugins must be a list of module names such as [myext], got {names!r}")
    out = []
    for name in names:
        if not isinstance(name, str) or not _MODULE.fullmatch(name):
            raise ConfigError(f"plugins: {name!r} is not a module name (such as myext or pkg.ext)")
        out.append(name)
    return out


def _import(name: str, how: str) -> ModuleType:
    if name not in _loaded:
        try:
            _loaded[name] = importlib.import_module(name)
        except ModuleNotFoundError as exc:
            if exc.name is None or not (name == exc.name or name.startswith(exc.name + ".")):
                raise  # the plugin itself imports something missing: its own traceback
            raise ConfigError(
                f"plugins: cannot import {how} {name!r} ({exc}); is its folder on PYTHONPATH "
                "or the package installed?"
            ) from None
    return _loaded[name]


def load_plugins(names: object = ()) -> list[ModuleType]:
    """Import the installed plugins (entry-point group :data:`ENTRY_POINT_GROUP`) and the
    modules ``names``, each once; returns the named ones. :class:`ConfigError` names a module
    that cannot be found."""
    for entry in entry_points(group=ENTRY_POINT_GROUP):
        _import(entry.value.partition(":")[0], f"the installed plugin {entry.name!r}, module")
    return [_import(name, "module") for name in check_plugin_names(names)]
