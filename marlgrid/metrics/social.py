"""Social metrics per agent per episode, from what a batched env exposes each step.

:class:`SocialTracker` takes, for ``N`` envs of ``K`` agents, the state the agents act on
(positions, directions, who is in play, the engine's visibility masks, goal-cycle tile ids)
before each step and the step's actions and rewards after it. Each of the two calls is one
compiled sweep over the batch (a few microseconds), so tracking is on by default in training.
When an episode ends it yields one row per agent of these metrics:

``return``
    sum of the agent's rewards.
``rewards`` / ``penalties``
    how many rewards were positive / negative (in goal cycle: correct / wrong tile entries).
``longest_streak``
    the longest run of positive rewards with no negative one between them (a zero reward,
    such as an unpaid first tile, neither extends nor breaks a run).
``other_in_view`` / ``expert_in_view``
    the fraction of the agent's steps in play on which it saw another agent / an expert: the
    other's cell lies in the agent's view and the engine's visibility mask (occlusion
    included) marks it seen. An agent on the agent's own cell is not in view (that cell shows
    what the agent carries).
``other_distance`` / ``expert_distance``
    the mean Manhattan distance (``|dx| + |dy|``, in cells) to the nearest other agent /
    expert in play, over the agent's steps in play with at least one of them in play.
``follow_other`` / ``follow_expert``
    the fraction of the agent's correct tile entries (entering a goal-cycle tile for a
    positive reward) whose tile another agent / an expert entered (rightly or wrongly) at
    least 1 and at most ``window`` steps before, in the same episode. Beside experts who enter
    tiles often this is high for any agent (a random novice beside two oracles scores about
    0.7 on 7x7): read it against its random-novice control (:mod:`marlgrid.analysis.chance`).
``repeat_<kind>``, ``repeat_<kind>_shuffled``, ``repeat_<kind>_excess``
    the share of all the agent's tile entries that repeat an entry of the same tile by another
    agent / an expert within ``repeat_window`` steps, the same share with their entries shifted
    in time (its chance level in the same episodes) and the difference
    (:mod:`marlgrid.metrics.following`).
``order_<kind>``, ``trail_<kind>`` (each with ``_shuffled`` and ``_excess``)
    the share of the agent's tile entries that continue another agent's / an expert's
    sequence of entries in order, with any lag up to ``order_lag`` (default: the whole episode
    so far), and the share of its steps on a cell another agent / an expert held within the
    last ``trail_window`` steps (:mod:`marlgrid.metrics.following`).

Step-state metrics count the states before each step (what the agent acts on), so an episode
of ``T`` steps counts states ``0..T-1``. A tile entry is a ``forward`` action from in play
into a cell holding a tile that lands the agent there: always in ghost mode; in blocking mode
when the agent is on that cell after the step, or, in an env reset within the step (its end
state is gone), when the step paid it a nonzero reward. Experts are agent numbers given to the
tracker; an agent is never its own expert, and a metric with nobody to refer to is NaN.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
from numba import njit

from marlgrid.constants import DIR_TO_VEC, FORWARD
from marlgrid.core import kernels as K
from marlgrid.metrics.following import (
    DEFAULT_REPEAT_WINDOW,
    DEFAULT_TRAIL_WINDOW,
    NO_ENTRY,
    REPEAT_SUFFIXES,
    EntryLog,
    log_cells,
    repeat_names,
)

DEFAULT_WINDOW = 10
BASE_METRICS = ("return", "rewards", "penalties", "longest_streak")
KINDS = ("other", "expert")  # the reference sets, in the order of SocialTracker.refer
SEQUENCE_MEASURES = ("repeat", "order", "trail")  # shares with a time-shuffled control
_NEVER = -(1 << 40)  # "entered long ago": a step number no window reaches


@njit(cache=True, inline="always")
def _sees(pos, dirs, vis, view_sizes, view_offsets, n, k, m):
    """Agent ``k`` of env ``n`` sees agent ``m``'s cell (not its own) by the visibility mask."""
    dx, dy = pos[n, m, 0] - pos[n, k, 0], pos[n, m, 1] - pos[n, k, 1]
    if dx == 0 and dy == 0:
        return False
    d = dirs[n, k]
    ahead = dx * DIR_TO_VEC[d, 0] + dy * DIR_TO_VEC[d, 1]
    right = dx * DIR_TO_VEC[(d + 1) % 4, 0] + dy * DIR_TO_VEC[(d + 1) % 4, 1]
    v = view_sizes[k]
    i = right + v // 2
    j = v - 1 - view_offsets[k] - ahead
    return 0 <= i < v and 0 <= j < v and vis[n, k, i, j]


