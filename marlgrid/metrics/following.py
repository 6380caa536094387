"""Following measured against a time-shuffled control in the same episodes.

:class:`EntryLog` keeps, for ``N`` envs of ``K`` agents, the goal-cycle tile each agent entered
on each step of the running episode (-1 for none); :class:`marlgrid.metrics.social.SocialTracker`
writes it in its compiled step sweep and, when an episode ends, asks :meth:`EntryLog.repeats`
for these metrics per agent and reference set (``other`` / ``expert``):

``repeat_<kind>``
    the share of the agent's tile entries (right or wrong) that repeat an entry of the same
    tile by an agent of the set at least 1 and at most ``window`` steps before.
``repeat_<kind>_shuffled``
    the same share with the set's entries moved in time: the whole reference entry sequence
    is shifted circularly over the episode's ``T`` steps by an offset ``o`` (step ``u`` moves
    to ``(u + o) mod T``), and the share is averaged over every offset with
    ``window < o < T - window`` (the exact mean over uniformly random such offsets, so no
    noise is added). The window looks back from each entry as for the true share, never before
    the episode's first step. It keeps how often each tile is entered by the set and by the
    agent, and breaks only their timing: the chance level of ``repeat_<kind>`` in these very
    episodes.
``repeat_<kind>_excess``
    ``repeat_<kind> - repeat_<kind>_shuffled``: following beyond chance (about 0 for an agent
    that moves independently of the set, positive for one that walks where they just went).

A share is NaN for an episode without entries by the agent; the shuffled share also where
``T <= 2 * window + 1`` (no offset qualifies). The end-of-episode sweep costs O(K^2 T) per
env and reference set, once per episode.

Two measures that see order, lag and trail (:meth:`EntryLog.orders`, :meth:`EntryLog.trails`):

``order_<kind>``
    the share of the agent's tile entries that **continue an agent of the set in order**: the
    agent's previous entry matched one of that agent's entries (the earliest entry of the same
    tile at most ``lag`` steps before it), and this entry is of the tile of that agent's
    *next* entry, made before this one and at most ``lag`` steps before it. Each agent of the
    set is matched on its own; an entry counts if it continues any of them. ``lag`` defaults to
    the whole episode so far (``None``). A follower locked on one expert scores near 1 with
    any lag up to ``lag``; one that switches between experts at different points of the cycle
    copies entries out of order and scores lower; an agent entering tiles at random continues
    by chance only. An agent that cycles the tiles on its own also continues an expert who
    cycled before it: with the whole episode as ``lag`` this measure cannot tell copying from
    knowing (read it beside ``trail_<kind>``, or with a finite ``lag``).
``trail_<kind>``
    the share of the agent's steps in play (states ``0..T-1``) on a cell that an agent of the
    set in play held at least 1 and at most ``trail_window`` steps before.
``..._shuffled`` / ``..._excess``
    as for the repeat metrics: the set's entries (or cells) shifted circularly in time by
    offsets ``o`` with ``lag < o < T - lag`` (all ``0 < o < T`` for the whole episode),
    averaged over at most :data:`SHUFFLE_OFFSETS` offsets evenly spaced in that range; and the
    measured share minus it.
"""

from __future__ import annotations

import numpy as np
from numba import njit

DEFAULT_REPEAT_WINDOW = 10
DEFAULT_TRAIL_WINDOW = 10
REPEAT_SUFFIXES = ("", "_shuffled", "_excess")
NO_ENTRY = -1
NO_CELL = -1
SHUFFLE_OFFSETS = 24
WHOLE_EPISODE = 1 << 30  # the order measure's lag when it is the whole episode so far


def repeat_names(kind: str, measure: str = "repeat") -> tuple[str, ...]:
    """The metric names of ``measure`` (``repeat``, ``order``, ``trail``) for reference set
    ``kind``: share, shuffled share, excess."""
    return tuple(f"{measure}_{kind}{suffix}" for suffix in REPEAT_SUFFIXES)


@njit(cache=True)
def _shift_offsets(period, lag):
    """The circular shifts of the shuffled controls: ``lag < o < period - lag`` (``0 < o <
    period`` when ``lag`` spans the episode), at most SHUFFLE_OFFSETS evenly spaced."""
    low, high = (1, period - 1) if lag >= period else (lag + 1, period - lag - 1)
    count = high - low + 1
    if count <= 0:
        return np.zeros(0, dtype=np.int64)
    n = min(count, SHUFFLE_OFFSETS)
    out = np.empty(n, dtype=np.int64)
    for i in range(n):
        out[i] = low + (i * count) // n
    return out


