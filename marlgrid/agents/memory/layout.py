"""Index layouts that let fused RNN calls run sequences with resets inside them.

A fused ``nn.LSTM`` / ``nn.GRU`` call runs lanes side by side from their initial states and
returns every step's output but only the final state. Three ways around resets inside a
sequence (the flag steps they use are explained in :mod:`.rnn`):

- :func:`step_layout`: each lane stays one lane and every inner reset becomes one extra *reset
  step* before it, so a whole rollout is one call a few steps longer than the rollout; lanes
  that end early are padded with *hold* steps, which keep the state to the call's end.
- :func:`segment_layout`: each lane is cut at its inner resets into left-aligned, zero-padded
  rows (more lanes, no extra steps; the rows' final states are not kept).
- :func:`piece_layout`: blocks of ``L`` steps, one call each; inside a block every *piece* (a
  run of steps that no reset cuts) is a lane of its own, ended by hold steps, so the state at
  the end of every piece, the end of the block included, is a final state of that call.
"""

from __future__ import annotations

from typing import NamedTuple

import torch
from torch import Tensor

__all__ = ["PieceLayout", "StepLayout", "piece_layout", "segment_layout", "step_layout"]


class StepLayout(NamedTuple):
    """Where each step of a ``(T, B)`` sequence goes in a layout with reset and hold steps.

    Positions are flat, ``p * B + b`` for position ``p`` of lane ``b``. The input of the layout
    is ``source[src]`` with ``source`` the ``T * B`` input rows followed by one reset row (index
    ``T * B``) and one hold row (``T * B + 1``).
    """

    src: Tensor  #: ``(length * B,)`` source row of every position
    dst: Tensor  #: ``(T * B,)`` position of step ``(t, b)`` (flat ``t * B + b``)
    length: int  #: positions per lane


def step_layout(resets: Tensor) -> StepLayout:
    """Lay out ``resets (T, B)`` with one reset step before every reset at ``t > 0`` (a reset
    at ``t = 0`` is the caller's: it resets the initial state), hold steps after lanes' ends."""
    T, B = resets.shape
    dev = resets.device
    cs = resets.cumsum(0, dtype=torch.long)
    shift = cs - cs[0]  # reset steps up to each step
    lane_end = shift[-1] + T  # (B,)
    length = int(lane_end.max())
    rows = torch.arange(T * B, device=dev)
    dst = rows.view(T, B).add(shift, alpha=B).view(-1)  # (t + shift) * B + b
    p = torch.arange(length, device=dev).unsqueeze(1)
    src = torch.where(p < lane_end, T * B, T * B + 1).view(-1)
    src.index_copy_(0, dst, rows)
    return StepLayout(src, dst, length)


class PieceLayout(NamedTuple):
    """Blocks of a ``(T, B)`` sequence, each run as one call with a lane per piece.

    Block ``k`` is ``steps[k]`` positions by ``width[k]`` lanes, stored flat (``p * width + lane``)
    from ``offset[k]`` of the concatenated input ``source[src]`` (``source``: the ``T * B``
    input rows, then one hold row, index ``T * B``). Lane ``b < B`` holds the piece that starts
    at the block's first step (it continues from the state there); lanes ``B + j`` hold the
    pieces that start at a reset inside the block (from a fresh state), each left-aligned.
    Lanes are numbered across blocks too: block ``k``'s lanes are ``first_lane[k] + lane``.
    """

    src: Tensor  #: ``(sum(steps * width),)`` source row of every position
    dst: Tensor  #: ``(T, B)`` position of each step inside its block's flat layout
    lane: Tensor  #: ``(T, B)`` lane (numbered across blocks) of the piece holding each step
    ends_piece: Tensor  #: ``(T, B)`` bool: the step is the last of its piece
    last: Tensor  #: ``(sum(width),)`` position (inside its block) of each lane's last step
    end_lane: Tensor  #: ``(K, B)`` lane holding each column's last piece of each block
    blocks: list[tuple[int, int, int, int]]  #: ``(offset, steps, width, first_lane)``


def piece_layout(resets: Tensor, block: int) -> PieceLayout:
    """Cut ``resets (T, B)`` into blocks of ``block`` steps and every block into pieces at its
    resets (a reset at a block's first step is the caller's: it resets the block's start)."""
    T, B = resets.shape
    dev, L = resets.device, block
    K = -(-T // L)
    t = torch.arange(T, device=dev).unsqueeze(1)
    opens = t % L == 0  # (T, 1) block starts
    inner = resets.bool() & ~opens
    n_inner = torch.nn.functional.pad(inner.sum(1), (0, K * L - T)).view(K, L).sum(1)  # (K,)
    sizes = n_inner.tolist()
    width = [B + n for n in sizes]
    steps = [min(L, T - k * L) for k in range(K)]
    offset, first_lane = [0] * K, [0] * K
    for k in range(1, K):
        offset[k] = offset[k - 1] + steps[k - 1] * width[k - 1]
        first_lane[k] = first_lane[k - 1] + width[k - 1]
    k_of_t = t.squeeze(1) // L
    # lane of the piece that starts at each (t, b): B + its rank among the block's inner resets
    rank = inner.view(-1).cumsum(0).view(T, B) - 1 - (n_inner.cumsum(0) - n_inner)[k_of_t, None]
    starts_piece = inner | opens
    lane_at_start = torch.where(inner, B + rank, torch.arange(B, device=dev))
    piece_t0 = torch.where(starts_piece, t, 0).cummax(0).values  # (T, B) first step of the piece
    lane = lane_at_start.gather(0, piece_t0)
    w = torch.tensor(width, device=dev)[k_of_t, None]
    dst = (t - piece_t0) * w + lane  # inside the block
    flat = (torch.tensor(offset, device=dev)[k_of_t, None] + dst).view(-1)
    src = torch.full((offset[-1] + steps[-1] * width[-1],), T * B, device=dev, dtype=torch.long)
    src.index_copy_(0, flat, torch.arange(T * B, device=dev))
    ends_piece = torch.ones_like(inner)
    ends_piece[:-1] = starts_piece[1:]
    glob = torch.tensor(first_lane, device=dev)[k_of_t, None] + lane  # lane across blocks
    last = torch.zeros(first_lane[-1] + width[-1], dtype=torch.long, device=dev)
    last[glob[ends_piece]] = dst[ends_piece]
    t_last = torch.tensor([k * L + n - 1 for k, n in enumerate(steps)], device=dev)
    blocks = list(zip(offset, steps, width, first_lane, strict=True))
    return PieceLayout(src, dst, glob, ends_piece, last, lane[t_last], blocks)


def segment_layout(resets: Tensor) -> tuple[Tensor, Tensor, Tensor, int]:
    """Cut every column of ``resets (T, N)`` at its inner resets into left-aligned rows.

    Returns ``(tau, row, first_row, R)``: step ``(t, n)`` goes to position ``tau[t, n]`` of row
    ``row[t, n]`` of a ``(T, R)`` layout; ``first_row[n]`` is the row holding column ``n``'s first
    segment (the only one that starts from the given state; the others start from zero).
    """
    T, N = resets.shape
    inner = resets.bool().clone()
    inner[0] = False
    seg = inner.long().cumsum(0)  # segment number within the column
    n_seg = seg[-1] + 1
    first_row = n_seg.cumsum(0) - n_seg
    row = first_row + seg
    t_idx = torch.arange(T, device=resets.device).unsqueeze(1).expand(T, N)
    seg_start = torch.where(inner, t_idx, 0).cummax(0).values
    return t_idx - seg_start, row, first_row, int(n_seg.sum())
