"""Roles: what drives each agent id (a learner, a frozen checkpoint, a scripted policy).

Role kinds dispatch through :data:`ROLE_BUILDERS`. Learner names refer to learner configs: the
name ``main`` is the run's ``agent`` config and every other name an entry of ``learners``; agent
ids with the same learner name share one network. A frozen agent is rebuilt from its checkpoint's
own saved config, so a GRU expert can play beside an LSTM novice, or a PPO expert beside a DRQN one.
Its checkpoint is checked with the roles (:func:`resolve_roles`), before any network is built: the
file exists, its saved configs pass the checks a fresh config gets, its weights are finite
(:func:`~marlgrid.agents.bookkeeping.checkpoint.load_learners`).
"""

from __future__ import annotations

import warnings
from collections.abc import Callable, Mapping
from dataclasses import asdict, dataclass, replace
from pathlib import Path
from typing import Any

from torch import Tensor

from marlgrid.agents.bookkeeping.checkpoint import (
    CheckpointError,
    list_checkpoints,
    load_checkpoint,
    load_learners,
)
from marlgrid.agents.learner import Learner, build_learner, config_from_dict
from marlgrid.agents.networks.observation import with_observed_image_mode
from marlgrid.agents.training.env_sources import is_marlgrid_id
from marlgrid.agents.training.rollout import PolicyGroup
from marlgrid.config import AgentConfig, ConfigError, check_bool, check_float, space_difference
from marlgrid.policies import POLICIES, make_policy
from marlgrid.registry import make

MAIN = "main"


@dataclass
class RoleConfig:
    """What drives one agent id."""

    kind: str = "learner"  # learner (trained), frozen (a checkpoint, not trained) or scripted
    learner: str = MAIN  # learner: config name; frozen: learner name inside the checkpoint
    checkpoint: str | None = None  # frozen: checkpoint file to load the learner from
    policy: str = "oracle"  # scripted: a registered policy name (marlgrid.policies.POLICIES)
    deterministic: bool = False  # frozen: act greedily instead of sampling
    epsilon: float = 0.0  # scripted: chance of a uniformly random action each step, in [0, 1]


def as_role(role: RoleConfig | Mapping[str, Any], agent: str = "an agent") -> RoleConfig:
    """``role`` as a :class:`RoleConfig` (a mapping of its fields, e.g. from the command line's
    ``roles.agent_0.kind=scripted``); :class:`ConfigError` names a field it does not have."""
    if not isinstance(role, Mapping):
        return role
    allowed = list(RoleConfig.__dataclass_fields__)
    unknown = sorted(set(role) - set(allowed))
    if unknown:
        raise ConfigError(f"role of {agent} has no settings {unknown}; its settings are {allowed}")
    return RoleConfig(**role)


def role_identity(role: RoleConfig | Mapping[str, Any]) -> dict[str, Any]:
    """The role's settings as a checkpoint's identity holds them (``epsilon`` only when set,
    so runs from before it existed keep their identity)."""
    out = asdict(as_role(role))
    if out["epsilon"] == 0.0:
        del out["epsilon"]
    return out


def _check_learner(agent: str, role: RoleConfig, names: list[str]) -> None:
    if role.learner not in names:
        raise ConfigError(
            f"role of {agent} names learner {role.learner!r}; the learners are {names} "
            "('main' is the agent config, others come from 'learners')"
        )


def _check_frozen(agent: str, role: RoleConfig, names: list[str]) -> None:
    check_bool(f"deterministic of {agent}", role.deterministic)
    if not role.checkpoint:
        raise ConfigError(f"frozen role of {agent} needs a checkpoint path")
    path = Path(str(role.checkpoint))
    try:
        _saved_learner(path, role.learner, load_learners(path)["learners"])
    except CheckpointError as exc:
        raise CheckpointError(f"frozen role of {agent}: {exc}") from None