@njit(cache=True)
def _agents_in_view(pos, dirs, active, vis, view_sizes, view_offsets, out):
    n_envs, n_agents = dirs.shape
    for n in range(n_envs):
        for k in range(n_agents):
            for m in range(n_agents):
                out[n, k, m] = (
                    m != k
                    and active[n, k]
                    and active[n, m]
                    and _sees(pos, dirs, vis, view_sizes, view_offsets, n, k, m)
                )


def agents_in_view(
    pos: np.ndarray,
    dirs: np.ndarray,
    active: np.ndarray,
    vis: np.ndarray,
    view_sizes: np.ndarray,
    view_offsets: np.ndarray,
) -> np.ndarray:
    """``(N, K, K)`` bool: agent ``m`` is in play and seen by agent ``k`` (in play) in env ``n``.

    ``pos`` ``(N, K, 2)``, ``dirs`` ``(N, K)``, ``active`` ``(N, K)`` bool, ``vis`` the
    engine's masks ``(N, K, vmax, vmax)`` over each agent's egocentric view indexed ``[x, y]``
    (agent at ``(v // 2, v - 1 - view_offset)`` facing up), ``view_sizes`` and ``view_offsets``
    ``(K,)``. A cell shared with ``k`` (and ``k`` itself) is not in view.
    """
    out = np.zeros((*dirs.shape, dirs.shape[1]), dtype=np.bool_)
    _agents_in_view(
        np.asarray(pos, dtype=np.int64),
        np.asarray(dirs, dtype=np.int64),
        np.asarray(active, dtype=np.bool_),
        np.asarray(vis, dtype=np.bool_),
        np.asarray(view_sizes, dtype=np.int64),
        np.asarray(view_offsets, dtype=np.int64),
        out,
    )
    return out


def nearest_distance(pos: np.ndarray, active: np.ndarray, refer: np.ndarray) -> np.ndarray:
    """``(N, K)`` float: Manhattan distance from each agent in play to the nearest agent ``m``
    in play with ``refer[k, m]``; NaN where there is none (or the agent is out of play)."""
    dist = np.abs(pos[:, None, :, :] - pos[:, :, None, :]).sum(axis=3).astype(np.float64)
    present = active[:, None, :] & refer[None, :, :] & active[:, :, None]
    dist[~present] = np.inf
    nearest = dist.min(axis=2)
    nearest[~np.isfinite(nearest)] = np.nan
    return nearest


@njit(cache=True)
def _count_states(
    pos, dirs, active, vis, view_sizes, view_offsets, cycle_id, refer,
    steps, in_view, dist_sum, near, front, front_cell,
):  # fmt: skip
    """Add one state to the step-state counts; note the tile in front of each agent."""
    n_envs, n_agents = dirs.shape
    width, height = cycle_id.shape[1], cycle_id.shape[2]
    for n in range(n_envs):
        for k in range(n_agents):
            front[n, k] = -1
            if not active[n, k]:
                continue
            steps[n, k] += 1
            fx = pos[n, k, 0] + DIR_TO_VEC[dirs[n, k], 0]
            fy = pos[n, k, 1] + DIR_TO_VEC[dirs[n, k], 1]
            front_cell[n, k, 0], front_cell[n, k, 1] = fx, fy
            if 0 <= fx < width and 0 <= fy < height:
                front[n, k] = cycle_id[n, fx, fy]
            for r in range(refer.shape[0]):
                best, seen = -1, False
                for m in range(n_agents):
                    if not refer[r, k, m] or not active[n, m]:
                        continue
                    d = abs(pos[n, m, 0] - pos[n, k, 0]) + abs(pos[n, m, 1] - pos[n, k, 1])
                    if best < 0 or d < best:
                        best = d
                    if not seen:
                        seen = _sees(pos, dirs, vis, view_sizes, view_offsets, n, k, m)
                if seen:
                    in_view[r, n, k] += 1
                if best >= 0:
                    dist_sum[r, n, k] += best
                    near[r, n, k] += 1


