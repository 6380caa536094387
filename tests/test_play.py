"""The keyboard player: the key handler alone, fake window events, and the console script."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys

import numpy as np
import pytest

os.environ.setdefault("SDL_VIDEODRIVER", "dummy")
os.environ.setdefault("SDL_AUDIODRIVER", "dummy")

import marlgrid  # noqa: E402
from marlgrid.constants import DONE, DROP, FORWARD, LEFT, PICKUP, RIGHT, TOGGLE  # noqa: E402
from marlgrid.viewing.play import Player, key_to_command, main  # noqa: E402
from tests.conftest import HandMadeEnv, place  # noqa: E402

EAST, SOUTH, WEST, NORTH = range(4)
ROOM = [
    "#######",
    "#.....#",
    "#.K...#",
    "#.....#",
    "#######",
]


def test_key_map():
    assert key_to_command("left") == LEFT
    assert key_to_command("right") == RIGHT
    assert key_to_command("up") == FORWARD
    assert key_to_command("p") == key_to_command("page up") == PICKUP
    assert key_to_command("d") == key_to_command("page down") == DROP
    assert key_to_command("space") == TOGGLE
    assert key_to_command("return") == DONE
    assert key_to_command("backspace") == "reset"
    assert key_to_command("escape") == "quit"
    assert key_to_command("tab") == "next_agent"
    assert key_to_command("f12") is None


@pytest.fixture
def player():
    env = HandMadeEnv(ROOM, n_agents=2, max_steps=50)
    p = Player(env, "agent_0", policy="idle", seed=0, verbose=False)
    place(env, 0, 1, 1, EAST)
    place(env, 1, 5, 3, WEST)
    return p


def test_handle_key_moves_the_controlled_agent(player):
    env = player.env
    assert player.handle_key("up")
    assert env.agent_positions["agent_0"] == (2, 1)
    assert player.handle_key("right")  # now facing south, at the key
    assert env.agent_directions["agent_0"] == SOUTH
    assert player.handle_key("p")  # pick the key up
    assert env.engine.carrying[0, 0, 0] == 5
    assert env.agent_positions["agent_1"] == (5, 3)  # the idle agent stayed
    assert env.step_count == 3
    assert player.handle_key("f12")  # unbound: nothing happens
    assert env.step_count == 3
    assert player.handle_key("tab") and player.agent == "agent_1"
    assert player.handle_key("up")
    assert env.agent_positions["agent_1"] == (4, 3)
    assert player.handle_key("backspace")
    assert env.step_count == 0 and player.episode == 2
    assert not player.handle_key("escape")


def test_status_bar_shows_rewards_and_prestige(player):
    frame = player.frame()
    lines = player.status_lines()
    assert any("prestige" in line for line in lines)
    assert lines[1].startswith(">agent_0")
    assert frame.shape[0] > marlgrid.viewing.rendering.frame_shape(player.env)[0]
    assert frame.dtype == np.uint8


def test_rewards_and_prestige_are_tracked():
    env = HandMadeEnv(["#####", "#.0.#", "#.1.#", "#####"], max_steps=20)
    p = Player(env, policy="idle", seed=0, verbose=False)
    place(env, 0, 1, 1, EAST)
    p.handle_key("up")  # enters tile 0: the first tile pays 1
    assert p.last_rewards["agent_0"] == 1.0 and p.returns["agent_0"] == 1.0
    assert "prestige 1.00" in p.status_lines()[1]


def test_fake_window_events_drive_the_agent(player):
    pygame = pytest.importorskip("pygame")
    from marlgrid.viewing.human import Viewer

    viewer = Viewer()
    for key in (pygame.K_UP, pygame.K_UP, pygame.K_LEFT, pygame.K_SPACE, pygame.K_ESCAPE):
        pygame.event.post(pygame.event.Event(pygame.KEYDOWN, key=key))
    player.run(viewer)
    env = player.env
    assert env.step_count == 4
    assert env.agent_positions["agent_0"] == (3, 1)
    assert env.agent_directions["agent_0"] == NORTH
    assert viewer.closed


def test_closing_the_window_quits(player):
    pygame = pytest.importorskip("pygame")
    from marlgrid.viewing.human import Viewer

    viewer = Viewer()
    pygame.event.post(pygame.event.Event(pygame.KEYDOWN, key=pygame.K_UP))
    pygame.event.post(pygame.event.Event(pygame.QUIT))
    player.run(viewer)
    assert player.env.step_count == 1 and viewer.closed


def test_main_in_process(capsys):
    pytest.importorskip("pygame")
    assert main(["MarlGrid-Empty-8x8-v0", "--seed", "1", "--keys", "up,left,up,escape"]) == 0
    out = capsys.readouterr().out
    assert "final: step" in out


def test_console_script_headless(tmp_path):
    pytest.importorskip("pygame")
    exe = shutil.which("marlgrid-play", path=os.path.dirname(sys.executable))
    cmd = [exe] if exe else [sys.executable, "-m", "marlgrid.viewing.play"]
    env = {**os.environ, "SDL_VIDEODRIVER": "dummy", "SDL_AUDIODRIVER": "dummy"}
    args = ["MarlGrid-GoalCycle-13x13-3Agents-v0", "--seed", "0", "--policy", "oracle"]
    out = subprocess.run(
        [*cmd, *args, "--keys", "up,up,left,tab,up,escape"],
        capture_output=True,
        text=True,
        env=env,
        timeout=120,
        check=True,
    )
    assert "final: step 4" in out.stdout  # the escape key stops after four steps
