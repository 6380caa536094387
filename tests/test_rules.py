"""Task rules on hand-made layouts, with the expected numbers written out."""

from __future__ import annotations

import math

import numpy as np
import pytest

from marlgrid.constants import (
    BALL,
    BOX,
    DONE,
    DOOR_CLOSED,
    DOOR_LOCKED,
    DOOR_OPEN,
    DROP,
    EMPTY,
    FORWARD,
    KEY,
    LEFT,
    PICKUP,
    PRESTIGE_COLOR_BASE,
    PRESTIGE_LEVELS,
    RIGHT,
    TOGGLE,
)
from tests.conftest import HandMadeEnv, place, step

EAST, SOUTH, WEST, NORTH = range(4)

# A corridor of goal-cycle tiles with ids 1, 2, 0 at x = 2, 4, 6 (y = 1).
CORRIDOR = [
    "#########",
    "#.1.2.0.#",
    "#########",
]
TILE_X = {0: 6, 1: 2, 2: 4}


def enter(env, tile: int, agent: int = 0) -> float:
    """Put the agent west of ``tile`` facing east, step forward, return its reward."""
    place(env, agent, TILE_X[tile] - 1, 1, EAST)
    actions = [DONE] * len(env.possible_agents)
    actions[agent] = FORWARD
    _, rewards, *_ = step(env, *actions)
    assert env.agent_positions[f"agent_{agent}"] == (TILE_X[tile], 1)
    return rewards[f"agent_{agent}"]


def cycle_env(**kwargs):
    kwargs.setdefault("penalty", 0.5)
    kwargs.setdefault("max_steps", 100)
    env = HandMadeEnv(CORRIDOR, **kwargs)
    env.reset(seed=0)
    return env


def test_goal_cycle_rewards_follow_the_order():
    env = cycle_env()
    rewards = [enter(env, t) for t in (1, 2, 0, 1, 1, 0, 2, 0)]
    # first tile +1; 2 follows 1: +1; 0 follows 2: +1; 1 follows 0: +1; 1 again: -0.5;
    # 0 after 1 is wrong: -0.5 (state stays 1); 2 follows 1: +1; 0 follows 2: +1.
    assert rewards == [1.0, 1.0, 1.0, 1.0, -0.5, -0.5, 1.0, 1.0]


def test_penalty_sign_does_not_matter():
    env = cycle_env(penalty=-1.5)
    assert [enter(env, t) for t in (0, 2)] == [1.0, -1.5]


def test_no_initial_reward():
    env = cycle_env(initial_reward=False)
    assert [enter(env, t) for t in (2, 0, 1)] == [0.0, 1.0, 1.0]


def test_reset_on_mistake_restarts_the_cycle_there():
    env = cycle_env(reset_on_mistake=True)
    # 0 (+1), then 2 is wrong (-0.5) and becomes the last tile, so 0 now follows: +1.
    assert [enter(env, t) for t in (0, 2, 0)] == [1.0, -0.5, 1.0]
    plain = cycle_env()
    assert [enter(plain, t) for t in (0, 2, 0)] == [1.0, -0.5, -0.5]


def test_streak_bonus():
    env = cycle_env(streak_bonus=0.1)
    rewards = [enter(env, t) for t in (0, 1, 2, 0, 2, 0)]
    # 1, 1.1, 1.2, 1.3; the wrong 2 pays -0.5 and resets the streak; 0 after 0 is wrong too.
    assert rewards == pytest.approx([1.0, 1.1, 1.2, 1.3, -0.5, -0.5])
    rewards = [enter(env, t) for t in (1, 2)]
    assert rewards == pytest.approx([1.1, 1.2])


def test_turning_or_standing_on_a_tile_pays_nothing():
    env = cycle_env()
    assert enter(env, 0) == 1.0
    for action in (LEFT, RIGHT, DONE, TOGGLE, PICKUP):
        _, rewards, *_ = step(env, action)
        assert rewards["agent_0"] == 0.0


def test_tiles_never_end_the_episode_and_reset_clears_the_cycle():
    env = cycle_env(max_steps=5)
    for t in (0, 1, 2, 0):
        enter(env, t)
    assert env.agents == ["agent_0"]
    _, _, term, trunc, _ = step(env, DONE)
    assert trunc == {"agent_0": True} and term == {"agent_0": False}
    env.reset(seed=0)
    assert enter(env, 2) == 1.0  # any tile starts a new cycle
    assert env.engine.cycle_last[0, 0] == 2


