"""``goal_seeker``: a scripted expert that knows where the goal is and walks straight to it.

Registered in :data:`marlgrid.policies.POLICIES` as ``"goal_seeker"`` (a ``"module:Class"``
path, loaded on first use), so a role ``policy: goal_seeker`` or
``make_policy("goal_seeker")`` builds it. It is the expert partner of the FourRooms and Maze
transfer maps (:mod:`marlgrid.agents.bookkeeping.transfer`) and counts as an expert for the social
metrics (``is_expert``).

Each step it reads the goal cells (``goal`` objects) of every env and moves one step along a
shortest path (:func:`marlgrid.policies.navigate`: walls and closed doors block; goal-cycle tiles
are never crossed) to the nearest one; with several goals in an env the nearest is chosen by
path length (:func:`marlgrid.policies.path_lengths`). With no path it turns in place.

In a goal cycle (every env's episode has ``n_goals >= 2`` tiles and no goal object) it falls
back to the oracle's behaviour (:class:`~marlgrid.policies.OraclePolicy`: the next correct tile).
A batch mixing goal-cycle envs with goal envs, or an env with neither, raises ``ValueError``.
"""

from __future__ import annotations

import numpy as np

from marlgrid.constants import GOAL
from marlgrid.core.engine import Engine
from marlgrid.policies.scripted import OraclePolicy, ScriptedPolicy, navigate, path_lengths


def goal_targets(engine: Engine, k: int) -> np.ndarray:
    """``(num_envs, 2)``: the goal cell agent ``k`` heads for in each env (the nearest by path
    length where an env has several); ``-1`` where an env has no goal."""
    n, x, y = np.nonzero(engine.grid[..., 0] == GOAL)
    targets = np.full((engine.num_envs, 2), -1, dtype=np.int64)
    counts = np.bincount(n, minlength=engine.num_envs)
    single = counts[n] == 1
    targets[n[single], 0], targets[n[single], 1] = x[single], y[single]
    for env in np.flatnonzero(counts > 1):
        cells = np.stack([x[n == env], y[n == env]], axis=1).astype(np.int64)
        dist = np.empty(len(cells), dtype=np.int64)
        px, py = engine.pos[env, k]
        path_lengths(engine.grid, int(env), int(px), int(py), cells, dist)
        targets[env] = cells[int(np.argmin(dist))]
    return targets


class GoalSeekerPolicy(ScriptedPolicy):
    """Shortest path to the nearest goal (privileged: it knows where the goal is).

    In goal-cycle envs it plays as the oracle (see the module docstring); ``epsilon`` is the
    chance of a uniformly random action each step, as for every scripted policy.
    """

    is_expert = True

    def _start(self) -> None:
        super()._start()
        self._oracle = OraclePolicy()

    def _planned_actions(self, engine: Engine, k: int) -> np.ndarray:
        cycle = np.array([r.n_goals >= 2 for r in engine.episode_rules])
        if cycle.all():
            return self._oracle._planned_actions(engine, k)
        if cycle.any():
            raise ValueError(
                "goal_seeker cannot act in a batch that mixes goal-cycle envs (envs "
                f"{np.flatnonzero(cycle).tolist()}) with goal envs: give it one kind"
            )
        targets = goal_targets(engine, k)
        missing = np.flatnonzero(targets[:, 0] < 0)
        if len(missing):
            raise ValueError(
                f"goal_seeker needs a goal object in every env; envs {missing.tolist()} have "
                "none (FourRooms, Maze, Empty and Cluttered have one; goal cycles use the oracle)"
            )
        out = np.empty(engine.num_envs, dtype=np.int64)
        navigate(
            engine.grid, engine.cycle_id, engine.pos, engine.dirs, engine.status, k, targets, out
        )
        return out
