"""The configuration of a training run: plain dataclasses checked before anything runs.

:class:`TrainConfig` (env, the learners' configs, roles, logging, curriculum, mixed training
and expert dropout (:mod:`~marlgrid.agents.training.mixing`), run length and bookkeeping),
:func:`learner_configs` (learner name -> config), :func:`validate_learners` (each config's own
``validate``), :func:`iteration_steps` and :func:`identity` (what a resumed run must share with
the run that wrote its checkpoint).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

from marlgrid.agents.learner import config_from_dict, default_config
from marlgrid.agents.training.curriculum import check_curriculum, typed_schedules
from marlgrid.agents.training.learner_checks import check_learner_config
from marlgrid.agents.training.mixing import (
    DropoutConfig,
    MixedConfig,
    as_dropout,
    as_mixed,
    dropout_active,
    mixed_active,
)
from marlgrid.agents.training.roles import MAIN, RoleConfig, as_role, role_identity
from marlgrid.config import ConfigError, check_bool, check_int
from marlgrid.plugins import check_plugin_names

#: largest seed (derived seeds such as ``seed * 100_003 + iteration`` stay within 64 bits)
MAX_SEED = 2**32 - 1


@dataclass
class EnvConfig:
    """Which environment to train in."""

    id: str = "MarlGrid-GoalCycle-7x7-v0"  # registered marlgrid id
    num_envs: int = 16  # envs stepped together by the batched API
    settings: dict[str, Any] = field(default_factory=dict)  # overrides of the registered settings


@dataclass
class StreamConfig:
    """One more env stream: its own env batch and roles, its learners shared with the run's."""

    env: EnvConfig = field(default_factory=EnvConfig)
    roles: dict[str, RoleConfig] = field(default_factory=dict)  # agent id -> role (default main)
    mixed: MixedConfig = field(default_factory=MixedConfig)  # envs whose experts sit out
    dropout: DropoutConfig = field(default_factory=DropoutConfig)  # experts leaving mid-episode


@dataclass
class LoggerConfig:
    """Where metrics go."""

    csv: bool = True  # metrics.csv in the run directory
    tensorboard: bool = True  # TensorBoard events in run_dir/tensorboard
    print_every: int = 0  # print a line every N iterations (0: never)
    progress: bool = True  # tqdm progress bar with steps/s and recent return


#: the most torch CPU threads a run may ask for (torch itself overflows near 2**31)
MAX_THREADS = 1024


