"""MemoryEnv: MiniGrid's memory test, checked by hand and against MiniGrid itself."""

from __future__ import annotations

import numpy as np
import pytest

import marlgrid
from marlgrid.config import ConfigError
from marlgrid.constants import BALL, EMPTY, FORWARD, GOAL, KEY, LAVA, LEFT, PICKUP, RIGHT, WALL

S7 = "MarlGrid-MemoryS7-v0"
NAME = {KEY: "key", BALL: "ball"}

#: Expected maps, rows top to bottom: W wall, . empty, C the cue, O an end object, S/F the
#: success and failure cells (which of the two is which depends on the draw).
S7_MAP = """
WWWWWWW
WWWWWOW
WC..WSW
W.....W
W...WSW
WWWWWOW
WWWWWWW
"""
S9_MAP = """
WWWWWWWWW
W.....W.W
WWWWW.WOW
WC..WWWSW
W.......W
W...WWWSW
WWWWW.WOW
W.....W.W
WWWWWWWWW
"""


def _picture(enc: np.ndarray) -> str:
    """The map as rows of characters, S for both the goal and the lava cell."""
    chars = {WALL: "W", EMPTY: ".", GOAL: "S", LAVA: "S"}
    rows = []
    for y in range(enc.shape[1]):
        row = ""
        for x in range(enc.shape[0]):
            t = int(enc[x, y, 0])
            if t in (KEY, BALL):
                row += "C" if x == 1 else "O"
            else:
                row += chars[t]
        rows.append(row)
    return "\n".join(rows)


def _cells(enc: np.ndarray, t: int) -> list[tuple[int, int]]:
    return [(int(x), int(y)) for x, y in np.argwhere(enc[..., 0] == t)]


def _layout_key(enc: np.ndarray, agent_x: int) -> tuple[int, int, int, int]:
    """(column of the split, cue type, type of the top end object, agent's start column)."""
    mid = enc.shape[1] // 2
    end_x = next(x for x in range(2, enc.shape[0]) if enc[x, mid - 2, 0] in (KEY, BALL))
    return end_x, int(enc[1, mid - 1, 0]), int(enc[end_x, mid - 2, 0]), agent_x


def _reset(env_id: str = S7, seed: int = 0, **settings):
    env = marlgrid.make(env_id, **settings)
    obs, _ = env.reset(seed=seed)
    return env, obs


def _path_to(env, success: bool) -> list[int]:
    """Actions from the start to the success (or failure) cell: east along the middle row, then
    one step north or south."""
    enc = env.grid_encoding(with_agents=False)
    (gx, gy), (lx, ly) = _cells(enc, GOAL)[0], _cells(enc, LAVA)[0]
    tx, ty = (gx, gy) if success else (lx, ly)
    x, y = env.agent_positions["agent_0"]
    return [FORWARD] * (tx - x) + [LEFT if ty < y else RIGHT, FORWARD]


def _walk(env, actions: list[int]) -> tuple[float, bool, bool, int]:
    """Take ``actions``; returns (return, terminated, truncated, steps) when the episode ends."""
    total = 0.0
    for i, a in enumerate(actions, 1):
        _, rew, term, trunc, _ = env.step({"agent_0": a})
        total += rew["agent_0"]
        if term["agent_0"] or trunc["agent_0"]:
            return total, term["agent_0"], trunc["agent_0"], i
    return total, False, False, len(actions)


@pytest.mark.parametrize(("env_id", "expected"), [(S7, S7_MAP), ("MarlGrid-MemoryS9-v0", S9_MAP)])
def test_geometry_by_hand(env_id, expected):
    size = len(expected.split())
    mid, end_x = size // 2, size - 2
    for seed in range(8):
        env, _ = _reset(env_id, seed)
        enc = env.grid_encoding(with_agents=False)
        assert _picture(enc) == expected.strip()
        cue = int(enc[1, mid - 1, 0])
        top, bottom = int(enc[end_x, mid - 2, 0]), int(enc[end_x, mid + 2, 0])
        assert {top, bottom} == {KEY, BALL} and cue in (KEY, BALL)
        assert set(enc[[1, end_x, end_x], [mid - 1, mid - 2, mid + 2], 1]) == {1}  # all green
        success = (end_x, mid - 1) if top == cue else (end_x, mid + 1)
        failure = (end_x, mid + 1) if top == cue else (end_x, mid - 1)
        assert _cells(enc, GOAL) == [success] and _cells(enc, LAVA) == [failure]