def _check_scripted(agent: str, role: RoleConfig, names: list[str]) -> None:
    if role.policy not in POLICIES:
        raise ConfigError(
            f"policy of {agent} must be one of {sorted(POLICIES)}, got {role.policy!r} (a "
            "policy of your own: register it in a module named in plugins=[...])"
        )
    check_float(f"epsilon of {agent}", role.epsilon, 0.0, 1.0)


def resolve_roles(
    roles: Mapping[str, Any], agents: list[str], learner_names: list[str]
) -> dict[str, RoleConfig]:
    """A role for every agent id (``learner main`` where none is given); bad roles raise
    (:class:`ConfigError`; a frozen role's unusable checkpoint: :class:`CheckpointError`)."""
    unknown = sorted(set(roles) - set(agents))
    if unknown:
        raise ConfigError(f"roles name unknown agent ids {unknown}; the env's agents are {agents}")
    resolved = {}
    for agent in agents:
        role = _with_checkpoint_file(agent, as_role(roles.get(agent, RoleConfig()), agent))
        if role.kind not in ROLE_KINDS:
            raise ConfigError(
                f"role kind of {agent} must be one of {tuple(ROLE_KINDS)}, got {role.kind!r}"
            )
        ROLE_KINDS[role.kind].check(agent, role, learner_names)
        resolved[agent] = role
    if not any(r.kind == "learner" for r in resolved.values()):
        raise ConfigError("no agent has the role 'learner': nothing would be trained")
    return resolved


def _with_checkpoint_file(agent: str, role: RoleConfig) -> RoleConfig:
    """A frozen role naming a run directory plays that run's newest checkpoint (as
    ``init_from`` and ``evaluate.py`` take a run directory)."""
    folder = Path(str(role.checkpoint)) if role.kind == "frozen" and role.checkpoint else None
    if folder is None or not folder.is_dir():
        return role
    saved = list_checkpoints(folder / "checkpoints")
    if not saved:
        raise CheckpointError(
            f"frozen role of {agent}: {folder} is a folder with no checkpoints/ckpt_*.pt; give a "
            "run directory that has trained, a checkpoint file or an exported expert"
        )
    return replace(role, checkpoint=str(saved[-1]))


def load_frozen(
    path: str | Path,
    name: str,
    observation_space: Any,
    action_space: Any,
    plays: tuple[str, AgentConfig] | None = None,
) -> Learner:
    """The learner ``name`` (or the checkpoint's only one) rebuilt from its own saved config.

    ``plays``: the agent id and settings of the marlgrid agent it will drive. Where those only
    add ``extras`` to the settings the checkpoint's run gave that learner's agents (say
    ``reward`` beside an expert trained without it), the learner is built for its own
    observation and sees only those entries (:class:`TrainedView`); any other difference in
    :data:`~marlgrid.config.SPACE_SETTINGS` raises a ConfigError naming the settings. The
    checkpoint's learners are checked first (:func:`load_learners`): an unusable file raises
    :class:`CheckpointError`.
    """
    payload = load_learners(Path(path))
    learners = payload["learners"]
    name = _saved_learner(path, name, learners)
    keys = None
    trained = _trained_agent(payload, name) if plays is not None else None
    if plays is not None and trained is not None:
        trained_space, keys = _trained_observation(path, name, plays, *trained)
        if keys is not None:  # it sees a subset of this env's entries: built for what it knows
            observation_space = trained_space
    state = learners[name]
    cfg = config_from_dict(state["config"])
    learner = build_learner(cfg, observation_space, action_space)
    env = payload.get("identity", {}).get("env", {})
    trained = f" (it was trained on {env.get('id')} with settings {env.get('settings')})"
    load_saved_state(
        learner, state, f"learner {name!r} of {path} does not fit this env's agent (observation "
        f"{observation_space}, actions {action_space})", trained if env else "",
    )  # fmt: skip
    return learner if keys is None else TrainedView(learner, keys)


