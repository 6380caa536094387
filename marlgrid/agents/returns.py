"""Returns and targets as pure functions over time-major ``(T, B)`` tensors.

- :func:`compute_gae`: generalised advantage estimation (PPO);
- :func:`n_step_returns`: n-step returns cut at episode ends (DRQN);
- :func:`value_rescale` / :func:`inverse_value_rescale`: R2D2's h(x) and its inverse;
- :func:`bootstrap_values`: state values from action values (max, double Q, soft Q).
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
    floats = (rewards, values, next_values)
    if (
        values.device.type == "cpu"
        and values.dtype in (torch.float32, torch.float64)
        and all(x.dtype == values.dtype and x.device.type == "cpu" for x in floats)
        and not any(x.requires_grad for x in floats)
        and values.ndim == 2
        and values.numel() > 0
        and rewards.shape == values.shape == next_values.shape
    ):
        # one compiled pass: deltas, the recursion and the returns, in the arithmetic (dtype,
        # operation order) of the tensor expressions below, so the results are the same
        adv, ret = torch.empty_like(values), torch.empty_like(values)
        v = values.numpy()
        scalar = v.dtype.type
        _gae_scan(
            rewards.numpy(),
            v,
            next_values.numpy(),
            terminations.bool().numpy(),
            truncations.bool().numpy(),
            scalar(gamma),
            scalar(gamma * lam),
            adv.numpy(),
            ret.numpy(),
        )
        return adv, ret
    terminated = terminations.bool()
    done = terminated | truncations.bool()
    deltas = rewards + gamma * next_values * (~terminated).to(values.dtype) - values
    carry = gamma * lam * (~done).to(values.dtype)
    adv = torch.empty_like(deltas)
    last = torch.zeros_like(deltas[0])
    for t in range(deltas.shape[0] - 1, -1, -1):
        last = torch.addcmul(deltas[t], carry[t], last)
        adv[t] = last
    return adv, adv + values


@numba.njit(cache=True)
def _gae_scan(
    rewards: np.ndarray,
    values: np.ndarray,
    next_values: np.ndarray,
    terminated: np.ndarray,
    truncated: np.ndarray,
    gamma: np.floating,
    gamma_lam: np.floating,
    adv: np.ndarray,
    ret: np.ndarray,
) -> None:
    """The CPU pass of :func:`compute_gae` (a chain of tensor ops and a Python loop over T cost
    far more): backwards over ``t``, ``delta = (r + (gamma * v') * (1 - term)) - v``, ``A_t =
    delta + carry * A_{t+1}`` with ``carry = gamma * lam`` (0 at episode ends), ``ret = A + v``,
    every product and sum in the arrays' dtype, in that order (so ``0 * inf`` is NaN as there).
    ``gamma`` and ``gamma_lam`` come in that dtype."""
    one, zero = np.ones_like(values[0, :1])[0], np.zeros_like(values[0, :1])[0]
    last = np.zeros_like(values[0])
    for t in range(values.shape[0] - 1, -1, -1):
        for b in range(values.shape[1]):
            not_term = zero if terminated[t, b] else one
            carry = zero if terminated[t, b] or truncated[t, b] else gamma_lam
            delta = (rewards[t, b] + (gamma * next_values[t, b]) * not_term) - values[t, b]
            last[b] = delta + carry * last[b]
            adv[t, b] = last[b]
            ret[t, b] = last[b] + values[t, b]


def n_step_returns(
    rewards: Tensor,
    next_values: Tensor,
    terminations: Tensor,
    dones: Tensor,
    gamma: float,
    n: int,
) -> tuple[Tensor, Tensor]:
    """n-step returns over time-major ``(T, B)`` tensors, cut at episode ends.

    ``next_values[t]`` is the value of the observation that truly follows step ``t`` (the true
    final observation after a truncation); ``dones[t]`` marks that step ``t`` ended its episode
    (termination, truncation, or any cut), ``terminations[t]`` that it ended by termination.
    For each ``t`` the horizon ``k_t`` is the smallest of ``n``, the number of steps up to and
    including the first done at or after ``t``, and ``T - t``; then

    ``G_t = sum_{i < k_t} gamma^i r_{t+i} + gamma^{k_t} (1 - term_{t+k_t-1}) next_values_{t+k_t-1}``

    so the sum stops at terminations (no bootstrap) and bootstraps from the final observation at
    truncations. Returns ``(returns, horizons)``, ``horizons = k_t`` (long).
    """
    if n < 1:
        raise ValueError(f"n must be >= 1, got {n}")
    T = rewards.shape[0]
    stop = dones.bool().clone()
    stop[-1] = True  # the window ends: bootstrap from the last next value
    boot = ~terminations.bool()
    out = torch.zeros_like(rewards)
    horizon = torch.zeros(rewards.shape, dtype=torch.long, device=rewards.device)
    alive = torch.ones_like(stop)
    for i in range(min(n, T)):
        # step t + i for every t (rows past the end are padded: alive is already false there)
        r, v, b, s = (x[i:] for x in (rewards, next_values, boot, stop))
        a = alive[: T - i]
        ends = a & (s | (i == n - 1))
        out[: T - i] += torch.where(a, gamma**i * r, 0.0)
        out[: T - i] += torch.where(ends & b, gamma ** (i + 1) * v, 0.0)
        horizon[: T - i][ends] = i + 1
        alive[: T - i] = a & ~ends
    return out, horizon


def value_rescale(x: Tensor, eps: float = 1e-3) -> Tensor:
    """R2D2's invertible value rescaling ``h(x) = sign(x) (sqrt(|x| + 1) - 1) + eps x``."""
    return torch.sign(x) * (torch.sqrt(x.abs() + 1.0) - 1.0) + eps * x


def inverse_value_rescale(x: Tensor, eps: float = 1e-3) -> Tensor:
    """The exact inverse of :func:`value_rescale` (Pohlen et al. 2018, Prop. A.2):

    ``h^-1(x) = sign(x) (((sqrt(1 + 4 eps (|x| + 1 + eps)) - 1) / (2 eps))^2 - 1)``, computed as
    ``root = 2 c / (1 + sqrt(1 + 4 eps c))``, ``c = |x| + 1 + eps`` (the same number without the
    cancellation that costs float32 about 1e-4 near 0).
    """
    c = x.abs() + 1.0 + eps
    root = 2.0 * c / (1.0 + torch.sqrt(1.0 + 4.0 * eps * c))
    return torch.sign(x) * (root * root - 1.0)


def bootstrap_values(q_target: Tensor, q_online: Tensor | None, soft_alpha: float | None) -> Tensor:
    """State values ``(..., )`` from action values ``(..., A)``.

    - ``soft_alpha`` set (soft Q): ``alpha * logsumexp(Q_target / alpha)``; with ``q_online``
      (double), ``sum_a pi(a) (Q_target(a) - alpha log pi(a))``, ``pi = softmax(Q_online / alpha)``;
    - otherwise ``max_a Q_target`` (DQN), or ``Q_target`` at ``argmax Q_online`` (double Q).
    """
    if soft_alpha is not None:
        if q_online is None:
            return soft_alpha * torch.logsumexp(q_target / soft_alpha, -1)
        logp = torch.log_softmax(q_online / soft_alpha, -1)
        return (logp.exp() * (q_target - soft_alpha * logp)).sum(-1)
    if q_online is None:
        return q_target.max(-1).values
    return q_target.gather(-1, q_online.argmax(-1, keepdim=True)).squeeze(-1)
