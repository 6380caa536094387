"""The linear-attention core (``kind="linear_attention"``): POPGym's fast autoregressive
transformer (FART, Katharopoulos et al. 2020)."""

from __future__ import annotations

import math

import torch
from torch import Tensor, nn
from torch.nn import functional as fn

from marlgrid.agents.memory.base import MemoryCore, register_core
from marlgrid.agents.memory.scan import linear_scan
from marlgrid.config import check_int


def default_dim(hidden_size: int) -> int:
    """POPGym's key/query/value size for a core of ``hidden_size``: ``round(sqrt(H) - 1)``
    (15 for 256), at least 1."""
    return max(1, round(math.sqrt(hidden_size) - 1))


def feature_map(x: Tensor) -> Tensor:
    """``phi(x) = elu(x) + 1`` (positive, so attention weights are)."""
    return fn.elu(x) + 1.0


@register_core("linear_attention")
class LinearAttention(MemoryCore):
    """One causal linear-attention layer over the episode so far.

    Per step, with ``n = LayerNorm(x)``, ``q = phi(W_q n)``, ``k = phi(W_k n)``, ``v = W_v n``
    (``d`` wide)::

        S_t = S_{t-1} + k_t v_t^T        z_t = z_{t-1} + k_t
        a_t = q_t^T S_t / max(q_t . z_t, 1)
        out_t = W_out (FF(a_t) + W_res n_t)

    with ``FF`` two ``Linear(d, d)`` + ReLU. ``a_t`` is the softmax-free attention of step ``t``
    over the episode's steps so far, ``sum_s (q_t . k_s) v_s / sum_s q_t . k_s``; the floor of 1
    on the normaliser keeps the division well-conditioned for any state (until the attention
    mass reaches 1 the missing weight goes to a zero value). A reset zeroes ``S`` and ``z``
    before its step. State ``{"S": d * d, "z": d}``, ``S`` row-major (``S[i, j]``: key ``i``,
    value ``j``).

    A sequence is one pass: ``S`` and ``z`` of every step by one :func:`.scan.linear_scan`
    (a running sum whose carry is dropped at resets), which ``unroll`` and the generic
    ``chunk_unroll`` return as the states.

    Options: ``dim`` (``d``; default :func:`default_dim` of ``hidden_size``, 15 for 256 as
    POPGym).
    """

    def __init__(self, input_size: int, hidden_size: int, *, dim: int | None = None) -> None:
        super().__init__(input_size, hidden_size)
        d = default_dim(hidden_size) if dim is None else check_int("linear_attention dim", dim, 1)
        self.dim = d
        self.norm = nn.LayerNorm(input_size)
        self.qkv = nn.Linear(input_size, 3 * d, bias=False)
        self.ff = nn.Sequential(nn.Linear(d, d), nn.ReLU(), nn.Linear(d, d), nn.ReLU())
        self.shortcut = nn.Linear(input_size, d)
        self.unmap = nn.Linear(d, hidden_size)
        for layer in (self.qkv, self.ff[0], self.ff[2], self.shortcut, self.unmap):
            nn.init.orthogonal_(layer.weight)
            if layer.bias is not None:
                nn.init.zeros_(layer.bias)

    @property
    def state_layout(self) -> dict[str, int]:
        return {"S": self.dim * self.dim, "z": self.dim}

    def _run(self, x: Tensor, state: Tensor, resets: Tensor) -> tuple[Tensor, Tensor]:
        """Outputs and the state after every step."""
        T, B, _ = x.shape
        d = self.dim
        n = self.norm(x)
        q, k, v = self.qkv(n).split(d, -1)
        q, k = feature_map(q), feature_map(k)
        kv = (k.unsqueeze(-1) * v.unsqueeze(-2)).view(T, B, d * d)
        keep = (~resets.bool()).unsqueeze(-1).to(x.dtype)
        post = linear_scan(keep, torch.cat([kv, k], -1), state)  # (T, B, d * d + d)
        S, z = post.split([d * d, d], -1)
        num = (q.unsqueeze(-2) @ S.view(T, B, d, d)).squeeze(-2)
        att = num / (q * z).sum(-1, keepdim=True).clamp_min(1.0)
        return self.unmap(self.ff(att) + self.shortcut(n)), post

    def forward(self, x: Tensor, state: Tensor, resets: Tensor) -> tuple[Tensor, Tensor]:
        out, post = self._run(x, state, resets)
        return out, post[-1]

    def unroll(self, x: Tensor, state: Tensor, resets: Tensor) -> tuple[Tensor, Tensor]:
        return self._run(x, state, resets)
