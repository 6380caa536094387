"""Scripted baselines of the memory test (:mod:`marlgrid.envs.memory`, the T-maze): what a
policy that remembers the cue scores there, and what one that ignores it scores.

Both walk a shortest path (:func:`marlgrid.policies.navigate`) to one of the two task cells at
the hallway's end, the goal and the lava tile that no agent sees; they are registered in
:data:`marlgrid.policies.POLICIES` by path.

* ``cue_reader`` (:class:`CueReaderPolicy`): the oracle. It heads for the success cell, the one
  a player that read the cue and kept it in mind would choose; its return is the task's
  ceiling (MiniGrid's decayed reward of the shortest walk).
* ``cue_blind`` (:class:`CueBlindPolicy`): the memoryless baseline. It always takes the top end,
  whatever the cue, so it succeeds in the half of the episodes whose cue names that end: what a
  policy that cannot carry the cue down the hallway gets.
"""

from __future__ import annotations

import numpy as np

from marlgrid.constants import LAVA
from marlgrid.core.engine import Engine
from marlgrid.policies.goal_seeker import goal_targets
from marlgrid.policies.scripted import ScriptedPolicy, navigate

__all__ = ["CueBlindPolicy", "CueReaderPolicy"]


def _hallway_ends(engine: Engine, k: int, name: str) -> tuple[np.ndarray, np.ndarray]:
    """``(num_envs, 2)`` each: the success (goal) and failure (lava) cell of every env."""
    goals = goal_targets(engine, k)
    n, x, y = np.nonzero(engine.grid[..., 0] == LAVA)
    lavas = np.full((engine.num_envs, 2), -1, dtype=np.int64)
    lavas[n, 0], lavas[n, 1] = x, y
    if (goals < 0).any() or (lavas < 0).any():
        raise ValueError(
            f"the {name} policy needs the memory test's goal and lava cells in every env "
            "(a MarlGrid-Memory* env)"
        )
    return goals, lavas


def _walk_to(engine: Engine, k: int, targets: np.ndarray) -> np.ndarray:
    out = np.empty(engine.num_envs, dtype=np.int64)
    navigate(engine.grid, engine.cycle_id, engine.pos, engine.dirs, engine.status, k, targets, out)
    return out


class CueReaderPolicy(ScriptedPolicy):
    """Walks to the success cell: the memory test's oracle (privileged: it reads the hidden
    goal's cell rather than the cue, which names the same cell)."""

    def _planned_actions(self, engine: Engine, k: int) -> np.ndarray:
        goals, _ = _hallway_ends(engine, k, "cue_reader")
        return _walk_to(engine, k, goals)


class CueBlindPolicy(ScriptedPolicy):
    """Walks to the top end of the hallway's split whatever the cue: the memoryless baseline
    (it succeeds where the cue names the top end, half of the episodes)."""

    is_expert = False

    def _planned_actions(self, engine: Engine, k: int) -> np.ndarray:
        goals, lavas = _hallway_ends(engine, k, "cue_blind")
        top = np.where((goals[:, 1] < lavas[:, 1])[:, None], goals, lavas)
        return _walk_to(engine, k, top)
