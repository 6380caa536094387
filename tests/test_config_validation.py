"""Every setting is checked up front: a bad value raises a ConfigError naming the setting.

The regression cases of issue 8 first, then property tests: for every ``AgentConfig`` field and
every env setting, a random value either raises a ``ConfigError`` that names the setting, or is
valid and the env resets and steps with observations inside their spaces.
"""

from __future__ import annotations

import dataclasses
import inspect
import math
import os

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import marlgrid
from marlgrid.base import MarlGridEnv
from marlgrid.config import EXTRAS, AgentConfig, ConfigError
from marlgrid.constants import HIDEABLE
from marlgrid.core.rules import Rules
from marlgrid.registry import spec

ENV_ID = "MarlGrid-GoalCycle-13x13-3Agents-v0"


@pytest.mark.parametrize(
    ("overrides", "message"),
    [
        ({"agent": {"restrict_actions": "yes"}}, r"restrict_actions must be True or False"),
        ({"agent": {"restrict_actions": None}}, r"restrict_actions must be True or False"),
        ({"agent": {"restrict_actions": 1}}, r"restrict_actions must be True or False, got 1"),
        ({"agent": {"see_through_walls": "no"}}, r"see_through_walls must be True or False"),
        ({"agent": {"see_through_walls": None}}, r"see_through_walls must be True or False"),
        ({"agent": {"see_through_walls": 0}}, r"see_through_walls must be True or False"),
        ({"agent": {"prestige_beta": "0.5"}}, r"prestige_beta must be a number, got '0.5'"),
        ({"penalty": math.nan}, r"penalty must be a finite number, got nan"),
        ({"penalty": math.inf}, r"penalty must be a finite number, got inf"),
        ({"clutter_density": math.nan}, r"clutter_density must be a finite number, got nan"),
        ({"agent": {"prestige_scale": math.inf}}, r"prestige_scale must be a finite number"),
        ({"agent": {"prestige_scale": 0}}, r"prestige_scale must be > 0, got 0"),
        ({"agent": {"hide": "goal"}}, r"hide must be a list of names .* got 'goal' \(str\)"),
        ({"agent": {"hide": None}}, r"hide must be a list of names .* got None"),
        ({"agent": {"extras": None}}, r"extras must be a list of names .* got None"),
        ({"agent": {"extras": ("reward", "reward")}}, r"extras lists \['reward'\] more than once"),
        ({"agent": "rgb"}, r"agent must be a dict of agent settings, got 'rgb'"),
        ({"agents": "rgb"}, r"agents must be a list of per-agent setting dicts, got 'rgb'"),
        (
            {"agents": [{}, 3]},
            r"agents\[1\] must be a dict of agent settings or an AgentConfig, got 3",
        ),
        ({"agents": [{}, {"view_size": 4}]}, r"agents\[1\]: view_size must be odd"),
        ({"size": 13.0}, r"size must be an integer, got 13.0"),
        ({"size": 10**30}, r"size must be <= 4096"),
        ({"max_steps": 10**30}, r"max_steps must be <= 2147483647"),
        ({"max_cycles": "9"}, r"max_cycles must be an integer, got '9'"),
        ({"n_agents": 10**30}, r"n_agents must be <= 1024"),
        ({"agent": {"spawn_delay": 10**30}}, r"spawn_delay must be <= 2147483647"),
        ({"agent": {"view_size": 10**9 + 1}}, r"view_size must be <= 255"),
        (
            {"agent": {"observation": "rgb", "tile_size": 100, "view_size": 41}},
            r"tile_size x view_size",
        ),
        ({"goal_reward": 1e300}, r"goal_reward must be in \[-3.40282e\+38, 3.40282e\+38\]"),
        ({"ghost_mode": np.array([True])}, r"ghost_mode must be True or False"),
        ({"reward": "1"}, r"reward must be a number, got '1'"),
        ({"cycle_reward": 2.0}, r"cycle_reward from reward: set reward instead"),
        ({"width": 9}, r"GoalCycleEnv is square: set size, not \['width'\]"),
        ({"n_goals": 2.0}, r"n_goals must be an integer, got 2.0"),
        ({"n_clutter": -1}, r"n_clutter must be >= 0, got -1"),
        ({"render_mode": ["human"]}, r"render_mode must be one of .*got \['human'\]"),
    ],
)
def test_bad_setting_raises_a_config_error_naming_it(overrides, message):
    with pytest.raises(ConfigError, match=message):
        marlgrid.make(ENV_ID, **overrides)


