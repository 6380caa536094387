"""Frames: PettingZoo's render test, the documented frame size, pixels, prestige, human mode."""

from __future__ import annotations

import importlib
import math
import os
import subprocess
import sys
import time

import numpy as np
import pytest

os.environ.setdefault("SDL_VIDEODRIVER", "dummy")
os.environ.setdefault("SDL_AUDIODRIVER", "dummy")

import marlgrid  # noqa: E402
from marlgrid.config import DEFAULT_AGENT_COLORS  # noqa: E402
from marlgrid.constants import AGENT, COLOR_TO_IDX, COLORS_RGB, FORWARD  # noqa: E402
from marlgrid.core.atlas import get_atlas, prestige_rgb  # noqa: E402
from marlgrid.viewing.rendering import (  # noqa: E402
    TINT_ALPHA,
    draw_text,
    frame_layout,
    frame_shape,
    render_frame,
)
from tests.conftest import HandMadeEnv, place, step  # noqa: E402

EAST, SOUTH, WEST, NORTH = range(4)


def test_rendering_imports_nothing_heavy():
    code = (
        "import sys, marlgrid, marlgrid.viewing.rendering, marlgrid.viewing.human, "
        "marlgrid.viewing.play, "
        "marlgrid.viewing.record, marlgrid.viewing.video, marlgrid.wrappers; "
        "print([m for m in ('torch', 'pygame', 'imageio', 'imageio_ffmpeg', "
        "'stable_baselines3') if m in sys.modules])"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"


@pytest.mark.filterwarnings("ignore:The old environment creation API:DeprecationWarning")
@pytest.mark.parametrize("env_id", sorted(marlgrid.REGISTRY))
def test_pettingzoo_render_test(env_id):
    from pettingzoo.test import render_test

    spec = marlgrid.spec(env_id)
    module = importlib.import_module(spec.entry_point.split(":")[0])

    def env_fn(render_mode=None):
        env = module.env(render_mode=render_mode, **spec.kwargs)
        # Pacing is tested on its own below; here the human window may run at full speed.
        env.unwrapped.metadata = {**env.unwrapped.metadata, "render_fps": 1000}
        # render_test resets without a seed; seeding once makes its layouts reproducible.
        env.unwrapped.reset(seed=0)
        return env

    render_test(env_fn)


# -- frame size ---------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("n_agents", "shape"), [(1, (416, 648, 3)), (3, (416, 543, 3)), (8, (416, 596, 3))]
)
def test_frame_size_goal_cycle(n_agents, shape):
    # Worked out by hand from the module docstring's formula (ts 32, 13x13, view 7):
    # pad 4, label_h 14; 1 agent: s = min(32, 394 // 7) = 32, W = 416 + 224 + 8;
    # 3 agents in one column: s = (416 - 16 - 42) // 21 = 17, W = 416 + 119 + 8;
    # 8 agents: one column gives s = 4 < 8, two give s = (416 - 20 - 56) // 28 = 12,
    # W = 416 + 2 * (84 + 4) + 4.
    env = marlgrid.make(
        "MarlGrid-GoalCycle-13x13-3Agents-v0", n_agents=n_agents, render_mode="rgb_array"
    )
    env.reset(seed=0)
    frame = env.render()
    assert frame.dtype == np.uint8
    assert frame.shape == shape == frame_shape(env)


@pytest.mark.parametrize(
    ("settings", "shape"),
    [
        # 5x5 at ts 32, 8 agents: 4 columns of 2 rows give s = (160 - 12 - 28) // 14 = 8.
        ({"tile_size": 32}, (160, 404, 3)),
        # ts 8: pad 2, label 9; no layout reaches s = 8, the best is one row, s = 27 // 7 = 3.
        ({"tile_size": 8}, (40, 226, 3)),
        ({"tile_size": 8, "agent_views": False}, (40, 40, 3)),
    ],
)
def test_frame_size_eight_agents_small_map(settings, shape):
    env = marlgrid.make("MarlGrid-Empty-5x5-v0", n_agents=8)
    env.reset(seed=0)
    assert render_frame(env, **settings).shape == shape == frame_shape(env, **settings)


def test_layout_for_any_size():
    for w, h in [(3, 3), (4, 30), (30, 4), (13, 13), (40, 40)]:
        for n in range(1, 9):
            for ts in (1, 4, 8, 16, 32):
                lay = frame_layout(w, h, [7] * n, ts)
                assert lay.cell >= 1 and lay.cols * lay.rows >= n
                assert lay.height >= h * ts and lay.width > w * ts
                side = lay.view * lay.cell
                for r, c in lay.slots:  # every slot inside the frame, right of the map
                    assert c >= w * ts and c + side <= lay.width
                    assert r + lay.label_h + side <= lay.height


def test_render_options_from_env_attributes():
    env = marlgrid.make("MarlGrid-Empty-8x8-v0", render_mode="rgb_array")
    env.reset(seed=0)
    env.render_tile_size = 8
    env.render_agent_views = False
    assert env.render().shape == (64, 64, 3)