@njit(cache=True)
def _count_outcomes(
    actions, rewards, pos, ended, ghost, active, front, front_cell, window, refer,
    t, ret, paid, fined, streak, longest, correct, follow, last_entry, entered, log,
):  # fmt: skip
    """Add one step's rewards and tile entries, logging the entries in ``log`` (follows are
    checked before any entry of the step is recorded, so simultaneous entries never count)."""
    n_envs, n_agents = rewards.shape
    for n in range(n_envs):
        t[n] += 1
        for k in range(n_agents):
            r = rewards[n, k]
            ret[n, k] += r
            if r > 0:
                paid[n, k] += 1
                streak[n, k] += 1
                longest[n, k] = max(longest[n, k], streak[n, k])
            elif r < 0:
                fined[n, k] += 1
                streak[n, k] = 0
            tile = front[n, k]
            entered[k] = False
            if active[n, k] and actions[n, k] == FORWARD and tile >= 0:
                if ghost[n]:
                    entered[k] = True
                elif ended[n]:
                    entered[k] = r != 0
                else:
                    entered[k] = (
                        pos[n, k, 0] == front_cell[n, k, 0] and pos[n, k, 1] == front_cell[n, k, 1]
                    )
            if entered[k] and r > 0:
                correct[n, k] += 1
                for s in range(refer.shape[0]):
                    for m in range(n_agents):
                        ago = t[n] - last_entry[n, m, tile]
                        if refer[s, k, m] and 1 <= ago <= window:
                            follow[s, n, k] += 1
                            break
        for k in range(n_agents):
            log[n, k, t[n] - 1] = front[n, k] if entered[k] else NO_ENTRY
            if entered[k]:
                last_entry[n, k, front[n, k]] = t[n]


