"""Per-agent configuration and validation of user-supplied settings.

Every setting is checked when an env is built, before anything runs: booleans must be ``bool``
(numpy's too), numbers finite and of the right kind (an int is fine where a float is expected,
a float is not an int), and lists of names real sequences (a bare string is not one). A bad value
raises :class:`ConfigError` naming the setting, the value and what is allowed.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from marlgrid.constants import COLOR_TO_IDX, HIDEABLE

OBSERVATION_MODES = ("symbolic", "onehot", "rgb")
EXTRAS = ("reward", "position", "direction", "action")
#: Agent settings that shape an agent's observation or action space (a trained policy plays
#: only under the values it was trained with).
SPACE_SETTINGS = (
    "view_size",
    "view_offset",
    "observation",
    "tile_size",
    "extras",
    "restrict_actions",
)
AGENT_COLORS = (*COLOR_TO_IDX, "prestige")
#: Default agent colors by agent index (cycled): MiniGrid's colors, with green (goals) and
#: yellow (goal-cycle tiles) last so that an agent on a goal or tile stays visible.
DEFAULT_AGENT_COLORS = ("red", "blue", "purple", "grey", "green", "yellow")
#: Upper bounds that keep arrays allocatable and counters inside the kernels' int64 / float32.
MAX_SIDE = 4096  # map width / height, cells
MAX_AGENTS = 1024
MAX_VIEW = 255  # view_size, cells
MAX_TILE = 128  # tile_size, pixels
MAX_PIXELS = 4096  # side of an RGB observation, pixels
MAX_COUNT = 2**31 - 1  # steps, delays, goal counts
MAX_REWARD = float(np.finfo(np.float32).max)  # rewards are float32


class ConfigError(ValueError):
    """An invalid setting; the message names the setting, the value and what is allowed."""


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
            ``direction``, ``action`` (its last env action, ``Discrete(n_actions + 1)``: the
            extra value ``n_actions`` means "none yet", at the start of an episode and until the
            agent first acts in play). With no extras the observation is the bare view array.
        restrict_actions: only left, right and forward (``Discrete(3)``).
        color: a fixed MiniGrid color name, ``prestige`` (red to blue as rewards come in), or
            ``None`` (default): by agent index, cycling :data:`DEFAULT_AGENT_COLORS` (agent 0 red,
            agent 1 blue, agent 2 purple, ...).
        prestige_beta: per-step decay of prestige, in [0, 1].
        prestige_scale: prestige at which ``tanh`` of the color blend reaches about 0.76 (> 0).
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
    color: str | None = None
    prestige_beta: float = 0.95
    prestige_scale: float = 2.0
    spawn_delay: int = 0
    see_through_walls: bool = False

    def __post_init__(self) -> None:
        def put(name: str, value: Any) -> None:
            object.__setattr__(self, name, value)

        put("view_size", check_int("view_size", self.view_size, low=3, high=MAX_VIEW))
        if self.view_size % 2 == 0:
            raise ConfigError(f"view_size must be odd and >= 3, got {self.view_size}")
        put("view_offset", check_int("view_offset", self.view_offset, low=0))
        if self.view_offset > self.view_size - 1 - self.view_size // 2:
            raise ConfigError(
                f"view_offset must be in [0, {self.view_size - 1 - self.view_size // 2}] for "
                f"view_size {self.view_size} (the agent must keep its half-view ahead), "
                f"got {self.view_offset}"
            )
        check_choice("observation", self.observation, OBSERVATION_MODES)
        put("tile_size", check_int("tile_size", self.tile_size, low=1, high=MAX_TILE))
        if self.observation == "rgb" and self.view_size * self.tile_size > MAX_PIXELS:
            raise ConfigError(
                f"tile_size x view_size must be <= {MAX_PIXELS} pixels for rgb observations, got "
                f"{self.tile_size} x {self.view_size} = {self.tile_size * self.view_size}"
            )
        put("hide", check_names("hide", self.hide, HIDEABLE))
        put("extras", check_names("extras", self.extras, EXTRAS))
        put("restrict_actions", check_bool("restrict_actions", self.restrict_actions))
        if self.color is not None:
            check_choice("color", self.color, AGENT_COLORS)
        put("prestige_beta", check_float("prestige_beta", self.prestige_beta, low=0.0, high=1.0))
        put(
            "prestige_scale",
            check_float("prestige_scale", self.prestige_scale, low=0.0, low_open=True),
        )
        put("spawn_delay", check_int("spawn_delay", self.spawn_delay, low=0, high=MAX_COUNT))
        put("see_through_walls", check_bool("see_through_walls", self.see_through_walls))

    def with_default_color(self, index: int) -> AgentConfig:
        """This config with ``color`` filled in for agent number ``index`` if it is ``None``."""
        if self.color is not None:
            return self
        color = DEFAULT_AGENT_COLORS[index % len(DEFAULT_AGENT_COLORS)]
        return dataclasses.replace(self, color=color)

    @classmethod
    def build(cls, shared: Mapping[str, Any] | None, own: Mapping[str, Any] | None) -> AgentConfig:
        """Merge the shared agent settings with one agent's own; unknown keys raise."""
        merged = {**(shared or {}), **(own or {})}
        allowed = {f.name for f in dataclasses.fields(cls)}
        unknown = sorted(set(merged) - allowed, key=repr)
        if unknown:
            raise ConfigError(f"unknown agent setting(s) {unknown}; allowed: {sorted(allowed)}")
        return cls(**merged)


