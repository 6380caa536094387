"""The learner protocol: what the rollout loop, the trainer, roles and checkpoints know of an
algorithm, and the registry that maps algorithm names to their config and learner classes.

A learner acts for a batch of *slots* (one slot per (env, agent) pair it drives), owns its
storage (an on-policy rollout buffer, a sequence replay...), records each step it took, says when
it is ready to update, updates, and saves and loads its whole state with its config. The rollout
loop (:mod:`marlgrid.agents.training.rollout`) and the trainer
(:mod:`marlgrid.agents.training.trainer`) call only
the methods below; a new algorithm is one module with a config dataclass (with an ``algo`` field
naming it) and a learner class, plus one :func:`register_learner` call.

Conventions shared by every learner:

- ``resets[b]`` marks that slot ``b``'s observation starts an episode; the memory core resets that
  slot's state itself (callers never zero a state).
- Actions are indices ``0..n-1``; add ``action_start`` before passing them to an env.
- ``act`` runs without gradients (``torch.inference_mode``).

Optional members the loop reads when a learner has them:

- ``teachers``: agent ids whose actions and observations the learner wants in each
  :class:`Step` (:attr:`Step.teachers`), e.g. the experts a behaviour-cloning learner imitates.
- ``acting_state(state)`` (a static method): the part of :meth:`Learner.state_dict` that acting
  needs, for exported policies (default: all but ``"optimizer"``).

A learner that reads a teacher's actions, in full::

    class Imitator(PPO):
        teachers = ("agent_1",)  # the expert's agent id

        def record(self, step: Step) -> None:
            expert = step.teachers["agent_1"]
            self.expert_actions = expert.actions[expert.valid] - self.action_start
            super().record(step)
"""

from __future__ import annotations

import dataclasses
import importlib
from collections.abc import Callable, Mapping
from types import MappingProxyType
from typing import Any, NamedTuple, Protocol, runtime_checkable

import torch
from gymnasium import spaces
from torch import Tensor

from marlgrid.agents.arrays import Obs


class Action(NamedTuple):
    """What :meth:`Learner.act` returns for a batch of slots."""

    actions: Tensor  #: ``(B,)`` action indices
    state: Tensor  #: ``(B, S)`` memory state after the step
    extras: dict[str, Tensor]  #: per-slot values the learner wants back in :meth:`Learner.record`


class Teacher(NamedTuple):
    """Another agent's step, as a learner that asks for it sees it (:attr:`Step.teachers`).

    Per slot of the learner: the teacher agent of the same env, so every slot of one env holds
    the same values. ``actions`` are the env actions the teacher took (add nothing: they are
    the env's own values, subtract the learner's ``action_start`` for an index); ``obs`` is the
    observation it acted on; ``valid`` is false where the teacher was out of play.
    """

    actions: Tensor  #: ``(B,)`` env actions
    obs: Obs  #: ``(B, ...)`` the teacher's observations before the step
    valid: Tensor  #: ``(B,)`` the teacher was in play


#: an empty, read-only ``Step.teachers``
NO_TEACHERS: Mapping[str, Teacher] = MappingProxyType({})


class Step(NamedTuple):
    """One step of every slot, as :meth:`Learner.record` receives it.

    ``obs``, ``resets``, ``state`` (the state used at the step, after its reset), ``actions`` and
    ``extras`` are what :meth:`Learner.act` saw and returned; ``rewards``, ``terminations`` and
    ``truncations`` come from the env. ``valid`` is false for slots whose agent was out of play
    (their step must not enter a loss). ``next_obs`` starts the next step (already a new episode
    where ``terminations | truncations``); ``next_state`` is the state after the step (before any
    reset). Where a slot was truncated but not terminated, ``final_ids`` lists it and
    ``final_obs`` holds its true last observation (for bootstrapping). ``teachers`` holds the
    steps of the other agents the learner asked for (agent id -> :class:`Teacher`), empty
    unless it asked. ``respawned`` marks slots whose agent's life ended in the step under a
    respawn rule (its next view is of a new life; None where the env does not say).
    """

    obs: Obs
    resets: Tensor
    state: Tensor
    actions: Tensor
    extras: dict[str, Tensor]
    rewards: Tensor
    terminations: Tensor
    truncations: Tensor
    valid: Tensor
    next_obs: Obs
    next_state: Tensor
    final_ids: Tensor
    final_obs: Obs | None
    teachers: Mapping[str, Teacher] = NO_TEACHERS
    respawned: Tensor | None = None