class SocialTracker:
    """Accumulates the metrics of the module docstring for ``num_envs`` x ``num_agents``.

    Call :meth:`before_step` with the state the agents are about to act on, then
    :meth:`after_step` with the step's outcome (or :meth:`observe` and :meth:`record` with an
    engine); :meth:`pop` returns the rows of the episodes that ended since the last call.
    ``experts``: agent numbers that count as experts; ``window``: the follow window in steps;
    ``repeat_window``: that of the repeat metrics; ``order_lag``: the longest lag of the order
    metrics (None: the whole episode so far); ``trail_window``: that of the trail metrics;
    ``tiles``: whether the env has goal-cycle tiles (else the follow, repeat, order and trail
    metrics are left out).
    ``refer`` ``(2, K, K)``: whom each agent refers to (others, experts).
    """

    def __init__(
        self,
        num_envs: int,
        num_agents: int,
        view_sizes: Sequence[int],
        view_offsets: Sequence[int],
        experts: Sequence[int] = (),
        window: int = DEFAULT_WINDOW,
        tiles: bool = True,
        repeat_window: int = DEFAULT_REPEAT_WINDOW,
        order_lag: int | None = None,
        trail_window: int = DEFAULT_TRAIL_WINDOW,
    ) -> None:
        steps = [("window", window), ("repeat_window", repeat_window)]
        steps += [("trail_window", trail_window)]
        if order_lag is not None:
            steps.append(("order_lag", order_lag))
        for name, value in steps:
            if isinstance(value, bool) or not isinstance(value, int | np.integer) or value < 1:
                raise ValueError(f"{name} must be an int >= 1 (steps), got {value!r}")
        bad = [e for e in experts if not 0 <= e < num_agents]
        if bad:
            raise ValueError(f"experts {bad} are not agent numbers in [0, {num_agents})")
        n, k = self.num_envs, self.num_agents = num_envs, num_agents
        self.window, self.repeat_window, self.tiles = int(window), int(repeat_window), tiles
        self.order_lag = None if order_lag is None else int(order_lag)
        self.trail_window = int(trail_window)
        self.view_sizes = np.asarray(view_sizes, dtype=np.int64)
        self.view_offsets = np.asarray(view_offsets, dtype=np.int64)
        is_expert = np.zeros(k, dtype=np.bool_)
        is_expert[list(experts)] = True
        not_self = ~np.eye(k, dtype=np.bool_)
        self.refer = np.stack([not_self, not_self & is_expert[None, :]])
        #: (kind, env, agent): some agent it refers to was in play this episode (absent experts,
        #: e.g. in mixed training's solo envs, give NaN rather than 0)
        self._ref_seen = np.zeros((2, n, k), dtype=np.bool_)
        self.names = BASE_METRICS
        for kind, refer in zip(KINDS, self.refer, strict=True):
            if refer.any():
                per_kind = (f"{kind}_in_view", f"{kind}_distance", f"follow_{kind}")
                shares = [name for m in SEQUENCE_MEASURES for name in repeat_names(kind, m)]
                self.names += (*per_kind, *shares) if tiles else per_kind[:2]
        ints = ("paid", "fined", "streak", "longest", "correct", "steps")
        self._counts = {name: np.zeros((n, k), dtype=np.int64) for name in ints}
        self._counts["ret"] = np.zeros((n, k), dtype=np.float64)
        for name in ("in_view", "near", "follow"):
            self._counts[name] = np.zeros((2, n, k), dtype=np.int64)
        self._counts["dist_sum"] = np.zeros((2, n, k), dtype=np.int64)
        self.t = np.zeros(n, dtype=np.int64)  # steps taken in each env's episode
        self.last_entry = np.full((n, k, 1), _NEVER, dtype=np.int64)  # [env, agent, tile]
        self._active = np.zeros((n, k), dtype=np.bool_)
        self._front = np.full((n, k), -1, dtype=np.int64)
        self._front_cell = np.zeros((n, k, 2), dtype=np.int64)
        self._entered = np.zeros(k, dtype=np.bool_)
        self.entries = EntryLog(n, k)  # the tile entries of the running episodes
        self._no_tiles: np.ndarray | None = None
        self._ended: dict[str, list[np.ndarray]] = {name: [] for name in self.names}

    # -- an engine's arrays ----------------------------------------------------------------------

    @classmethod
    def for_engine(
        cls,
        engine: Any,
        experts: Sequence[int] = (),
        window: int = DEFAULT_WINDOW,
        repeat_window: int = DEFAULT_REPEAT_WINDOW,
        order_lag: int | None = None,
        trail_window: int = DEFAULT_TRAIL_WINDOW,
    ) -> SocialTracker:
        """A tracker sized for a :class:`marlgrid.core.engine.Engine` (tiles if a goal cycle is
        among the rules of its episodes, current or next)."""
        rules = getattr(engine, "episode_rules", None) or [engine.rules]
        rules = [*rules, *getattr(engine, "next_rules", [])]
        return cls(
            engine.num_envs,
            engine.num_agents,
            [a.view_size for a in engine.agents],
            [a.view_offset for a in engine.agents],
            experts,
            window,
            tiles=any(r.n_goals > 0 for r in rules),
            repeat_window=repeat_window,
            order_lag=order_lag,
            trail_window=trail_window,
        )

    def observe(self, engine: Any) -> None:
        """:meth:`before_step` with ``engine``'s current state."""
        active = engine.status == K.ACTIVE
        self.before_step(engine.pos, engine.dirs, active, engine.vis, engine.cycle_id)

    def record(
        self, engine: Any, actions: np.ndarray, rewards: np.ndarray, ended: np.ndarray | None
    ) -> None:
        """:meth:`after_step` for a step ``engine`` just took (``ended``: envs it reset)."""
        ghost = engine.rules_i[..., K.R_GHOST] != 0  # per env (or one for all)
        self.after_step(actions, rewards, engine.pos, ended, ghost)

    # -- plain arrays ----------------------------------------------------------------------------

    def before_step(
        self,
        pos: np.ndarray,
        dirs: np.ndarray,
        active: np.ndarray,
        vis: np.ndarray,
        cycle_id: np.ndarray | None = None,
    ) -> None:
        """Count the state the agents act on (arrays as for :func:`agents_in_view`;
        ``cycle_id`` ``(N, W, H)`` tile ids, -1 elsewhere)."""
        if cycle_id is None:
            if self._no_tiles is None:
                self._no_tiles = np.full((self.num_envs, 1, 1), -1, dtype=np.int16)
            cycle_id = self._no_tiles
        c = self._counts
        self._active[:] = active
        if self.tiles:
            self.entries.reserve(int(self.t.max()) + 1)
            log_cells(np.asarray(pos, dtype=np.int64), self._active, self.t,
                      cycle_id.shape[2], self.entries.cells)  # fmt: skip
        self._ref_seen |= (self._active[None, :, None, :] & self.refer[:, None]).any(axis=-1)
        _count_states(
            pos, dirs, self._active, vis, self.view_sizes, self.view_offsets, cycle_id,
            self.refer, c["steps"], c["in_view"], c["dist_sum"], c["near"], self._front,
            self._front_cell,
        )  # fmt: skip

    def after_step(
        self,
        actions: np.ndarray,
        rewards: np.ndarray,
        pos: np.ndarray,
        ended: np.ndarray | None = None,
        ghost_mode: bool | np.ndarray = True,
    ) -> None:
        """Count the step's outcome: ``actions`` and ``rewards`` ``(N, K)``, ``pos`` after the
        step, ``ended`` ``(N,)`` bool for envs whose episode ended (and were reset) in it,
        ``ghost_mode`` for all envs or ``(N,)``."""
        n = self.num_envs
        ended = np.zeros(n, dtype=np.bool_) if ended is None else np.asarray(ended, np.bool_)
        ghost = np.asarray(ghost_mode, dtype=np.bool_)
        if ghost.shape != (n,):
            ghost = np.full(n, bool(ghost))
        tiles = int(self._front.max()) + 1
        if tiles > self.last_entry.shape[2]:
            grown = np.full((n, self.num_agents, tiles), _NEVER, dtype=np.int64)
            grown[:, :, : self.last_entry.shape[2]] = self.last_entry
            self.last_entry = grown
        self.entries.reserve(int(self.t.max()) + 1)
        c = self._counts
        _count_outcomes(
            np.asarray(actions, dtype=np.int64), np.asarray(rewards, dtype=np.float64),
            np.asarray(pos, dtype=np.int64), ended, ghost, self._active,
            self._front, self._front_cell, self.window, self.refer, self.t, c["ret"], c["paid"],
            c["fined"], c["streak"], c["longest"], c["correct"], c["follow"], self.last_entry,
            self._entered, self.entries.tiles,
        )  # fmt: skip
        if ended.any():
            self._finish(np.flatnonzero(ended))

    def _finish(self, envs: np.ndarray) -> None:
        """Record the episodes of ``envs`` and clear their counts."""
        c = self._counts

        def ratio(num: np.ndarray, den: np.ndarray) -> np.ndarray:
            with np.errstate(invalid="ignore", divide="ignore"):
                return np.where(den > 0, num / np.maximum(den, 1), np.nan)

        rows = {
            "return": c["ret"][envs],
            "rewards": c["paid"][envs].astype(np.float64),
            "penalties": c["fined"][envs].astype(np.float64),
            "longest_streak": c["longest"][envs].astype(np.float64),
        }
        if self.tiles:
            lengths = self.t[envs]
            shares = {
                "repeat": self.entries.repeats(
                    envs, lengths, self.refer, self.repeat_window, self.last_entry.shape[2]
                ),
                "order": self.entries.orders(envs, lengths, self.refer, self.order_lag),
                "trail": self.entries.trails(envs, lengths, self.refer, self.trail_window),
            }
        for s, kind in enumerate(KINDS):
            nobody = ~self.refer[s].any(axis=1)  # agents with nobody to refer to
            metrics = [
                (f"{kind}_in_view", ratio(c["in_view"][s, envs], c["steps"][envs])),
                (f"{kind}_distance", ratio(c["dist_sum"][s, envs], c["near"][s, envs])),
                (f"follow_{kind}", ratio(c["follow"][s, envs], c["correct"][envs])),
            ]
            if self.tiles:
                for measure, found in shares.items():
                    names = zip(repeat_names(kind, measure), REPEAT_SUFFIXES, strict=True)
                    metrics += [(name, found[x][s]) for name, x in names]
            unseen = ~self._ref_seen[s, envs]  # every agent it refers to was out all episode
            for name, value in metrics:
                value[:, nobody] = np.nan
                value[unseen] = np.nan
                rows[name] = value
        for name in self.names:
            self._ended[name].extend(rows[name])
        for arr in c.values():
            arr[..., envs, :] = 0
        self.t[envs] = 0
        self._ref_seen[:, envs] = False
        self.last_entry[envs] = _NEVER
        self.entries.clear(envs)

    def pop(self) -> dict[str, np.ndarray]:
        """Each metric as ``(episodes, K)`` over the episodes ended since the last call."""
        out = {
            name: np.array(rows, dtype=np.float64).reshape(-1, self.num_agents)
            for name, rows in self._ended.items()
        }
        for rows in self._ended.values():
            rows.clear()
        return out


def summarize(
    episodes: dict[str, np.ndarray], agents: Sequence[str], columns: Sequence[int] | None = None
) -> dict[str, float]:
    """Log entries of :meth:`SocialTracker.pop`'s rows: ``social/<metric>`` (mean over the
    agents ``columns``, default all, of every episode) and ``social/<metric>_<agent>``; the mean
    leaves NaN rows out and is NaN with none."""
    out: dict[str, float] = {}
    cols = list(range(len(agents))) if columns is None else list(columns)
    for name, rows in episodes.items():
        out[f"social/{name}"] = _mean(rows[:, cols])
        for k, agent in enumerate(agents):
            out[f"social/{name}_{agent}"] = _mean(rows[:, k])
    return out


def _mean(values: np.ndarray) -> float:
    kept = values[~np.isnan(values)]
    return float(kept.mean()) if kept.size else float("nan")