@njit(cache=True)
def _actual_and_shifted(hits):
    """The unshifted count (``hits[0]``) and the mean over the shifted ones (NaN with none)."""
    return hits[0], hits[1:].mean() if hits.shape[0] > 1 else np.nan


@njit(cache=True)
def _continues(ref_t, ref_j, nov_t, nov_j, lag, flags):
    """Mark ``flags[r]`` where novice entry ``r`` (steps ``nov_t``, tiles ``nov_j``) continues
    the reference entries (``ref_t`` sorted, ``ref_j``) in order (module docstring)."""
    anchor = -1
    for r in range(nov_t.shape[0]):
        t, tile = nov_t[r], nov_j[r]
        q = anchor + 1
        if anchor >= 0 and q < ref_t.shape[0] and ref_j[q] == tile and ref_t[q] < t:
            if t - ref_t[q] <= lag:
                flags[r] = True
                anchor = q
                continue
        anchor = -1
        for q in range(ref_t.shape[0]):
            if ref_t[q] >= t:
                break
            if ref_j[q] == tile and t - ref_t[q] <= lag:
                anchor = q
                break


@njit(cache=True)
def _entries_of(log, n, m, period, offset, out_t, out_j):
    """Agent ``m``'s entries in env ``n`` with steps shifted by ``offset`` around ``period``,
    in time order; returns how many."""
    count = 0
    for v in range(period):
        u = (v - offset) % period
        if log[n, m, u] != NO_ENTRY:
            out_t[count], out_j[count] = v, log[n, m, u]
            count += 1
    return count


@njit(cache=True)
def _order_counts(log, envs, lengths, refer, lag, continued, chance):
    """Per ended env, set ``s`` and agent ``k``: entries that continue the set in order
    (``continued[s, i, k]``) and their mean over the shifted controls (``chance``; NaN with
    no offset)."""
    n_sets, n_agents = refer.shape[0], refer.shape[1]
    for i in range(envs.shape[0]):
        n, period = envs[i], lengths[i]
        offsets = _shift_offsets(period, lag)
        nov_t = np.empty(period, dtype=np.int64)
        nov_j = np.empty(period, dtype=np.int64)
        ref_t = np.empty(period, dtype=np.int64)
        ref_j = np.empty(period, dtype=np.int64)
        flags = np.zeros(period, dtype=np.bool_)
        for s in range(n_sets):
            for k in range(n_agents):
                if not refer[s, k].any():
                    chance[s, i, k] = np.nan
                    continue
                n_nov = _entries_of(log, n, k, period, 0, nov_t, nov_j)
                hits = np.zeros(offsets.shape[0] + 1)  # unshifted, then each shift
                for o in range(offsets.shape[0] + 1):
                    shift = 0 if o == 0 else offsets[o - 1]
                    flags[:n_nov] = False
                    for m in range(n_agents):
                        if refer[s, k, m]:
                            n_ref = _entries_of(log, n, m, period, shift, ref_t, ref_j)
                            _continues(ref_t[:n_ref], ref_j[:n_ref], nov_t[:n_nov],
                                       nov_j[:n_nov], lag, flags[:n_nov])  # fmt: skip
                    hits[o] = flags[:n_nov].sum()
                continued[s, i, k], chance[s, i, k] = _actual_and_shifted(hits)


@njit(cache=True)
def _trail_counts(cells, envs, lengths, refer, window, steps, on_trail, chance):
    """Per ended env, set ``s`` and agent ``k``: states in play (``steps[i, k]``), those on a
    cell the set held 1 to ``window`` steps before (``on_trail[s, i, k]``) and their mean over
    the shifted controls (``chance``; NaN with no offset)."""
    n_sets, n_agents = refer.shape[0], refer.shape[1]
    for i in range(envs.shape[0]):
        n, period = envs[i], lengths[i]
        offsets = _shift_offsets(period, window)
        for k in range(n_agents):
            for t in range(period):
                steps[i, k] += cells[n, k, t] != NO_CELL
        for s in range(n_sets):
            for k in range(n_agents):
                if not refer[s, k].any():
                    chance[s, i, k] = np.nan
                    continue
                hits = np.zeros(offsets.shape[0] + 1)  # unshifted, then each shift
                for o in range(offsets.shape[0] + 1):
                    shift = 0 if o == 0 else offsets[o - 1]
                    for t in range(period):
                        here = cells[n, k, t]
                        if here == NO_CELL:
                            continue
                        found = False
                        for u in range(max(0, t - window), t):
                            src = (u - shift) % period
                            for m in range(n_agents):
                                if refer[s, k, m] and cells[n, m, src] == here:
                                    found = True
                                    break
                            if found:
                                break
                        hits[o] += found
                on_trail[s, i, k], chance[s, i, k] = _actual_and_shifted(hits)