@dataclass
class TrainConfig:
    """A whole training run."""

    env: EnvConfig = field(default_factory=EnvConfig)
    agent: Any = None  # the 'main' learner's config (any algorithm; None: learner.DEFAULT_ALGO's)
    learners: dict[str, Any] = field(default_factory=dict)  # more learner configs by name
    # agent id -> role (a RoleConfig or a mapping of its fields; default: learner main)
    roles: dict[str, Any] = field(default_factory=dict)
    streams: dict[str, StreamConfig] = field(default_factory=dict)  # more env streams by name
    mixed: MixedConfig = field(default_factory=MixedConfig)  # main stream: envs without experts
    dropout: DropoutConfig = field(default_factory=DropoutConfig)  # main stream: experts leave
    logger: LoggerConfig = field(default_factory=LoggerConfig)
    # rule -> schedule: a ScheduleConfig or a mapping of its fields (from the command line)
    curriculum: dict[str, Any] = field(default_factory=dict)
    name: str = "default"  # run name (part of the run directory)
    seed: int = 0  # seeds networks, sampling and environments (0 .. 2**32 - 1)
    total_timesteps: int = 200_000  # env steps summed over the batch (each is one step per agent)
    iteration_steps: int | None = None  # env steps per env between logs; None: the agent's own
    checkpoint_every: int = 10  # iterations between checkpoints (also at the end and on signals)
    keep_checkpoints: int | None = 3  # newest checkpoints kept (>= 1); None (null): keep all
    eval_every: int = 0  # iterations between greedy evaluations on fresh envs (0: never)
    eval_episodes: int = 10  # episodes per evaluation
    video: bool = True  # record a greedy episode at the end (needs the video extra)
    video_every: int = 0  # also record every N iterations (0: only at the end)
    resume: bool = True  # continue from the newest checkpoint in the run directory if any
    extend: bool = False  # resume even if total_timesteps differs from the run's (train on to it)
    # a run directory, checkpoint or exported agent whose network weights start the learners
    # (warm_start.py); a resumed run continues from its own checkpoint instead
    init_from: str | None = None
    torch_threads: int = 1  # torch CPU threads
    # modules of outside code (envs, policies, loss terms, cores, learners) imported before
    # anything is checked, and again by whatever reads the run back (marlgrid.plugins)
    plugins: list[str] = field(default_factory=list)

    def __post_init__(self) -> None:
        self.curriculum = typed_schedules(self.curriculum)  # command-line entries: mappings
        # the command line's roles are mappings (any agent id may be named): RoleConfigs here
        self.roles = {agent: as_role(role, agent) for agent, role in self.roles.items()}

    def validate(self) -> None:
        """Check every field that needs no env; :class:`ConfigError` names the first bad one."""
        if not isinstance(self.name, str) or not self.name:
            raise ConfigError(f"name must be a non-empty string, got {self.name!r}")
        check_int("seed", self.seed, low=0, high=MAX_SEED)
        self.plugins = check_plugin_names(self.plugins)
        check_int("total_timesteps", self.total_timesteps, low=1)
        if self.iteration_steps is not None:
            check_int("iteration_steps", self.iteration_steps, 1, self.total_timesteps,
                      why="total_timesteps: one iteration cannot outlast the run")  # fmt: skip
        check_int("checkpoint_every", self.checkpoint_every, low=1)
        if self.keep_checkpoints is not None:
            try:
                check_int("keep_checkpoints", self.keep_checkpoints, low=1)
            except ConfigError as exc:
                raise ConfigError(f"{exc} (null keeps every checkpoint)") from None
        check_int("eval_every", self.eval_every, low=0)
        check_int("eval_episodes", self.eval_episodes, low=1)
        check_int("video_every", self.video_every, low=0)
        check_int("torch_threads", self.torch_threads, 1, MAX_THREADS,
                  why="threads past the CPU's cores only contend for them")  # fmt: skip
        for key in ("video", "resume", "extend"):
            check_bool(key, getattr(self, key))
        if self.init_from is not None and (
            not isinstance(self.init_from, str) or not Path(self.init_from).exists()
        ):
            raise ConfigError(
                f"init_from must name a run directory, checkpoint or exported agent file that "
                f"exists, got {self.init_from!r}"
            )
        for key in ("csv", "tensorboard", "progress"):
            check_bool(f"logger.{key}", getattr(self.logger, key))
        check_int("logger.print_every", self.logger.print_every, low=0)
        if not isinstance(self.env.id, str):
            raise ConfigError(f"env.id must be a registered env id, got {self.env.id!r}")
        check_int("env.num_envs", self.env.num_envs, low=1)
        for key in ("settings", "learners", "roles", "streams"):
            value = self.env.settings if key == "settings" else getattr(self, key)
            if not isinstance(value, Mapping):
                name = "env.settings" if key == "settings" else key
                raise ConfigError(f"{name} must be a mapping, got {value!r}")
        for name, value in self.streams.items():
            if name == "main" or not isinstance(name, str):
                raise ConfigError(f"streams: {name!r} cannot name a stream ('main' is env/roles)")
            try:
                stream = as_stream(value)
            except (TypeError, ConfigError) as exc:
                raise ConfigError(f"streams.{name}: {exc}") from None
            if not isinstance(stream.env.id, str):
                raise ConfigError(f"streams.{name}.env.id must be an env id, got {stream.env.id!r}")
            check_int(f"streams.{name}.env.num_envs", stream.env.num_envs, low=1)
            for key in ("settings", "roles"):
                value = stream.env.settings if key == "settings" else stream.roles
                if not isinstance(value, Mapping):
                    where = (
                        f"streams.{name}.env.settings"
                        if key == "settings"
                        else f"streams.{name}.roles"
                    )
                    raise ConfigError(f"{where} must be a mapping, got {value!r}")
            as_mixed(stream.mixed, f"streams.{name}.mixed")
            as_dropout(stream.dropout, f"streams.{name}.dropout")
        as_mixed(self.mixed)
        as_dropout(self.dropout)
        check_curriculum(self.curriculum)


def as_stream(value: StreamConfig | Mapping[str, Any]) -> StreamConfig:
    """A :class:`StreamConfig` from itself or from a mapping of its fields."""
    if isinstance(value, StreamConfig):
        return value
    if not isinstance(value, Mapping) or set(value) - {"env", "roles", "mixed", "dropout"}:
        raise ConfigError(
            f"a stream must be a mapping with keys env, roles, mixed and dropout, got {value!r}"
        )
    env = value.get("env", {})
    env = env if isinstance(env, EnvConfig) else EnvConfig(**env)
    roles = value.get("roles", {})
    return StreamConfig(
        env=env,
        roles=dict(roles) if isinstance(roles, Mapping) else roles,
        mixed=as_mixed(value.get("mixed", {}), "mixed"),
        dropout=as_dropout(value.get("dropout", {}), "dropout"),
    )


