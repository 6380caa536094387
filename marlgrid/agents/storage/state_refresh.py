"""Refreshing a sequence replay's stored memory states with the current network."""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING

import numpy as np
import torch
from torch import Tensor

from marlgrid.agents.arrays import Obs, obs_index, tree_map

if TYPE_CHECKING:
    from marlgrid.agents.storage.sequence_replay import SequenceReplay


def refresh_states(
    replay: SequenceReplay,
    unroll: Callable[[Obs, Tensor, Tensor], Tensor],
    device: torch.device | str = "cpu",
    batch_size: int = 4096,
) -> dict[str, float]:
    """Recompute every stored state with the current network.

    A sequence that does not start its episode follows another one ``period`` steps earlier;
    its state is what ``unroll(obs (period, k, ...), state (k, S), resets (period, k))`` (the
    state after those steps) gives from that sequence's (refreshed) state. Chains are
    refreshed in order, one batched call per link depth. Sequences that start an episode
    keep their exact state; those whose predecessor is gone keep theirs. Returns the
    staleness of the replaced states: ``cos`` (mean cosine similarity), ``mse`` and ``count``.
    """
    child, parent = _links(replay)
    depth = np.where(replay.rec_row >= 0, 0, -1)  # link depth; roots are 0
    depth[child] = -1
    totals, level = np.zeros(3), 0  # cosine sum, mse sum, count
    while True:
        sel = (depth[child] < 0) & (depth[parent] == level)
        if not sel.any():
            break
        c, p = child[sel], parent[sel]
        depth[c] = level + 1
        for lo in range(0, len(c), batch_size):
            hi = lo + batch_size
            totals += _refresh_links(replay, c[lo:hi], p[lo:hi], unroll, device)
        level += 1
    cos, mse, count = totals
    n = max(count, 1.0)
    return {"cos": cos / n if count else float("nan"), "mse": mse / n, "count": int(count)}


def _links(replay: SequenceReplay) -> tuple[np.ndarray, np.ndarray]:
    """Live sequences that follow a live one ``period`` steps earlier, and that one."""
    child = np.flatnonzero(
        (replay.rec_row >= 0) & ~replay.rec_fresh & (replay.rec_s >= replay.period)
    )
    prev_rows, slots = replay.rec_row[child] - replay.period, replay.rec_slot[child]
    parent = replay.seq_at[prev_rows % replay.rows, slots].astype(np.int64)
    ok = parent >= 0
    p = parent[ok]
    ok[ok] = (replay.rec_row[p] == prev_rows[ok]) & (replay.rec_slot[p] == slots[ok])
    return child[ok], parent[ok]


def _refresh_links(
    replay: SequenceReplay,
    child: np.ndarray,
    parent: np.ndarray,
    unroll: Callable[[Obs, Tensor, Tensor], Tensor],
    device: torch.device | str,
) -> np.ndarray:
    """New states of ``child`` from their parents' windows; ``[cos sum, mse sum, count]``."""
    rows, cols = replay._windows(parent, replay.period)
    to = lambda x: torch.from_numpy(np.ascontiguousarray(x)).to(device)  # noqa: E731
    with torch.no_grad():
        new = unroll(
            tree_map(to, obs_index(replay.obs, (rows, cols))),
            to(replay.rec_state[parent]),
            to(replay.resets[rows, cols]),
        ).float()
        old = to(replay.rec_state[child])
        cos = torch.nn.functional.cosine_similarity(old, new, dim=-1).sum()
        mse = (old - new).pow(2).mean(-1).sum()
    replay.rec_state[child] = new.cpu().numpy()
    return np.array([float(cos), float(mse), len(child)])
