"""Bad input raises a clear error naming the value and what is allowed; the env stays usable."""

from __future__ import annotations

import re

import numpy as np
import pytest

import marlgrid
from marlgrid.base import ActionError
from marlgrid.config import ConfigError
from tests.conftest import HandMadeEnv, place, step

ENV_ID = "MarlGrid-GoalCycle-13x13-3Agents-v0"


@pytest.fixture
def env():
    env = marlgrid.make(ENV_ID)
    env.reset(seed=0)
    return env


def _still_usable(env):
    before = env.state().copy(), env.step_count
    return before


@pytest.mark.parametrize(
    ("actions", "message"),
    [
        (
            {"agent_0": 7, "agent_1": 0, "agent_2": 0},
            r"agent_0 must be an integer in \[0, 7\), got 7",
        ),
        ({"agent_0": -1, "agent_1": 0, "agent_2": 0}, r"in \[0, 7\), got -1"),
        ({"agent_0": 1.0, "agent_1": 0, "agent_2": 0}, r"agent_0 must be an integer, got 1.0"),
        ({"agent_0": "left", "agent_1": 0, "agent_2": 0}, r"got 'left'"),
        ({"agent_0": True, "agent_1": 0, "agent_2": 0}, r"got True"),
        ({"agent_0": 0, "agent_1": 0}, r"missing actions for \['agent_2'\]"),
        ({"agent_0": 0, "agent_1": 0, "agent_2": 0, "bob": 1}, r"unknown agent keys \[\"'bob'\"\]"),
        ({"agent_0": 0, "agent_1": 0, "agent_9": 0}, r"missing actions for \['agent_2'\]"),
    ],
)
def test_bad_actions(env, actions, message):
    state, steps = env.state().copy(), env.step_count
    with pytest.raises(ActionError, match=message):
        env.step(actions)
    np.testing.assert_array_equal(env.state(), state)  # nothing moved
    assert env.step_count == steps
    env.step({a: 2 for a in env.agents})  # and the env still works
    assert env.step_count == steps + 1


def test_numpy_integer_actions_are_accepted(env):
    env.step({a: np.int64(2) for a in env.agents})
    env.step({a: env.action_space(a).sample() for a in env.agents})
    assert env.step_count == 2


def test_restricted_actions():
    env = marlgrid.make(ENV_ID, agent={"restrict_actions": True})
    env.reset(seed=0)
    assert env.action_space("agent_0").n == 3
    with pytest.raises(ActionError, match=r"in \[0, 3\), got 3"):
        env.step({a: 3 for a in env.agents})


def test_action_for_a_finished_agent():
    env = HandMadeEnv(["#####", "#..G#", "#####"], n_agents=2, max_steps=20)
    env.reset(seed=0)
    place(env, 0, 2, 1, 0)
    step(env, 2, 6)
    assert env.agents == ["agent_1"]
    with pytest.raises(ActionError, match=r"actions for finished agents \['agent_0'\]"):
        env.step({"agent_0": 0, "agent_1": 0})
    env.step({"agent_1": 0})


def test_step_after_the_episode_ends():
    env = marlgrid.make("MarlGrid-Empty-5x5-v0", max_steps=1)
    env.reset(seed=0)
    env.step({"agent_0": 0})
    with pytest.raises(ActionError, match=r"call reset\(\)"):
        env.step({"agent_0": 0})
    env.reset()
    env.step({"agent_0": 0})


@pytest.mark.parametrize(
    ("overrides", "message"),
    [
        ({"agent": {"view_size": 6}}, r"view_size must be odd and >= 3, got 6"),
        ({"agent": {"view_size": 1}}, r"view_size must be >= 3, got 1"),
        ({"agent": {"view_offset": 4}}, r"view_offset must be in \[0, 3\].*got 4"),
        ({"agent": {"hide": ("goals",)}}, r"hide entry must be one of .*'goal'.*got 'goals'"),
        ({"agent": {"observation": "pixels"}}, r"observation must be one of .*'rgb'.*got 'pixels'"),
        ({"agent": {"color": "orange"}}, r"color must be one of .*'prestige'.*got 'orange'"),
        ({"agent": {"extras": ("speed",)}}, r"extras entry must be one of .*got 'speed'"),
        ({"agent": {"viewsize": 5}}, r"unknown agent setting\(s\) \['viewsize'\]"),
        ({"agent": {"prestige_beta": 1.5}}, r"prestige_beta must be in \[0, 1\], got 1.5"),
        (
            {"clutter_density": 0.99},
            r"clutter_density=0.99 .* need \d+ cells but the 13x13 map \(size=13\) has only 121",
        ),
        (
            {"n_clutter": 200},
            r"n_clutter \(200\) .* need 206 cells but the 13x13 map \(size=13\) has",
        ),
        ({"n_clutter": 5, "clutter_density": 0.1}, r"not both"),
        ({"n_goals": 1}, r"n_goals must be >= 2 for a cycle, got 1"),
        ({"max_steps": 0}, r"max_steps must be >= 1, got 0"),
        ({"respawn": "yes"}, r"respawn must be True or False, got 'yes'"),
        ({"penalti": 1.0}, r"unknown setting\(s\) \['penalti'\]"),
        ({"n_agents": 0, "agents": None}, r"n_agents must be >= 1, got 0"),
        ({"render_mode": "video"}, r"render_mode must be one of .*got 'video'"),
    ],
)
def test_bad_config(overrides, message):
    with pytest.raises(ConfigError, match=message):
        marlgrid.make(ENV_ID, **overrides)