def _look_first(env, obs, state: dict) -> int:
    """Navigates by position, but learns the cue and the end objects only from its view: turns
    back until the cue shows, walks to the split, faces north and reads the object two cells on."""
    x, _ = env.agent_positions["agent_0"]
    d = env.agent_directions["agent_0"]
    if "cue" not in state:
        if x == 1 and d == 0 and obs[2, 6, 0] in (KEY, BALL):
            state["cue"] = int(obs[2, 6, 0])  # beside the agent, on its left
        elif d != 2:
            return LEFT
        elif not np.isin(obs[..., 0], (KEY, BALL)).any():
            return FORWARD
        else:
            state["cue"] = int(obs[..., 0][np.isin(obs[..., 0], (KEY, BALL))][0])
    if x < 5:
        return FORWARD if d == 0 else LEFT
    if "want" not in state:
        if d != 3:
            return LEFT
        state["want"] = 3 if int(obs[3, 4, 0]) == state["cue"] else 1
    return FORWARD if d == state["want"] else RIGHT


def test_the_cue_and_the_ends_can_be_told_apart_from_views_alone():
    for seed in range(40):
        env, obs = _reset(S7, seed)
        state: dict = {}
        while env.agents:
            obs, rew, term, *_ = env.step({"agent_0": _look_first(env, obs["agent_0"], state)})
        assert term["agent_0"] and rew["agent_0"] > 0.9, seed


def test_start_cells_directions_and_defaults():
    starts, room_starts = set(), set()
    for seed in range(60):
        env, _ = _reset(S7, seed)
        starts.add(env.agent_positions["agent_0"])
        assert env.agent_directions == {"agent_0": 0}
        env, _ = _reset(S7, seed, start="room")
        room_starts.add(env.agent_positions["agent_0"])
        assert env.agent_directions == {"agent_0": 0}
        env, obs = _reset(S7, seed, start="cue", agent={"view_size": 3})
        assert env.agent_positions["agent_0"] == (1, 3)
        view = obs["agent_0"]  # 3x3, the agent at the bottom middle: the cue is left of it
        assert view[0, 2, 0] in (5, 6), view[..., 0]  # key or ball type
    assert starts == {(1, 3), (2, 3), (3, 3), (4, 3)}  # x in [1, hallway_end = 4]
    assert room_starts == {(1, 3), (2, 3), (3, 3)}
    assert env.max_steps == 245 and env.action_space("agent_0").n == 7
    assert marlgrid.make("MarlGrid-MemoryS17-v0").max_steps == 5 * 17**2


@pytest.mark.parametrize("success", [True, False])
def test_walking_to_a_cell_by_hand(success):
    for seed in range(6):
        env, _ = _reset(S7, seed)
        x, _ = env.agent_positions["agent_0"]
        ret, term, trunc, steps = _walk(env, _path_to(env, success))
        assert steps == (5 - x) + 2 and term and not trunc and env.agents == []
        expected = np.float32(1 - 0.9 * steps / 245) if success else 0.0
        assert ret == expected


def test_only_the_success_cell_pays_and_timeouts_pay_nothing():
    env, _ = _reset(S7, 1, max_steps=3)
    ret, term, trunc, steps = _walk(env, [LEFT] * 5)
    assert (ret, term, trunc, steps) == (0.0, False, True, 3)
    env, _ = _reset(S7, 1, lava_reward=-1.0)  # the failure cell pays lava_reward
    assert _walk(env, _path_to(env, success=False))[:2] == (-1.0, True)


def test_cue_names_the_success_side_and_both_sides_occur():
    top_wins, key_cues, n = 0, 0, 300
    for seed in range(n):
        env, _ = _reset(S7, seed)
        enc = env.grid_encoding(with_agents=False)
        cue, top = int(enc[1, 2, 0]), int(enc[5, 1, 0])
        (gx, gy), (_, ly) = _cells(enc, GOAL)[0], _cells(enc, LAVA)[0]
        assert gx == 5 and {gy, ly} == {2, 4}
        assert (gy == 2) == (cue == top)
        assert int(enc[5, gy + (gy - 3), 0]) == cue  # the twin lies beyond the success cell
        top_wins += gy == 2
        key_cues += cue == KEY
    assert 0.4 < top_wins / n < 0.6 and 0.4 < key_cues / n < 0.6


