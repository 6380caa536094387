"""The clipped PPO loss (:func:`ppo_loss`) and the explained variance of value predictions:
pure tensor math, tested against hand computations; the learner is :mod:`.ppo`."""

from __future__ import annotations

from collections.abc import Callable

import torch
from torch import Tensor

__all__ = ["explained_variance", "ppo_loss"]


def ppo_loss(
    *,
    new_logp: Tensor,
    old_logp: Tensor,
    adv: Tensor,
    new_values: Tensor,
    old_values: Tensor,
    returns: Tensor,
    entropy: Tensor,
    mask: Tensor,
    clip: float,
    clip_vloss: bool,
    vf_coef: float,
    ent_coef: float,
) -> tuple[Tensor, dict[str, Tensor]]:
    """Clipped PPO loss; every term is averaged over the steps where ``mask`` is true (every
    argument by name: several are tensors of one shape, easy to swap unseen).

    Padding steps (``mask`` false) are replaced by zeros with ``torch.where`` before any arithmetic
    and excluded from every mean, so whatever they hold (even NaN) changes neither the terms nor
    the gradients. ``loss = pg_loss - ent_coef * entropy + vf_coef * v_loss`` with

    - ``pg_loss = mean(max(-adv * ratio, -adv * clamp(ratio, 1 - clip, 1 + clip)))``;
    - ``v_loss = 0.5 * mean(max((v - R)^2, (v_old + clamp(v - v_old, -clip, clip) - R)^2))``
      (``0.5 * mean((v - R)^2)`` without ``clip_vloss``);
    - ``approx_kl = mean((ratio - 1) - log ratio)``; ``clipfrac = mean(|ratio - 1| > clip)``.

    Returns ``(loss, terms)`` with terms ``policy_loss, value_loss, entropy, approx_kl, clipfrac``.
    """
    mask = mask.bool()
    mean: Callable[[Tensor], Tensor]
    if bool(mask.all()):  # no padding (the usual case): plain means, fewer autograd nodes
        mean = torch.mean
    else:
        n = mask.sum().clamp(min=1)
        zero = new_logp.new_zeros(())

        def clean(x: Tensor) -> Tensor:
            return torch.where(mask, x, zero)

        def mean(x: Tensor) -> Tensor:
            return clean(x).sum() / n

        new_logp, old_logp, adv, entropy = map(clean, (new_logp, old_logp, adv, entropy))
        new_values, old_values, returns = map(clean, (new_values, old_values, returns))
    logratio = new_logp - old_logp
    ratio = logratio.exp()
    pg_loss = mean(torch.max(-adv * ratio, -adv * ratio.clamp(1.0 - clip, 1.0 + clip)))
    v_err = (new_values - returns).square()
    if clip_vloss:
        v_clipped = old_values + (new_values - old_values).clamp(-clip, clip)
        v_err = torch.max(v_err, (v_clipped - returns).square())
    v_loss = 0.5 * mean(v_err)
    ent = mean(entropy)
    loss = pg_loss - ent_coef * ent + vf_coef * v_loss
    with torch.no_grad():
        approx_kl = mean((ratio - 1.0) - logratio)
        clipfrac = mean(((ratio - 1.0).abs() > clip).to(ratio.dtype))
    terms = {
        "policy_loss": pg_loss.detach(),
        "value_loss": v_loss.detach(),
        "entropy": ent.detach(),
        "approx_kl": approx_kl,
        "clipfrac": clipfrac,
    }
    return loss, terms


def explained_variance(pred: Tensor, target: Tensor) -> float:
    """``1 - Var(target - pred) / Var(target)``; NaN when the target is constant."""
    var = target.var()
    return float("nan") if var.item() == 0 else float(1.0 - (target - pred).var() / var)
