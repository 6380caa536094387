"""Proportional prioritized replay (Schaul et al., 2016) over item indices, on a sum tree."""

from __future__ import annotations

from typing import Any

import numpy as np
from numba import njit

from marlgrid.agents.storage.sum_tree import (
    _BAD_INDEX,
    _BAD_VALUE,
    SumTree,
    _as_indices,
    _as_values,
    _descend,
    _raise,
    _stratify,
    _write,
)

IS_NORMS = ("buffer", "batch")
TINY = float(np.finfo(np.float64).tiny)  # floor of a present item's leaf: present <=> leaf > 0


@njit(cache=True)
def _in_range(idx: np.ndarray, capacity: int) -> bool:
    for j in range(idx.shape[0]):  # noqa: SIM110  (numba compiles the loop, not all())
        if idx[j] < 0 or idx[j] >= capacity:
            return False
    return True


@njit(cache=True)
def _set_presence(
    sums: np.ndarray, mins: np.ndarray, levels: int, capacity: int, idx: np.ndarray, leaf: float
) -> int:
    """Set the leaves of ``idx`` to ``leaf``; how many items that adds (``leaf > 0``) or removes.

    -1 if an index is out of range. Duplicates count once.
    """
    if not _in_range(idx, capacity):
        return -1
    base = 1 << levels
    changed = 0
    for j in range(idx.shape[0]):
        k = base + idx[j]
        changed += (sums[k] > 0.0) != (leaf > 0.0)
        sums[k] = leaf  # at once, so that a duplicate sees its new state
    _write(sums, mins, levels, idx, np.full(idx.shape[0], leaf))
    return changed


@njit(cache=True)
def _set_priorities(
    sums: np.ndarray,
    mins: np.ndarray,
    levels: int,
    capacity: int,
    idx: np.ndarray,
    prio: np.ndarray,
    params: np.ndarray,
) -> int:
    """Leaves ``max((|p| + eps) ** alpha, TINY)`` for present items; absent ones stay zero.

    ``params`` is ``[alpha, eps, running max priority]``; the max is raised in place.
    """
    n = idx.shape[0]
    if not _in_range(idx, capacity):
        return _BAD_INDEX
    for j in range(n):
        if not abs(prio[j]) < np.inf:
            return _BAD_VALUE
    alpha, eps, max_prio = params[0], params[1], params[2]
    base = 1 << levels
    vals = np.empty(n)
    for j in range(n):
        if sums[base + idx[j]] > 0.0:
            p = abs(prio[j])
            max_prio = max(max_prio, p)
            vals[j] = max((p + eps) ** alpha, TINY)
        else:
            vals[j] = 0.0
    _write(sums, mins, levels, idx, vals)
    params[2] = max_prio
    return 0


@njit(cache=True)
def _weighted_sample(
    sums: np.ndarray,
    mins: np.ndarray,
    levels: int,
    r: np.ndarray,
    beta: float,
    buffer_norm: bool,
    out_idx: np.ndarray,
    out_w: np.ndarray,
) -> None:
    """Stratified descent, then ``w = (leaf / ref) ** -beta``, ``ref`` the buffer or batch min."""
    n = r.shape[0]
    _descend(sums, levels, _stratify(sums[1], r), out_idx)
    base = 1 << levels
    ref = mins[1]
    if not buffer_norm:
        ref = np.inf
        for j in range(n):
            ref = min(ref, sums[base + out_idx[j]])
    for j in range(n):
        out_w[j] = (sums[base + out_idx[j]] / ref) ** -beta


