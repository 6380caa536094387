"""Sequence helpers of the parallel cores: a linear scan that respects resets, reset positions.

:func:`linear_scan` runs ``h_t = a_t * h_{t-1} + u_t`` over a whole sequence in
``ceil(log2 T)`` rounds of elementwise ops (a Hillis-Steele scan of the affine maps
``h -> a h + u``), so a reset is just ``a_t = 0``: the carry is dropped before step ``t``. Its
terms are the step loop's, summed in another order; nothing is divided, so it is as stable as
the loop (float32 agrees with it to rounding, float64 to ~1e-15).
"""

from __future__ import annotations

import torch
from torch import Tensor

__all__ = ["linear_scan", "steps_since_reset"]


def linear_scan(a: Tensor, u: Tensor, h0: Tensor) -> Tensor:
    """Every ``h_t`` of ``h_t = a_t * h_{t-1} + u_t`` from ``h_{-1} = h0``, ``(T, ...)``.

    ``u (T, ...)``; ``a`` broadcasts against ``u`` (e.g. ``(T, B, 1)`` for one factor per slot)
    and ``h0`` against ``u[0]``. Real or complex. Differentiable in all three.
    """
    T = u.shape[0]
    if T == 1:  # acting
        return (u[0] + a[0] * h0).unsqueeze(0)
    b = u.clone()
    b[0] = u[0] + a[0] * h0  # the carry enters at step 0
    d = 1
    while d < T:  # after the round for d, b[t] composes steps max(0, t - 2d + 1) .. t
        prev, b = b, b.clone()
        b[d:].addcmul_(a[d:], prev[:-d])
        if 2 * d < T:
            prev_a, a = a, a.clone()
            a[d:].mul_(prev_a[:-d])
        d *= 2
    return b


def steps_since_reset(resets: Tensor) -> tuple[Tensor, Tensor]:
    """``(age, fresh)`` of ``resets (T, B)``: ``age[t, b]`` counts the steps since the last reset
    at or before ``t`` (0 on a reset step), or since the sequence start (``t``) where there was
    none; ``fresh[t, b]`` says whether there was one."""
    T = resets.shape[0]
    r = resets.bool()
    if T == 1:  # acting
        return torch.zeros_like(r, dtype=torch.long), r
    t = torch.arange(T, device=resets.device).unsqueeze(1)
    last = torch.where(r, t, -1).cummax(0).values
    fresh = last >= 0
    return torch.where(fresh, t - last, t), fresh