def load_saved_state(learner: Learner, state: Mapping[str, Any], what: str, note: str = "") -> None:
    """``learner.load_state_dict(state)``; a state that does not fit raises
    :class:`CheckpointError` as ``"<what>: <the first tensor that differs><note>"``."""
    try:
        learner.load_state_dict(state)
    except (RuntimeError, KeyError, ValueError, TypeError) as exc:
        found = _tensor_difference(state, learner.state_dict())
        detail = found or (f"no entry {exc}" if isinstance(exc, KeyError) else str(exc))
        detail = detail or type(exc).__name__
        raise CheckpointError(f"{what}: {detail.splitlines()[0]}{note}") from exc


def _saved_learner(path: str | Path, name: str, learners: Mapping[str, Any]) -> str:
    """The learner a frozen role named ``name`` plays from checkpoint ``path``: that one, or
    the checkpoint's only learner."""
    if name in learners:
        return name
    if len(learners) != 1:
        raise CheckpointError(
            f"checkpoint {path} holds learners {sorted(learners)}; name one with learner=..."
        )
    return next(iter(learners))


def frozen_learner_config(role: RoleConfig) -> Any:
    """The learner config a frozen ``role`` plays, as its checkpoint saved it (nothing built:
    the memory check sizes the network from it first)."""
    path = Path(str(role.checkpoint))
    learners = load_checkpoint(path)["learners"]
    return config_from_dict(learners[_saved_learner(path, role.learner, learners)]["config"])


class TrainedView:
    """A frozen learner that sees only the observation entries it was trained on: ``image``
    alone (``keys == ()``) or ``image`` and ``keys``; every other member is the learner's."""

    def __init__(self, learner: Learner, keys: tuple[str, ...]) -> None:
        self.learner, self.keys = learner, keys

    def act(self, obs: Any, state: Tensor, resets: Tensor, explore: bool = True) -> Any:
        seen = obs["image"] if not self.keys else {k: obs[k] for k in ("image", *self.keys)}
        return self.learner.act(seen, state, resets, explore=explore)

    def __getattr__(self, name: str) -> Any:
        return getattr(self.__dict__["learner"], name)


def _trained_agent(payload: Mapping[str, Any], name: str) -> tuple[AgentConfig, Any] | None:
    """Settings and observation space of an agent that learner ``name`` drove in the run that
    wrote ``payload`` (None when that run was not on a marlgrid env)."""
    identity = payload.get("identity") or {}
    env = identity.get("env") or {}
    if not isinstance(env.get("id"), str) or not is_marlgrid_id(env["id"]):
        return None
    try:
        trained_env = make(env["id"], **(env.get("settings") or {}))
    except ConfigError:  # settings this version no longer takes: load as before, unchecked
        return None
    roles = identity.get("roles") or {}
    for k, agent in enumerate(trained_env.possible_agents):
        role = roles.get(agent) or {}
        if role.get("kind", "learner") == "learner" and role.get("learner", MAIN) == name:
            return trained_env.agent_configs[k], trained_env.observation_space(agent)
    return None


def _trained_observation(
    path: str | Path, name: str, plays: tuple[str, AgentConfig], trained: AgentConfig, space: Any
) -> tuple[Any, tuple[str, ...] | None]:
    """The space to build learner ``name`` for and the entries it sees (None: all of them)."""
    agent, now = plays
    diff = space_difference(trained, now)
    if not diff:
        return space, None
    if set(trained.extras) <= set(now.extras):  # more entries than it knows: it skips them
        diff.pop("extras", None)
        if not diff:
            return space, trained.extras

    def shown(value: Any) -> str:  # as a Hydra override writes it
        if isinstance(value, tuple):
            return f"[{','.join(value)}]"
        return str(value).lower() if isinstance(value, bool) else str(value)

    found = "; ".join(f"{k}={shown(t)} (here {shown(n)})" for k, (t, n) in diff.items())
    fix = " ".join(f"env.settings.agents.{agent}.{k}={shown(t)}" for k, (t, _) in diff.items())
    raise ConfigError(
        f"frozen {agent}: learner {name!r} of {path} was trained with {found}; give {agent} the "
        f"settings it was trained with, e.g. {fix}"
    )


