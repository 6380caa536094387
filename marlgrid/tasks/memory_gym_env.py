"""Memory Gym's grid tasks for the POPGym harness (:mod:`marlgrid.tasks.popgym_env`).

Two tasks of memory-gym 1.0.2, both with ``Box(0, 255, (84, 84, 3), uint8)`` frames of the whole
arena (pygame's surfarray order: axis 0 is x) and ``Discrete(4)`` actions (0 wait, 1 turn left,
2 turn right, 3 step forward):

- ``MortarMayhem-Grid-v0``: 10 commands (3 steps shown, 1 step gap) on a 5x5 arena of 14 px tiles
  inside a 7 px margin; +0.1 per command carried out; the episode ends at the first failure or
  after the last command, at most 119 steps. Returns lie in ``[0, 1]``, multiples of 0.1.
- ``MysteryPath-Grid-v0``: a hidden path across a 7x7 grid of 12 px tiles, origin and goal not
  shown; stepping off the path sends the agent back to the origin; +1 at the goal, which ends
  the episode, else it ends after 128 steps (reported as terminated, not truncated). Returns are
  0 or 1.

Both suit the ``pixels`` encoder when its patches line up with the task's tiles:
:data:`TILE_SIZES` gives that ``NetworkConfig.tile_size`` (a Mystery Path tile is one 12 px
patch, a Mortar Mayhem tile 2x2 patches of 7 px), :func:`network_overrides` the same as preset
overrides.

All envs of a process draw on pygame's one display; each step redraws it whole before reading
it back, so the envs of a ``SyncVectorEnv`` stay independent, but closing one env ends pygame for
every env of the process: close them together.

memory-gym is imported only when an env is resolved or made. It pins gymnasium 0.29 and plain
pygame, yet runs unchanged on gymnasium 1.x and pygame-ce, so it is installed without its
dependencies (``pip install 'marlgrid[memorygym]' && pip install --no-deps memory-gym==1.0.2``).
"""

from __future__ import annotations

import importlib
import os
from typing import Any

import gymnasium as gym

__all__ = [
    "TILE_SIZES",
    "import_memory_gym",
    "make_memory_gym_env",
    "memory_gym_env_ids",
    "network_overrides",
    "resolve_memory_gym_id",
]

#: pixels per encoder cell for each supported task (the ``pixels`` encoder's ``tile_size``)
TILE_SIZES = {"MortarMayhem-Grid-v0": 7, "MysteryPath-Grid-v0": 12}

INSTALL_HINT = "pip install 'marlgrid[memorygym]' && pip install --no-deps memory-gym==1.0.2"


def memory_gym_env_ids() -> list[str]:
    """The Memory Gym ids this harness runs, sorted (known without importing memory_gym)."""
    return sorted(TILE_SIZES)


def _short(env_id: str) -> str:
    return env_id.lower().removesuffix("-v0")


def resolve_memory_gym_id(name: str) -> str | None:
    """The supported Memory Gym id ``name`` names (case-insensitive: the full id, or it without
    ``-v0``, with or without the dash: ``MortarMayhem-Grid``, ``mortarmayhemgrid``), else None."""
    wanted = name.strip().lower()
    for env_id in TILE_SIZES:
        short = _short(env_id)
        if wanted in (env_id.lower(), short, short.replace("-", "")):
            return env_id
    return None


def import_memory_gym() -> Any:
    """Import memory_gym (which registers its envs) headless and quiet; a missing package
    raises naming the install line."""
    os.environ.setdefault("SDL_VIDEODRIVER", "dummy")
    os.environ.setdefault("SDL_AUDIODRIVER", "dummy")
    os.environ.setdefault("PYGAME_HIDE_SUPPORT_PROMPT", "1")
    try:
        return importlib.import_module("memory_gym")
    except ImportError as err:
        raise ImportError(
            f"Memory Gym environments need the memory-gym package: {INSTALL_HINT}"
        ) from err


def make_memory_gym_env(env_id: str) -> gym.Env:
    """One Memory Gym env by its supported id (:func:`memory_gym_env_ids`), unwrapped but for
    gymnasium's order check."""
    if env_id not in TILE_SIZES:
        raise ValueError(
            f"unsupported Memory Gym env {env_id!r}; supported: {memory_gym_env_ids()}"
        )
    import_memory_gym()
    return gym.make(env_id, disable_env_checker=True)


def network_overrides(env_id: str) -> list[str]:
    """Agent-preset overrides a task needs (``network.tile_size``); none for other envs."""
    return [f"network.tile_size={TILE_SIZES[env_id]}"] if env_id in TILE_SIZES else []