def test_random_length_hallways_cover_their_range():
    ends = set()
    for seed in range(120):
        env, _ = _reset("MarlGrid-MemoryS13Random-v0", seed)
        enc = env.grid_encoding(with_agents=False)
        end_x = _layout_key(enc, 0)[0]
        ends.add(end_x - 1)
        x, y = env.agent_positions["agent_0"]
        assert y == 6 and 1 <= x <= end_x - 1
        assert _cells(enc, GOAL)[0][0] == end_x
    assert ends == set(range(4, 11))  # MiniGrid's hallway_end in [4, size - 3]


def test_same_seed_same_episode():
    rng = np.random.default_rng(0)
    actions = rng.integers(0, 7, size=120).tolist()
    runs = []
    for _ in range(2):
        env, obs = _reset("MarlGrid-MemoryS11-v0", 42)
        trace = [env.grid_encoding().copy(), obs["agent_0"].copy()]
        for a in actions:
            if not env.agents:
                break
            obs, rew, *_ = env.step({"agent_0": a})
            trace += [obs["agent_0"].copy(), rew["agent_0"], env.agent_positions["agent_0"]]
        runs.append(trace)
    assert len(runs[0]) == len(runs[1])
    for a, b in zip(*runs, strict=True):
        np.testing.assert_array_equal(a, b)


def test_agents_never_see_the_task_cells():
    env, obs = _reset(S7, 3, agent={"hide": ("box",)})
    assert set(env.agent_configs[0].hide) == {"box", "goal", "lava"}
    rng = np.random.default_rng(3)
    seen = set(np.unique(obs["agent_0"][..., 0]))
    for _ in range(200):
        if not env.agents:
            env.reset()
        obs, *_ = env.step({"agent_0": int(rng.choice([LEFT, RIGHT, FORWARD]))})
        seen |= set(np.unique(obs["agent_0"][..., 0]))
    assert GOAL not in seen and LAVA not in seen and {KEY, BALL, WALL} <= seen


def test_pickup_leaves_the_cue_in_place():
    seed = next(s for s in range(100) if _reset(S7, s)[0].agent_positions["agent_0"] == (1, 3))
    env, _ = _reset(S7, seed)
    cue = env.grid_encoding(with_agents=False)[1, 2].copy()
    _walk(env, [LEFT, PICKUP])  # facing the cue
    np.testing.assert_array_equal(env.grid_encoding(with_agents=False)[1, 2], cue)
    assert env.engine.carrying[0, 0, 0] == 0
    env, _ = _reset(S7, seed, allow_pickup=True)
    _walk(env, [LEFT, PICKUP])
    assert env.grid_encoding(with_agents=False)[1, 2, 0] == EMPTY
    assert env.engine.carrying[0, 0, 0] == cue[0]


def test_spawn_direction_holds_for_respawns():
    for seed in range(10):
        env, _ = _reset("MarlGrid-Empty-8x8-v0", seed, spawn_direction=2)
        assert env.agent_directions == {"agent_0": 2}
    env, _ = _reset(S7, 0, respawn=True)
    ret, term, _, _ = _walk(env, _path_to(env, success=True))  # arrives facing north or south
    assert ret > 0 and not term and env.agents == ["agent_0"]
    assert env.agent_directions == {"agent_0": 0} and env.agent_positions["agent_0"][1] == 3
    with pytest.raises(ConfigError, match=r"spawn_direction must be <= 3, got 4"):
        marlgrid.make(S7, spawn_direction=4)


@pytest.mark.parametrize(
    ("overrides", "message"),
    [
        ({"size": 8}, r"odd size >= 7, got 8"),
        ({"size": 5}, r"odd size >= 7, got 5"),
        ({"random_length": "yes"}, r"random_length must be True or False, got 'yes'"),
        ({"start": "middle"}, r"start must be one of \('hallway', 'room', 'cue'\), got 'middle'"),
        ({"n_agents": 5, "ghost_mode": False}, r"n_agents \(5\) exceeds the 4 start cells"),
    ],
)
def test_bad_settings_raise(overrides, message):
    with pytest.raises(ConfigError, match=message):
        marlgrid.make(S7, **overrides)


