"""A float64 sum tree (with a min tree beside it) for proportional prioritized replay.

The tree is an implicit binary heap: node ``k`` has children ``2k`` and ``2k + 1``, the root is
node 1 and leaf ``i`` is node ``base + i``, where ``base`` is ``capacity`` rounded up to a power of
two. Leaves past ``capacity`` stay zero. A second heap holds the minimum over the leaves in use
(positive leaves; zero leaves count as ``+inf``) and is written in the same compiled loop as the
sums. The hot loops are numba kernels over plain numpy arrays.
"""

from __future__ import annotations

from typing import Any

import numpy as np
from numba import njit

_BAD_INDEX = 1
_BAD_VALUE = 2


@njit(cache=True)
def _check(idx: np.ndarray, vals: np.ndarray, capacity: int) -> int:
    """0 if every index is in ``[0, capacity)`` and every value finite and >= 0, else an error."""
    for j in range(idx.shape[0]):
        if idx[j] < 0 or idx[j] >= capacity:
            return _BAD_INDEX
    for j in range(vals.shape[0]):
        v = vals[j]
        if not (v >= 0.0 and v < np.inf):
            return _BAD_VALUE
    return 0


@njit(cache=True)
def _write(
    sums: np.ndarray, mins: np.ndarray, levels: int, idx: np.ndarray, vals: np.ndarray
) -> None:
    """Set leaves ``idx[j] = vals[j]`` in order (the last duplicate wins), then repair ancestors.

    The repair is level-major, bottom up: every parent is recomputed from its (already final)
    children, never by adding a delta, so shared or duplicate paths are harmless and the tree is
    exactly what a fresh bottom-up build of the leaves gives. Level-major order lets the loads of
    the different paths overlap.
    """
    base = 1 << levels
    n = idx.shape[0]
    for j in range(n):
        k = idx[j] + base
        v = vals[j]
        sums[k] = v
        mins[k] = v if v > 0.0 else np.inf
    for level in range(1, levels + 1):
        for j in range(n):
            k = (idx[j] + base) >> level
            left = 2 * k
            sums[k] = sums[left] + sums[left + 1]
            mins[k] = min(mins[left], mins[left + 1])


@njit(cache=True)
def _update(
    sums: np.ndarray,
    mins: np.ndarray,
    levels: int,
    capacity: int,
    idx: np.ndarray,
    vals: np.ndarray,
) -> int:
    """``_check`` then, if all is well, ``_write``; returns ``_check``'s code."""
    code = _check(idx, vals, capacity)
    if code == 0:
        _write(sums, mins, levels, idx, vals)
    return code


@njit(cache=True)
def _rebuild(sums: np.ndarray, mins: np.ndarray, base: int) -> None:
    """Recompute every internal node and the min leaves from the sum leaves."""
    for k in range(base, 2 * base):
        mins[k] = sums[k] if sums[k] > 0.0 else np.inf
    for k in range(base - 1, 0, -1):
        sums[k] = sums[2 * k] + sums[2 * k + 1]
        mins[k] = min(mins[2 * k], mins[2 * k + 1])


@njit(cache=True)
def _gather(sums: np.ndarray, base: int, capacity: int, idx: np.ndarray, out: np.ndarray) -> int:
    for j in range(idx.shape[0]):
        if idx[j] < 0 or idx[j] >= capacity:
            return _BAD_INDEX
        out[j] = sums[idx[j] + base]
    return 0


@njit(cache=True)
def _descend(sums: np.ndarray, levels: int, u: np.ndarray, out: np.ndarray) -> None:
    """Write into ``out[j]`` the leaf index for the prefix sum ``u[j]``.

    At each node go right when ``u >= left sum`` (or the left subtree is empty), unless the right
    subtree is empty. Starting from a positive root, the chosen subtree is then always positive,
    so the leaf reached is positive even when round-off (or ``u >= total``) would have led past
    the last positive leaf: such a ``u`` lands on the last positive leaf. The loop is level-major,
    so the loads of the different samples are independent and overlap in the memory system.
    """
    n = u.shape[0]
    node = np.ones(n, dtype=np.int64)
    rem = u.copy()
    for _ in range(levels):
        for j in range(n):  # branch-free step: ``right`` is 0 or 1
            k = 2 * node[j]
            left = sums[k]
            right = ((rem[j] >= left) | (left <= 0.0)) & (sums[k + 1] > 0.0)
            rem[j] -= left * right
            node[j] = k + right
    base = 1 << levels
    for j in range(n):
        out[j] = node[j] - base


@njit(cache=True)
def _stratify(total: float, r: np.ndarray) -> np.ndarray:
    """Prefix sums ``(j + r_j) * total / n``: one uniform draw in each of ``n`` equal strata."""
    n = r.shape[0]
    u = np.empty(n)
    step = total / n if n > 0 else 0.0
    for j in range(n):
        u[j] = (j + r[j]) * step
    return u


def _as_indices(indices: Any) -> np.ndarray:
    a = np.ascontiguousarray(indices, dtype=np.int64)
    return a if a.ndim == 1 else a.reshape(-1)  # reshape costs more than the conversion