def _tensor_difference(saved: Any, built: Any, prefix: str = "") -> str | None:
    """The first tensor whose shape differs (or that one side lacks), by its dotted name."""
    if isinstance(saved, Mapping) and isinstance(built, Mapping):
        for key in list(built) + [k for k in saved if k not in built]:
            where = f"{prefix}{key}"
            if key not in saved or key not in built:
                if isinstance(saved.get(key, built.get(key)), Tensor):
                    side = "this env's network" if key not in saved else "the checkpoint"
                    return f"tensor {where} is only in {side}"
                continue
            diff = _tensor_difference(saved[key], built[key], f"{where}.")
            if diff is not None:
                return diff
        return None
    if isinstance(saved, Tensor) and isinstance(built, Tensor) and saved.shape != built.shape:
        return (
            f"{prefix.rstrip('.')} has shape {list(saved.shape)} in the checkpoint but "
            f"{list(built.shape)} for this env"
        )
    return None


def _learner_group(ctx: _Context, name: str, agents: list[str], role: RoleConfig) -> PolicyGroup:
    obs_space, act_space = ctx.spaces(agents, name)
    learner = ctx.shared.get(name)
    if learner is None:
        seed = ctx.seed * 1000 + ctx.index
        try:
            cfg = with_observed_image_mode(ctx.configs[name], ctx.vec, agents)
            learner = build_learner(cfg, obs_space, act_space, seed)
        except ConfigError as exc:
            key = "agent" if name == MAIN else f"learners.{name}"
            raise ConfigError(f"{key}: {exc}") from None
    own = [a for a in getattr(learner, "teachers", ()) if a in agents]
    if own:  # a learner cannot imitate (or read the teacher signal of) an agent it drives
        key = "agent" if name == MAIN else f"learners.{name}"
        raise ConfigError(
            f"{key}: learner {name!r} asks for teachers {own}, which it drives itself (its "
            f"agents are {agents}); a teacher must be another agent of the env"
        )
    return PolicyGroup(name, learner, agents)


def _frozen_key(ctx: _Context, agent: str, role: RoleConfig) -> tuple[Any, ...]:
    """What makes two frozen agents one policy group: the same learner of the same checkpoint
    file, acting the same way, on the same observation (agent settings and spaces)."""
    path = Path(str(role.checkpoint)).resolve()
    learner = _saved_learner(path, role.learner, load_checkpoint(path)["learners"])
    configs = getattr(ctx.vec, "agent_configs", None)
    index = ctx.vec.possible_agents.index(agent)
    settings = None if configs is None else repr(configs[index])
    spaces = tuple(str(s(agent)) for s in (ctx.vec.single_observation_space,
                                           ctx.vec.single_action_space))  # fmt: skip
    return str(path), learner, role.deterministic, settings, spaces


def _frozen_group(ctx: _Context, name: str, agents: list[str], role: RoleConfig) -> PolicyGroup:
    obs_space, act_space = ctx.spaces(agents, name)
    configs = getattr(ctx.vec, "agent_configs", None)  # a marlgrid env's: checked against it
    index = ctx.vec.possible_agents.index(agents[0])
    plays = None if configs is None else (agents[0], configs[index])
    learner = load_frozen(str(role.checkpoint), role.learner, obs_space, act_space, plays)
    other = other_task(str(role.checkpoint), ctx.vec)
    if other is not None:
        warnings.warn(f"frozen {', '.join(agents)}: {other}", FrozenTaskWarning, stacklevel=2)
    return PolicyGroup(name, learner, agents, train=False, explore=not role.deterministic)


class FrozenTaskWarning(UserWarning):
    """A frozen agent plays a task other than the one it was trained on (a transfer)."""


#: the settings that make a goal-cycle task another one for a frozen expert
TASK_SETTINGS = ("size", "n_goals")