def test_vector_env_hides_the_task_cells_and_ends_episodes():
    vec = marlgrid.make_vec(S7, 4)
    obs, _ = vec.reset(seed=0)
    assert not np.isin(obs["agent_0"][..., 0], (GOAL, LAVA)).any()
    assert (vec.engine.dirs == 0).all()


# -- against MiniGrid -------------------------------------------------------------------------

minigrid_envs = pytest.importorskip("minigrid.envs")


def _ours_by_layout(env_id: str, seeds: range) -> dict[tuple, int]:
    """Our first seed for each drawn layout key."""
    env = marlgrid.make(env_id)
    found: dict[tuple, int] = {}
    for seed in seeds:
        env.reset(seed=seed)
        key = _layout_key(env.grid_encoding(with_agents=False), env.agent_positions["agent_0"][0])
        found.setdefault(key, seed)
    return found


@pytest.mark.parametrize(
    ("env_id", "size", "random_length", "n_seeds"),
    [
        (S7, 7, False, 100),
        ("MarlGrid-MemoryS9-v0", 9, False, 150),
        ("MarlGrid-MemoryS13Random-v0", 13, True, 2500),
    ],
)
def test_layout_views_and_outcomes_equal_minigrid(env_id, size, random_length, n_seeds):
    """Same layout draw: same walls and objects, the success and failure cells MiniGrid's, and the
    same views, rewards and ends under the same actions."""
    ours_for = _ours_by_layout(env_id, range(n_seeds))
    mg = minigrid_envs.MemoryEnv(size=size, random_length=random_length)
    rng = np.random.default_rng(size)
    outcomes = set()
    compared = 0
    for mg_seed in range(12):
        mg_obs, _ = mg.reset(seed=mg_seed)
        mg_enc = mg.grid.encode()
        key = _layout_key(mg_enc, int(mg.agent_pos[0]))
        assert key in ours_for, key
        env, obs = _reset(env_id, ours_for[key])
        enc = env.grid_encoding(with_agents=False)
        assert _cells(enc, GOAL) == [tuple(mg.success_pos)]
        assert _cells(enc, LAVA) == [tuple(mg.failure_pos)]
        enc[np.isin(enc[..., 0], (GOAL, LAVA))] = (EMPTY, 0, 0)
        np.testing.assert_array_equal(enc, mg_enc)
        assert env.agent_positions["agent_0"] == tuple(int(c) for c in mg.agent_pos)
        assert env.agent_directions["agent_0"] == mg.agent_dir == 0
        np.testing.assert_array_equal(obs["agent_0"], mg_obs["image"])
        for _ in range(mg.max_steps):
            a = int(rng.choice(7, p=[0.2, 0.2, 0.45, 0.05, 0.04, 0.03, 0.03]))
            mg_obs, mg_rew, mg_term, mg_trunc, _ = mg.step(a)
            obs, rew, term, trunc, _ = env.step({"agent_0": a})
            np.testing.assert_array_equal(obs["agent_0"], mg_obs["image"])
            assert rew["agent_0"] == pytest.approx(mg_rew, abs=1e-6)
            assert term["agent_0"] == mg_term
            if mg_term or mg_trunc:
                assert term["agent_0"] or trunc["agent_0"]
                outcomes.add("success" if mg_rew > 0 else "failure" if mg_term else "timeout")
                break
        compared += 1
    assert compared == 12 and {"success", "failure"} <= outcomes


def test_env_config_composes():
    from pathlib import Path

    from hydra import compose, initialize_config_dir
    from omegaconf import OmegaConf

    import experiments.train  # noqa: F401  (registers the schema)

    conf = Path(__file__).resolve().parents[1] / "conf"
    with initialize_config_dir(str(conf), version_base="1.3"):
        cfg = OmegaConf.to_object(compose("train", overrides=["env=memory_s7"]))
    assert cfg.env.id == S7 and cfg.env.num_envs == 16
    vec = marlgrid.make_vec(cfg.env.id, cfg.env.num_envs, **cfg.env.settings)
    rules = marlgrid.make(cfg.env.id, **cfg.env.settings).rules
    assert vec.num_envs == 16 and rules.max_steps == 245 and rules.allow_pickup is False
