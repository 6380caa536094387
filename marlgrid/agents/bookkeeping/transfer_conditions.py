"""The named transfer conditions and the partners of a condition as the command line writes
them (:mod:`marlgrid.agents.bookkeeping.transfer` plays them)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from marlgrid.config import ConfigError
from marlgrid.policies import POLICIES, policy_class
from marlgrid.registry import spec

ALONE = ("none", "alone")


@dataclass(frozen=True)
class TransferCondition:
    """One pairing: the saved agent in ``target`` beside ``partners`` (agent id -> policy)."""

    name: str
    target: str
    partners: Mapping[str, str] = field(default_factory=dict)
    settings: Mapping[str, Any] = field(default_factory=dict)


_GC4 = "MarlGrid-GoalCycle-13x13-4Goals-3Agents-v0"
_ROOMS, _MAZE = "MarlGrid-FourRooms-3Agents-v0", "MarlGrid-Maze-13x13-3Agents-v0"
_TWO = ("agent_1", "agent_2")
#: named condition sets: ``social_transfer`` is the social-learning paper's transfer suite (the
#: 4-tile goal cycle beside 4-tile oracles, FourRooms and Maze beside goal_seeker experts, each
#: also alone)
CONDITIONS: dict[str, tuple[TransferCondition, ...]] = {
    "social_transfer": (
        TransferCondition("goal_cycle_4/oracle", _GC4, dict.fromkeys(_TWO, "oracle")),
        TransferCondition("goal_cycle_4/alone", _GC4),
        TransferCondition("four_rooms/goal_seeker", _ROOMS, dict.fromkeys(_TWO, "goal_seeker")),
        TransferCondition("four_rooms/alone", _ROOMS),
        TransferCondition("maze/goal_seeker", _MAZE, dict.fromkeys(_TWO, "goal_seeker")),
        TransferCondition("maze/alone", _MAZE),
    )
}


def partners_from_text(target_env_id: str, text: str, role: str = "agent_0") -> dict[str, str]:
    """Partners written as on the command line: ``none`` (alone), one policy name (every other
    agent of the registered env plays it) or comma-separated names (``agent_1, agent_2, ...`` in
    order, ``role`` skipped)."""
    names = [t.strip() for t in text.split(",") if t.strip()]
    if not names:
        raise ConfigError(f"partners must name policies or 'none', got {text!r}")
    if len(names) == 1 and names[0] in ALONE:
        return {}
    unknown = sorted(set(names) - set(POLICIES))
    if unknown:
        raise ConfigError(
            f"partners {unknown} are not scripted policies; choose from {sorted(POLICIES)} or "
            f"{' / '.join(ALONE)}"
        )
    registered = spec(target_env_id)
    n_agents = int(registered.kwargs.get("n_agents", 1))
    goal_cycle = "n_goals" in registered.kwargs or "goal_cycle" in str(registered.entry_point)
    tile_only = sorted(n for n in set(names) if policy_class(n).needs_goal_cycle)
    if tile_only and not goal_cycle:
        raise ConfigError(
            f"partners {tile_only} play goal-cycle tiles, which {target_env_id} has none of; "
            "choose partners that play any env (e.g. goal_seeker, follower, random)"
        )
    if len(names) == 1:
        others = [f"agent_{j}" for j in range(n_agents) if f"agent_{j}" != role]
        if not others:
            raise ConfigError(
                f"partners={text!r}: {target_env_id} has one agent, so there is no partner to "
                "give a policy; use partners=none, or name one policy per partner"
            )
        return dict.fromkeys(others, names[0])
    if len(names) > n_agents - 1:
        raise ConfigError(
            f"partners={text!r} names {len(names)} partners, but {target_env_id} has "
            f"{n_agents} agents ({n_agents - 1} beside {role}); name at most {n_agents - 1}, "
            "or pick an env registered with more agents"
        )
    others = [f"agent_{j}" for j in range(len(names) + 1) if f"agent_{j}" != role][: len(names)]
    return dict(zip(others, names, strict=True))