def test_cycle_state_survives_respawn():
    rows = ["#########", "#.1.2.0G#", "#########"]
    env = HandMadeEnv(rows, penalty=0.5, respawn=True, max_steps=100)
    env.reset(seed=0)
    assert enter(env, 1) == 1.0
    place(env, 0, 6, 1, EAST)
    _, rewards, term, _, _ = step(env, FORWARD)  # onto the goal: reward, respawn at once
    assert rewards["agent_0"] == 1.0 and term == {"agent_0": False}
    assert env.agent_positions["agent_0"] != (7, 1)
    assert env.engine.cycle_last[0, 0] == 1
    assert enter(env, 2) == 1.0  # 2 follows 1 after the respawn


def test_reward_decay_on_positive_rewards():
    env = cycle_env(reward_decay=True, max_steps=50)
    for _ in range(15):
        step(env, DONE)
    assert enter(env, 0) == pytest.approx(1 - 0.9 * 16 / 50)  # 0.712 at step 16 of 50
    assert enter(env, 2) == -0.5  # penalties are not decayed


def test_prestige_values_and_color():
    env = cycle_env(agent={"prestige_beta": 0.5, "prestige_scale": 2.0, "color": "prestige"})
    engine = env.engine
    expected = []
    p = 0.0
    for tile, r in ((0, 1.0), (1, 1.0)):
        assert enter(env, tile) == r
        p = 0.5 * p + r  # decay then add
        expected.append(p)
        assert engine.prestige[0, 0] == pytest.approx(p)
    assert expected == [1.0, 1.5]
    step(env, DONE)
    assert engine.prestige[0, 0] == pytest.approx(0.75)
    level = round(math.tanh(0.75 / 2.0) * (PRESTIGE_LEVELS - 1))
    agent_cell = env.grid_encoding()[tuple(env.agent_positions["agent_0"])]
    assert agent_cell.tolist() == [10, PRESTIGE_COLOR_BASE + level, engine.dirs[0, 0]]
    assert level == 5
    assert enter(env, 1) == -0.5  # 1 after 1: penalty zeroes prestige
    assert engine.prestige[0, 0] == 0.0
    agent_cell = env.grid_encoding()[tuple(env.agent_positions["agent_0"])]
    assert agent_cell[1] == PRESTIGE_COLOR_BASE  # pure red again


def test_goal_terminates_without_respawn_and_agent_leaves():
    rows = ["#####", "#..G#", "#####"]
    env = HandMadeEnv(rows, n_agents=2, max_steps=20)
    env.reset(seed=0)
    place(env, 0, 2, 1, EAST)
    place(env, 1, 1, 1, WEST)
    obs, rewards, term, trunc, _ = step(env, FORWARD, DONE)
    assert rewards == {"agent_0": 1.0, "agent_1": 0.0}
    assert term == {"agent_0": True, "agent_1": False}
    assert env.agents == ["agent_1"]
    # The terminal observation still shows the world: the goal it stands on is now its own cell.
    assert obs["agent_0"][3, 6].tolist() == [1, 0, 0] and obs["agent_0"][3, 5, 0] == 2
    obs, *_ = step(env, DONE, LEFT)
    assert set(obs) == {"agent_1"}
    assert not env.engine.sym[0, 0].any()  # out of play afterwards: all unseen


def test_lava_ends_the_agent_with_no_reward():
    env = HandMadeEnv(["#####", "#.L.#", "#####"], max_steps=20)
    env.reset(seed=0)
    place(env, 0, 1, 1, EAST)
    _, rewards, term, *_ = step(env, FORWARD)
    assert rewards == {"agent_0": 0.0} and term == {"agent_0": True}


def test_spawn_delay_holds_an_agent_out():
    rows = ["#######", "#.....#", "#.....#", "#######"]
    env = HandMadeEnv(rows, agents=[{}, {"spawn_delay": 2}], max_steps=20)
    obs, _ = env.reset(seed=0)
    assert env.agent_positions["agent_1"] is None and not obs["agent_1"].any()
    obs, *_ = step(env, DONE, FORWARD)
    assert env.agent_positions["agent_1"] is None and not obs["agent_1"].any()
    obs, *_ = step(env, DONE, FORWARD)  # placed at the end of its second step
    assert env.agent_positions["agent_1"] is not None and obs["agent_1"].any()
    assert env.agents == ["agent_0", "agent_1"]


