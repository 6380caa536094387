"""Property-based tests of engine invariants over random layouts and action sequences."""

from __future__ import annotations

import numpy as np
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import marlgrid
from marlgrid.constants import CAN_OVERLAP, DOOR, DOOR_OPEN
from marlgrid.core import kernels as K

ENV_IDS = [
    "MarlGrid-GoalCycle-13x13-3Agents-v0",
    "MarlGrid-Cluttered-11x11-3Agents-v0",
    "MarlGrid-DoorKey-8x8-2Agents-v0",
    "MarlGrid-Empty-8x8-3Agents-v0",
]


@st.composite
def episodes(draw):
    env_id = draw(st.sampled_from(ENV_IDS))
    ghost = draw(st.booleans())
    seed = draw(st.integers(0, 2**31 - 1))
    n_steps = draw(st.integers(1, 60))
    actions = draw(st.lists(st.integers(0, 6), min_size=n_steps * 3, max_size=n_steps * 3))
    return env_id, ghost, seed, n_steps, actions


def _expected_reward_set(env) -> set[float]:
    rules = env.rules
    allowed = {0.0, rules.goal_reward, rules.lava_reward}
    if rules.n_goals:
        allowed |= {rules.cycle_reward, -abs(rules.penalty)}
    return allowed


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(episodes())
def test_invariants_hold(case):
    env_id, ghost, seed, n_steps, actions = case
    env = marlgrid.make(env_id, ghost_mode=ghost, max_steps=n_steps + 5)
    obs, _ = env.reset(seed=seed)
    engine = env.engine
    allowed = _expected_reward_set(env)
    shapes = {a: (o.shape, o.dtype) for a, o in obs.items()}
    for t in range(n_steps):
        if not env.agents:
            break
        acts = {a: actions[3 * t + i] for i, a in enumerate(env.possible_agents) if a in env.agents}
        obs, rewards, term, trunc, infos = env.step(acts)
        grid = engine.grid[0]
        cells = []
        for k in range(len(env.possible_agents)):
            if engine.status[0, k] != K.ACTIVE:
                continue
            x, y = engine.pos[0, k]
            t_, s_ = grid[x, y, 0], grid[x, y, 2]
            # never inside a wall, a closed door or any other solid object
            assert CAN_OVERLAP[t_] and (t_ != DOOR or s_ == DOOR_OPEN)
            cells.append((int(x), int(y)))
        if not ghost:
            assert len(cells) == len(set(cells)), "two agents on one cell in blocking mode"
        for r in rewards.values():
            assert any(np.isclose(r, a) for a in allowed), f"reward {r} outside the rules"
        for a, o in obs.items():
            assert (o.shape, o.dtype) == shapes[a]
        assert set(infos) == set(rewards) == set(term) == set(trunc)
