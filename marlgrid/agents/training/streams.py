"""Env streams: several env batches whose steps reach the same learners; :func:`build_streams`
builds a run's streams from its config.

A run trains on its main stream (``env`` and ``roles`` of the
:class:`~marlgrid.agents.training.train_config.TrainConfig`) and on any number of named
``streams``, each with its own env config and roles (e.g. a novice beside experts in one, alone
in the other). A learner named in several streams is one learner: its groups in each stream act
for their own slots, and :class:`SlotJoin` joins their steps into one
:class:`~marlgrid.agents.learner.Step` per env step (the main stream's slots first), so its
storage, updates and schedules see one batch. Every stream steps once per trainer step.

Each stream may also play some envs without its experts (``mixed``) and let experts leave during
episodes (``dropout``), both through the engine's absent agents
(:mod:`marlgrid.agents.training.mixing`); its learners' episode metrics then also come split
into ``charts/solo/*`` and ``charts/social/*``, and ``charts/dropouts`` counts the departures.

A two-stream run, in full::

    cfg = TrainConfig(
        env=EnvConfig("MarlGrid-GoalCycle-13x13-3Agents-v0", num_envs=8),
        roles={"agent_0": RoleConfig(), "agent_1": RoleConfig("scripted", policy="oracle"),
               "agent_2": RoleConfig("scripted", policy="oracle")},
        streams={"solo": StreamConfig(EnvConfig("MarlGrid-GoalCycle-13x13-v0", num_envs=8))},
        agent=PPOConfig(), total_timesteps=100_000,
    )
    train(cfg, "runs/mixed")  # one PPO learner on 8 envs with experts and 8 alone
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

import numpy as np
import torch

from marlgrid.agents.arrays import obs_cat
from marlgrid.agents.learner import Learner, Step, Teacher
from marlgrid.agents.training.env_sources import make_env_source
from marlgrid.agents.training.metric_observers import MetricObserver, build_metric_observers
from marlgrid.agents.training.mixing import (
    AbsencePlan,
    ExpertDropout,
    plan_absence,
    split_episode_metrics,
)
from marlgrid.agents.training.roles import RoleConfig, build_groups, resolve_roles
from marlgrid.agents.training.rollout import MultiAgentRollout, PolicyGroup, episode_metrics
from marlgrid.agents.training.train_config import (
    StreamConfig,
    TrainConfig,
    as_stream,
    validate_learners,
)
from marlgrid.config import ConfigError

MAIN_STREAM = "main"


@dataclass
class EnvStream:
    """One env batch of a run with its groups and scripted policies (see the module docstring).

    ``prefix`` goes before its metrics' names (empty for the main stream).
    """

    name: str
    env_id: str
    settings: dict[str, Any]
    vec: Any
    roles: dict[str, RoleConfig]
    groups: list[PolicyGroup]
    scripted: dict[str, Any]
    metrics: list[MetricObserver] = field(default_factory=list)
    rollout: MultiAgentRollout | None = field(default=None, repr=False)
    absence: AbsencePlan | None = None  # its solo envs and dropout (mixing.plan_absence)
    dropout: ExpertDropout | None = field(default=None, repr=False)

    @property
    def prefix(self) -> str:
        return "" if self.name == MAIN_STREAM else f"{self.name}/"

    @property
    def learners(self) -> dict[str, PolicyGroup]:
        """Training groups by learner name."""
        return {g.name: g for g in self.groups if g.train}

    @property
    def learner_columns(self) -> list[int]:
        """Env columns of the agents its learners drive."""
        agents = self.vec.possible_agents
        return [agents.index(a) for g in self.learners.values() for a in g.agents]

    def start(self, seed: int) -> MultiAgentRollout:
        """Fresh episodes seeded by ``seed``: a new rollout over this stream, with the metric
        observers that apply to its env (built now: the rules set so far apply)."""
        self.metrics = build_metric_observers(self.vec, self.groups, self.scripted)
        observers: list[Any] = list(self.metrics)
        self.dropout = None if self.absence is None else self.absence.dropout(seed)
        editors = [self.dropout] if self.dropout is not None else []
        self.rollout = MultiAgentRollout(
            self.vec, self.groups, self.scripted, seed=seed, observers=observers, editors=editors
        )
        return self.rollout

    def pop_metrics(self) -> dict[str, float]:
        """Episode returns, lengths and social metrics of the episodes ended since the last call
        (means over the learners' agents, and the return of every agent), prefixed."""
        assert self.rollout is not None, "start the stream first"
        columns = self.learner_columns
        returns, lengths = self.rollout.pop_returns(), self.rollout.pop_lengths()
        envs = self.rollout.pop_envs()
        out = episode_metrics(returns, lengths, columns)
        if self.absence is not None and self.absence.solo.any():
            out.update(split_episode_metrics(returns, lengths, envs, self.absence.solo, columns))
        if self.dropout is not None:
            out["charts/dropouts"] = float(self.dropout.pop_removed())
        for observer in self.metrics:
            out.update(observer.pop(columns))
        if len(returns):
            for k, agent in enumerate(self.vec.possible_agents):
                out[f"charts/return_{agent}"] = float(returns[:, k].mean())
        return {f"{self.prefix}{k}": v for k, v in out.items()}


class SlotJoin:
    """Joins the steps of one learner's groups in several streams into one step per env step.

    ``sizes``: the slots of each part, in stream order; :meth:`begin` makes the learner's
    storage for their sum. Part ``k``'s recorder (:meth:`recorder`) takes that group's step;
    once every part has given this env step's, the joined step reaches the learner.
    """

    def __init__(self, learner: Learner, sizes: Sequence[int]) -> None:
        self.learner, self.num_slots = learner, int(sum(sizes))
        self.offsets = np.concatenate([[0], np.cumsum(sizes)[:-1]]).tolist()
        self.parts: list[Step | None] = [None] * len(sizes)

    def begin(self) -> None:
        """Make the learner's storage for every part's slots (before the streams start)."""
        self.parts = [None] * len(self.parts)
        self.learner.begin(self.num_slots)

    def recorder(self, part: int) -> Callable[[Step], None]:
        def record(step: Step) -> None:
            if self.parts[part] is not None:
                raise RuntimeError(f"part {part} recorded twice before the others recorded once")
            self.parts[part] = step
            if all(p is not None for p in self.parts):
                steps = [p for p in self.parts if p is not None]
                self.parts = [None] * len(self.parts)
                self.learner.record(join_steps(steps, self.offsets))

        return record


def join_steps(steps: Sequence[Step], offsets: Sequence[int]) -> Step:
    """One :class:`Step` of the slots of ``steps`` in order (part ``k``'s slots from
    ``offsets[k]`` on)."""
    cat = torch.cat
    finals = [s.final_obs for s in steps if s.final_obs is not None]
    teachers = {
        name: Teacher(
            actions=cat([s.teachers[name].actions for s in steps]),
            obs=obs_cat([s.teachers[name].obs for s in steps]),
            valid=cat([s.teachers[name].valid for s in steps]),
        )
        for name in steps[0].teachers
    }
    return Step(
        obs=obs_cat([s.obs for s in steps]),
        resets=cat([s.resets for s in steps]),
        state=cat([s.state for s in steps]),
        actions=cat([s.actions for s in steps]),
        extras={k: cat([s.extras[k] for s in steps]) for k in steps[0].extras},
        rewards=cat([s.rewards for s in steps]),
        terminations=cat([s.terminations for s in steps]),
        truncations=cat([s.truncations for s in steps]),
        valid=cat([s.valid for s in steps]),
        next_obs=obs_cat([s.next_obs for s in steps]),
        next_state=cat([s.next_state for s in steps]),
        final_ids=cat([s.final_ids + off for s, off in zip(steps, offsets, strict=True)]),
        final_obs=obs_cat(finals) if finals else None,
        teachers=teachers or steps[0].teachers,  # the read-only empty one when none
        respawned=None
        if any(s.respawned is None for s in steps)
        else cat([s.respawned for s in steps]),
    )


def build_streams(
    cfg: TrainConfig, configs: dict[str, Any]
) -> tuple[list[EnvStream], list[SlotJoin]]:
    """The main stream and ``cfg.streams``, and the joins of the learners driven in several
    (each records through a :class:`SlotJoin`); learners are built once and shared. Every
    setting that a stream cannot honour raises :class:`~marlgrid.config.ConfigError` here,
    before anything is written."""
    specs = [(MAIN_STREAM, StreamConfig(cfg.env, cfg.roles, cfg.mixed, cfg.dropout))]
    specs += [
        (n, _inheriting(spec, cfg.env)) for n, spec in map(_named_stream, cfg.streams.items())
    ]
    streams: list[EnvStream] = []
    shared: dict[str, Any] = {}
    for name, spec in specs:
        where = "" if name == MAIN_STREAM else f"streams.{name}: "
        env = spec.env
        try:
            vec = make_env_source(env.id, env.num_envs, env.settings)
            roles = resolve_roles(spec.roles, vec.possible_agents, sorted(configs))
        except (ConfigError, TypeError) as exc:
            raise ConfigError(f"{where}{exc}") from None
        key = "" if name == MAIN_STREAM else f"streams.{name}."
        absence = plan_absence(key, spec.mixed, spec.dropout, roles, vec)
        stream = EnvStream(name, env.id, dict(env.settings), vec, roles, [], {}, absence=absence)
        streams.append(stream)
    _check_shared_spaces(streams)
    slots: dict[str, int] = {}  # learner -> slots it drives over every stream
    for stream in streams:
        for role in stream.roles.values():
            if role.kind == "learner":
                slots[role.learner] = slots.get(role.learner, 0) + stream.vec.num_envs
    validate_learners(configs, slots)
    for stream in streams:
        stream.groups, stream.scripted = build_groups(
            stream.roles, stream.vec, configs, cfg.seed, shared=shared
        )
        shared.update({g.name: g.learner for g in stream.groups if g.train})
        _check_teachers(stream)
    joins: list[SlotJoin] = []
    for name in slots:
        parts = [(s, g) for s in streams for g in s.groups if g.train and g.name == name]
        if len(parts) > 1:
            join = SlotJoin(shared[name], [s.vec.num_envs * len(g.agents) for s, g in parts])
            for part, (_, g) in enumerate(parts):
                g.recorder = join.recorder(part)
            joins.append(join)
    return streams, joins


def _inheriting(spec: StreamConfig, main: Any) -> StreamConfig:
    """``spec`` with the main env's shared agent settings (``env.settings.agent``: extras,
    view, observation kind) where the stream sets none of its own, so that a learner sees the
    same inputs in every stream (per-agent ``agents`` settings are not inherited: agent numbers
    differ between envs)."""
    shared = dict(main.settings or {}).get("agent")
    if shared is None or "agent" in (spec.env.settings or {}):
        return spec
    env = replace(spec.env, settings={**dict(spec.env.settings or {}), "agent": shared})
    return replace(spec, env=env)


def _check_shared_spaces(streams: list[EnvStream]) -> None:
    """A learner driven in several streams must see the same spaces in each."""
    seen: dict[str, tuple[str, str, str]] = {}  # learner -> (stream, observation, action space)
    for stream in streams:
        for agent, role in stream.roles.items():
            if role.kind != "learner":
                continue
            spaces = (
                str(stream.vec.single_observation_space(agent)),
                str(stream.vec.single_action_space(agent)),
            )
            first = seen.setdefault(role.learner, (stream.name, *spaces))
            if first[1:] != spaces:
                raise ConfigError(
                    f"streams.{stream.name}: learner {role.learner!r} drives {agent} with "
                    f"observations {spaces[0]} and actions {spaces[1]}, but in stream "
                    f"{first[0]!r} with {first[1]} and {first[2]}; a shared learner needs the "
                    f"same spaces in every stream: give streams.{stream.name}.env.settings.agent "
                    "the main env's agent settings (extras, view_size, observation), or leave it "
                    "out to inherit them"
                )


def _check_teachers(stream: EnvStream) -> None:
    """Every teacher a learner asks for is an agent of the stream's env whose observation and
    action spaces are the learner's own (its record and an imitation loss read the teacher's
    views and actions with the learner's network)."""
    vec, agents = stream.vec, stream.vec.possible_agents
    where = "" if stream.name == MAIN_STREAM else f"streams.{stream.name}: "
    for g in stream.groups:
        unknown = sorted(set(g.teachers) - set(agents))
        if unknown:
            raise ConfigError(
                f"{where}learner {g.name!r} asks for teachers {unknown}, which are not agents "
                f"of {stream.env_id}; its agents are {list(agents)}"
            )
        if not g.teachers or not g.agents:
            continue
        own = g.agents[0]
        for teacher in g.teachers:
            for kind, space in (
                ("observation", vec.single_observation_space),
                ("action", vec.single_action_space),
            ):
                if space(teacher) != space(own):
                    raise ConfigError(
                        f"{where}learner {g.name!r} asks for teacher {teacher!r}, whose {kind} "
                        f"space {space(teacher)} differs from that of its agent {own!r} "
                        f"({space(own)}); give both the same agent settings (view_size, "
                        "extras, observation, restrict_actions)"
                    )


def _named_stream(item: tuple[str, Any]) -> tuple[str, StreamConfig]:
    name, value = item
    return name, as_stream(value)