@pytest.fixture
def arena():
    rows = ["#######", "#.....#", "#.....#", "#.....#", "#######"]
    env = HandMadeEnv(rows, n_agents=3, ghost_mode=False, max_steps=50)
    env.reset(seed=0)
    return env


def test_blocking_swap_fails(arena):
    place(arena, 0, 2, 1, EAST)
    place(arena, 1, 3, 1, WEST)
    place(arena, 2, 5, 3, NORTH)
    step(arena, FORWARD, FORWARD, DONE)
    assert arena.agent_positions["agent_0"] == (2, 1)
    assert arena.agent_positions["agent_1"] == (3, 1)


def test_blocking_chain_moves_together(arena):
    place(arena, 0, 1, 1, EAST)
    place(arena, 1, 2, 1, EAST)
    place(arena, 2, 3, 1, EAST)
    step(arena, FORWARD, FORWARD, FORWARD)
    assert [arena.agent_positions[f"agent_{i}"] for i in range(3)] == [(2, 1), (3, 1), (4, 1)]


def test_blocking_chain_stops_behind_a_standing_agent(arena):
    place(arena, 0, 1, 1, EAST)
    place(arena, 1, 2, 1, EAST)
    place(arena, 2, 3, 1, NORTH)  # faces a wall: stays
    step(arena, FORWARD, FORWARD, FORWARD)
    assert [arena.agent_positions[f"agent_{i}"] for i in range(3)] == [(1, 1), (2, 1), (3, 1)]


def test_blocking_two_into_one_cell_both_stay(arena):
    place(arena, 0, 1, 2, EAST)
    place(arena, 1, 3, 2, WEST)
    place(arena, 2, 5, 3, NORTH)
    step(arena, FORWARD, FORWARD, DONE)
    assert arena.agent_positions["agent_0"] == (1, 2)
    assert arena.agent_positions["agent_1"] == (3, 2)


def test_ghost_mode_lets_agents_share_a_cell():
    rows = ["#######", "#.....#", "#######"]
    env = HandMadeEnv(rows, n_agents=2, max_steps=50)
    env.reset(seed=0)
    place(env, 0, 1, 1, EAST)
    place(env, 1, 3, 1, WEST)
    step(env, FORWARD, FORWARD)
    assert env.agent_positions["agent_0"] == env.agent_positions["agent_1"] == (2, 1)


def _two_facing(rows, seed, **kwargs):
    env = HandMadeEnv(rows, n_agents=2, max_steps=50, **kwargs)
    env.reset(seed=seed)
    place(env, 0, 1, 1, EAST)
    place(env, 1, 3, 1, WEST)
    return env


def test_pickup_conflict_has_one_random_winner():
    winners = set()
    for seed in range(40):
        env = _two_facing(["#####", "#.B.#", "#####"], seed)
        step(env, PICKUP, PICKUP)
        carried = env.engine.carrying[0, :, 0].tolist()
        assert sorted(carried) == [0, BALL]  # exactly one carries the ball
        assert env.grid_encoding(with_agents=False)[2, 1, 0] == EMPTY
        winners.add(carried.index(BALL))
    assert winners == {0, 1}  # both can win


def test_toggle_conflict_toggles_once():
    for seed in range(10):
        env = _two_facing(["#####", "#.D.#", "#####"], seed)
        step(env, TOGGLE, TOGGLE)
        assert env.grid_encoding(with_agents=False)[2, 1, 2] == DOOR_OPEN


def test_doors_and_keys():
    rows = ["######", "#.X..#", "#K#..#", "######"]
    env = HandMadeEnv(rows, max_steps=50)
    env.reset(seed=0)
    grid = lambda: env.grid_encoding(with_agents=False)  # noqa: E731
    place(env, 0, 1, 1, EAST)
    step(env, TOGGLE)
    assert grid()[2, 1, 2] == DOOR_LOCKED  # no key: still locked
    step(env, FORWARD)
    assert env.agent_positions["agent_0"] == (1, 1)  # a locked door blocks
    assert not env.visible_cells("agent_0")[3, 1]  # and blocks sight
    place(env, 0, 1, 1, SOUTH)
    step(env, PICKUP)
    assert env.engine.carrying[0, 0].tolist() == [KEY, 4, 0]
    step(env, LEFT)  # face east again
    step(env, TOGGLE)
    assert grid()[2, 1, 2] == DOOR_OPEN
    step(env, FORWARD)
    assert env.agent_positions["agent_0"] == (2, 1)  # open door: passable
    step(env, TOGGLE)  # cannot close a door on itself... it faces (3, 1), empty: nothing
    assert grid()[2, 1, 2] == DOOR_OPEN
    step(env, FORWARD)
    step(env, LEFT)
    step(env, LEFT)  # now at (3, 1) facing west, towards the door
    step(env, TOGGLE)
    assert grid()[2, 1, 2] == DOOR_CLOSED
    assert not env.visible_cells("agent_0")[1, 1]  # closed doors block sight
    step(env, TOGGLE)
    assert grid()[2, 1, 2] == DOOR_OPEN


