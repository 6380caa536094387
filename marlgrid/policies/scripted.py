"""Scripted reference policies for goal cycle, usable for any agent of any episode.

A scripted policy acts for one agent across a batch of envs: ``scripted_actions(engine, k) ->
(N,) int64`` (named so that it never collides with a learner's ``act``). Use
:func:`scripted_action` for a PettingZoo env and pass ``vec.engine`` for a
:class:`marlgrid.vector.VectorEnv`. One instance may serve several agents and envs: whatever a
policy remembers, its random streams included, is kept per (engine, env, agent).

* ``random``: uniform over the agent's actions.
* ``oracle``: privileged: reads the tile ids and walks a shortest path to the next correct tile,
  never stepping on a wrong one.
* ``discoverer``: the ideal non-privileged player: it knows where the tiles are but not their
  order, learns the order from its own rewards and never tries a successor that what it knows
  rules out (:class:`CycleKnowledge`).

Policies defined in other modules are registered here by path: ``follower``, ``goal_seeker``
(single-goal rooms), ``reward_blind`` and ``play_safe`` (goal-cycle baselines), ``cue_reader``
and ``cue_blind`` (the T-maze's oracle and memoryless baseline,
:mod:`marlgrid.policies.hallway_ends`).

The oracle and the discoverer take ``epsilon``: with that probability, each step, the agent
takes a uniformly random action instead (what it then enters still teaches the discoverer).
"""

from __future__ import annotations

import importlib
import warnings
import weakref
from typing import Any

import numpy as np
from numba import njit

from marlgrid.config import check_float
from marlgrid.constants import CAN_OVERLAP, CYCLE_TILE, DIR_TO_VEC, DOOR, FORWARD, LEFT, RIGHT
from marlgrid.core import kernels as K
from marlgrid.core.engine import Engine


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


@njit(cache=True)
def path_lengths(grid, n, px, py, cells, out):
    """Moves from ``(px, py)`` to each of ``cells`` ``(m, 2)`` in env ``n``, written to ``out``.

    Paths never cross a goal-cycle tile (tiles end a path); unreachable cells get ``1 << 30``.
    """
    width, height = grid.shape[1], grid.shape[2]
    dist = np.full((width, height), -1, dtype=np.int64)
    queue = np.empty((width * height, 2), dtype=np.int64)
    dist[px, py] = 0
    queue[0, 0], queue[0, 1] = px, py
    head, tail = 0, 1
    while head < tail:
        x, y = queue[head, 0], queue[head, 1]
        head += 1
        if head > 1 and grid[n, x, y, 0] == CYCLE_TILE:
            continue  # a tile is a destination, never a way through
        for d in range(4):
            nx, ny = x + DIR_TO_VEC[d, 0], y + DIR_TO_VEC[d, 1]
            if 0 <= nx < width and 0 <= ny < height and dist[nx, ny] < 0:
                t = grid[n, nx, ny, 0]
                if (t == DOOR and grid[n, nx, ny, 2] == 0) or (t != DOOR and CAN_OVERLAP[t]):
                    dist[nx, ny] = dist[x, y] + 1
                    queue[tail, 0], queue[tail, 1] = nx, ny
                    tail += 1
    for i in range(cells.shape[0]):
        d = dist[cells[i, 0], cells[i, 1]]
        out[i] = d if d >= 0 else 1 << 30


def _tile_table(engine: Engine, n_goals: int) -> np.ndarray:
    """``(num_envs, n_goals, 2)``: the cell of each tile id in every env."""
    table = np.zeros((engine.num_envs, n_goals, 2), dtype=np.int64)
    n, x, y = np.nonzero(engine.cycle_id >= 0)
    ids = engine.cycle_id[n, x, y]
    table[n, ids, 0], table[n, ids, 1] = x, y
    return table


def _agent_rng(entropy: int, k: int, stream: int) -> np.random.Generator:
    """Agent ``k``'s own generator: a shared instance draws what separate ones would."""
    return np.random.default_rng(np.random.SeedSequence(entropy, spawn_key=(k, stream)))