def _settings_dict(name: str, value: Any) -> dict[str, Any] | None:
    """``value`` (an :class:`AgentConfig`, a mapping or None) as a plain dict of settings."""
    if value is None:
        return None
    if isinstance(value, AgentConfig):
        out = dataclasses.asdict(value)
        if value.color is None:
            del out["color"]  # keep the per-index default
        return out
    if isinstance(value, Mapping):
        return dict(value)
    raise ConfigError(
        f"{name} must be a dict of agent settings or an AgentConfig, got {value!r} "
        f"({type(value).__name__})"
    )


def build_agents(
    n_agents: int,
    agent: Mapping[str, Any] | AgentConfig | None,
    agents: Sequence[Mapping[str, Any] | AgentConfig] | Mapping[str, Any] | None,
) -> list[AgentConfig]:
    """Agent configs from a shared setting dict plus optional per-agent overrides.

    ``agents`` is a list of overrides, one per agent (its length sets the number of agents), or
    a mapping from agent ids (``agent_0``, ``agent_1``, ...) to the overrides of those agents
    only, ``n_agents`` setting the number: such mappings merge key by key (Hydra presets change
    one agent without restating the others). An agent's own settings win over the shared ones;
    its ``color: None`` gives it back the color of its index. Agents left without a ``color``
    get their default color by index.
    """
    shared = _settings_dict("agent", agent)
    n = check_int("n_agents", n_agents, low=1, high=MAX_AGENTS)
    if isinstance(agents, Mapping):
        agents = _overrides_by_index(n, agents)
    if agents is None:
        configs = [AgentConfig.build(shared, None) for _ in range(n)]
    else:
        if isinstance(agents, str | bytes) or not isinstance(agents, Sequence):
            raise ConfigError(
                f"agents must be a list of per-agent setting dicts, got {agents!r} "
                f"({type(agents).__name__}); or a dict from agent ids (agent_0, ...) to settings"
            )
        if not 1 <= len(agents) <= MAX_AGENTS:
            raise ConfigError(f"agents must list 1 to {MAX_AGENTS} agents, got {len(agents)}")
        configs = []
        for i, own in enumerate(agents):
            own_dict = _settings_dict(f"agents[{i}]", own)
            try:
                configs.append(AgentConfig.build(shared, own_dict))
            except ConfigError as err:
                raise ConfigError(f"agents[{i}]: {err}") from None
    return [cfg.with_default_color(i) for i, cfg in enumerate(configs)]


def _overrides_by_index(n: int, agents: Mapping[str, Any]) -> list[Any]:
    """A mapping ``{agent_<i>: settings}`` as a list of ``n`` overrides (None where unnamed)."""
    out: list[Any] = [None] * n
    for key, own in agents.items():
        index = key[len("agent_") :] if isinstance(key, str) and key.startswith("agent_") else ""
        if not index.isdigit() or int(index) >= n or str(int(index)) != index:
            raise ConfigError(
                f"agents must map agent ids agent_0 ... agent_{n - 1} (this env has {n} agents) "
                f"to their settings, got the key {key!r}"
            )
        out[int(index)] = {} if own is None else own
    return out


def space_difference(trained: AgentConfig, now: AgentConfig) -> dict[str, tuple[Any, Any]]:
    """The :data:`SPACE_SETTINGS` in which ``now`` differs from ``trained``, each as
    ``(trained value, value now)``."""
    return {
        name: (getattr(trained, name), getattr(now, name))
        for name in SPACE_SETTINGS
        if getattr(trained, name) != getattr(now, name)
    }