def other_task(path: str, vec: Any) -> str | None:
    """How the task of marlgrid env ``vec`` differs from the one checkpoint ``path`` was trained
    on (map size, number of tiles), in words; None where it does not or cannot be told."""
    engine = getattr(vec, "engine", None)
    env = load_checkpoint(Path(path)).get("identity", {}).get("env", {})
    if engine is None or not is_marlgrid_id(str(env.get("id", ""))):
        return None
    from marlgrid.registry import spec

    try:
        trained = {**spec(env["id"]).kwargs, **dict(env.get("settings") or {})}
    except (KeyError, ValueError):
        return None
    here = {"size": int(engine.grid.shape[1]), "n_goals": int(engine.rules.n_goals)}
    differ = [k for k in TASK_SETTINGS if k in trained and trained[k] != here[k]]
    if not differ:
        return None
    was = ", ".join(f"{k}={trained[k]}" for k in differ)
    now = ", ".join(f"{k}={here[k]}" for k in differ)
    return f"{path} was trained on {env['id']} with {was}; here it plays {now} (a transfer)"


def _scripted(ctx: _Context, name: str, agents: list[str], role: RoleConfig) -> Any:
    return make_policy(role.policy, seed=ctx.seed, epsilon=role.epsilon)


@dataclass
class _Context:
    vec: Any
    configs: Mapping[str, Any]
    seed: int
    shared: Mapping[str, Learner]
    index: int = 0

    def spaces(self, agents: list[str], name: str) -> tuple[Any, Any]:
        if len({str(self.vec.single_observation_space(a)) for a in agents}) > 1:
            raise ConfigError(
                f"agents {agents} share learner {name!r} but see different observations; give "
                "them separate learner names"
            )
        return self.vec.single_observation_space(agents[0]), self.vec.single_action_space(agents[0])


@dataclass(frozen=True)
class RoleKind:
    """How one role kind is checked and built, and which agents it groups together."""

    check: Callable[[str, RoleConfig, list[str]], None]
    build: Callable[[_Context, str, list[str], RoleConfig], Any]
    group_by_learner: bool  # agents with the same learner name share one built object
    is_policy_group: bool  # builds a PolicyGroup (else a scripted policy)


#: role kind -> how it is checked and built
ROLE_KINDS: dict[str, RoleKind] = {
    "learner": RoleKind(_check_learner, _learner_group, True, True),
    "frozen": RoleKind(_check_frozen, _frozen_group, False, True),
    "scripted": RoleKind(_check_scripted, _scripted, False, False),
}


def build_groups(
    roles: dict[str, RoleConfig],
    vec: Any,
    learner_configs: Mapping[str, Any],
    seed: int,
    shared: Mapping[str, Learner] | None = None,
) -> tuple[list[PolicyGroup], dict[str, Any]]:
    """Policy groups (learners: one network per learner name; frozen: one per checkpoint
    learner, acting mode and observation, so agents playing the same policy share its
    forwards) and scripted policies (per agent).

    ``learner_configs`` maps learner names to their configs; the ``i``-th group in sorted
    ``(kind, name)`` order is seeded with ``seed * 1000 + i``. ``shared``: learners already
    built (by name) that learner groups reuse instead of building their own (env streams).
    """
    keyed: dict[tuple[str, str], list[str]] = {}
    for agent, role in roles.items():
        kind = ROLE_KINDS[role.kind]
        keyed.setdefault((role.kind, role.learner if kind.group_by_learner else agent), []).append(
            agent
        )
    groups: list[PolicyGroup] = []
    scripted: dict[str, Any] = {}
    ctx = _Context(vec, learner_configs, seed, dict(shared or {}))
    frozen: dict[tuple[Any, ...], PolicyGroup] = {}  # frozen agents playing one policy
    for index, ((kind_name, name), agents) in enumerate(sorted(keyed.items())):
        kind, ctx.index = ROLE_KINDS[kind_name], index
        if kind_name == "frozen":
            key = _frozen_key(ctx, agents[0], roles[agents[0]])
            if key in frozen:  # one forward per step for all of them
                same = frozen[key]
                same.agents.extend(agents)
                same.name = "+".join(same.agents)
                continue
        built = kind.build(ctx, name, agents, roles[agents[0]])
        if kind_name == "frozen":
            frozen[key] = built
        if kind.is_policy_group:
            groups.append(built)
        else:
            scripted[agents[0]] = built
    return groups, scripted
