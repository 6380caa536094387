"""Scripted reference policies for goal cycle, usable for any agent of any episode.

A scripted policy acts for one agent across a batch of envs: ``scripted_actions(engine, k) ->
(N,) int64`` (named so that it never collides with a learner's ``act``). Use
:func:`scripted_action` for a PettingZoo env and pass ``vec.engine`` for a
:class:`marlgrid.vector.VectorEnv`. One instance may serve several agents and envs: whatever a
policy remembers is kept per (engine, env, agent).

* ``random``: uniform over the agent's actions.
* ``oracle``: privileged: reads the tile ids and walks a shortest path to the next correct tile,
  never stepping on a wrong one.
* ``discoverer``: knows where the tiles are but not their order; it learns the order by trial
  within the episode (a penalty marks a wrong successor, a reward a right one), then cycles.
"""

from __future__ import annotations

import warnings
import weakref
from typing import Any

import numpy as np
from numba import njit

from marlgrid import kernels as K
from marlgrid.constants import CAN_OVERLAP, CYCLE_TILE, DIR_TO_VEC, DOOR, FORWARD, LEFT, RIGHT
from marlgrid.engine import Engine

POLICIES = ("random", "oracle", "discoverer")


@njit(cache=True)
def _walkable(grid, cycle_id, n, x, y, tx, ty):
    t = grid[n, x, y, 0]
    if t == CYCLE_TILE:
        return x == tx and y == ty  # never step on any other tile
    if t == DOOR:
        return grid[n, x, y, 2] == 0
    return CAN_OVERLAP[t]


@njit(cache=True)
def navigate(grid, cycle_id, pos, dirs, status, k, targets, out):
    """Action moving agent ``k`` one step along a shortest path to ``targets[n]`` in each env.

    Paths avoid every goal-cycle tile but the target. With no target (``-1``) or no path the
    agent turns in place.
    """
    n_envs, width, height = grid.shape[0], grid.shape[1], grid.shape[2]
    dist = np.empty((width, height), dtype=np.int64)
    queue = np.empty((width * height, 2), dtype=np.int64)
    for n in range(n_envs):
        out[n] = LEFT  # valid even with restricted actions; ignored for agents out of play
        if status[n, k] != K.ACTIVE:
            continue
        tx, ty = targets[n, 0], targets[n, 1]
        if tx < 0:
            out[n] = LEFT
            continue
        dist[:] = -1
        dist[tx, ty] = 0
        queue[0, 0], queue[0, 1] = tx, ty
        head, tail = 0, 1
        while head < tail:
            x, y = queue[head, 0], queue[head, 1]
            head += 1
            for d in range(4):
                nx, ny = x + DIR_TO_VEC[d, 0], y + DIR_TO_VEC[d, 1]
                if 0 <= nx < width and 0 <= ny < height and dist[nx, ny] < 0:
                    if _walkable(grid, cycle_id, n, nx, ny, tx, ty):
                        dist[nx, ny] = dist[x, y] + 1
                        queue[tail, 0], queue[tail, 1] = nx, ny
                        tail += 1
        px, py = pos[n, k, 0], pos[n, k, 1]
        best_d, best = -1, 1 << 30
        for d in range(4):
            nx, ny = px + DIR_TO_VEC[d, 0], py + DIR_TO_VEC[d, 1]
            if 0 <= nx < width and 0 <= ny < height and 0 <= dist[nx, ny] < best:
                best, best_d = dist[nx, ny], d
        if best_d < 0:
            out[n] = LEFT
        elif best_d == dirs[n, k]:
            out[n] = FORWARD
        elif best_d == (dirs[n, k] + 1) % 4:
            out[n] = RIGHT
        else:
            out[n] = LEFT


def _tile_cells(engine: Engine) -> list[np.ndarray]:
    """Per env, the ``(n_goals, 2)`` cells of the tiles ordered by id."""
    cells = []
    for n in range(engine.num_envs):
        ids = engine.cycle_id[n]
        order = np.argwhere(ids >= 0)
        order = order[np.argsort(ids[order[:, 0], order[:, 1]])]
        cells.append(order)
    return cells