def check_bool(name: str, value: Any) -> bool:
    """``value`` as a bool; anything but ``True``/``False`` (numpy's included) raises."""
    if isinstance(value, bool | np.bool_):
        return bool(value)
    raise ConfigError(f"{name} must be True or False, got {value!r}")


def check_int(
    name: str, value: Any, low: int | None = None, high: int | None = None, why: str = ""
) -> int:
    """``value`` as an int within ``[low, high]``; bools, floats and strings raise. ``why``
    (e.g. ``"agent.seq_len - 1"``) says what the upper bound stands for, in the error."""
    if isinstance(value, bool | np.bool_) or not isinstance(value, int | np.integer):
        raise ConfigError(f"{name} must be an integer, got {value!r}")
    value = int(value)
    if low is not None and value < low:
        raise ConfigError(f"{name} must be >= {low}, got {value}")
    if high is not None and value > high:
        raise ConfigError(f"{name} must be <= {high}, got {value}{why and f' ({why})'}")
    return value


def check_float(
    name: str,
    value: Any,
    low: float | None = None,
    high: float | None = None,
    *,
    low_open: bool = False,
    high_open: bool = False,
) -> float:
    """``value`` (an int or a float) as a finite float within its bounds (open if told)."""
    if isinstance(value, bool | np.bool_) or not isinstance(
        value, int | float | np.integer | np.floating
    ):
        raise ConfigError(f"{name} must be a number, got {value!r}")
    try:
        out = float(value)
    except OverflowError:
        out = math.inf
    if not math.isfinite(out):
        raise ConfigError(f"{name} must be a finite number, got {value!r}")
    too_low = low is not None and (out < low or (low_open and out == low))
    too_high = high is not None and (out > high or (high_open and out == high))
    if too_low or too_high:
        if low is not None and high is not None:
            lo, hi = "(" if low_open else "[", ")" if high_open else "]"
            allowed = f"in {lo}{low:g}, {high:g}{hi}"
        elif low is not None:
            allowed = f"{'>' if low_open else '>='} {low:g}"
        else:
            allowed = f"{'<' if high_open else '<='} {high:g}"
        raise ConfigError(f"{name} must be {allowed}, got {value!r}")
    return out


def check_choice(name: str, value: Any, allowed: Sequence[str]) -> str:
    """``value`` if it is one of the strings ``allowed``."""
    if not isinstance(value, str) or value not in allowed:
        raise ConfigError(f"{name} must be one of {list(allowed)}, got {value!r}")
    return value


def check_registered_entry(
    name: str, entry: Any, fields: Sequence[str], pick: str, registry: Mapping[str, Any], what: str
) -> Any:
    """A config entry naming a registered component: ``entry`` must be a mapping with keys from
    ``fields`` whose ``pick`` key is in ``registry`` (a registered ``what``) and whose ``options``
    (if given) is a mapping. Returns ``entry[pick]``."""
    listed = ", ".join(fields)
    if not isinstance(entry, Mapping):
        raise ConfigError(f"{name} must be a mapping {{{listed}}}, got {entry!r}")
    unknown = sorted(set(entry) - set(fields))
    if unknown:
        raise ConfigError(f"{name} has unknown keys {unknown}; allowed: {listed}")
    value = entry.get(pick)
    if value not in registry:
        raise ConfigError(
            f"{name}.{pick} must be a registered {what}, one of {sorted(registry)}, got {value!r}"
        )
    if not isinstance(entry.get("options", {}), Mapping):
        raise ConfigError(f"{name}.options must be a mapping, got {entry['options']!r}")
    return value


def check_names(name: str, value: Any, allowed: Sequence[str]) -> tuple[str, ...]:
    """``value`` (a list or tuple of distinct names from ``allowed``) as a tuple."""
    if isinstance(value, str | bytes | Mapping) or not isinstance(
        value, Sequence | set | frozenset
    ):
        example = value if isinstance(value, str) and value in allowed else allowed[0]
        raise ConfigError(
            f"{name} must be a list of names from {list(allowed)}, got {value!r} "
            f"({type(value).__name__}); e.g. {name}=({example!r},)"
        )
    if isinstance(value, set | frozenset):
        value = sorted(value, key=repr)
    out = tuple(value)
    for entry in out:
        check_choice(f"{name} entry", entry, allowed)
    duplicates = sorted({e for e in out if out.count(e) > 1})
    if duplicates:
        raise ConfigError(f"{name} lists {duplicates} more than once, got {value!r}")
    return out