def test_make_with_a_non_string_id():
    with pytest.raises(ConfigError, match=r"environment id must be a string, got None"):
        marlgrid.make(None)
    with pytest.raises(ConfigError, match=r"environment id must be a string, got 3"):
        marlgrid.make_vec(3, 2)


def test_hide_names_the_whole_entry():
    with pytest.raises(ConfigError, match=r"hide entry must be one of .*got 'goals'"):
        AgentConfig(hide=["goals"])
    with pytest.raises(ConfigError) as err:
        AgentConfig(hide="goal")
    assert "got 'g'" not in str(err.value)
    assert "hide=('goal',)" in str(err.value)  # and it says what to write instead


def test_values_are_stored_with_their_python_types():
    cfg = AgentConfig(
        view_size=np.int64(5),
        prestige_beta=1,
        prestige_scale=np.float32(3.0),
        restrict_actions=np.bool_(True),
        hide=["goal"],
        extras={"reward"},
    )
    assert type(cfg.view_size) is int and cfg.view_size == 5
    assert type(cfg.prestige_beta) is float and cfg.prestige_beta == 1.0
    assert type(cfg.prestige_scale) is float
    assert cfg.restrict_actions is True
    assert cfg.hide == ("goal",) and cfg.extras == ("reward",)
    rules = Rules(respawn=np.bool_(True), penalty=2, max_steps=np.int32(9))
    assert rules.respawn is True
    assert type(rules.penalty) is float and type(rules.max_steps) is int


def test_every_agent_delayed_past_the_episode_is_refused():
    with pytest.raises(ConfigError, match=r"spawn_delay of every agent \(\[50, 60\]\) is >= "):
        marlgrid.make(
            "MarlGrid-Empty-8x8-v0",
            max_steps=50,
            agents=[{"spawn_delay": 50}, {}],
            agent={"spawn_delay": 60},
        )
    # One agent that plays is enough.
    env = marlgrid.make("MarlGrid-Empty-8x8-v0", max_steps=50, agents=[{"spawn_delay": 49}, {}])
    env.reset(seed=0)


# -- property tests ---------------------------------------------------------------------------

_NAMES = st.sampled_from([*HIDEABLE, *EXTRAS, "goals", "", "g"])
_SMALL = st.one_of(st.integers(-1, 9), st.sampled_from(["red", "blue", None]))
#: Values of every kind a user might pass: valid ones for some field, invalid for most.
VALUES = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(-4, 40),
    st.sampled_from([10**30, -(10**30), 2**63, 0, 1, 3, 5, 7]),
    st.floats(allow_nan=True, allow_infinity=True),
    st.sampled_from([math.nan, math.inf, -math.inf, 1e308, 0.5, 0.15, 1.0, -1.0, 2.0]),
    st.sampled_from(
        ["symbolic", "onehot", "rgb", "red", "blue", "prestige", "rgb_array", "0.5", "True", ""]
    ),
    st.text(max_size=6),
    st.lists(_NAMES, max_size=3),
    st.tuples(_NAMES),
    st.frozensets(_NAMES, max_size=2),
    st.dictionaries(st.text(max_size=4), st.integers(), max_size=2),
    st.lists(st.dictionaries(st.sampled_from(["view_size", "color", "x"]), _SMALL, max_size=1)),
    st.sampled_from(
        [np.int64(3), np.float64(0.5), np.bool_(True), np.array([1, 2]), np.str_("red"), object()]
    ),
)

