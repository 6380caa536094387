"""Memory: a cue seen in the start room names which end of a hallway pays (MiniGrid's)."""

from __future__ import annotations

from typing import Any

from marlgrid.base import MarlGridEnv
from marlgrid.config import ConfigError, check_bool
from marlgrid.core.layout import Layout
from marlgrid.envs._common import aec_from, square_size

#: Object types that mark the success (goal) and failure (lava) cells; no agent sees them.
TASK_CELLS = ("goal", "lava")
#: Last start column of each ``start`` choice (0: the hallway's end).
START_COLUMNS = {"hallway": 0, "room": 3, "cue": 1}
#: Smallest side: the start room and the hallway's split need 7 cells.
MIN_SIZE = 7


class MemoryEnv(MarlGridEnv):
    """MiniGrid's memory test: a cue in the start room names which end of the hallway pays.

    ## Description
    A ``size x size`` map (odd ``size >= 7``). On the left a start room (columns 1-3, the three
    middle rows) holds a green key or ball, the cue, at ``(1, size // 2 - 1)``. A one-cell
    hallway runs east along the middle row to ``hallway_end`` (``size - 3``; with
    ``random_length`` drawn from ``[4, size - 3]`` each episode), where it meets a vertical
    corridor in column ``hallway_end + 1``. In that corridor a green key and a green ball lie at
    ``size // 2 - 2`` and ``size // 2 + 2`` in random order (with ``shuffle_ends=False`` the key
    is always on top, so the cue alone names the side: a T-maze). The cell next to the cue's twin
    (between it and the middle row) is the success cell, the one next to the other object the
    failure cell: a goal and a lava tile that every agent sees as empty floor (they show in
    full-map frames only). The geometry is MiniGrid's ``MemoryEnv``, cell for cell.

    Agents start on the middle row facing east. ``start`` picks the column: ``"hallway"`` (a
    random one in ``[1, hallway_end]``, as in MiniGrid; a start east of column 1 leaves the cue
    behind the agent, so it must turn to see it), ``"room"`` (``[1, 3]``) or ``"cue"`` (column 1,
    beside the cue, which is then in view at the first step whatever the view size).

    ## Action Space
    ``Discrete(7)``; only left, right and forward matter. Pickup does nothing, as in MiniGrid
    (where it becomes toggle), so the cue cannot be carried along.

    ## Observation
    Each agent's egocentric view (default 7x7): walls, the key and the ball; the success and
    failure cells read as empty ``(1, 0, 0)``.

    ## Rewards
    Entering the success cell pays MiniGrid's ``1 - 0.9 * step / max_steps`` (``goal_reward``
    times the decay); entering the failure cell pays ``lava_reward`` (default 0).

    ## Termination
    Entering either cell ends the agent's episode; truncation at ``max_steps`` (default
    ``5 * size ** 2``).

    ## Registered Configurations
    ``MarlGrid-MemoryS7-v0``, ``-S9-``, ``-S11-``, ``-S13-``, ``-S17-`` and the variable hallway
    lengths ``MarlGrid-MemoryS13Random-v0``, ``MarlGrid-MemoryS17Random-v0``; T-mazes
    ``MarlGrid-MemoryS7TMaze-v0`` and ``-S11TMaze-`` (``shuffle_ends=False``, ``start="cue"``,
    3x3 view: the cue is seen only from the start cell; the default training task). 1 agent each.
    """

    hidden_types = TASK_CELLS
    task_policies = ("cue_reader", "cue_blind")

    def __init__(
        self,
        size: int = 7,
        *,
        random_length: bool = False,
        shuffle_ends: bool = True,
        start: str = "hallway",
        **kwargs: Any,
    ) -> None:
        size = square_size("MemoryEnv", size, kwargs)
        if size < MIN_SIZE or size % 2 == 0:
            raise ConfigError(f"MemoryEnv needs an odd size >= {MIN_SIZE}, got {size}")
        self.random_length = check_bool("random_length", random_length)
        self.shuffle_ends = check_bool("shuffle_ends", shuffle_ends)
        if start not in START_COLUMNS:
            raise ConfigError(f"start must be one of {tuple(START_COLUMNS)}, got {start!r}")
        self.start = start
        kwargs.setdefault("max_steps", 5 * size * size)
        kwargs.setdefault("reward_decay", True)
        kwargs.setdefault("allow_pickup", False)
        kwargs.setdefault("spawn_direction", 0)
        super().__init__(size, size, **kwargs)
        starts = START_COLUMNS[start] or 4  # start cells (on the shortest hallway)
        if not self.rules.ghost_mode and len(self.agent_configs) > starts:
            raise ConfigError(
                f"n_agents ({len(self.agent_configs)}) exceeds the {starts} start cells of "
                "MemoryEnv with ghost_mode=False; use fewer agents or ghost_mode=True"
            )

    def generate(self, layout: Layout) -> None:
        size, rng = self.width, layout.rng
        mid = size // 2
        hallway_end = int(rng.integers(4, size - 2)) if self.random_length else size - 3
        layout.walls_border()
        layout.horizontal_wall(1, mid - 2, 4)  # the start room's top and bottom walls
        layout.horizontal_wall(1, mid + 2, 4)
        if hallway_end > 4:  # the hallway's walls (at x = 4 the room's east side)
            layout.horizontal_wall(4, mid - 1, hallway_end - 4)
            layout.horizontal_wall(4, mid + 1, hallway_end - 4)
        layout.vertical_wall(hallway_end, 0, gaps=[mid])  # the split, open to the hallway
        layout.vertical_wall(hallway_end + 2, 0)
        cue = str(rng.choice(("key", "ball")))
        swap = rng.integers(2) == 0 if self.shuffle_ends else False
        top, bottom = ("ball", "key") if swap else ("key", "ball")
        layout.put(1, mid - 1, cue, "green")
        end_x = hallway_end + 1
        layout.put(end_x, mid - 2, top, "green")
        layout.put(end_x, mid + 2, bottom, "green")
        success_y, failure_y = (mid - 1, mid + 1) if top == cue else (mid + 1, mid - 1)
        layout.put(end_x, success_y, "goal")
        layout.put(end_x, failure_y, "lava")
        last_start = START_COLUMNS[self.start] or hallway_end
        layout.restrict_spawn((1, mid, last_start + 1, mid + 1))


def parallel_env(**kwargs: Any) -> MemoryEnv:
    """A :class:`MemoryEnv` (PettingZoo ``ParallelEnv``)."""
    return MemoryEnv(**kwargs)


env = aec_from(parallel_env)
