"""Mixed training and expert dropout: which agents leave which envs, through engine absence.

Where it plugs in: :class:`MixedConfig` and :class:`DropoutConfig` are the ``mixed`` and
``dropout`` fields of a :class:`~marlgrid.agents.training.train_config.TrainConfig` (its main
stream) and of each :class:`~marlgrid.agents.training.train_config.StreamConfig`.
:func:`plan_absence` (called by :func:`~marlgrid.agents.training.streams.build_streams`, before
anything runs) checks them against the stream's roles and marks the solo envs in the engine;
:class:`ExpertDropout` is the rollout's step editor that removes agents during episodes;
:func:`split_episode_metrics` splits a stream's episode metrics into solo and social envs.

The agents leave through the engine's absence (:meth:`marlgrid.vector.VectorEnv.remove_where`,
:meth:`~marlgrid.vector.VectorEnv.set_absent_at_reset`): an absent agent has no cell, takes no
action, gets no reward and is in no view. It comes back at its env's next reset (dropout) or
never while the run lasts (the solo envs of ``mixed``).

- **Mixed**: ``round_half_up(solo_fraction * num_envs)`` envs of the stream (envs ``0 ..
  n_solo - 1``) play every episode without ``mixed.agents``; the learners' episode metrics are
  logged for all envs and apart as ``charts/solo/*`` and ``charts/social/*``.
- **Dropout**: after each step of an episode, each of ``dropout.agents`` still in its env
  leaves for the rest of the episode with probability ``dropout.rate``, and at the latest once
  the episode has taken ``dropout.step`` steps (it acted in steps ``1 .. step``).

Both default to the agents no learner trains (scripted and frozen roles).
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from marlgrid.agents.training.roles import RoleConfig
from marlgrid.agents.training.rollout import episode_metrics
from marlgrid.config import ConfigError, check_float, check_int
from marlgrid.core import kernels as K

SOLO, SOCIAL = "solo", "social"


@dataclass
class MixedConfig:
    """Envs of a stream whose experts sit out every episode (see the module docstring)."""

    solo_fraction: float = 0.0  # share of envs without the agents, in [0, 1), rounded half up
    agents: list[str] | None = None  # agent ids left out there; None: scripted and frozen ones


@dataclass
class DropoutConfig:
    """Agents that leave during episodes and come back at the next reset.

    They leave between steps (after the env step that the rollout has already ended or not),
    so an env whose last agent in play leaves this way ends one step later, with one idle
    step for every slot there.
    """

    agents: list[str] | None = None  # agent ids that may leave; None: scripted and frozen ones
    rate: float = 0.0  # chance per step that each one still present leaves, in [0, 1]
    step: int | None = None  # each leaves once the episode has taken this many steps (>= 1)


def as_mixed(value: MixedConfig | Mapping[str, Any], key: str = "mixed") -> MixedConfig:
    """A checked :class:`MixedConfig` from itself or a mapping of its fields."""
    cfg = _as_dataclass(MixedConfig, value, key)
    check_float(f"{key}.solo_fraction", cfg.solo_fraction, 0.0, 1.0, high_open=True)
    _check_agent_list(f"{key}.agents", cfg.agents)
    return cfg


def as_dropout(value: DropoutConfig | Mapping[str, Any], key: str = "dropout") -> DropoutConfig:
    """A checked :class:`DropoutConfig` from itself or a mapping of its fields."""
    cfg = _as_dataclass(DropoutConfig, value, key)
    check_float(f"{key}.rate", cfg.rate, 0.0, 1.0)
    if cfg.step is not None:
        try:
            check_int(f"{key}.step", cfg.step, low=1)
        except ConfigError as exc:
            whole = "null: no fixed step; mixed.solo_fraction removes agents for whole episodes"
            raise ConfigError(f"{exc} ({whole})") from None
    _check_agent_list(f"{key}.agents", cfg.agents)
    return cfg


def mixed_active(cfg: MixedConfig) -> bool:
    return cfg.solo_fraction > 0


def dropout_active(cfg: DropoutConfig) -> bool:
    return cfg.rate > 0 or cfg.step is not None


def solo_env_count(fraction: float, num_envs: int) -> int:
    """Envs without the experts: ``fraction * num_envs`` rounded half up (16 x 0.25 -> 4,
    10 x 0.25 -> 3)."""
    return min(num_envs, math.floor(fraction * num_envs + 0.5))


def _check_solo_count(key: str, fraction: float, n_solo: int, num_envs: int) -> None:
    """Refuse a fraction that rounds to no solo env or to all of them, naming what it gives."""
    if n_solo == 0:
        raise ConfigError(
            f"{key}={fraction} gives 0 of {num_envs} envs without the experts (rounded half "
            f"up): use at least {0.5 / num_envs:.4g} for one, or 0 for none"
        )
    if n_solo == num_envs:
        raise ConfigError(
            f"{key}={fraction} gives all {num_envs} envs without the experts (rounded half "
            f"up), which 1.0 is refused for: use less than {(num_envs - 0.5) / num_envs:.4g} to "
            f"keep one env with them"
        )


@dataclass
class AbsencePlan:
    """What leaves one stream's envs: ``solo`` ``(N,)`` envs without ``mixed_columns`` (env
    columns), and the dropout of ``dropout_columns`` (``rate``, ``step``)."""

    solo: np.ndarray
    mixed_columns: list[int] = field(default_factory=list)
    dropout_columns: list[int] = field(default_factory=list)
    rate: float = 0.0
    step: int | None = None

    def dropout(self, seed: int) -> ExpertDropout | None:
        """The rollout's step editor for this plan's dropout (None without one)."""
        if not self.dropout_columns:
            return None
        return ExpertDropout(self.dropout_columns, self.rate, self.step, seed)


def plan_absence(
    where: str,
    mixed: MixedConfig | Mapping[str, Any],
    dropout: DropoutConfig | Mapping[str, Any],
    roles: Mapping[str, RoleConfig],
    vec: Any,
) -> AbsencePlan | None:
    """Check ``mixed`` and ``dropout`` against a stream's ``roles`` and env ``vec``, and mark its
    solo envs in the engine (from their first reset on). ``where`` prefixes the keys in errors
    (``""`` or ``"streams.<name>."``). None when neither is set."""
    mixed, dropout = as_mixed(mixed, f"{where}mixed"), as_dropout(dropout, f"{where}dropout")
    if not (mixed_active(mixed) or dropout_active(dropout)):
        return None
    if getattr(vec, "engine", None) is None:
        raise ConfigError(
            f"{where}mixed / {where}dropout need a marlgrid env (agents leave through its "
            f"engine); this stream's env {type(vec).__name__} has none"
        )
    agents = list(vec.possible_agents)
    plan = AbsencePlan(solo=np.zeros(vec.num_envs, dtype=np.bool_))
    if mixed_active(mixed):
        names = _leaving_agents(f"{where}mixed.agents", mixed.agents, roles, agents)
        n_solo = solo_env_count(mixed.solo_fraction, vec.num_envs)
        _check_solo_count(f"{where}mixed.solo_fraction", mixed.solo_fraction, n_solo, vec.num_envs)
        plan.solo[:n_solo] = True
        plan.mixed_columns = [agents.index(a) for a in names]
        if n_solo:
            vec.set_absent_at_reset(list(range(n_solo)), names)
    if dropout_active(dropout):
        rules = getattr(vec.engine, "rules", None)
        max_steps = getattr(rules, "max_steps", None)
        if dropout.step is not None and max_steps is not None and dropout.step >= max_steps:
            raise ConfigError(
                f"{where}dropout.step={dropout.step} never comes: this stream's episodes end at "
                f"step {max_steps}; give a step below {max_steps}"
            )
        names = _leaving_agents(f"{where}dropout.agents", dropout.agents, roles, agents)
        plan.dropout_columns = [agents.index(a) for a in names]
        plan.rate, plan.step = float(dropout.rate), dropout.step
    return plan


class ExpertDropout:
    """Removes agents during episodes (a :class:`~marlgrid.agents.training.rollout.StepEditor`).

    After each step, each of ``columns`` still in its env (waiting or in play) whose episode has
    begun leaves with probability ``rate`` (drawn from a generator seeded by ``seed``), and any
    still there once its episode has taken ``step`` steps leaves then. ``removed`` counts them.
    """

    def __init__(self, columns: Sequence[int], rate: float, step: int | None, seed: int) -> None:
        self.columns = np.asarray(columns, dtype=np.int64)
        self.rate, self.step = float(rate), step
        self.rng = np.random.default_rng(seed)
        self.removed = 0

    def after_step(self, vec: Any, obs: Any, infos: dict[str, Any]) -> tuple[Any, dict[str, Any]]:
        engine = vec.engine
        steps = engine.step_count
        present = engine.status[:, self.columns] < K.FINISHED  # waiting or in play
        leave = np.zeros_like(present)
        if self.rate > 0:
            leave |= self.rng.random(present.shape) < self.rate
        if self.step is not None:
            leave |= (steps == self.step)[:, None]
        leave &= present & (steps > 0)[:, None]  # an episode just begun keeps its agents
        if not leave.any():
            return obs, infos
        mask = np.zeros(engine.status.shape, dtype=np.bool_)
        mask[:, self.columns] = leave
        self.removed += int(leave.sum())
        obs, active = vec.remove_where(mask)
        return obs, {**infos, "active": active}

    def pop_removed(self) -> int:
        """Agents removed since the last call."""
        out, self.removed = self.removed, 0
        return out


def split_episode_metrics(
    returns: np.ndarray,
    lengths: np.ndarray,
    envs: np.ndarray,
    solo: np.ndarray,
    columns: list[int] | None = None,
) -> dict[str, float]:
    """:func:`~marlgrid.agents.training.rollout.episode_metrics` of the episodes of solo envs
    and of the others apart, as ``charts/solo/*`` and ``charts/social/*`` (``envs``: each
    episode's env, ``solo`` ``(N,)``: the solo envs)."""
    in_solo = solo[np.asarray(envs, dtype=np.int64)]
    out: dict[str, float] = {}
    for kind, rows in ((SOLO, in_solo), (SOCIAL, ~in_solo)):
        part = episode_metrics(returns[rows], lengths[rows], columns)
        out.update({k.replace("charts/", f"charts/{kind}/"): v for k, v in part.items()})
    return out


def _leaving_agents(
    key: str, names: list[str] | None, roles: Mapping[str, RoleConfig], agents: list[str]
) -> list[str]:
    """The agents ``key`` removes: ``names``, or every agent no learner trains when None."""
    if names is None:
        chosen = [a for a in agents if roles[a].kind != "learner"]
        if not chosen:
            raise ConfigError(
                f"{key} is null (the scripted and frozen agents) but every agent of this env "
                f"is a learner ({agents}); name the agents to remove"
            )
        return chosen
    unknown = [a for a in names if a not in agents]
    if unknown:
        raise ConfigError(f"{key} names unknown agent ids {unknown}; the env's agents are {agents}")
    learning = [a for a in names if roles[a].kind == "learner"]
    if learning:
        raise ConfigError(
            f"{key} includes {learning}, driven by a training learner; only scripted or frozen "
            "agents can be removed"
        )
    return list(dict.fromkeys(names))


def _check_agent_list(key: str, value: Any) -> None:
    if value is None:
        return
    if isinstance(value, str) or not isinstance(value, Sequence):
        raise ConfigError(f"{key} must be a list of agent ids or null, got {value!r}")
    bad = [a for a in value if not isinstance(a, str)]
    if bad or not value:
        raise ConfigError(f"{key} must be a non-empty list of agent ids or null, got {value!r}")


def _as_dataclass(cls: type, value: Any, key: str) -> Any:
    if isinstance(value, cls):
        return value
    if not isinstance(value, Mapping):
        raise ConfigError(f"{key} must be a mapping of {cls.__name__} fields, got {value!r}")
    allowed = sorted(cls.__dataclass_fields__)
    unknown = sorted(set(value) - set(allowed))
    if unknown:
        raise ConfigError(f"{key}: unknown key(s) {unknown}; allowed: {allowed}")
    return cls(**value)