@njit(cache=True)
def _circular_sum(prefix, start, length, period):
    """Sum of the values ``start, start + 1, ... (length of them)`` around a circle of
    ``period`` whose prefix sums are ``prefix`` (``period + 1`` of them)."""
    end = start + length
    if end <= period:
        return prefix[end] - prefix[start]
    return prefix[period] - prefix[start] + prefix[end - period]


@njit(cache=True)
def _repeat_counts(log, envs, lengths, refer, window, n_tiles, entries, repeats, chance):
    """Per ended env ``envs[i]`` of ``lengths[i]`` steps, agent ``k`` and reference set ``s``:
    ``entries[i, k]`` tile entries, ``repeats[s, i, k]`` of them repeating an entry of the set
    within ``window`` steps, ``chance[s, i, k]`` the repeats expected under the circular shifts
    of the module docstring (NaN where no offset qualifies)."""
    n_sets, n_agents = refer.shape[0], refer.shape[1]
    for i in range(envs.shape[0]):
        n, period = envs[i], lengths[i]
        n_offsets = period - 1 - 2 * window
        entered = np.zeros((n_tiles, period), dtype=np.bool_)
        gap = np.zeros((n_tiles, period), dtype=np.int64)  # steps back to the set's last entry
        prefix = np.zeros((n_tiles, period + 1), dtype=np.int64)
        for k in range(n_agents):
            for u in range(period):
                if log[n, k, u] != NO_ENTRY:
                    entries[i, k] += 1
        for s in range(n_sets):
            for k in range(n_agents):
                same = -1  # an earlier set of k with the same agents: same counts
                for r in range(s):
                    if (refer[r, k] == refer[s, k]).all():
                        same = r
                if same >= 0 or not refer[s, k].any():
                    repeats[s, i, k] = repeats[same, i, k] if same >= 0 else 0
                    chance[s, i, k] = chance[same, i, k] if same >= 0 else np.nan
                    continue
                entered[:] = False
                for m in range(n_agents):
                    if refer[s, k, m]:
                        for u in range(period):
                            if log[n, m, u] != NO_ENTRY:
                                entered[log[n, m, u], u] = True
                if n_offsets > 0:  # around the circle: gaps, and prefix sums of gap <= window
                    for j in range(n_tiles):
                        last = never = -3 * period
                        for v in range(period):
                            if entered[j, v]:
                                last = v - period  # the last entry, seen from the next lap
                        for v in range(period):
                            gap[j, v] = v - last if last != never else 2 * period
                            if entered[j, v]:
                                last = v
                        for v in range(period):
                            prefix[j, v + 1] = prefix[j, v] + (gap[j, v] <= window)
                total = 0.0
                for t in range(period):
                    j = log[n, k, t]
                    if j == NO_ENTRY:
                        continue
                    for u in range(max(0, t - window), t):
                        if entered[j, u]:
                            repeats[s, i, k] += 1
                            break
                    if n_offsets > 0 and t >= window:  # offsets o in (window, T - window)
                        start = (t + window + 1) % period  # v = t - o over those offsets
                        total += _circular_sum(prefix[j], start, n_offsets, period) / n_offsets
                    elif n_offsets > 0:  # the window stops at step 0, as for the true share
                        hits = 0
                        for o in range(window + 1, period - window):
                            v = t - o
                            hits += gap[j, v if v >= 0 else v + period] <= t
                        total += hits / n_offsets
                chance[s, i, k] = total if n_offsets > 0 else np.nan


