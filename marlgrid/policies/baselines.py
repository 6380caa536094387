"""Scripted goal-cycle baselines that play without reading rewards: what a learner can score
with perfect navigation and nothing else (DESIGN.md §7, "Chance and ceilings first").

Both are :class:`~marlgrid.policies.ScriptedPolicy` classes registered in
:data:`marlgrid.policies.POLICIES` by path (``"marlgrid.policies.baselines:..."``), so roles,
evaluation and ``make_policy`` reach them by name. Neither counts as an expert
(``is_expert = False``).

* ``reward_blind`` (:class:`RewardBlindPolicy`), the reward-blind cycler: it walks shortest
  paths to the tiles (never crossing one it does not aim at) but never reads a reward. It
  enters the nearest tile first, then picks a random order of the other tiles there and cycles
  through that order for the rest of the episode. With 3 tiles the order is one of the two
  directions round the cycle, each with chance 1/2: the right one pays every entry; the wrong
  one enters the tile before the last correct one (a penalty), then the one after it (paid),
  and so on, so an entry after the first is worth ``0.5 + (1 - penalty) / 4`` on average.
* ``play_safe`` (:class:`PlaySafePolicy`): it takes the free first tile (the nearest) and then
  never enters a tile again; it wanders at random (left, right, or forward where the cell ahead
  is not a tile). Its return is the first tile's reward (1 on the canonical task) in every
  episode where it reaches a tile, whatever the penalty.

``epsilon`` replaces actions by uniformly random ones as for every scripted policy (those may
enter tiles; the cycler then goes on from the tile it entered).
"""

from __future__ import annotations

import weakref

import numpy as np

from marlgrid.constants import CYCLE_TILE, DIR_TO_VEC, FORWARD, LEFT, RIGHT
from marlgrid.core import kernels as K
from marlgrid.core.engine import Engine
from marlgrid.policies.scripted import ScriptedPolicy, navigate, path_lengths

__all__ = ["PlaySafePolicy", "RewardBlindPolicy"]


class _Walks:
    """What one agent of one engine remembers across its envs: the tiles' cells of each
    episode (shuffled, so ties break at random), its route round them and its current target."""

    def __init__(self, entropy: int, k: int, n_envs: int) -> None:
        self.rng = np.random.default_rng(np.random.SeedSequence(entropy, spawn_key=(k, 2)))
        self.cells: list[np.ndarray] = [np.zeros((0, 2), dtype=np.int64)] * n_envs
        self.route: list[np.ndarray | None] = [None] * n_envs  # cell indices, in visiting order
        self.at = np.full(n_envs, -1, dtype=np.int64)  # index into route of the last tile entered
        self.entries = np.zeros(n_envs, dtype=np.int64)  # tiles entered this episode
        self.started = np.zeros(n_envs, dtype=np.bool_)
        self.last_step = np.full(n_envs, -1, dtype=np.int64)
        self.prev_pos = np.full((n_envs, 2), -1, dtype=np.int64)
        self.target_cell = np.full((n_envs, 2), -1, dtype=np.int64)

    def start(self, engine: Engine, n: int, k: int) -> None:
        """A new episode in env ``n``: aim at the nearest tile."""
        cells = np.argwhere(engine.grid[n, ..., 0] == CYCLE_TILE)
        self.cells[n] = cells = cells[self.rng.permutation(len(cells))]
        self.route[n] = None
        self.at[n] = -1
        self.entries[n] = 0
        self.started[n] = True
        self.prev_pos[n] = engine.pos[n, k]
        self.target_cell[n] = -1
        if len(cells):
            dist = np.empty(len(cells), dtype=np.int64)
            path_lengths(engine.grid, n, engine.pos[n, k, 0], engine.pos[n, k, 1], cells, dist)
            self.target_cell[n] = cells[int(np.argmin(dist))]

    def entered(self, engine: Engine, k: int) -> np.ndarray:
        """Bring every env up to date; return the envs where agent ``k`` just entered a tile."""
        steps = engine.step_count
        for n in np.flatnonzero(~self.started | (steps == 0) | (steps < self.last_step)):
            self.start(engine, int(n), k)  # a new episode
        self.last_step[:] = steps
        pos = engine.pos[:, k]
        active = engine.status[:, k] == K.ACTIVE
        moved = active & (pos != self.prev_pos).any(axis=1)
        rows = np.arange(engine.num_envs)
        on_tile = engine.grid[rows, pos[:, 0], pos[:, 1], 0] == CYCLE_TILE
        self.prev_pos[:] = pos
        entered = np.flatnonzero(moved & on_tile)
        self.entries[entered] += 1
        return entered

    def tile_index(self, n: int, cell: np.ndarray) -> int:
        return int(np.flatnonzero((self.cells[n] == cell).all(axis=1))[0])


class _TileWalker(ScriptedPolicy):
    """Base of the baselines: a :class:`_Walks` memory per (engine, agent)."""

    is_expert = False
    needs_goal_cycle = True

    def _start(self) -> None:
        super()._start()
        self._walks: weakref.WeakKeyDictionary[Engine, dict[int, _Walks]] = (
            weakref.WeakKeyDictionary()
        )

    def _walks_of(self, engine: Engine, k: int) -> _Walks:
        per_agent = self._walks.setdefault(engine, {})
        if k not in per_agent:
            per_agent[k] = _Walks(self._entropy, k, engine.num_envs)
        return per_agent[k]

    @staticmethod
    def _navigate(engine: Engine, k: int, targets: np.ndarray) -> np.ndarray:
        out = np.empty(engine.num_envs, dtype=np.int64)
        navigate(
            engine.grid, engine.cycle_id, engine.pos, engine.dirs, engine.status, k, targets, out
        )
        return out


class RewardBlindPolicy(_TileWalker):
    """The reward-blind cycler (see the module docstring): the nearest tile, then a random order
    of the others, kept for the episode; rewards are never read."""

    def _planned_actions(self, engine: Engine, k: int) -> np.ndarray:
        walks = self._walks_of(engine, k)
        for n in walks.entered(engine, k):
            n = int(n)
            tile = walks.tile_index(n, engine.pos[n, k])
            route = walks.route[n]
            if route is None:  # the first tile: choose the order round the others, for good
                others = np.flatnonzero(np.arange(len(walks.cells[n])) != tile)
                route = walks.route[n] = np.array([tile, *walks.rng.permutation(others)])
            walks.at[n] = int(np.flatnonzero(route == tile)[0])
            walks.target_cell[n] = walks.cells[n][route[(walks.at[n] + 1) % len(route)]]
        return self._navigate(engine, k, walks.target_cell)


class PlaySafePolicy(_TileWalker):
    """Takes the free first tile, then never enters a tile again (see the module docstring)."""

    def _planned_actions(self, engine: Engine, k: int) -> np.ndarray:
        walks = self._walks_of(engine, k)
        walks.entered(engine, k)
        out = self._navigate(engine, k, walks.target_cell)
        done = walks.entries > 0
        if done.any():
            wander = walks.rng.choice(np.array([LEFT, RIGHT, FORWARD]), engine.num_envs)
            rows = np.arange(engine.num_envs)
            ahead = engine.pos[:, k] + DIR_TO_VEC[engine.dirs[:, k]]
            x = np.clip(ahead[:, 0], 0, engine.width - 1)
            y = np.clip(ahead[:, 1], 0, engine.height - 1)
            tile_ahead = engine.grid[rows, x, y, 0] == CYCLE_TILE
            wander[(wander == FORWARD) & tile_ahead] = LEFT
            out[done] = wander[done]
        return out