class ScriptedPolicy:
    """Base of the scripted policies: :meth:`scripted_actions` for agent ``k`` of every env.

    ``epsilon`` (in ``[0, 1]``): the probability of replacing each action with a uniformly
    random one of the agent's actions, drawn from a stream per (engine, agent) seeded by
    ``seed``.
    """

    _NOISE_STREAM = 1
    #: plays the task as an expert would (social metrics count its agent as an expert); a
    #: policy is not one unless its class declares it
    is_expert = False
    #: plays goal-cycle tiles only (an env without them is refused before it plays)
    needs_goal_cycle = False

    def __init__(self, seed: int | None = None, epsilon: float = 0.0) -> None:
        self.epsilon = check_float("epsilon", epsilon, 0.0, 1.0)
        self._entropy = np.random.SeedSequence(seed).entropy
        self._start()

    def _start(self) -> None:
        """Fresh per-engine state (also after unpickling: memories start afresh)."""
        self._noise: weakref.WeakKeyDictionary[Engine, dict[int, np.random.Generator]] = (
            weakref.WeakKeyDictionary()
        )

    def __getstate__(self) -> dict:
        return {"epsilon": self.epsilon, "_entropy": self._entropy}

    def __setstate__(self, state: dict) -> None:
        self.__dict__.update(state)
        self._start()

    def scripted_actions(self, engine: Engine, k: int) -> np.ndarray:
        """Actions ``(num_envs,)`` int64 of agent ``k`` in every env of ``engine``."""
        return self._noisy(engine, k, self._planned_actions(engine, k))

    def _planned_actions(self, engine: Engine, k: int) -> np.ndarray:
        raise NotImplementedError

    def _noisy(self, engine: Engine, k: int, actions: np.ndarray) -> np.ndarray:
        """``actions`` with each replaced by a uniformly random one with probability epsilon."""
        if self.epsilon == 0.0:
            return actions
        streams = self._noise.setdefault(engine, {})
        if k not in streams:
            streams[k] = _agent_rng(self._entropy, k, self._NOISE_STREAM)
        rng = streams[k]
        n_actions = 3 if engine.agents[k].restrict_actions else 7
        flip = rng.random(engine.num_envs) < self.epsilon
        return np.where(flip, rng.integers(0, n_actions, engine.num_envs), actions)

    def act(self, engine: Engine, k: int) -> np.ndarray:
        """Deprecated name of :meth:`scripted_actions` (it collided with learners' ``act``)."""
        warnings.warn(
            "scripted policies' act(engine, k) is renamed scripted_actions(engine, k)",
            DeprecationWarning,
            stacklevel=2,
        )
        return self.scripted_actions(engine, k)


class RandomPolicy(ScriptedPolicy):
    """Uniform random actions over the agent's action space (``epsilon`` changes nothing)."""

    is_expert = False

    def __init__(self, seed: int | None = None, epsilon: float = 0.0) -> None:
        super().__init__(seed, epsilon)
        self.rng = np.random.default_rng(seed)

    def __getstate__(self) -> dict:
        return {**super().__getstate__(), "rng": self.rng}

    def scripted_actions(self, engine: Engine, k: int) -> np.ndarray:
        n_actions = 3 if engine.agents[k].restrict_actions else 7
        return self.rng.integers(0, n_actions, engine.num_envs)


class OraclePolicy(ScriptedPolicy):
    """Shortest path to the next correct tile (privileged: reads tile ids and cycle state)."""

    is_expert = True
    needs_goal_cycle = True

    def _planned_actions(self, engine: Engine, k: int) -> np.ndarray:
        n_goals = np.array([r.n_goals for r in engine.episode_rules])  # each env's episode
        if (n_goals < 2).any():
            raise ValueError("the oracle policy needs a goal-cycle env (n_goals >= 2)")
        size = max(int(n_goals.max()), int(engine.cycle_id.max()) + 1)
        table = _tile_table(engine, size)
        rows = np.arange(engine.num_envs)
        last = engine.cycle_last[:, k]
        # Before the first tile any tile of the cycle starts it: head for the nearest one.
        dist = np.abs(table - engine.pos[:, k, None]).sum(axis=2)
        dist[np.arange(size) >= n_goals[:, None]] = np.iinfo(np.int64).max
        nearest = dist.argmin(axis=1)
        targets = table[rows, np.where(last >= 0, (last + 1) % n_goals, nearest)]
        out = np.empty(engine.num_envs, dtype=np.int64)
        navigate(
            engine.grid, engine.cycle_id, engine.pos, engine.dirs, engine.status, k, targets, out
        )
        return out


