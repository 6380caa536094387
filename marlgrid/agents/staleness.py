"""How far stored memory states drifted from what the current network computes."""

from __future__ import annotations

from torch import Tensor


def state_staleness(stored: Tensor, fresh: Tensor) -> dict[str, float]:
    """Mean squared difference and mean per-row cosine similarity of two ``(..., S)`` state sets.

    Rows where either state is zero (episode starts) are left out of the cosine; with no state
    (``S = 0``) or no such row the states count as identical (``mse 0``, ``cos 1``).
    """
    if stored.shape[-1] == 0:
        return {"mse": 0.0, "cos": 1.0}
    mse = float((fresh - stored).square().mean())
    dot = (fresh * stored).sum(-1)
    norms = fresh.norm(dim=-1) * stored.norm(dim=-1)
    valid = norms > 0
    cos = float((dot[valid] / norms[valid]).mean()) if bool(valid.any()) else 1.0
    return {"mse": mse, "cos": cos}