def test_unknown_env_id_suggests_close_ones():
    with pytest.raises(ConfigError, match=r"unknown environment id 'MarlGrid-GoalCycle-13x13-v1'"):
        marlgrid.make("MarlGrid-GoalCycle-13x13-v1")
    with pytest.raises(ConfigError, match=r"Did you mean \['MarlGrid-GoalCycle-13x13-v0'"):
        marlgrid.make("MarlGrid-GoalCycle-13x13-v1")


def test_bad_seed_and_unknown_agent():
    env = marlgrid.make(ENV_ID)
    with pytest.raises(ConfigError, match=r"seed must be >= 0, got -3"):
        env.reset(seed=-3)
    with pytest.raises(KeyError, match=r"unknown agent 'agent_7'"):
        env.observation_space("agent_7")
    env.reset(seed=1)


@pytest.mark.parametrize("actions", [[2, 2, 2], np.array([2, 2, 2]), None, (2, 2, 2), 2, "agent_0"])
def test_step_needs_a_dict_of_actions(env, actions):
    state, steps = env.state().copy(), env.step_count
    with pytest.raises(ActionError, match=r"actions must be a dict mapping each live agent id"):
        env.step(actions)
    np.testing.assert_array_equal(env.state(), state)
    assert env.step_count == steps
    env.step({a: 2 for a in env.agents})


def test_nothing_reads_the_world_before_reset():
    from marlgrid.viewing.rendering import render_frame

    env = marlgrid.make(ENV_ID, render_mode="rgb_array")
    with pytest.raises(ActionError, match=r"step\(\) before reset\(\)"):
        env.step({a: 0 for a in env.possible_agents})
    for call, name in [
        (env.state, "state()"),
        (env.pprint, "pprint()"),
        (env.grid_encoding, "grid_encoding()"),
        (lambda: env.visibility("agent_0"), "visibility()"),
        (lambda: env.visible_cells("agent_0"), "visible_cells()"),
        (lambda: env.agent_positions, "agent_positions"),
        (lambda: env.agent_directions, "agent_directions"),
        (env.render, "render_frame()"),
        (lambda: render_frame(env), "render_frame()"),
    ]:
        with pytest.raises(RuntimeError, match=rf"{re.escape(name)} before reset\(\)"):
            call()
    env.reset(seed=0)
    assert env.pprint() and env.state().shape == (13, 13, 3)


def test_vector_step_before_reset_is_refused():
    vec = marlgrid.make_vec(ENV_ID, num_envs=2)
    actions = np.zeros((2, 3), dtype=np.int64)
    with pytest.raises(ActionError, match=r"step\(\) before reset\(\)"):
        vec.step(actions)
    assert (vec.engine.step_count == 0).all()  # nothing ran
    vec.reset(seed=0)
    vec.step(actions)
    assert (vec.engine.step_count == 1).all()


def test_a_failed_reset_leaves_the_env_refusing_to_step():
    env = marlgrid.make("MarlGrid-Empty-5x5-v0")
    env.reset(seed=0)
    env.step({"agent_0": 2})

    def broken(layout):
        raise ConfigError("no room")

    env.engine.generate = broken
    with pytest.raises(ConfigError, match="no room"):
        env.reset(seed=1)
    with pytest.raises(ActionError, match=r"before reset"):
        env.step({"agent_0": 0})
    with pytest.raises(RuntimeError, match=r"state\(\) before reset"):
        env.state()