class CycleKnowledge:
    """What one agent knows of a hidden cycle over ``m`` tiles (indices ``0..m-1``).

    Facts are correct successions (``succ[i] = j``, with ``pred[j] = i``) and wrong ones
    (``wrong[i, j]``). A tile ``j`` can follow tile ``i`` unless

    * ``j`` is ``i``, or ``i -> j`` is known wrong;
    * ``j``'s predecessor is known (in a cycle over all tiles each tile has one predecessor, so
      a tile already known to follow one tile follows no other);
    * ``j`` starts the known chain that ends at ``i`` while that chain covers fewer than ``m``
      tiles (closing the cycle early would leave tiles out of it).

    After each fact these rules are applied until nothing changes: a tile left with one
    possible successor, or one possible predecessor, has it as a fact. :meth:`candidates`
    lists the possible successors of ``last``, the agent's last correct tile (-1 before the
    first tile, when every tile is a candidate).
    """

    def __init__(self, m: int) -> None:
        self.m = m
        self.last = -1
        self.succ = np.full(m, -1, dtype=np.int64)
        self.pred = np.full(m, -1, dtype=np.int64)
        self.wrong = np.zeros((m, m), dtype=np.bool_)

    def learn(self, tile: int, reward: float, reset_on_mistake: bool = False) -> None:
        """Take in an entry of ``tile`` that paid ``reward`` (> 0: correct, else wrong).

        The first entry of an episode starts the cycle whatever it pays.
        """
        last = self.last
        if last < 0:
            self.last = tile
        elif reward > 0:
            self._link(last, tile)
            self.last = tile
        else:
            self.wrong[last, tile] = True
            if reset_on_mistake:
                self.last = tile
        self._infer()

    def _link(self, i: int, j: int) -> None:
        self.succ[i], self.pred[j] = j, i

    def chain_start(self, tile: int) -> tuple[int, int]:
        """The first tile of the known chain ending at ``tile`` and the chain's length."""
        start, length = tile, 1
        while self.pred[start] >= 0 and length < self.m:
            start, length = int(self.pred[start]), length + 1
        return start, length

    def successors(self, i: int) -> np.ndarray:
        """Bool ``(m,)``: the tiles that can still follow tile ``i``."""
        ok = np.zeros(self.m, dtype=np.bool_)
        if self.succ[i] >= 0:
            ok[self.succ[i]] = True
            return ok
        ok[:] = (self.pred < 0) & ~self.wrong[i]
        ok[i] = False
        start, length = self.chain_start(i)
        if length < self.m:
            ok[start] = False
        return ok

    def _infer(self) -> None:
        """Turn every tile with a single possible successor or predecessor into a fact."""
        changed = True
        while changed:
            changed = False
            open_tiles = np.flatnonzero(self.succ < 0)
            if not len(open_tiles):
                return
            options = np.array([self.successors(int(i)) for i in open_tiles])
            for row, i in enumerate(open_tiles):
                if options[row].sum() == 1:
                    self._link(int(i), int(np.argmax(options[row])))
                    changed = True
                    break
            else:
                for j in np.flatnonzero(self.pred < 0):
                    able = open_tiles[options[:, j]]
                    if len(able) == 1:
                        self._link(int(able[0]), int(j))
                        changed = True
                        break

    def candidates(self) -> np.ndarray:
        """Tiles that may follow ``last`` (all before the first tile), in index order."""
        if self.last < 0:
            return np.arange(self.m)
        return np.flatnonzero(self.successors(self.last))


