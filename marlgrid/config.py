"""Per-agent configuration and validation of user-supplied settings."""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from marlgrid.constants import COLOR_TO_IDX, HIDEABLE

OBSERVATION_MODES = ("symbolic", "onehot", "rgb")
EXTRAS = ("reward", "position", "direction")
AGENT_COLORS = (*COLOR_TO_IDX, "prestige")


class ConfigError(ValueError):
    """An invalid setting; the message names the value and what is allowed."""


@dataclass(frozen=True)
class AgentConfig:
    """How one agent sees and acts.

    Attributes:
        view_size: side of the square egocentric view, in cells (odd, >= 3).
        view_offset: rows of the view behind the agent (0 = MiniGrid's view).
        observation: ``symbolic`` (uint8 type/color/state cells), ``onehot`` or ``rgb`` pixels.
        tile_size: pixels per cell in ``rgb`` mode.
        hide: object types this agent cannot see; they read as empty cells (e.g. ``("goal",)``).
        extras: extra Dict observation entries: ``reward`` (of its last step), ``position``,
            ``direction``. With no extras the observation is the bare view array.
        restrict_actions: only left, right and forward (``Discrete(3)``).
        color: a fixed MiniGrid color name, or ``prestige`` (red to blue as rewards come in).
        prestige_beta: per-step decay of prestige.
        prestige_scale: prestige at which ``tanh`` of the color blend reaches about 0.76.
        spawn_delay: the agent is held out of play for its first ``spawn_delay`` steps.
        see_through_walls: no occlusion.
    """

    view_size: int = 7
    view_offset: int = 0
    observation: str = "symbolic"
    tile_size: int = 8
    hide: tuple[str, ...] = ()
    extras: tuple[str, ...] = ()
    restrict_actions: bool = False
    color: str = "red"
    prestige_beta: float = 0.95
    prestige_scale: float = 2.0
    spawn_delay: int = 0
    see_through_walls: bool = False

    def __post_init__(self) -> None:
        object.__setattr__(self, "hide", tuple(self.hide))
        object.__setattr__(self, "extras", tuple(self.extras))
        check_int("view_size", self.view_size, low=3)
        if self.view_size % 2 == 0:
            raise ConfigError(f"view_size must be odd and >= 3, got {self.view_size}")
        check_int("view_offset", self.view_offset, low=0)
        if self.view_offset > self.view_size - 1 - self.view_size // 2:
            raise ConfigError(
                f"view_offset must be in [0, {self.view_size - 1 - self.view_size // 2}] for "
                f"view_size {self.view_size} (the agent must keep its half-view ahead), "
                f"got {self.view_offset}"
            )
        check_choice("observation", self.observation, OBSERVATION_MODES)
        check_int("tile_size", self.tile_size, low=1)
        for name in self.hide:
            check_choice("hide entry", name, HIDEABLE)
        for name in self.extras:
            check_choice("extras entry", name, EXTRAS)
        check_choice("color", self.color, AGENT_COLORS)
        if not 0.0 <= float(self.prestige_beta) <= 1.0:
            raise ConfigError(f"prestige_beta must be in [0, 1], got {self.prestige_beta}")
        if not float(self.prestige_scale) > 0.0:
            raise ConfigError(f"prestige_scale must be > 0, got {self.prestige_scale}")
        check_int("spawn_delay", self.spawn_delay, low=0)

    @classmethod
    def build(cls, shared: Mapping[str, Any] | None, own: Mapping[str, Any] | None) -> AgentConfig:
        """Merge the shared agent settings with one agent's own; unknown keys raise."""
        merged = {**(shared or {}), **(own or {})}
        allowed = {f.name for f in dataclasses.fields(cls)}
        unknown = sorted(set(merged) - allowed)
        if unknown:
            raise ConfigError(f"unknown agent setting(s) {unknown}; allowed: {sorted(allowed)}")
        return cls(**merged)


def build_agents(
    n_agents: int,
    agent: Mapping[str, Any] | AgentConfig | None,
    agents: Sequence[Mapping[str, Any] | AgentConfig] | None,
) -> list[AgentConfig]:
    """Agent configs from a shared setting dict plus optional per-agent overrides."""
    shared = dataclasses.asdict(agent) if isinstance(agent, AgentConfig) else agent
    if agents is None:
        check_int("n_agents", n_agents, low=1)
        return [AgentConfig.build(shared, None) for _ in range(n_agents)]
    if len(agents) == 0:
        raise ConfigError("agents must list at least one agent, got an empty list")
    out = []
    for own in agents:
        own_dict = dataclasses.asdict(own) if isinstance(own, AgentConfig) else own
        out.append(AgentConfig.build(shared, own_dict))
    return out


def check_int(name: str, value: Any, low: int | None = None, high: int | None = None) -> None:
    if isinstance(value, bool) or not isinstance(value, int | np.integer):
        raise ConfigError(f"{name} must be an integer, got {value!r}")
    if low is not None and value < low:
        raise ConfigError(f"{name} must be >= {low}, got {value}")
    if high is not None and value > high:
        raise ConfigError(f"{name} must be <= {high}, got {value}")


def check_float(name: str, value: Any, low: float | None = None) -> None:
    if isinstance(value, bool) or not isinstance(value, int | float | np.integer | np.floating):
        raise ConfigError(f"{name} must be a number, got {value!r}")
    if low is not None and value < low:
        raise ConfigError(f"{name} must be >= {low}, got {value}")


def check_choice(name: str, value: Any, allowed: Sequence[str]) -> None:
    if value not in allowed:
        raise ConfigError(f"{name} must be one of {list(allowed)}, got {value!r}")