@runtime_checkable
class Learner(Protocol):
    """The methods every algorithm implements (see the module docstring)."""

    cfg: Any  #: the algorithm's config dataclass, saved in every checkpoint
    device: torch.device
    action_start: int  #: add to action indices before passing them to an env

    def initial_state(self, num_slots: int) -> Tensor:
        """Memory state ``(num_slots, S)`` of slots that have seen nothing yet."""
        ...

    def reset_state(self, state: Tensor, resets: Tensor) -> Tensor:
        """``state`` with the slots where ``resets`` is set reset (by the memory core)."""
        ...

    def act(self, obs: Obs, state: Tensor, resets: Tensor, explore: bool = True) -> Action:
        """Actions for a batch of slots: explore (sample, epsilon-greedy...) or greedy."""
        ...

    def begin(self, num_slots: int) -> None:
        """Create the storage for ``num_slots`` slots (called once, before the first record)."""
        ...

    def record(self, step: Step) -> None:
        """Store one step of every slot."""
        ...

    def ready(self) -> bool:
        """True when :meth:`update` should run now."""
        ...

    def update(self, progress: float) -> dict[str, float]:
        """Learn from the storage; ``progress`` in [0, 1] drives schedules. Returns metrics."""
        ...

    def state_dict(self) -> dict[str, Any]:
        """Everything needed to continue: networks, optimizer, counters, RNG, config."""
        ...

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        """Restore what :meth:`state_dict` saved."""
        ...


def resume_note(learner: Learner) -> str | None:
    """What a learner restored from a checkpoint wants said (optional: a learner may define
    ``resume_note()``, e.g. a replay learner whose checkpoint held no replay)."""
    note = getattr(learner, "resume_note", None)
    return note() if callable(note) else None


class LearnerSpec(NamedTuple):
    """A registry entry: the config dataclass and the class that builds a learner from it."""

    config: type
    build: Callable[..., Learner]


#: algorithm name -> spec; ``register_learner`` adds one
LEARNERS: dict[str, LearnerSpec] = {}


def register_learner(name: str, config: type, build: Callable[..., Learner]) -> None:
    """Make algorithm ``name`` available to configs, roles and checkpoints."""
    LEARNERS[name] = LearnerSpec(config, build)


def _spec(algo: str) -> LearnerSpec:
    load_builtin_learners()
    if algo not in LEARNERS:
        raise ValueError(f"unknown learner algorithm {algo!r}; registered: {sorted(LEARNERS)}")
    return LEARNERS[algo]


#: modules whose import registers the built-in algorithms
BUILTIN_MODULES = (
    "marlgrid.agents.algorithms.ppo",
    "marlgrid.agents.algorithms.drqn",
    "marlgrid.agents.algorithms.bc",
)


def load_builtin_learners() -> None:
    """Import the modules that register the built-in algorithms."""
    for name in BUILTIN_MODULES:
        importlib.import_module(name)


#: the algorithm a run trains when its config names none (``TrainConfig.agent = None``)
DEFAULT_ALGO = "ppo"


def default_config() -> Any:
    """A new config of :data:`DEFAULT_ALGO` at its defaults (``PPOConfig()``)."""
    return _spec(DEFAULT_ALGO).config()


def build_learner(
    cfg: Any, observation_space: spaces.Space, action_space: spaces.Space, seed: int = 0
) -> Learner:
    """A new learner for ``cfg`` (a registered config dataclass, or its ``asdict`` form)."""
    if isinstance(cfg, Mapping):
        cfg = config_from_dict(cfg)
    return _spec(cfg.algo).build(observation_space, action_space, cfg, seed=seed)


def config_from_dict(data: Mapping[str, Any]) -> Any:
    """Rebuild a config dataclass from its ``asdict`` form (as saved in checkpoints)."""
    algo = data.get("algo")
    if algo is None:
        raise ValueError(f"a learner config needs an 'algo' entry; got keys {sorted(data)}")
    return _from_dict(_spec(str(algo)).config, data)


def _from_dict(cls: type, data: Mapping[str, Any]) -> Any:
    """Nested dataclasses from nested dicts; tuples restored where the field is a tuple."""
    fields = {f.name: f for f in dataclasses.fields(cls)}
    unknown = sorted(set(data) - set(fields))
    if unknown:
        raise ValueError(f"{cls.__name__} has no fields {unknown}; its fields are {sorted(fields)}")
    kwargs: dict[str, Any] = {}
    for name, value in data.items():
        default = cls.__dataclass_fields__[name].default_factory  # type: ignore[attr-defined]
        sub = default() if callable(default) else cls.__dataclass_fields__[name].default  # type: ignore[attr-defined]
        if dataclasses.is_dataclass(sub) and isinstance(value, Mapping):
            value = _from_dict(type(sub), value)
        elif isinstance(sub, tuple) and isinstance(value, list | tuple):
            value = tuple(value)
        kwargs[name] = value
    return cls(**kwargs)