class _Memory:
    """What the discoverer keeps for one agent across the envs of one engine."""

    def __init__(self, entropy: int, k: int, n_envs: int) -> None:
        self.rng = _agent_rng(entropy, k, 0)
        self.cells: list[np.ndarray] = [np.zeros((0, 2), dtype=np.int64)] * n_envs
        self.known: list[CycleKnowledge] = [CycleKnowledge(0)] * n_envs
        self.started = np.zeros(n_envs, dtype=np.bool_)
        self.last_step = np.full(n_envs, -1, dtype=np.int64)
        self.prev_pos = np.full((n_envs, 2), -1, dtype=np.int64)
        self.target = np.full(n_envs, -1, dtype=np.int64)  # index into cells
        self.target_cell = np.full((n_envs, 2), -1, dtype=np.int64)

    def start(self, engine: Engine, n: int, k: int) -> None:
        """A new episode in env ``n``: the tiles' cells (shuffled, so ties break at random)."""
        cells = np.argwhere(engine.grid[n, ..., 0] == CYCLE_TILE)
        self.cells[n] = cells[self.rng.permutation(len(cells))]
        self.known[n] = CycleKnowledge(len(cells))
        self.started[n] = True
        self.prev_pos[n] = engine.pos[n, k]
        self.target[n] = -1
        self.target_cell[n] = -1


class DiscovererPolicy(ScriptedPolicy):
    """The ideal non-privileged goal-cycle player: it learns the order from its own rewards.

    It sees where the tiles are (all look alike) but not their ids. It heads for the nearest
    tile (shortest path, ties broken at random); that first entry starts its cycle. From then on
    it walks to the nearest tile among :meth:`CycleKnowledge.candidates` for the successor of
    its last correct tile: a reward confirms the successor, a penalty rules that tile out. Once
    the chain covers every tile it cycles without error. It never steps on a tile it does not
    aim at, so every entry it makes is a test it chose (random ``epsilon`` moves excepted, and
    it learns from those too).

    **Expected penalties per episode** (with ``reset_on_mistake=False``, when the order is found
    within the episode): the order is a uniformly random cycle, so whatever the agent knows
    leaves every candidate for ``last``'s successor equally likely. With ``c`` candidates it
    pays one penalty per wrong try and needs no try for the last candidate standing, so it
    pays ``0, 1, ..., c - 1`` penalties with equal chance (the successor is its ``1st, 2nd, ...,
    c-th`` try): ``(c - 1) / 2`` on average. The known chain grows one tile at a time and
    leaves ``c = n - 1, n - 2, ..., 1`` candidates, so the total is ``sum (c - 1) / 2 =
    (n - 1)(n - 2) / 4``: **0.5 with 3 tiles** (one coin flip: the first try is right or
    wrong, and then everything is known) and **1.5 with 4 tiles** (1 for the first successor
    among 3, then 0.5 among 2). No player without the ids can do better: each entry tests one
    tile for the successor of ``last``, and every order of tries among equally likely
    candidates costs the same on average. Choosing the nearest candidate therefore changes the
    steps spent, never the expected penalties.

    Its memory is kept per (engine, env, agent): one instance can serve several agents (e.g.
    ``dict.fromkeys(agents, make_policy("discoverer", 0))``) exactly as separate instances with
    the same seed would. A correct entry must pay a positive reward (``cycle_reward > 0``).
    """

    is_expert = True
    needs_goal_cycle = True

    def _start(self) -> None:
        super()._start()
        self._memory: weakref.WeakKeyDictionary[Engine, dict[int, _Memory]] = (
            weakref.WeakKeyDictionary()
        )

    def _planned_actions(self, engine: Engine, k: int) -> np.ndarray:
        n_envs = engine.num_envs
        per_agent = self._memory.setdefault(engine, {})
        if k not in per_agent:
            per_agent[k] = _Memory(self._entropy, k, n_envs)
        memory = per_agent[k]
        steps = engine.step_count
        for n in np.flatnonzero(~memory.started | (steps == 0) | (steps < memory.last_step)):
            memory.start(engine, int(n), k)  # a new episode
        memory.last_step[:] = steps
        pos = engine.pos[:, k]
        active = engine.status[:, k] == K.ACTIVE
        moved = active & (pos != memory.prev_pos).any(axis=1)
        rows = np.arange(n_envs)
        on_tile = engine.grid[rows, pos[:, 0], pos[:, 1], 0] == CYCLE_TILE
        for n in np.flatnonzero(moved & on_tile):  # entered a tile: learn, then choose anew
            tile = int(np.flatnonzero((memory.cells[n] == pos[n]).all(axis=1))[0])
            reset_on_mistake = engine.episode_rules[n].reset_on_mistake  # this episode's rules
            memory.known[n].learn(tile, float(engine.last_reward[n, k]), reset_on_mistake)
            memory.target[n] = -1
        memory.prev_pos[:] = pos
        for n in np.flatnonzero(active & (memory.target < 0)):
            self._choose(engine, memory, int(n), k)
        out = np.empty(n_envs, dtype=np.int64)
        navigate(
            engine.grid,
            engine.cycle_id,
            engine.pos,
            engine.dirs,
            engine.status,
            k,
            memory.target_cell,
            out,
        )
        return out

    @staticmethod
    def _choose(engine: Engine, memory: _Memory, n: int, k: int) -> None:
        """Aim at the nearest candidate (the first in the shuffled order among equals)."""
        cells = memory.cells[n]
        candidates = memory.known[n].candidates()
        if not len(candidates):  # knowledge contradicted (a reward misread): any other tile
            candidates = np.flatnonzero(np.arange(len(cells)) != memory.known[n].last)
        if not len(candidates):
            memory.target_cell[n] = -1
            return
        dist = np.empty(len(cells), dtype=np.int64)
        path_lengths(engine.grid, n, engine.pos[n, k, 0], engine.pos[n, k, 1], cells, dist)
        best = int(candidates[np.argmin(dist[candidates])])
        memory.target[n] = best
        memory.target_cell[n] = cells[best]