class ScriptedPolicy:
    """Base of the scripted policies: :meth:`scripted_actions` for agent ``k`` of every env."""

    def scripted_actions(self, engine: Engine, k: int) -> np.ndarray:
        """Actions ``(num_envs,)`` int64 of agent ``k`` in every env of ``engine``."""
        raise NotImplementedError

    def act(self, engine: Engine, k: int) -> np.ndarray:
        """Deprecated name of :meth:`scripted_actions` (it collided with learners' ``act``)."""
        warnings.warn(
            "scripted policies' act(engine, k) is renamed scripted_actions(engine, k)",
            DeprecationWarning,
            stacklevel=2,
        )
        return self.scripted_actions(engine, k)


class RandomPolicy(ScriptedPolicy):
    """Uniform random actions over the agent's action space."""

    def __init__(self, seed: int | None = None) -> None:
        self.rng = np.random.default_rng(seed)

    def scripted_actions(self, engine: Engine, k: int) -> np.ndarray:
        n_actions = 3 if engine.agents[k].restrict_actions else 7
        return self.rng.integers(0, n_actions, engine.num_envs)


class OraclePolicy(ScriptedPolicy):
    """Shortest path to the next correct tile (privileged: reads tile ids and cycle state)."""

    def __init__(self, seed: int | None = None) -> None:
        pass  # deterministic and stateless; the seed is accepted for a uniform signature

    def scripted_actions(self, engine: Engine, k: int) -> np.ndarray:
        n_goals = engine.rules.n_goals
        if n_goals < 2:
            raise ValueError("the oracle policy needs a goal-cycle env (n_goals >= 2)")
        targets = np.full((engine.num_envs, 2), -1, dtype=np.int64)
        for n, cells in enumerate(_tile_cells(engine)):
            last = engine.cycle_last[n, k]
            if last >= 0:
                targets[n] = cells[(last + 1) % n_goals]
            else:  # any tile starts the cycle: head for the nearest one
                d = np.abs(cells - engine.pos[n, k]).sum(axis=1)
                targets[n] = cells[int(np.argmin(d))]
        out = np.empty(engine.num_envs, dtype=np.int64)
        navigate(
            engine.grid, engine.cycle_id, engine.pos, engine.dirs, engine.status, k, targets, out
        )
        return out


class _AgentMemory:
    """What the discoverer remembers for one agent across the envs of one engine."""

    def __init__(self, entropy: int, k: int, n_envs: int) -> None:
        # A stream per agent number: a shared instance draws what separate ones would.
        self.rng = np.random.default_rng(np.random.SeedSequence(entropy, spawn_key=(k,)))
        self.state: list[dict | None] = [None] * n_envs
        self.last_step = [-1] * n_envs