AGENT_FIELDS = [f.name for f in dataclasses.fields(AgentConfig)]
#: One registered id per env class.
ENV_IDS = [
    "MarlGrid-Empty-5x5-v0",
    "MarlGrid-GoalCycle-7x7-v0",
    "MarlGrid-Cluttered-11x11-v0",
    "MarlGrid-DoorKey-8x8-v0",
    "MarlGrid-FourRooms-v0",
    "MarlGrid-Maze-13x13-v0",
]
BASE_SETTINGS = ["n_agents", "agent", "agents", "max_cycles", "render_mode", "width", "height"]


def env_settings(env_id: str) -> list[str]:
    """Every setting an env takes: its own, the task rules and the base class's."""
    cls = spec(env_id).load()
    own = [
        name
        for name, p in inspect.signature(cls.__init__).parameters.items()
        if name != "self" and p.kind is not p.VAR_KEYWORD
    ]
    return sorted({*own, *Rules.__dataclass_fields__, *BASE_SETTINGS})


ENV_FIELDS = [(env_id, name) for env_id in ENV_IDS for name in env_settings(env_id)]


def _steps_inside_spaces(env: MarlGridEnv) -> None:
    obs, _ = env.reset(seed=0)
    rng = np.random.default_rng(0)
    for _ in range(3):
        for agent, o in obs.items():
            assert env.observation_space(agent).contains(o), agent
        if not env.agents:
            break
        actions = {a: int(rng.integers(env.action_space(a).n)) for a in env.agents}
        obs, *_ = env.step(actions)


def _names_field(err: ConfigError, field: str) -> bool:
    return field in str(err)


def _assert_typed(obj: object) -> None:
    """Every field of an accepted config holds a value of its declared kind."""
    for f in dataclasses.fields(obj):
        value = getattr(obj, f.name)
        kind = f.type if isinstance(f.type, str) else f.type.__name__
        if kind == "bool":
            assert type(value) is bool, (f.name, value)
        elif kind == "int":
            assert type(value) is int, (f.name, value)
        elif kind == "float":
            assert type(value) is float and math.isfinite(value), (f.name, value)
        elif kind.startswith("tuple"):
            assert type(value) is tuple and all(isinstance(v, str) for v in value), (f.name, value)
        else:  # the color and observation names
            assert isinstance(value, str), (f.name, value)


def _build_and_step(env_id: str, field: str, overrides: dict) -> None:
    try:
        env = marlgrid.make(env_id, **overrides)
    except ConfigError as err:
        assert _names_field(err, field), f"{field}={overrides!r}: {err}"
        return
    _assert_typed(env.rules)
    for cfg in env.agent_configs:
        _assert_typed(cfg)
    try:
        _steps_inside_spaces(env)
    except ConfigError as err:  # layouts that cannot be generated say why at reset
        assert _names_field(err, field), f"{field}={overrides!r}: {err}"


PROPERTY = settings(
    max_examples=int(os.environ.get("MARLGRID_PROPERTY_EXAMPLES", "300")),
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow],
)


@PROPERTY
@given(field=st.sampled_from(AGENT_FIELDS), value=VALUES, per_agent=st.booleans())
def test_agent_fields_are_validated_or_work(field, value, per_agent):
    try:
        AgentConfig(**{field: value})
    except ConfigError as err:
        assert _names_field(err, field), f"{field}={value!r}: {err}"
    overrides = {"agents": [{field: value}, {}]} if per_agent else {"agent": {field: value}}
    _build_and_step("MarlGrid-GoalCycle-7x7-v0", field, overrides)


@PROPERTY
@given(target=st.sampled_from(ENV_FIELDS), value=VALUES)
def test_env_settings_are_validated_or_work(target, value):
    env_id, field = target
    _build_and_step(env_id, field, {field: value})