def _as_values(values: Any) -> np.ndarray:
    a = np.ascontiguousarray(values, dtype=np.float64)
    return a if a.ndim == 1 else a.reshape(-1)


def as_tensor(array: np.ndarray) -> Any:
    """A CPU tensor copy of ``array``: ``torch.load(weights_only=True)`` refuses numpy arrays."""
    import torch  # only checkpoints need torch; the tree itself is numpy + numba

    return torch.from_numpy(np.array(array))


def _raise(code: int, capacity: int) -> None:
    if code == _BAD_INDEX:
        raise IndexError(f"index out of range [0, {capacity})")
    if code == _BAD_VALUE:
        raise ValueError("values must be finite and >= 0")


class SumTree:
    """Sum tree over ``capacity`` non-negative float64 leaves, with the min over positive leaves.

    ``update`` and ``get`` take index arrays; ``find`` maps prefix sums to leaves by descent and
    ``sample_stratified`` draws one prefix sum in each of ``n`` equal strata of the total. Neither
    ever returns a zero leaf (an empty tree raises).
    """

    def __init__(self, capacity: int) -> None:
        if capacity < 1:
            raise ValueError(f"capacity must be >= 1, got {capacity}")
        self._capacity = int(capacity)
        self._levels = (self._capacity - 1).bit_length()
        self._base = 1 << self._levels
        self._sum = np.zeros(2 * self._base, dtype=np.float64)
        self._min = np.full(2 * self._base, np.inf, dtype=np.float64)

    @property
    def capacity(self) -> int:
        return self._capacity

    @property
    def total(self) -> float:
        """Sum of all leaves."""
        return float(self._sum[1])

    @property
    def min(self) -> float:
        """Smallest positive leaf (the leaves in use); ``inf`` when every leaf is zero."""
        return float(self._min[1])

    @property
    def values(self) -> np.ndarray:
        """Read-only view of the ``capacity`` leaves."""
        view = self._sum[self._base : self._base + self._capacity]
        view.flags.writeable = False
        return view

    @property
    def nbytes(self) -> int:
        """Bytes held by the two heaps."""
        return self._sum.nbytes + self._min.nbytes

    def __len__(self) -> int:
        return self._capacity

    def update(self, indices: Any, values: Any) -> None:
        """Set ``leaf[indices[j]] = values[j]``; with duplicate indices the last write wins."""
        idx, vals = _as_indices(indices), _as_values(values)
        if idx.shape != vals.shape:
            raise ValueError(f"{idx.shape[0]} indices but {vals.shape[0]} values")
        _raise(
            _update(self._sum, self._min, self._levels, self._capacity, idx, vals), self._capacity
        )

    def get(self, indices: Any) -> np.ndarray:
        """Leaf values at ``indices``."""
        idx = _as_indices(indices)
        out = np.empty(idx.shape[0], dtype=np.float64)
        _raise(_gather(self._sum, self._base, self._capacity, idx, out), self._capacity)
        return out

    def find(self, prefix_sums: Any) -> np.ndarray:
        """For each ``u``, the leaf ``i`` with ``cumsum[i-1] <= u < cumsum[i]``.

        That is ``np.searchsorted(np.cumsum(leaves), u, side="right")`` for ``0 <= u < total``;
        a ``u >= total`` gives the last positive leaf, a negative ``u`` the first.
        """
        u = _as_values(prefix_sums)
        self._require_mass()
        out = np.empty(u.shape[0], dtype=np.int64)
        _descend(self._sum, self._levels, u, out)
        return out

    def sample_stratified(self, n: int, rng: np.random.Generator) -> np.ndarray:
        """``n`` leaf indices, one drawn in proportion to the leaves in each of ``n`` equal strata.

        The indices come in ascending order of their prefix sums, hence of their index.
        """
        self._require_mass()
        u = _stratify(self._sum[1], rng.random(n))
        out = np.empty(n, dtype=np.int64)
        _descend(self._sum, self._levels, u, out)
        return out

    def _require_mass(self) -> None:
        if not self._sum[1] > 0.0:
            raise ValueError("cannot sample from a tree whose leaves are all zero")

    def state_dict(self) -> dict[str, Any]:
        """Capacity and leaves (a float64 tensor), loadable by ``torch.load(weights_only=True)``.

        ``load_state_dict`` takes the leaves as a tensor or a numpy array.
        """
        return {"capacity": self._capacity, "leaves": as_tensor(self.values)}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Restore the leaves and rebuild the inner nodes (bit-identical to incremental updates)."""
        if int(state["capacity"]) != self._capacity:
            raise ValueError(f"state has capacity {state['capacity']}, tree has {self._capacity}")
        leaves = _as_values(np.asarray(state["leaves"]))
        if leaves.shape[0] != self._capacity:
            raise ValueError(f"state has {leaves.shape[0]} leaves, expected {self._capacity}")
        _raise(_check(np.zeros(0, dtype=np.int64), leaves, self._capacity), self._capacity)
        self._sum[:] = 0.0
        self._sum[self._base : self._base + self._capacity] = leaves
        _rebuild(self._sum, self._min, self._base)
