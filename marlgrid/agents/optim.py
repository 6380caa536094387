"""Optimizer helpers shared by the learners: fast Adam/RMSprop and flat gradient clipping."""

from __future__ import annotations

from collections.abc import Iterable

import torch
from torch import Tensor, nn

OPTIMIZERS = ("adam", "rmsprop")


def make_optimizer(
    params: Iterable[nn.Parameter], name: str, lr: float, eps: float
) -> torch.optim.Optimizer:
    """Adam or RMSprop, with torch's fused kernel where it exists (several times faster on small
    CPU nets), else the ``foreach`` one.

    torch's CPU fused kernels update a parameter wrongly, raising nothing, when its gradient is
    a non-contiguous tensor (measured here: 0.6 off reference Adam after three steps of
    learning rate 0.1). So the fused kernel is used only for contiguous parameters, and a hook
    before every step replaces a non-contiguous gradient by a contiguous copy
    (:func:`contiguous_grads`; with contiguous gradients, as every network here has, it only
    checks them)."""
    params = list(params)
    cls = {"adam": torch.optim.Adam, "rmsprop": torch.optim.RMSprop}.get(name)
    if cls is None:
        raise ValueError(f"unknown optimizer {name!r}; expected one of {OPTIMIZERS}")
    if all(p.is_contiguous() for p in params):
        try:
            optimizer = cls(params, lr=lr, eps=eps, fused=True)
        except (RuntimeError, ValueError, TypeError):
            pass
        else:
            optimizer.register_step_pre_hook(contiguous_grads)
            return optimizer
    return cls(params, lr=lr, eps=eps, foreach=True)


def contiguous_grads(optimizer: torch.optim.Optimizer, *_: object) -> None:
    """Make every gradient of ``optimizer`` contiguous (a step pre-hook of the fused kernels)."""
    for group in optimizer.param_groups:
        for p in group["params"]:
            if p.grad is not None and not p.grad.is_contiguous():
                p.grad = p.grad.contiguous()


def set_lr(optimizer: torch.optim.Optimizer, lr: float) -> None:
    """Set the learning rate of every parameter group."""
    for group in optimizer.param_groups:
        group["lr"] = lr


def linear_schedule(start: float, end: float, progress: float) -> float:
    """``start`` at progress 0, ``end`` at progress 1 (clipped to [0, 1])."""
    return start + (end - start) * min(max(progress, 0.0), 1.0)


class FlatGrads:
    """All gradients of a module as views of one flat tensor, zeroed and clipped with one op each.

    The views are installed as the parameters' ``.grad`` (backward accumulates into them in
    place); they are installed again if something replaced them (e.g. ``zero_grad()``).
    """

    def __init__(self, module: nn.Module) -> None:
        self.params = list(module.parameters())
        self.views: list[Tensor] | None = None
        self.flat = torch.zeros(0)

    def zero(self) -> Tensor:
        """Zero every gradient; returns the flat gradient tensor."""
        params, views = self.params, self.views
        if views is None or any(p.grad is not g for p, g in zip(params, views, strict=True)):
            device = params[0].device
            self.flat = torch.zeros(sum(p.numel() for p in params), device=device)
            parts = self.flat.split([p.numel() for p in params])
            self.views = [g.view_as(p) for p, g in zip(params, parts, strict=True)]
            for p, g in zip(params, self.views, strict=True):
                p.grad = g
        else:
            self.flat.zero_()
        return self.flat

    def clip_(self, max_norm: float) -> Tensor:
        """Scale the gradients in place to 2-norm at most ``max_norm`` (as
        ``nn.utils.clip_grad_norm_``); returns the norm before clipping."""
        norm = torch.linalg.vector_norm(self.flat)
        self.flat.mul_((max_norm / (norm + 1e-6)).clamp(max=1.0))
        return norm
