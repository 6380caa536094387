"""Following measured against a time-shuffled control in the same episodes.

:class:`EntryLog` keeps, for ``N`` envs of ``K`` agents, the goal-cycle tile each agent entered
on each step of the running episode (-1 for none); :class:`marlgrid.social.SocialTracker`
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
"""

from __future__ import annotations

import numpy as np
from numba import njit

DEFAULT_REPEAT_WINDOW = 10
REPEAT_SUFFIXES = ("", "_shuffled", "_excess")
NO_ENTRY = -1


def repeat_names(kind: str) -> tuple[str, ...]:
    """The metric names of reference set ``kind``: share, shuffled share, excess."""
    return tuple(f"repeat_{kind}{suffix}" for suffix in REPEAT_SUFFIXES)


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
    """The tile each agent entered on each step of the running episode, per env.

    ``tiles`` ``(N, K, capacity)`` int16: step ``u`` (0-based) of env ``n``'s episode holds the
    tile id agent ``k`` entered then, or ``NO_ENTRY``. :meth:`reserve` grows it before a step
    would pass its end; :meth:`clear` empties the rows of envs whose episode ended.
    """

    def __init__(self, num_envs: int, num_agents: int, capacity: int = 256) -> None:
        self.tiles = np.full((num_envs, num_agents, capacity), NO_ENTRY, dtype=np.int16)

    def reserve(self, steps: int) -> None:
        """Room for episodes of at least ``steps`` steps (capacity doubles as needed)."""
        capacity = self.tiles.shape[2]
        if steps <= capacity:
            return
        while capacity < steps:
            capacity *= 2
        grown = np.full((*self.tiles.shape[:2], capacity), NO_ENTRY, dtype=np.int16)
        grown[:, :, : self.tiles.shape[2]] = self.tiles
        self.tiles = grown

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
        with np.errstate(invalid="ignore", divide="ignore"):
            share = np.where(entries > 0, repeats / np.maximum(entries, 1), np.nan)
            shuffled = np.where(entries > 0, chance / np.maximum(entries, 1), np.nan)
        return {"": share, "_shuffled": shuffled, "_excess": share - shuffled}

    def clear(self, envs: np.ndarray) -> None:
        self.tiles[envs] = NO_ENTRY