def test_wrong_key_color_does_not_unlock():
    env = HandMadeEnv(["#####", "#.X.#", "#####"], max_steps=50)
    env.reset(seed=0)
    place(env, 0, 1, 1, EAST)
    env.engine.carrying[0, 0] = (KEY, 2, 0)  # a blue key
    step(env, TOGGLE)
    assert env.grid_encoding(with_agents=False)[2, 1, 2] == DOOR_LOCKED


def test_door_cannot_close_on_an_agent():
    env = _two_facing(["#####", "#.O.#", "#####"], 0)
    place(env, 1, 2, 1, WEST)  # agent_1 stands in the open door
    step(env, TOGGLE, DONE)
    assert env.grid_encoding(with_agents=False)[2, 1, 2] == DOOR_OPEN


def test_box_pickup_drop_and_open():
    env = HandMadeEnv(["######", "#.x..#", "######"], max_steps=50)
    env.reset(seed=0)
    place(env, 0, 1, 1, EAST)
    step(env, PICKUP)
    assert env.engine.carrying[0, 0, 0] == BOX
    step(env, FORWARD)
    step(env, DROP)  # drop the box at (3, 1), keeping its ball
    assert env.grid_encoding(with_agents=False)[3, 1, 0] == BOX
    step(env, TOGGLE)  # opening the box leaves its ball
    assert env.grid_encoding(with_agents=False)[3, 1].tolist() == [BALL, 0, 0]
    step(env, PICKUP)
    step(env, RIGHT)
    step(env, DROP)  # (2, 2) is a wall: nothing happens
    assert env.engine.carrying[0, 0, 0] == BALL


def test_drop_onto_an_agent_fails():
    env = _two_facing(["#####", "#...#", "#####"], 0)
    place(env, 1, 2, 1, WEST)
    env.engine.carrying[0, 0] = (BALL, 1, 0)
    step(env, DROP, DONE)
    assert env.engine.carrying[0, 0, 0] == BALL


def test_carried_object_shows_in_own_cell():
    env = HandMadeEnv(["#####", "#.K.#", "#####"], agent={"view_size": 3}, max_steps=50)
    env.reset(seed=0)
    place(env, 0, 1, 1, EAST)
    assert env.engine.sym[0, 0, 1, 2].tolist() == [EMPTY, 0, 0]
    obs, *_ = step(env, PICKUP)
    assert obs["agent_0"][1, 2].tolist() == [KEY, 4, 0]


def test_other_agents_appear_with_color_and_direction():
    env = HandMadeEnv(
        ["#######", "#.....#", "#######"],
        agents=[{"color": "red"}, {"color": "blue"}],
        max_steps=50,
    )
    env.reset(seed=0)
    place(env, 0, 1, 1, EAST)
    place(env, 1, 3, 1, SOUTH)
    view = env.engine.sym[0, 0]
    # agent_0 faces east: two cells ahead is view (3, 4) for view size 7.
    assert view[3, 4].tolist() == [10, 2, SOUTH]


def test_hidden_types_read_as_empty():
    env = HandMadeEnv(CORRIDOR, agent={"hide": ("cycle_tile",)}, penalty=0.5, max_steps=50)
    env.reset(seed=0)
    place(env, 0, 1, 1, EAST)
    types = env.engine.sym[0, 0, ..., 0]
    assert not np.isin(types, [11]).any()
    assert enter(env, 1) == 1.0  # hiding changes the view only


def test_an_agent_that_never_entered_has_a_blank_final_view():
    rows = ["#######", "#.....#", "#.....#", "#######"]
    env = HandMadeEnv(rows, agents=[{}, {"spawn_delay": 10}], max_steps=2)
    env.reset(seed=0)
    step(env, DONE, DONE)
    obs, _, _, trunc, _ = step(env, DONE, DONE)
    assert trunc == {"agent_0": True, "agent_1": True}
    assert obs["agent_0"].any() and not obs["agent_1"].any()