class PrioritizedSampler:
    """Proportional prioritized sampling over item indices ``0 .. capacity - 1``.

    An item's leaf is ``(|p| + eps) ** alpha`` (floored at the smallest normal float, so that a
    present item's leaf is always positive and an absent item's is zero); it is drawn with
    probability ``P(i) = leaf_i / sum(leaves)``, by stratified sampling (one draw in each of
    ``n`` equal strata of the total, so a batch comes in ascending index order). Only the
    ``size`` items that are present (``add``-ed and not ``remove``-d) can be drawn. A new item
    gets the running max of every raw priority given to ``update`` so far (``initial_priority``
    before any), a max that never decreases.

    Importance-sampling weights are ``w_i = (N * P(i)) ** -beta`` divided by a max weight, with
    ``N = size``; both choices reduce to ``(leaf_i / leaf_ref) ** -beta``:

    - ``is_norm="buffer"`` (default, as torchrl and cpprb): the max weight over the whole buffer,
      i.e. that of the smallest leaf present (an exact min tree). Weights are <= 1.
    - ``is_norm="batch"``: the max weight within the sampled batch; its largest weight is 1.

    With ``uniform=True`` items are drawn uniformly (with replacement) among those present and
    every weight is 1; priorities are still recorded. ``eps`` must be > 0, so that every present
    item can be drawn and the buffer's max weight is finite.
    """

    def __init__(
        self,
        capacity: int,
        alpha: float = 0.6,
        eps: float = 1e-6,
        is_norm: str = "buffer",
        uniform: bool = False,
        initial_priority: float = 1.0,
    ) -> None:
        if is_norm not in IS_NORMS:
            raise ValueError(f"is_norm must be one of {IS_NORMS}, got {is_norm!r}")
        if not (alpha >= 0 and eps > 0 and initial_priority >= 0):
            raise ValueError("need alpha >= 0, eps > 0 and initial_priority >= 0")
        self.tree = SumTree(capacity)
        self.is_norm = is_norm
        self.uniform = bool(uniform)
        self._params = np.array([alpha, eps, initial_priority], dtype=np.float64)
        self._size = 0
        self._high = 0  # 1 + the largest index ever added: uniform draws come from [0, high)

    @property
    def capacity(self) -> int:
        return self.tree.capacity

    @property
    def size(self) -> int:
        """Number of items present."""
        return self._size

    @property
    def nbytes(self) -> int:
        """Bytes held: the tree's two heaps (presence is stored in the leaves)."""
        return self.tree.nbytes + self._params.nbytes

    @property
    def alpha(self) -> float:
        return float(self._params[0])

    @property
    def eps(self) -> float:
        return float(self._params[1])

    @property
    def max_priority(self) -> float:
        """Running max raw priority: what the next ``add`` assigns."""
        return float(self._params[2])

    def add(self, indices: Any) -> None:
        """Mark items present (new or overwritten) with the running max priority."""
        idx = _as_indices(indices)
        leaf = max((self.max_priority + self.eps) ** self.alpha, TINY)
        self._size += self._set(idx, leaf)
        if idx.shape[0]:
            self._high = max(self._high, int(idx.max()) + 1)

    def remove(self, indices: Any) -> None:
        """Mark items absent (overwritten or invalidated): their leaves become zero."""
        self._size -= self._set(_as_indices(indices), 0.0)

    def _set(self, idx: np.ndarray, leaf: float) -> int:
        t = self.tree
        changed = _set_presence(t._sum, t._min, t._levels, t.capacity, idx, leaf)
        if changed < 0:
            _raise(_BAD_INDEX, t.capacity)
        return changed

    def update(self, indices: Any, priorities: Any) -> None:
        """Set raw priorities (e.g. |TD error|) of present items; absent items are left at zero.

        With duplicate indices the last one wins.
        """
        idx, prio = _as_indices(indices), _as_values(priorities)
        if idx.shape != prio.shape:
            raise ValueError(f"{idx.shape[0]} indices but {prio.shape[0]} priorities")
        t = self.tree
        code = _set_priorities(t._sum, t._min, t._levels, t.capacity, idx, prio, self._params)
        if code:
            _raise(code, t.capacity)

    def sample(
        self, n: int, beta: float, rng: np.random.Generator
    ) -> tuple[np.ndarray, np.ndarray]:
        """``n`` item indices (int64) and their normalised IS weights (float64)."""
        if self._size == 0:
            raise ValueError("cannot sample: no item is present")
        if self.uniform:
            return self._sample_uniform(n, rng), np.ones(n)
        idx = np.empty(n, dtype=np.int64)
        w = np.empty(n, dtype=np.float64)
        t = self.tree
        buffer_norm = self.is_norm == "buffer"
        r = rng.random(n)
        _weighted_sample(t._sum, t._min, t._levels, r, float(beta), buffer_norm, idx, w)
        return idx, w

    def _sample_uniform(self, n: int, rng: np.random.Generator) -> np.ndarray:
        """Uniform over present items: draws from ``[0, high)``, keeping those present."""
        if self._size == self._high:  # every index below high is present
            return rng.integers(0, self._high, n)
        leaves = self.tree.values
        kept = np.empty(0, dtype=np.int64)
        for _ in range(4):  # each round keeps a fraction size / high of its draws
            draw = rng.integers(0, self._high, 2 * n)
            kept = np.concatenate([kept, draw[leaves[draw] > 0]])
            if kept.shape[0] >= n:
                return kept[:n]
        return rng.choice(np.flatnonzero(leaves > 0), n)

    def state_dict(self) -> dict[str, Any]:
        """Tensors, ints and floats only (loadable by ``torch.load(weights_only=True)``).

        Presence is the leaves' sign (present: > 0), so the tree's leaves carry it.
        """
        return {
            "tree": self.tree.state_dict(),
            "alpha": self.alpha,
            "eps": self.eps,
            "max_priority": self.max_priority,
            "high": self._high,
        }

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Restore priorities, presence, the running max, ``alpha`` and ``eps``."""
        self.tree.load_state_dict(state["tree"])
        self._params[:] = (state["alpha"], state["eps"], state["max_priority"])
        self._size = int(np.count_nonzero(self.tree.values))
        self._high = int(state["high"])
