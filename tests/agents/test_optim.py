"""Optimizer helpers: flat gradient zeroing and clipping, optimizer choice."""

from __future__ import annotations

import copy

import pytest
import torch
from torch import nn

from marlgrid.agents.optim import FlatGrads, make_optimizer


def _net_and_loss(seed: int = 0) -> tuple[nn.Module, torch.Tensor]:
    torch.manual_seed(seed)
    net = nn.Sequential(nn.Linear(5, 7), nn.Tanh(), nn.Linear(7, 3))
    x = torch.randn(11, 5)
    return net, x


@pytest.mark.parametrize("max_norm", [0.05, 1e6])
def test_flat_clip_equals_clip_grad_norm(max_norm: float) -> None:
    """Same gradients and returned norm as ``nn.utils.clip_grad_norm_``, clipped (small bound)
    or left as they are (large bound)."""
    ours, x = _net_and_loss()
    ref = copy.deepcopy(ours)
    grads = FlatGrads(ours)
    flat = grads.zero()
    assert flat.numel() == sum(p.numel() for p in ours.parameters())
    for _ in range(2):  # accumulated twice: backward adds into the flat views
        ours(x).square().sum().backward()
        ref(x).square().sum().backward()
    unclipped = [p.grad.clone() for p in ref.parameters()]
    norm = grads.clip_(max_norm)
    ref_norm = nn.utils.clip_grad_norm_(ref.parameters(), max_norm)
    torch.testing.assert_close(norm, ref_norm)
    assert norm.item() > 0.05  # the small bound does clip
    for p, q in zip(ours.parameters(), ref.parameters(), strict=True):
        torch.testing.assert_close(p.grad, q.grad)
    total = torch.linalg.vector_norm(torch.cat([p.grad.flatten() for p in ours.parameters()]))
    if max_norm < norm:
        assert total.item() == pytest.approx(max_norm, rel=1e-4)
    else:
        for p, g in zip(ours.parameters(), unclipped, strict=True):
            torch.testing.assert_close(p.grad, g)


def test_flat_grads_zero_and_reinstall_after_zero_grad() -> None:
    net, x = _net_and_loss()
    grads = FlatGrads(net)
    grads.zero()
    net(x).sum().backward()
    assert grads.flat.abs().sum() > 0
    flat = grads.zero()
    assert flat.abs().sum() == 0 and all(p.grad.abs().sum() == 0 for p in net.parameters())
    net.zero_grad()  # set_to_none: the views are gone
    assert all(p.grad is None for p in net.parameters())
    flat = grads.zero()
    net(x).sum().backward()
    for p in net.parameters():  # every gradient lives in the flat tensor again
        start = (p.grad.data_ptr() - flat.data_ptr()) // flat.element_size()
        assert 0 <= start < flat.numel()
        torch.testing.assert_close(flat[start : start + p.numel()].view_as(p), p.grad)


def test_make_optimizer() -> None:
    net, _ = _net_and_loss()
    adam = make_optimizer(net.parameters(), "adam", 1e-3, 1e-5)
    assert isinstance(adam, torch.optim.Adam) and adam.param_groups[0]["eps"] == 1e-5
    assert isinstance(make_optimizer(net.parameters(), "rmsprop", 1e-3, 1e-5), torch.optim.RMSprop)
    with pytest.raises(ValueError, match="unknown optimizer 'sgd'"):
        make_optimizer(net.parameters(), "sgd", 1e-3, 1e-5)


def test_fused_adam_steps_right_with_a_non_contiguous_gradient():
    """torch's CPU fused Adam updates wrongly from a non-contiguous gradient, silently; the
    project's optimizer makes such gradients contiguous before every step."""
    import torch

    from marlgrid.agents.optim import make_optimizer

    torch.manual_seed(0)
    ours = torch.nn.Parameter(torch.randn(3, 4))
    reference = torch.nn.Parameter(ours.detach().clone())
    grad = torch.randn(4, 3).t()  # a (3, 4) view with transposed strides
    assert not grad.is_contiguous()
    a = make_optimizer([ours], "adam", lr=0.1, eps=1e-8)
    b = torch.optim.Adam([reference], lr=0.1, eps=1e-8, foreach=False)
    for _ in range(3):
        ours.grad, reference.grad = grad, grad.contiguous()
        a.step()
        b.step()
    torch.testing.assert_close(ours, reference)
