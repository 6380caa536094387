"""The Hydra schemas of ``experiments/train.py`` and the check of its boolean overrides.

- :func:`train_schema`: :class:`~marlgrid.agents.training.train_config.TrainConfig` as a
  structured config whose free-form mappings (:data:`OPEN_KEYS`: ``env.settings``,
  ``curriculum``, ``roles``) take new keys without ``+``: ``env.settings.penalty=0.5``,
  ``'curriculum.streak_bonus.points=[[0,0.0],[200000,0.5]]'``, ``roles.agent_0.kind=scripted``
  (a role's fields are checked when the run is built: ``roles.as_role``).
- :func:`agent_schema`: one learner config class (an algorithm's), with
  ``network.memory_kwargs`` open the same way: ``agent.network.memory_kwargs.k=4``.
- :func:`check_bool_overrides`: OmegaConf reads ``1``, ``yes``, ``on`` (and their opposites) as
  booleans for a ``bool`` field; a command-line override of a boolean setting must say ``true``
  or ``false``, as env settings must (:func:`marlgrid.config.check_bool`).
- :func:`check_nothing_dropped`: a ``+key=value`` override adds a key to the composed config
  that the validated :class:`TrainConfig` may not hold (``+agent.lrr=0.1``, ``+foo=1``);
  every key of the composed config must land in the validated one, or the run is refused
  naming the key and the settings allowed there.

Open mappings are checked when the trainer is built (unknown rules, schedule keys and env
settings are refused there, naming them).
"""

from __future__ import annotations

import dataclasses
import importlib.util
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from hydra.core.override_parser.overrides_parser import OverridesParser
from hydra.errors import HydraException
from omegaconf import DictConfig, OmegaConf

from marlgrid.agents.training.train_config import TrainConfig
from marlgrid.config import ConfigError, check_bool

#: free-form mappings of the train schema: a plain ``key.new=value`` adds an entry
OPEN_KEYS = ("env.settings", "curriculum", "roles")
#: free-form mappings of a learner config's schema
OPEN_AGENT_KEYS = ("network.memory_kwargs",)


def _opened(schema: DictConfig, keys: Sequence[str]) -> DictConfig:
    for key in keys:
        node = OmegaConf.select(schema, key)
        if node is not None:  # a learner config without a network keeps its schema
            OmegaConf.set_struct(node, False)
    return schema


def train_schema() -> DictConfig:
    """The structured :class:`TrainConfig`, :data:`OPEN_KEYS` taking new keys."""
    return _opened(OmegaConf.structured(TrainConfig), OPEN_KEYS)


def agent_schema(config_class: type) -> DictConfig:
    """The structured learner config ``config_class``, :data:`OPEN_AGENT_KEYS` taking new
    keys."""
    return _opened(OmegaConf.structured(config_class), OPEN_AGENT_KEYS)


def check_bool_overrides(cfg: DictConfig, overrides: Sequence[str]) -> None:
    """Refuse an override ``key=value`` of a boolean setting of ``cfg`` (the composed config)
    whose value is not ``true``/``false``: :class:`~marlgrid.config.ConfigError` names it."""
    for override in OverridesParser.create().parse_overrides(list(overrides)):
        if override.is_delete() or override.package is not None:
            continue
        key = override.key_or_group
        value: Any = override.value()
        if isinstance(value, str) and "${" in value:  # an interpolation: resolved by OmegaConf
            continue
        if isinstance(OmegaConf.select(cfg, key, default=None), bool):
            check_bool(key, value)


def search_dirs(conf_dir: Path, overrides: Sequence[Any]) -> list[Path]:
    """``conf_dir`` and the folders of a ``hydra.searchpath=[...]`` override (``file://`` paths,
    and ``pkg://`` packages found on the path), where config groups are looked up."""
    dirs = [conf_dir]
    for override in overrides:
        if override.key_or_group != "hydra.searchpath" or override.is_delete():
            continue
        value = override.value()
        for entry in value if isinstance(value, list) else [value]:
            scheme, _, where = str(entry).partition("://")
            if scheme == "file":
                dirs.append(Path(where).expanduser().resolve())
            elif scheme == "pkg":
                package, _, sub = where.replace("/", ".").partition(".")
                spec = importlib.util.find_spec(package)
                for root in (spec.submodule_search_locations or []) if spec else []:
                    dirs.append(Path(root, *sub.split(".")) if sub else Path(root))
    return dirs