class ValidatingConfig(Protocol):
    """What the trainer asks of a learner config (each registered algorithm's dataclass).

    ``validate(key, num_slots)`` raises :class:`~marlgrid.config.ConfigError` naming
    ``<key>.<field>`` for a bad value; ``num_slots`` (env copies times agents the learner drives,
    ``None`` when no agent uses it) allows the checks that depend on the batch.
    ``steps_per_iteration()`` is the env steps per env of one trainer iteration when it is the
    ``main`` learner's config and ``iteration_steps`` is not given (PPO: its rollout length).
    """

    algo: str

    def validate(self, key: str, num_slots: int | None = None) -> None: ...

    def steps_per_iteration(self) -> int: ...


def _config_key(name: str) -> str:
    return "agent" if name == MAIN else f"learners.{name}"


def learner_configs(cfg: TrainConfig) -> dict[str, Any]:
    """Learner name -> config dataclass (``main`` is ``cfg.agent``; dict entries are rebuilt)."""

    def typed(name: str, value: Any) -> Any:
        if not isinstance(value, Mapping):
            return value
        try:
            return config_from_dict(value)
        except (ValueError, TypeError) as exc:
            raise ConfigError(f"{_config_key(name)}: {exc}") from None

    main = default_config() if cfg.agent is None else typed(MAIN, cfg.agent)
    return {MAIN: main, **{k: typed(k, v) for k, v in cfg.learners.items()}}


def validate_learners(configs: Mapping[str, Any], slots: Mapping[str, int] | None = None) -> None:
    """Each config's own ``validate(key, num_slots)``; its ``algo`` must be registered."""
    for name, c in configs.items():
        check_learner_config(_config_key(name), c, None if slots is None else slots.get(name))


def iteration_steps(cfg: TrainConfig) -> int:
    """Env steps per env in one trainer iteration: ``cfg.iteration_steps``, else the ``main``
    learner config's ``steps_per_iteration()``."""
    if cfg.iteration_steps is not None:
        return cfg.iteration_steps
    main = learner_configs(cfg)[MAIN]
    steps = getattr(main, "steps_per_iteration", None)
    if not callable(steps):
        raise ConfigError(
            f"agent: a {type(main).__name__} has no steps_per_iteration(); set iteration_steps"
        )
    return int(steps())


def identity_defaults(cfg: TrainConfig) -> dict[str, Any]:
    """What a checkpoint's identity reads for a setting it does not record: each learner's
    settings at their defaults (a field added to a learner config since the checkpoint)."""
    return {
        "learners": {
            k: dataclasses.asdict(type(v)()) for k, v in sorted(learner_configs(cfg).items())
        }
    }


def identity(cfg: TrainConfig) -> dict[str, Any]:
    """The settings a checkpoint must share with the run that resumes it."""

    def strip(c: Any) -> dict[str, Any]:
        d = dataclasses.asdict(c)
        d.pop("device", None)
        return d

    out = {
        "env": {"id": cfg.env.id, "num_envs": cfg.env.num_envs, "settings": dict(cfg.env.settings)},
        "learners": {k: strip(v) for k, v in sorted(learner_configs(cfg).items())},
        "roles": {k: role_identity(v) for k, v in sorted(cfg.roles.items())},
        "iteration_steps": iteration_steps(cfg),
        "seed": cfg.seed,
    }
    out.update(_absence_identity(cfg.mixed, cfg.dropout))
    if cfg.streams:  # runs with one stream keep the identity they always had
        out["streams"] = {
            k: {
                "env": dataclasses.asdict(as_stream(v).env),
                "roles": {a: role_identity(r) for a, r in sorted(as_stream(v).roles.items())},
                **_absence_identity(as_stream(v).mixed, as_stream(v).dropout),
            }
            for k, v in sorted(cfg.streams.items())
        }
    if cfg.curriculum:  # runs without one keep the identity they always had
        schedules = check_curriculum(cfg.curriculum)
        out["curriculum"] = {k: dataclasses.asdict(v) for k, v in sorted(schedules.items())}
    if cfg.plugins:  # the same: and an exported file names the modules it needs
        out["plugins"] = list(cfg.plugins)
    return out


def _absence_identity(mixed: Any, dropout: Any) -> dict[str, Any]:
    """``mixed`` and ``dropout`` as an identity holds them: only when set (runs without them
    keep the identity they always had)."""
    mixed, dropout = as_mixed(mixed), as_dropout(dropout)
    out: dict[str, Any] = {}
    if mixed_active(mixed):
        out["mixed"] = dataclasses.asdict(mixed)
    if dropout_active(dropout):
        out["dropout"] = dataclasses.asdict(dropout)
    return out