class EntryLog:
    """The tile each agent entered on each step of the running episode, and the cell it stood
    on before the step, per env.

    ``tiles`` ``(N, K, capacity)`` int16: step ``u`` (0-based) of env ``n``'s episode holds the
    tile id agent ``k`` entered then, or ``NO_ENTRY``. ``cells`` ``(N, K, capacity)`` int32: the
    cell (``x * height + y``) agent ``k`` held in state ``u`` (before step ``u``), ``NO_CELL``
    out of play. :meth:`reserve` grows both before a step would pass their end; :meth:`clear`
    empties the rows of envs whose episode ended.
    """

    def __init__(self, num_envs: int, num_agents: int, capacity: int = 256) -> None:
        self.tiles = np.full((num_envs, num_agents, capacity), NO_ENTRY, dtype=np.int16)
        self.cells = np.full((num_envs, num_agents, capacity), NO_CELL, dtype=np.int32)

    def reserve(self, steps: int) -> None:
        """Room for episodes of at least ``steps`` steps (capacity doubles as needed)."""
        capacity = self.tiles.shape[2]
        if steps <= capacity:
            return
        while capacity < steps:
            capacity *= 2
        for name, empty in (("tiles", NO_ENTRY), ("cells", NO_CELL)):
            old = getattr(self, name)
            grown = np.full((*old.shape[:2], capacity), empty, dtype=old.dtype)
            grown[:, :, : old.shape[2]] = old
            setattr(self, name, grown)

    def orders(
        self, envs: np.ndarray, lengths: np.ndarray, refer: np.ndarray, lag: int | None = None
    ) -> dict[str, np.ndarray]:
        """``order_*`` share, shuffled share and excess ``(S, len(envs), K)`` (keys as
        :data:`REPEAT_SUFFIXES`; ``lag`` None: the whole episode so far)."""
        envs, lengths, entries = self._ended(envs, lengths)
        continued = np.zeros((refer.shape[0], len(envs), refer.shape[1]), dtype=np.int64)
        chance = np.zeros(continued.shape, dtype=np.float64)
        lag = WHOLE_EPISODE if lag is None else int(lag)
        _order_counts(self.tiles, envs, lengths, refer, lag, continued, chance)
        return _shares(continued, chance, entries)

    def trails(
        self, envs: np.ndarray, lengths: np.ndarray, refer: np.ndarray, window: int
    ) -> dict[str, np.ndarray]:
        """``trail_*`` share, shuffled share and excess ``(S, len(envs), K)`` over the states
        each agent was in play."""
        envs, lengths, _ = self._ended(envs, lengths)
        steps = np.zeros((len(envs), refer.shape[1]), dtype=np.int64)
        on_trail = np.zeros((refer.shape[0], *steps.shape), dtype=np.int64)
        chance = np.zeros(on_trail.shape, dtype=np.float64)
        _trail_counts(self.cells, envs, lengths, refer, int(window), steps, on_trail, chance)
        return _shares(on_trail, chance, steps)

    def _ended(self, envs: np.ndarray, lengths: np.ndarray) -> tuple[np.ndarray, ...]:
        envs = np.asarray(envs, dtype=np.int64)
        lengths = np.asarray(lengths, dtype=np.int64)
        entries = np.array(
            [
                (self.tiles[n, :, :t] != NO_ENTRY).sum(axis=1)
                for n, t in zip(envs, lengths, strict=True)
            ],
            dtype=np.int64,
        ).reshape(len(envs), self.tiles.shape[1])
        return envs, lengths, entries

    def repeats(
        self,
        envs: np.ndarray,
        lengths: np.ndarray,
        refer: np.ndarray,
        window: int,
        n_tiles: int,
    ) -> dict[str, np.ndarray]:
        """Share, shuffled share and excess ``(S, len(envs), K)`` (keys as
        :data:`REPEAT_SUFFIXES`) for the episodes of ``envs`` that lasted ``lengths`` steps,
        per reference set ``refer`` ``(S, K, K)`` (``refer[s, k, m]``: ``m`` is in ``k``'s set)."""
        envs = np.asarray(envs, dtype=np.int64)
        lengths = np.asarray(lengths, dtype=np.int64)
        n_sets, n_agents = refer.shape[0], refer.shape[1]
        entries = np.zeros((len(envs), n_agents), dtype=np.int64)
        repeats = np.zeros((n_sets, len(envs), n_agents), dtype=np.int64)
        chance = np.zeros((n_sets, len(envs), n_agents), dtype=np.float64)
        _repeat_counts(
            self.tiles, envs, lengths, refer, window, max(n_tiles, 1), entries, repeats, chance
        )
        return _shares(repeats, chance, entries)

    def clear(self, envs: np.ndarray) -> None:
        self.tiles[envs] = NO_ENTRY
        self.cells[envs] = NO_CELL


@njit(cache=True)
def log_cells(pos, active, t, height, cells):
    """Write each agent's cell of the state before step ``t[n]`` (``NO_CELL`` out of play)."""
    for n in range(pos.shape[0]):
        for k in range(pos.shape[1]):
            cells[n, k, t[n]] = pos[n, k, 0] * height + pos[n, k, 1] if active[n, k] else NO_CELL


def _shares(hits: np.ndarray, chance: np.ndarray, counts: np.ndarray) -> dict[str, np.ndarray]:
    """Share, shuffled share and excess from counts ``(S, E, K)`` over ``counts`` ``(E, K)``
    (NaN where the agent has nothing to count)."""
    with np.errstate(invalid="ignore", divide="ignore"):
        share = np.where(counts > 0, hits / np.maximum(counts, 1), np.nan)
        shuffled = np.where(counts > 0, chance / np.maximum(counts, 1), np.nan)
    return {"": share, "_shuffled": shuffled, "_excess": share - shuffled}