def check_group_overrides(conf_dir: Path, overrides: Sequence[str]) -> None:
    """Refuse an override of a config group (a folder of ``conf_dir`` or of a folder that
    ``hydra.searchpath`` adds, e.g. ``curriculum``) whose value is not the name of one of its
    files (``curriculum=3``): Hydra would fail with a traceback.
    :class:`~marlgrid.config.ConfigError` names the group and its choices."""
    try:
        parsed = OverridesParser.create().parse_overrides(list(overrides))
    except HydraException:
        return  # not an override Hydra can read: its own error says why
    dirs = search_dirs(conf_dir, parsed)
    groups = {o.key_or_group for o in parsed if not o.is_delete()}
    if "scale" in groups and "experiment" not in groups:
        presets = sorted({p.stem for d in dirs for p in (d / "experiment").glob("*.yaml")})
        raise ConfigError(
            "scale=... picks the scale of an experiment preset: give one with it "
            f"(experiment=<name> scale=small; presets: {', '.join(presets)})"
        )
    for override in parsed:
        key = override.key_or_group
        folders = [d / key for d in dirs if (d / key).is_dir()]
        if override.is_delete() or key.startswith("hydra") or not folders:
            continue
        value: Any = override.value()
        values = value if isinstance(value, list) else getattr(value, "list", [value])  # a,b
        choices = sorted({p.stem for folder in folders for p in folder.glob("*.yaml")})
        for v in values:
            if not isinstance(v, str) or (choices and v not in choices and "/" not in v):
                raise ConfigError(
                    f"{key}={v!r} is not one of the group's configs: {', '.join(choices)}"
                )


def plugin_overrides(overrides: Sequence[str]) -> list[str]:
    """The modules a ``plugins=[...]`` override names (empty without one, or when Hydra cannot
    read the overrides: its own error says why)."""
    try:
        parsed = OverridesParser.create().parse_overrides(list(overrides))
    except HydraException:
        return []
    out: list[str] = []
    for override in parsed:
        if override.key_or_group == "plugins" and not override.is_delete():
            value = override.value()
            out += [str(v) for v in (value if isinstance(value, list) else [value])]
    return out


def dropped_keys(composed: Any, validated: Any, prefix: str = "") -> list[tuple[str, list[str]]]:
    """Keys of ``composed`` (plain containers) that ``validated`` (dataclasses, dicts, lists)
    lacks: ``(dotted key, the names allowed there)`` each."""
    if not isinstance(composed, Mapping):
        if isinstance(composed, list) and isinstance(validated, list | tuple):
            return [
                d
                for i, (c, v) in enumerate(zip(composed, validated, strict=False))
                for d in dropped_keys(c, v, f"{prefix}{i}.")
            ]
        return []
    if dataclasses.is_dataclass(validated):
        allowed = [f.name for f in dataclasses.fields(validated)]
        values = {name: getattr(validated, name) for name in allowed}
    elif isinstance(validated, Mapping):
        allowed, values = list(validated), dict(validated)
    else:
        return []
    out: list[tuple[str, list[str]]] = []
    for key, value in composed.items():
        if key not in values:
            out.append((f"{prefix}{key}", sorted(map(str, allowed))))
        else:
            out += dropped_keys(value, values[key], f"{prefix}{key}.")
    return out


def check_nothing_dropped(cfg: DictConfig, config: Any) -> None:
    """Refuse a composed ``cfg`` with keys the validated ``config`` dropped (a ``+`` override
    of a key no setting has): :class:`~marlgrid.config.ConfigError` names the first of them."""
    composed = OmegaConf.to_container(cfg, resolve=True)
    dropped = dropped_keys(composed, config)
    if dropped:
        key, allowed = dropped[0]
        where = key.rpartition(".")[0] or "the top level"
        more = f" (and {[k for k, _ in dropped[1:]]})" if len(dropped) > 1 else ""
        raise ConfigError(
            f"{key!r}{more} is not a setting: {where} has {allowed}; a '+' override cannot "
            "add settings the run would ignore"
        )
