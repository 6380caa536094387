"""The Hydra schemas of ``experiments/train.py`` and the check of its boolean overrides.

- :func:`train_schema`: :class:`~marlgrid.agents.training.train_config.TrainConfig` as a
  structured config whose free-form mappings (:data:`OPEN_KEYS`: ``env.settings``,
  ``curriculum``) take new keys without ``+``: ``env.settings.penalty=0.5``,
  ``'curriculum.streak_bonus.points=[[0,0.0],[200000,0.5]]'``.
- :func:`agent_schema`: one learner config class (an algorithm's), with
  ``network.memory_kwargs`` open the same way: ``agent.network.memory_kwargs.k=4``.
- :func:`check_bool_overrides`: OmegaConf reads ``1``, ``yes``, ``on`` (and their opposites) as
  booleans for a ``bool`` field; a command-line override of a boolean setting must say ``true``
  or ``false``, as env settings must (:func:`marlgrid.config.check_bool`).

Open mappings are checked when the trainer is built (unknown rules, schedule keys and env
settings are refused there, naming them).
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

from hydra.core.override_parser.overrides_parser import OverridesParser
from hydra.errors import HydraException
from omegaconf import DictConfig, OmegaConf

from marlgrid.agents.training.train_config import TrainConfig
from marlgrid.config import ConfigError, check_bool

#: free-form mappings of the train schema: a plain ``key.new=value`` adds an entry
OPEN_KEYS = ("env.settings", "curriculum")
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


def check_group_overrides(conf_dir: Path, overrides: Sequence[str]) -> None:
    """Refuse an override of a config group (a folder of ``conf_dir``, e.g. ``curriculum``)
    whose value is not the name of one of its files (``curriculum=3``): Hydra would fail with
    a traceback. :class:`~marlgrid.config.ConfigError` names the group and its choices."""
    try:
        parsed = OverridesParser.create().parse_overrides(list(overrides))
    except HydraException:
        return  # not an override Hydra can read: its own error says why
    for override in parsed:
        group = conf_dir / override.key_or_group
        if override.is_delete() or override.key_or_group.startswith("hydra") or not group.is_dir():
            continue
        value: Any = override.value()
        values = value if isinstance(value, list) else getattr(value, "list", [value])  # a,b
        choices = sorted(p.stem for p in group.glob("*.yaml"))
        for v in values:
            if not isinstance(v, str) or (choices and v not in choices and "/" not in v):
                raise ConfigError(
                    f"{override.key_or_group}={v!r} is not one of the group's configs: "
                    f"{', '.join(choices)}"
                )
