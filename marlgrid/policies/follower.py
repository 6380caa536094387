"""A scripted follower: walks in the trail of one other agent, knowing nothing of tiles.

Registered in :data:`marlgrid.policies.POLICIES` as ``"follower"`` (``make_policy("follower")``),
so it can take any agent's slot in training roles or in :mod:`marlgrid.analysis.chance`. It
is the positive control of the following metrics (:mod:`marlgrid.metrics.following`): an agent that
does nothing but follow, set beside :class:`~marlgrid.policies.RandomPolicy`, which never does.

Three kinds of following, one class (what each pays is measured in
``experiments/results/following_pays/``):

* **locked** (the default, ``leader="locked"``): one leader per episode, the nearest allowed
  agent in play on its first step, kept until it leaves play. It enters the tiles its leader
  entered, in the leader's order: the careful follower.
* **switching** (``leader="nearest_each_step"``): the nearest agent on every step (ties keep
  the current one). Beside two experts at different points of the cycle it copies entries of
  both, out of order: a sloppy follower.
* **noisy** (``epsilon > 0``, either leader rule): a random action with that chance each step;
  it then rejoins the leader's trail where it now is: the other sloppy follower.
"""

from __future__ import annotations

import weakref
from collections.abc import Sequence

import numpy as np
from numba import njit

from marlgrid.config import ConfigError, check_int
from marlgrid.constants import DONE
from marlgrid.core import kernels as K
from marlgrid.core.engine import Engine
from marlgrid.policies.scripted import ScriptedPolicy, navigate

DEFAULT_LAG = 2
LEADER_RULES = ("locked", "nearest_each_step")
TRAIL_STEPS = 16  # how far back the follower remembers where the others went


@njit(cache=True)
def _trail_targets(trail, pos, k, leader, lag, out):
    """Where agent ``k`` heads in each env: along ``leader``'s trail ``(H, N, K, 2)`` (oldest
    first), to the first cell after its own latest place on it, never past the cell the
    leader held ``lag`` steps ago; off the trail, to that cell; there, nowhere (-1)."""
    tip = trail.shape[0] - 1 - lag
    for n in range(pos.shape[0]):
        out[n, 0], out[n, 1] = -1, -1
        m = leader[n]
        if m < 0:
            continue
        x, y = pos[n, k, 0], pos[n, k, 1]
        on = -1
        for j in range(tip, -1, -1):
            if trail[j, n, m, 0] == x and trail[j, n, m, 1] == y:
                on = j
                break
        if on < 0:
            out[n, 0], out[n, 1] = trail[tip, n, m, 0], trail[tip, n, m, 1]
            continue
        for j in range(on + 1, tip + 1):
            if trail[j, n, m, 0] != x or trail[j, n, m, 1] != y:
                out[n, 0], out[n, 1] = trail[j, n, m, 0], trail[j, n, m, 1]
                break


class _Trail:
    """Where every agent stood on the last ``TRAIL_STEPS + lag + 1`` steps, per env (oldest
    first)."""

    def __init__(self, engine: Engine, lag: int) -> None:
        steps = TRAIL_STEPS + lag + 1
        self.cells = np.repeat(engine.pos[None].astype(np.int64), steps, axis=0)
        self.last_step = np.full(engine.num_envs, -1, dtype=np.int64)
        self.leader = np.full(engine.num_envs, -1, dtype=np.int64)

    def update(self, engine: Engine) -> None:
        """Add the current positions; an env that started an episode forgets its trail."""
        steps = engine.step_count
        new = (steps == 0) | (steps < self.last_step) | (self.last_step < 0)
        self.last_step[:] = steps
        self.cells[:-1] = self.cells[1:]
        self.cells[-1] = engine.pos
        self.cells[:, new] = engine.pos[new]
        self.leader[new] = -1


class FollowerPolicy(ScriptedPolicy):
    """Walks in the trail of its leader, another agent in play, ``lag`` steps behind.

    ``leader``: ``"locked"`` (default) takes the nearest allowed agent in play (Manhattan
    distance, the lowest agent number among equals) on the episode's first step and keeps it
    until it leaves play, then takes the nearest again; ``"nearest_each_step"`` takes the
    nearest on every step, keeping the current one while no other is strictly nearer. On the
    leader's trail (the cells it held in the last :data:`TRAIL_STEPS` steps) it steps to the
    next cell the leader went to, up to the one the leader held ``lag`` steps ago, where it
    waits (``done``; it turns in place with restricted actions); off the trail it takes a
    shortest path (round goal-cycle tiles) to that cell. With nobody to follow it waits. It
    steps on a tile only where its leader went, so it enters the tiles its leader entered, a
    few steps later. ``leaders``: the agent numbers it may follow (default: every other
    agent). It reads positions only, never rewards or tile ids, so it is not an expert.
    """

    is_expert = False

    def __init__(
        self,
        seed: int | None = None,
        epsilon: float = 0.0,
        lag: int = DEFAULT_LAG,
        leaders: Sequence[int] | None = None,
        leader: str = "locked",
    ) -> None:
        self.lag = check_int("lag", lag, low=0)
        if leader not in LEADER_RULES:
            raise ConfigError(f"leader must be one of {list(LEADER_RULES)}, got {leader!r}")
        self.leader = leader
        if leaders is not None:
            leaders = [check_int("leaders", m, low=0) for m in leaders]
            if not leaders:
                raise ConfigError("leaders must name at least one agent number, got []")
        self.leaders = None if leaders is None else tuple(leaders)
        super().__init__(seed, epsilon)

    def _start(self) -> None:
        super()._start()
        self._trails: weakref.WeakKeyDictionary[Engine, dict[int, _Trail]] = (
            weakref.WeakKeyDictionary()
        )

    def __getstate__(self) -> dict:
        state = {**super().__getstate__(), "lag": self.lag, "leaders": self.leaders}
        return {**state, "leader": self.leader}

    def _planned_actions(self, engine: Engine, k: int) -> np.ndarray:
        per_agent = self._trails.setdefault(engine, {})
        if k not in per_agent:
            per_agent[k] = _Trail(engine, self.lag)
        trail = per_agent[k]
        trail.update(engine)
        rows = np.arange(engine.num_envs)
        candidates = engine.status == K.ACTIVE
        candidates[:, k] = False
        if self.leaders is not None:
            allowed = np.zeros(engine.num_agents, dtype=np.bool_)
            allowed[[m for m in self.leaders if m < engine.num_agents]] = True
            candidates &= allowed
        dist = np.abs(engine.pos - engine.pos[:, k, None]).sum(axis=2).astype(np.float64)
        kept = trail.leader >= 0
        dist[rows[kept], trail.leader[kept]] -= 0.5  # ties keep the current leader
        dist[~candidates] = np.inf
        nearest = np.where(candidates.any(axis=1), dist.argmin(axis=1), -1)
        if self.leader == "locked":  # keep a leader still in play; else take the nearest
            still = kept & candidates[rows, np.maximum(trail.leader, 0)]
            trail.leader[:] = np.where(still, trail.leader, nearest)
        else:
            trail.leader[:] = nearest
        targets = np.empty((engine.num_envs, 2), dtype=np.int64)
        _trail_targets(trail.cells, engine.pos, k, trail.leader, self.lag, targets)
        out = np.empty(engine.num_envs, dtype=np.int64)
        navigate(
            engine.grid, engine.cycle_id, engine.pos, engine.dirs, engine.status, k, targets, out
        )
        if not engine.agents[k].restrict_actions:  # wait facing the same way
            out[targets[:, 0] < 0] = DONE
        return out
