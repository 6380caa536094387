"""Encoding tables, bit-identical to MiniGrid's, plus marlgrid's additions.

A cell is encoded as three uint8 values ``(type, color, state)``. Object, color, state and
direction ids are MiniGrid's; marlgrid's additions take ids after them so that MiniGrid models and
wrappers keep working.
"""

from __future__ import annotations

import numpy as np

OBJECT_TO_IDX: dict[str, int] = {
    "unseen": 0,
    "empty": 1,
    "wall": 2,
    "floor": 3,
    "door": 4,
    "key": 5,
    "ball": 6,
    "box": 7,
    "goal": 8,
    "lava": 9,
    "agent": 10,
    # marlgrid additions
    "cycle_tile": 11,
}
IDX_TO_OBJECT = {v: k for k, v in OBJECT_TO_IDX.items()}
N_TYPES = len(OBJECT_TO_IDX)

UNSEEN, EMPTY, WALL, FLOOR, DOOR, KEY, BALL, BOX, GOAL, LAVA, AGENT, CYCLE_TILE = range(N_TYPES)

COLOR_TO_IDX: dict[str, int] = {
    "red": 0,
    "green": 1,
    "blue": 2,
    "purple": 3,
    "yellow": 4,
    "grey": 5,
}
IDX_TO_COLOR = {v: k for k, v in COLOR_TO_IDX.items()}
N_BASE_COLORS = len(COLOR_TO_IDX)

COLORS_RGB: dict[str, tuple[int, int, int]] = {
    "red": (255, 0, 0),
    "green": (0, 255, 0),
    "blue": (0, 0, 255),
    "purple": (112, 39, 195),
    "yellow": (255, 255, 0),
    "grey": (100, 100, 100),
}

#: Prestige colors: an agent with ``color="prestige"`` is encoded with color id
#: ``PRESTIGE_COLOR_BASE + level`` where ``level = round(tanh(p / scale) * (PRESTIGE_LEVELS - 1))``.
#: Level 0 is pure red (a fresh or just-penalized agent), the top level pure blue.
PRESTIGE_LEVELS = 16
PRESTIGE_COLOR_BASE = N_BASE_COLORS
N_COLORS = N_BASE_COLORS + PRESTIGE_LEVELS

STATE_TO_IDX: dict[str, int] = {"open": 0, "closed": 1, "locked": 2}
DOOR_OPEN, DOOR_CLOSED, DOOR_LOCKED = 0, 1, 2
#: The state channel also holds an agent's direction (0..3), hence 4 values.
N_STATES = 4

#: Direction ids: 0 east (+x), 1 south (+y), 2 west (-x), 3 north (-y).
DIR_TO_VEC = np.array([[1, 0], [0, 1], [-1, 0], [0, -1]], dtype=np.int64)

ACTIONS: tuple[str, ...] = ("left", "right", "forward", "pickup", "drop", "toggle", "done")
LEFT, RIGHT, FORWARD, PICKUP, DROP, TOGGLE, DONE = range(len(ACTIONS))


def _table(names: tuple[str, ...]) -> np.ndarray:
    table = np.zeros(N_TYPES, dtype=np.bool_)
    for name in names:
        table[OBJECT_TO_IDX[name]] = True
    return table


#: Property tables indexed by object type. A new object is a row in each.
#: Doors are special-cased on their state: passable and transparent only when open.
CAN_OVERLAP = _table(("empty", "floor", "goal", "lava", "cycle_tile", "door"))
SEE_BEHIND = _table(
    (
        "unseen",
        "empty",
        "floor",
        "door",
        "key",
        "ball",
        "box",
        "goal",
        "lava",
        "agent",
        "cycle_tile",
    )
)
CAN_PICKUP = _table(("key", "ball", "box"))

#: Object types a user may name in ``hide``.
HIDEABLE = tuple(n for n in OBJECT_TO_IDX if n not in ("unseen", "empty"))
