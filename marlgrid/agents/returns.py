"""Returns and targets as pure functions over time-major ``(T, B)`` tensors.

- :func:`compute_gae`: generalised advantage estimation (PPO);
"""

from __future__ import annotations

import numba
import numpy as np
import torch
from torch import Tensor


def compute_gae(
    rewards: Tensor,
    values: Tensor,
    next_values: Tensor,
    terminations: Tensor,
    truncations: Tensor,
    gamma: float,
    lam: float,
) -> tuple[Tensor, Tensor]:
    """Generalised advantage estimation over time-major ``(T, B)`` tensors.

    ``next_values[t]`` is the value of the observation that truly follows step ``t``: ``V(s_{t+1})``
    inside an episode, the value of the final observation when step ``t`` ended the episode by
    truncation (ignored on termination).

    ``delta_t = r_t + gamma * next_values_t * (1 - terminated_t) - values_t`` and
    ``A_t = delta_t + gamma * lam * (1 - done_t) * A_{t+1}`` with ``done = terminated | truncated``,
    so the recursion is cut at every episode end. Returns ``(advantages, returns)``,
    ``returns = advantages + values``.
    """
    terminated = terminations.bool()
    done = terminated | truncations.bool()
    deltas = rewards + gamma * next_values * (~terminated).to(values.dtype) - values
    carry = gamma * lam * (~done).to(values.dtype)
    adv = torch.empty_like(deltas)
    if deltas.device.type == "cpu" and not deltas.requires_grad:
        _reverse_scan(deltas.numpy(), carry.numpy(), adv.numpy())  # compiled, in place
        return adv, adv + values
    last = torch.zeros_like(deltas[0])
    for t in range(deltas.shape[0] - 1, -1, -1):
        last = torch.addcmul(deltas[t], carry[t], last)
        adv[t] = last
    return adv, adv + values


@numba.njit(cache=True)
def _reverse_scan(deltas: np.ndarray, carry: np.ndarray, out: np.ndarray) -> None:
    """``out[t] = deltas[t] + carry[t] * out[t + 1]`` backwards from ``out[T - 1] = deltas[T - 1]``
    (the recursion of :func:`compute_gae`; a Python loop over T costs far more on CPU)."""
    last = np.zeros_like(deltas[0])
    for t in range(deltas.shape[0] - 1, -1, -1):
        for b in range(deltas.shape[1]):
            last[b] = deltas[t, b] + carry[t, b] * last[b]
            out[t, b] = last[b]


