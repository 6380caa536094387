"""Env sources: what an ``env.id`` names, built as the batched env the rollout loop steps.

The trainer, evaluation and saved runs build every env batch through :func:`make_env_source`,
so one training driver serves every task family:

- a marlgrid id (``MarlGrid-*``, any id of :data:`marlgrid.registry.REGISTRY`):
  ``marlgrid.make_vec(id, num_envs, **settings)``, a multi-agent
  :class:`~marlgrid.vector.VectorEnv` (with an engine: scripted roles and social metrics work);
- ``popgym:<Name>`` (a POPGym env, e.g. ``popgym:RepeatPreviousEasy``) and ``memorygym:<Name>``
  (a Memory Gym grid task, e.g. ``memorygym:MortarMayhem-Grid-v0``): a gymnasium vector env of
  :mod:`marlgrid.tasks.popgym_env` seen as one agent (``agent_0``) by
  :class:`~marlgrid.agents.training.rollout.SingleAgentBatch`; ``settings`` are the harness's
  wrapper options (``previous_action``, ``antialias``, ``discrete_action``,
  ``box_action_bins``).

A new family is one :func:`register_env_source` call::

    from marlgrid.agents.training.env_sources import register_env_source
    from marlgrid.agents.training.rollout import SingleAgentBatch

    def make_my_tasks(name, num_envs, settings):
        return SingleAgentBatch(MyBatchedTask(name, num_envs, **settings))

    register_env_source("mytask", make_my_tasks)  # env.id=mytask:<name>
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from marlgrid.config import ConfigError

#: ``prefix -> builder(name, num_envs, settings)`` for ids written ``<prefix>:<name>``
ENV_SOURCES: dict[str, Callable[[str, int, Mapping[str, Any]], Any]] = {}


def register_env_source(prefix: str, build: Callable[[str, int, Mapping[str, Any]], Any]) -> None:
    """Make ``env.id=<prefix>:<name>`` build ``build(name, num_envs, settings)``."""
    ENV_SOURCES[prefix] = build


def split_env_id(env_id: str) -> tuple[str | None, str]:
    """``(prefix, name)`` of ``<prefix>:<name>``; ``(None, env_id)`` for a marlgrid id."""
    if not isinstance(env_id, str) or not env_id:
        raise ConfigError(f"env.id must be a non-empty string, got {env_id!r}")
    prefix, sep, name = env_id.partition(":")
    return (prefix, name) if sep else (None, env_id)


def is_marlgrid_id(env_id: str) -> bool:
    """True when ``env_id`` names an env of marlgrid's own registry."""
    return split_env_id(env_id)[0] is None


def make_env_source(env_id: str, num_envs: int, settings: Mapping[str, Any] | None = None) -> Any:
    """The batched env ``env_id`` names (see the module docstring); a bad id or setting raises
    :class:`~marlgrid.config.ConfigError` naming it."""
    prefix, name = split_env_id(env_id)
    settings = dict(settings or {})
    if prefix is None:
        import marlgrid

        try:
            return marlgrid.make_vec(env_id, num_envs, **settings)
        except ConfigError as exc:
            raise ConfigError(f"env {env_id!r}: {exc}") from None
    if prefix not in ENV_SOURCES:
        raise ConfigError(
            f"env.id {env_id!r}: unknown env source {prefix!r}; registered: "
            f"{sorted(ENV_SOURCES)} (or a marlgrid id such as MarlGrid-GoalCycle-7x7-v0)"
        )
    try:
        return ENV_SOURCES[prefix](name, num_envs, settings)
    except (ValueError, TypeError) as exc:
        raise ConfigError(f"env {env_id!r}: {exc}") from None


def _popgym_source(name: str, num_envs: int, settings: Mapping[str, Any]) -> Any:
    from marlgrid.agents.training.rollout import SingleAgentBatch
    from marlgrid.tasks.popgym_env import make_vector_env

    return SingleAgentBatch(make_vector_env(name, num_envs, **settings))


register_env_source("popgym", _popgym_source)
register_env_source("memorygym", _popgym_source)
