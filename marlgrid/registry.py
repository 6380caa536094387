"""Registered environment ids and the ``make`` / ``make_vec`` front doors."""

from __future__ import annotations

import difflib
import importlib
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from marlgrid.config import ConfigError


@dataclass(frozen=True)
class EnvSpec:
    """A registered configuration: an env class (``module:Class``) and its keyword arguments."""

    id: str
    entry_point: str
    kwargs: dict[str, Any] = field(default_factory=dict)

    def load(self):
        module, name = self.entry_point.split(":")
        return getattr(importlib.import_module(module), name)


REGISTRY: dict[str, EnvSpec] = {}


def register(id: str, entry_point: str, **kwargs: Any) -> None:
    """Register ``id`` here and in PettingZoo's ``parallel`` and ``aec`` registries.

    ``pettingzoo.make("parallel", id, **settings)`` then equals ``make(id, **settings)`` and
    ``pettingzoo.make("aec", id, **settings)`` equals ``make_aec(id, **settings)``.
    """
    if not isinstance(id, str) or not id:
        raise ConfigError(f"environment id must be a non-empty string, got {id!r}")
    if not isinstance(entry_point, str) or entry_point.count(":") != 1:
        raise ConfigError(f"entry_point must be 'module:Class', got {entry_point!r}")
    REGISTRY[id] = EnvSpec(id, entry_point, kwargs)
    try:
        import pettingzoo

        for api, factory in (("parallel", "make"), ("aec", "make_aec")):
            pettingzoo.register(
                api, id, entry_point=f"marlgrid.registry:{factory}", kwargs={"id": id}
            )
    except AttributeError:  # older PettingZoo without a registry
        pass


def spec(id: str) -> EnvSpec:
    """The registered spec of ``id``; an unknown id raises, naming the closest ones."""
    if not isinstance(id, str):
        raise ConfigError(
            f"environment id must be a string, got {id!r} ({type(id).__name__}); registered "
            f"ids: {sorted(REGISTRY)}"
        )
    if id not in REGISTRY:
        close = difflib.get_close_matches(id, REGISTRY, n=3)
        hint = f" Did you mean {close}?" if close else ""
        raise ConfigError(
            f"unknown environment id {id!r}.{hint} Registered ids: {sorted(REGISTRY)}"
        )
    return REGISTRY[id]


def make(id: str, **overrides: Any):
    """A PettingZoo ``ParallelEnv`` for a registered id; ``overrides`` replace its settings.

    Agent settings merge key by key: ``make(id, agent={"observation": "rgb"})`` keeps the
    registered view size and offset. See :func:`make_aec` for the AEC form.
    """
    s = spec(id)
    if "agent" in overrides and overrides["agent"] is not None:
        from marlgrid.config import AgentConfig

        if not isinstance(overrides["agent"], Mapping | AgentConfig):
            raise ConfigError(
                f"agent must be a dict of agent settings, got {overrides['agent']!r} "
                f"({type(overrides['agent']).__name__}); e.g. agent={{'observation': 'rgb'}}"
            )
    return s.load()(**merge(s.kwargs, overrides))


def make_aec(id: str, **overrides: Any):
    """The PettingZoo ``AECEnv`` form of :func:`make` (``parallel_to_aec`` of it)."""
    from pettingzoo.utils.conversions import parallel_to_aec

    return parallel_to_aec(make(id, **overrides))


def make_vec(id: str, num_envs: int, **overrides: Any):
    """A batched :class:`marlgrid.vector.VectorEnv` of ``num_envs`` copies of a registered id."""
    from marlgrid.config import check_int
    from marlgrid.vector import VectorEnv

    check_int("num_envs", num_envs, low=1)
    return VectorEnv(make(id, **overrides), num_envs)


#: Settings that replace one another: overriding one drops the registered other.
EXCLUSIVE = (frozenset({"n_clutter", "clutter_density"}),)


def merge(base: dict[str, Any], overrides: dict[str, Any]) -> dict[str, Any]:
    """``base`` updated with ``overrides``; the shared ``agent`` dict merges key by key."""
    out = dict(base)
    for group in EXCLUSIVE:
        if group & overrides.keys():
            for key in group - overrides.keys():
                out.pop(key, None)
    for key, value in overrides.items():
        if key == "agent" and isinstance(value, Mapping) and isinstance(out.get(key), Mapping):
            out[key] = {**out[key], **value}
        else:
            out[key] = value
    return out