#: policy name -> its class, or ``"module:Class"`` for one defined in another module (imported
#: when first made, so that modules building on this one can add policies without an import
#: circle). Add entries with :func:`register_policy`.
POLICIES: dict[str, type[ScriptedPolicy] | str] = {
    "random": RandomPolicy,
    "oracle": OraclePolicy,
    "discoverer": DiscovererPolicy,
    "follower": "marlgrid.policies.follower:FollowerPolicy",
    "goal_seeker": "marlgrid.policies.goal_seeker:GoalSeekerPolicy",
    "reward_blind": "marlgrid.policies.baselines:RewardBlindPolicy",
    "play_safe": "marlgrid.policies.baselines:PlaySafePolicy",
    "cue_reader": "marlgrid.policies.hallway_ends:CueReaderPolicy",
    "cue_blind": "marlgrid.policies.hallway_ends:CueBlindPolicy",
}


def register_policy(name: str, cls: type[ScriptedPolicy] | str) -> None:
    """Register a scripted policy class (or its ``"module:Class"`` path) under ``name``."""
    if not isinstance(name, str) or not name:
        raise ValueError(f"a policy name must be a non-empty string, got {name!r}")
    old = POLICIES.get(name)
    if (
        old is not None
        and old != cls
        and getattr(old, "__qualname__", old) != getattr(cls, "__qualname__", cls)
    ):
        raise ValueError(f"policy {name!r} is already registered ({old!r})")
    POLICIES[name] = cls


def policy_class(name: str) -> type[ScriptedPolicy]:
    """The class registered under ``name`` (importing its module where it is given by path)."""
    if not isinstance(name, str) or name not in POLICIES:
        raise ValueError(f"unknown policy {name!r}; choose one of {sorted(POLICIES)}")
    cls = POLICIES[name]
    if isinstance(cls, str):
        module, _, attr = cls.partition(":")
        cls = POLICIES[name] = getattr(importlib.import_module(module), attr)
    return cls


def make_policy(name: str, seed: int | None = None, epsilon: float = 0.0) -> ScriptedPolicy:
    """A scripted policy by name (one of :data:`POLICIES`: ``random``, ``oracle``,
    ``discoverer``, ...).

    ``epsilon`` in ``[0, 1]``: the chance of a uniformly random action each step (see
    :class:`ScriptedPolicy`); a bad value raises :class:`~marlgrid.config.ConfigError`.
    """
    return policy_class(name)(seed, epsilon)


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