class DiscovererPolicy(ScriptedPolicy):
    """Learns the tile order by trial within each episode, then cycles (not privileged).

    It knows where the tiles are (all look alike) but not their ids; it watches its own rewards.
    Its memory is kept per (engine, env, agent): one instance can serve several agents (e.g.
    ``dict.fromkeys(agents, make_policy("discoverer", 0))``) exactly as separate instances with
    the same seed would.
    """

    def __init__(self, seed: int | None = None) -> None:
        self._entropy = np.random.SeedSequence(seed).entropy
        self._memory: weakref.WeakKeyDictionary[Engine, dict[int, _AgentMemory]] = (
            weakref.WeakKeyDictionary()
        )

    def __getstate__(self) -> dict:
        return {"_entropy": self._entropy}  # memories are per engine and start afresh

    def __setstate__(self, state: dict) -> None:
        self.__init__()
        self._entropy = state["_entropy"]

    @staticmethod
    def _fresh(engine: Engine, n: int, rng: np.random.Generator) -> dict:
        cells = np.argwhere(engine.cycle_id[n] >= 0)
        order = rng.permutation(len(cells))
        return {
            "cells": [tuple(int(v) for v in c) for c in cells[order]],
            "last": None,  # index into cells of the agent's last correct tile
            "succ": {},  # tile index -> known successor index
            "wrong": {},  # tile index -> set of indices known to be wrong after it
            "target": None,
            "prev_pos": None,
        }

    def scripted_actions(self, engine: Engine, k: int) -> np.ndarray:
        n_envs = engine.num_envs
        per_agent = self._memory.setdefault(engine, {})
        if k not in per_agent:
            per_agent[k] = _AgentMemory(self._entropy, k, n_envs)
        memory = per_agent[k]
        targets = np.full((n_envs, 2), -1, dtype=np.int64)
        for n in range(n_envs):
            t = int(engine.step_count[n])
            s = memory.state[n]
            if s is None or t == 0 or t < memory.last_step[n]:  # a new episode
                s = memory.state[n] = self._fresh(engine, n, memory.rng)
            memory.last_step[n] = t
            here = (int(engine.pos[n, k, 0]), int(engine.pos[n, k, 1]))
            if engine.status[n, k] == K.ACTIVE and here != s["prev_pos"]:
                if here in s["cells"]:
                    self._learn(s, s["cells"].index(here), float(engine.last_reward[n, k]), engine)
            s["prev_pos"] = here
            s["target"] = self._choose(s)
            if s["target"] is not None:
                targets[n] = s["cells"][s["target"]]
        out = np.empty(n_envs, dtype=np.int64)
        navigate(
            engine.grid, engine.cycle_id, engine.pos, engine.dirs, engine.status, k, targets, out
        )
        return out

    @staticmethod
    def _learn(s: dict, tile: int, reward: float, engine: Engine) -> None:
        last = s["last"]
        if last is None:
            s["last"] = tile
        elif reward > 0:
            s["succ"][last] = tile
            s["last"] = tile
        elif reward < 0:
            s["wrong"].setdefault(last, set()).add(tile)
            if engine.rules.reset_on_mistake:
                s["last"] = tile

    @staticmethod
    def _choose(s: dict) -> int | None:
        n = len(s["cells"])
        last = s["last"]
        if last is None:
            return 0 if n else None
        if last in s["succ"]:
            return s["succ"][last]
        tried = s["wrong"].get(last, set())
        known = set(s["succ"].values())
        for cand in range(n):
            if cand != last and cand not in tried and cand not in known:
                return cand
        for cand in range(n):
            if cand != last and cand not in tried:
                return cand
        return None


_CLASSES = {"random": RandomPolicy, "oracle": OraclePolicy, "discoverer": DiscovererPolicy}


def make_policy(name: str, seed: int | None = None) -> ScriptedPolicy:
    """A scripted policy by name: ``random``, ``oracle`` or ``discoverer``."""
    if not isinstance(name, str) or name not in _CLASSES:
        raise ValueError(f"unknown policy {name!r}; choose one of {list(POLICIES)}")
    return _CLASSES[name](seed)


def scripted_action(policy: Any, env: Any, agent: str) -> int:
    """One action of scripted ``policy`` for ``agent`` of a PettingZoo marlgrid env."""
    return int(policy.scripted_actions(env.engine, env.possible_agents.index(agent))[0])


def act(policy: Any, env: Any, agent: str) -> int:
    """Deprecated name of :func:`scripted_action`."""
    warnings.warn(
        "marlgrid.policies.act is renamed scripted_action", DeprecationWarning, stacklevel=2
    )
    if not hasattr(policy, "scripted_actions") and hasattr(policy, "act"):  # an old-style policy
        return int(policy.act(env.engine, env.possible_agents.index(agent))[0])
    return scripted_action(policy, env, agent)


def run_episode(env: Any, policies: dict[str, Any], seed: int | None = None) -> dict[str, float]:
    """Play one episode of a PettingZoo marlgrid env; returns each agent's return.

    ``policies`` as for :func:`marlgrid.episode.run_episode`, which this calls.
    """
    from marlgrid.episode import run_episode as run

    return run(env, policies, seed=seed).returns