def test_render_frame_of_a_batch():
    vec = marlgrid.make_vec("MarlGrid-Empty-8x8-3Agents-v0", 3)
    vec.reset(seed=0)
    frames = [render_frame(vec, index=i, tile_size=8) for i in range(3)]
    assert all(f.shape == frames[0].shape for f in frames)
    assert not np.array_equal(frames[0], frames[1])  # different layouts of agents
    with pytest.raises(IndexError):
        render_frame(vec, index=3)


def test_frames_are_fresh_arrays():
    env = marlgrid.make("MarlGrid-Empty-5x5-v0", render_mode="rgb_array")
    env.reset(seed=0)
    a = env.render()
    b = env.render()
    assert a is not b and np.array_equal(a, b)
    a[:] = 0
    assert not np.array_equal(env.render(), a)


# -- pixels -------------------------------------------------------------------------------

ROOM = [
    "#########",
    "#.......#",
    "#..#....#",
    "#......G#",
    "#.......#",
    "#########",
]
TS = 16


def cell(frame: np.ndarray, x: int, y: int) -> np.ndarray:
    return frame[y * TS : (y + 1) * TS, x * TS : (x + 1) * TS]


def center(frame: np.ndarray, x: int, y: int) -> np.ndarray:
    return frame[y * TS + TS // 2, x * TS + TS // 2]


def tinted(rgb, tint) -> np.ndarray:
    """The documented tint of one pixel: ``(p * (256 - a) + round(c * a) + 128) >> 8``."""
    p = np.asarray(rgb, dtype=np.int64)
    c = np.round(np.asarray(tint, dtype=np.float64) * TINT_ALPHA).astype(np.int64)
    return (p * (256 - TINT_ALPHA) + c + 128) >> 8


@pytest.fixture
def room():
    env = HandMadeEnv(ROOM, agents=[{"color": "blue"}, {"color": "purple"}])
    env.reset(seed=0)
    place(env, 0, 1, 1, EAST)  # top-left, looking along the top row
    place(env, 1, 6, 4, WEST)  # bottom row, looking west
    return env


def test_pixels_of_a_known_layout(room):
    plain = render_frame(room, tile_size=TS, highlight=False, agent_views=False)
    assert plain.shape == (6 * TS, 9 * TS, 3)
    assert tuple(center(plain, 7, 3)) == COLORS_RGB["green"]  # the goal
    assert tuple(center(plain, 0, 0)) == COLORS_RGB["grey"]  # border walls
    assert tuple(center(plain, 3, 2)) == COLORS_RGB["grey"]  # the inner wall
    assert tuple(center(plain, 4, 4)) == (0, 0, 0)  # an empty floor cell
    assert tuple(center(plain, 1, 1)) == COLORS_RGB["blue"]  # agent_0
    assert tuple(center(plain, 6, 4)) == COLORS_RGB["purple"]  # agent_1
    # The map is the atlas: every cell without an agent is its atlas tile, pixel for pixel.
    tiles = get_atlas(TS).tiles
    grid = room.engine.grid[0]
    for x in range(9):
        for y in range(6):
            if (x, y) not in ((1, 1), (6, 4)):
                assert np.array_equal(cell(plain, x, y), tiles[tuple(grid[x, y])])
    # An agent's cell is its triangle over the floor tile: pointing east, the tip is at the
    # right edge and the left-middle is background.
    a0 = cell(plain, 1, 1)
    assert tuple(a0[TS // 2, int(TS * 0.6)]) == COLORS_RGB["blue"]
    assert tuple(a0[2, TS // 2]) != COLORS_RGB["blue"]


def test_field_of_view_tint_covers_exactly_the_seen_cells(room):
    plain = render_frame(room, tile_size=TS, highlight=False, agent_views=False)
    lit = render_frame(room, tile_size=TS, highlight=True, agent_views=False)
    seen0 = room.visible_cells("agent_0")
    seen1 = room.visible_cells("agent_1")
    assert seen0.sum() > 5 and seen1.sum() > 5
    for x in range(9):
        for y in range(6):
            changed = not np.array_equal(cell(plain, x, y), cell(lit, x, y))
            assert changed == bool(seen0[x, y] or seen1[x, y]), (x, y)
            viewers = [c for c, s in (("blue", seen0), ("purple", seen1)) if s[x, y]]
            if viewers and (x, y) not in ((1, 1), (6, 4)):
                mean = np.mean([COLORS_RGB[c] for c in viewers], axis=0)
                expected = tinted(cell(plain, x, y), mean)
                assert np.array_equal(cell(lit, x, y), expected), (x, y)


def test_prestige_color_follows_the_formula():
    rows = ["#####", "#.0.#", "#.1.#", "#####"]
    env = HandMadeEnv(rows, agent={"color": "prestige", "prestige_scale": 2.0}, max_steps=50)
    env.reset(seed=0)
    place(env, 0, 1, 1, EAST)
    before = render_frame(env, tile_size=TS, highlight=False, agent_views=False)
    assert tuple(center(before, 1, 1)) == COLORS_RGB["red"]  # fresh: prestige 0
    _, rewards, *_ = step(env, FORWARD)  # enter tile 0: the first tile pays 1
    assert rewards["agent_0"] == 1.0
    p = env.prestige["agent_0"]
    assert p == pytest.approx(1.0)
    after = render_frame(env, tile_size=TS, highlight=False, agent_views=False)
    w = math.tanh(p / 2.0)
    expected = tuple(round(v) for v in ((1 - w) * 255, 0.0, w * 255))
    assert tuple(center(after, 2, 1)) == expected == tuple(prestige_rgb(p, 2.0))
    assert expected != COLORS_RGB["red"]
    # The label swatch in the agent-view column shows the same color.
    frame = render_frame(env, tile_size=TS)
    lay = frame_layout(5, 4, [7], TS)
    r, c = lay.slots[0]
    swatch = frame[r : r + lay.label_h, c : c + 5 * lay.font_scale]
    assert (swatch == np.array(expected, np.uint8)).all(axis=-1).any()


def test_agent_view_panel_is_the_rgb_observation():
    # 3 agents on 13x13 at ts 32 get view cells of 17 px; RGB observations at tile size 17 are
    # the same pictures, pixel for pixel (one atlas, one kernel).
    env = marlgrid.make(
        "MarlGrid-GoalCycle-13x13-3Agents-v0",
        agent={"observation": "rgb", "tile_size": 17},
        render_mode="rgb_array",
    )
    obs, _ = env.reset(seed=3)
    for _ in range(5):
        obs, *_ = env.step({a: 2 for a in env.agents})
    frame = env.render()
    lay = frame_layout(13, 13, [7, 7, 7], 32)
    assert lay.cell == 17
    for k, name in enumerate(env.possible_agents):
        r, c = lay.slots[k]
        panel = frame[r + lay.label_h : r + lay.label_h + 119, c : c + 119]
        assert np.array_equal(panel, obs[name])


def test_draw_text_clips_at_the_edge():
    img = np.zeros((7, 10, 3), dtype=np.uint8)
    end = draw_text(img, 1, 1, "ab1?", scale=1)
    assert end == 17 and img.any()
    draw_text(img, -2, -2, "x", scale=3)  # partly outside: no error


# -- human mode ---------------------------------------------------------------------------


def test_human_mode_window_and_closing():
    pygame = pytest.importorskip("pygame")
    env = marlgrid.make("MarlGrid-Empty-5x5-v0", render_mode="human")
    env.reset(seed=0)  # renders
    viewer = env._viewer
    assert viewer is not None and not viewer.closed
    assert pygame.display.get_surface().get_size() == frame_shape(env)[1::-1]
    assert env.render() is None
    pygame.event.post(pygame.event.Event(pygame.QUIT))
    env.step({"agent_0": 0})  # the close request is handled here
    assert viewer.closed
    assert env.render() is None  # later frames are dropped, no error
    env.step({"agent_0": 0})
    env.close()
    env.close()


def test_human_mode_is_paced_by_render_fps():
    pytest.importorskip("pygame")
    from marlgrid.viewing.human import Viewer

    frame = np.zeros((32, 48, 3), dtype=np.uint8)
    viewer = Viewer()
    try:
        viewer.show(frame, fps=20)
        start = time.perf_counter()
        for _ in range(6):
            viewer.show(frame, fps=20)
        elapsed = time.perf_counter() - start
    finally:
        viewer.close()
    assert elapsed >= 0.2  # 6 frames at 20 fps take about 0.3 s


def test_agents_get_distinct_colors_by_default():
    env = marlgrid.make("MarlGrid-Empty-8x8-3Agents-v0")
    assert [a.color for a in env.agent_configs] == ["red", "blue", "purple"]
    many = marlgrid.make("MarlGrid-Empty-8x8-v0", n_agents=7)
    assert [a.color for a in many.agent_configs] == [*DEFAULT_AGENT_COLORS, "red"]
    # Set colors stay as set; prestige stays opt-in.
    green = marlgrid.make("MarlGrid-Empty-8x8-3Agents-v0", agent={"color": "green"})
    assert {a.color for a in green.agent_configs} == {"green"}
    mixed = HandMadeEnv(ROOM, agents=[{"color": "prestige"}, {}])
    assert [a.color for a in mixed.agent_configs] == ["prestige", "blue"]
    # Frames and observations show them apart.
    two = HandMadeEnv(ROOM, n_agents=2)
    two.reset(seed=0)
    place(two, 0, 1, 1, EAST)
    place(two, 1, 2, 1, WEST)
    plain = render_frame(two, tile_size=TS, highlight=False, agent_views=False)
    assert tuple(center(plain, 1, 1)) == COLORS_RGB["red"]
    assert tuple(center(plain, 2, 1)) == COLORS_RGB["blue"]
    ahead = two.engine.sym[0, 0, 3, 5]  # agent_1, one cell ahead of agent_0
    assert ahead.tolist() == [AGENT, COLOR_TO_IDX["blue"], WEST]