#: The canonical goal-cycle task of the social-learning experiments.
GOAL_CYCLE_CANONICAL: dict[str, Any] = {
    "size": 13,
    "n_goals": 3,
    "clutter_density": 0.15,
    "penalty": 1.5,
    "max_steps": 250,
    "respawn": True,
    "ghost_mode": True,
    "agent": {"view_size": 7, "view_offset": 1},
}


#: The goal cycles of the 2020 study's public training scripts (its parallel scripts; see
#: ``experiments/results/following_pays/``): where a sloppy follower still earns more than
#: playing safe, so the reward offers a slope toward following.
GOAL_CYCLE_2020: dict[str, dict[str, Any]] = {
    "9x9": {
        **GOAL_CYCLE_CANONICAL,
        "size": 9,
        "clutter_density": 0.2,
        "penalty": 0.5,
        "max_steps": 150,
    },  # fmt: skip
    "13x13-Penalty0.25": {**GOAL_CYCLE_CANONICAL, "penalty": 0.25},
}


def _register_builtin() -> None:
    gc = "marlgrid.envs.goal_cycle:GoalCycleEnv"
    canon = GOAL_CYCLE_CANONICAL
    register("MarlGrid-GoalCycle-13x13-3Agents-v0", gc, n_agents=3, **canon)
    register("MarlGrid-GoalCycle-13x13-v0", gc, n_agents=1, **canon)
    for name, settings in GOAL_CYCLE_2020.items():
        register(f"MarlGrid-GoalCycle-{name}-3Agents-v0", gc, n_agents=3, **settings)
        register(f"MarlGrid-GoalCycle-{name}-v0", gc, n_agents=1, **settings)
    register(
        "MarlGrid-GoalCycle-7x7-v0",
        gc,
        size=7,
        n_agents=1,
        n_goals=2,
        n_clutter=0,
        penalty=0.5,
        max_steps=60,
        agent={"view_size": 5},
    )
    register(
        "MarlGrid-GoalCycle-13x13-4Goals-3Agents-v0", gc, n_agents=3, **{**canon, "n_goals": 4}
    )
    rooms = "marlgrid.envs.four_rooms:FourRoomsEnv"
    register("MarlGrid-FourRooms-v0", rooms, size=19, n_agents=1)
    register("MarlGrid-FourRooms-3Agents-v0", rooms, size=19, n_agents=3)
    maze = "marlgrid.envs.maze:MazeEnv"
    register("MarlGrid-Maze-13x13-v0", maze, size=13, n_agents=1)
    register("MarlGrid-Maze-13x13-3Agents-v0", maze, size=13, n_agents=3)
    empty = "marlgrid.envs.empty:EmptyEnv"
    register("MarlGrid-Empty-5x5-v0", empty, size=5, n_agents=1)
    register("MarlGrid-Empty-8x8-v0", empty, size=8, n_agents=1)
    register("MarlGrid-Empty-8x8-3Agents-v0", empty, size=8, n_agents=3)
    clut = "marlgrid.envs.cluttered:ClutteredEnv"
    register("MarlGrid-Cluttered-11x11-v0", clut, size=11, n_agents=1, clutter_density=0.15)
    register("MarlGrid-Cluttered-11x11-3Agents-v0", clut, size=11, n_agents=3, clutter_density=0.15)
    register("MarlGrid-Cluttered-15x15-3Agents-v0", clut, size=15, n_agents=3, clutter_density=0.15)
    dk = "marlgrid.envs.door_key:DoorKeyEnv"
    register("MarlGrid-DoorKey-8x8-v0", dk, size=8, n_agents=1)
    register("MarlGrid-DoorKey-8x8-2Agents-v0", dk, size=8, n_agents=2)
    memory = "marlgrid.envs.memory:MemoryEnv"
    for size in (7, 9, 11, 13, 17):
        register(f"MarlGrid-MemoryS{size}-v0", memory, size=size, n_agents=1)
    for size in (13, 17):
        register(
            f"MarlGrid-MemoryS{size}Random-v0", memory, size=size, n_agents=1, random_length=True
        )
    for size in (7, 11):  # T-mazes: the cue alone names the side; seen once, from the start cell
        register(
            f"MarlGrid-MemoryS{size}TMaze-v0",
            memory,
            size=size,
            n_agents=1,
            shuffle_ends=False,
            start="cue",
            agent={"view_size": 3},
        )


_register_builtin()
