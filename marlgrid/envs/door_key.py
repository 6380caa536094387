"""Door and key: one agent must fetch the key and unlock the door to reach the goal."""

from __future__ import annotations

from typing import Any

from marlgrid.base import MarlGridEnv
from marlgrid.config import ConfigError
from marlgrid.constants import DOOR_LOCKED
from marlgrid.core.layout import Layout
from marlgrid.envs._common import aec_from, square_size


class DoorKeyEnv(MarlGridEnv):
    """A wall splits the room; the goal lies behind a locked door whose key is on the near side.

    ## Description
    MiniGrid's DoorKey for several agents. A vertical wall at a random column has a locked yellow
    door at a random row; a yellow key lies on the left, where the agents start; the goal is in
    the bottom-right corner. Toggling the door while carrying the key opens it, for everyone.

    ## Action Space
    ``Discrete(7)``: pickup, drop and toggle are needed.

    ## Observation
    Each agent's egocentric view; a closed or locked door blocks sight.

    ## Rewards
    ``goal_reward`` (default 1) for entering the goal; MiniGrid's decay with ``reward_decay``
    (on by default here, as in MiniGrid).

    ## Termination
    An agent terminates on the goal (or respawns on the left with ``respawn``); truncation at
    ``max_steps`` (default ``10 * size * size``).

    ## Registered Configurations
    ``MarlGrid-DoorKey-8x8-v0`` (1 agent), ``MarlGrid-DoorKey-8x8-2Agents-v0``.
    """

    def __init__(self, size: int = 8, **kwargs: Any) -> None:
        size = square_size("DoorKeyEnv", size, kwargs)
        kwargs.setdefault("max_steps", 10 * size * size)
        kwargs.setdefault("reward_decay", True)
        super().__init__(size, size, **kwargs)
        if size < 5:
            raise ConfigError(f"DoorKey needs size >= 5, got {size}")
        if len(self.agent_configs) + 1 > (size - 2) * 1:
            raise ConfigError(
                f"n_agents ({len(self.agent_configs)}) and a key may not fit left of the door on a "
                f"{size}x{size} map; use fewer agents or a bigger map"
            )

    def generate(self, layout: Layout) -> None:
        w, h = self.width, self.height
        rng = layout.rng
        layout.walls_border()
        layout.put(w - 2, h - 2, "goal")
        split = int(rng.integers(2, w - 2))
        for y in range(h):
            layout.put(split, y, "wall")
        door_y = int(rng.integers(1, h - 1))
        layout.put(split, door_y, "door", "yellow", DOOR_LOCKED)
        layout.place("key", "yellow", region=(1, 1, split, h - 1))
        layout.restrict_spawn((1, 1, split, h - 1))


def parallel_env(**kwargs: Any) -> DoorKeyEnv:
    """A :class:`DoorKeyEnv` (PettingZoo ``ParallelEnv``)."""
    return DoorKeyEnv(**kwargs)


env = aec_from(parallel_env)
