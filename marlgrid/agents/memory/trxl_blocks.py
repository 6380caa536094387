"""Pieces of the Transformer-XL core (:mod:`.trxl`): the attention window, positions, blocks.

:func:`attention_window` is the one builder of which keys each query may read, used by every
path of the core (acting steps, sequences, chunk passes, refresh), so acting and training read
the same indices. Over a chunk of ``T`` steps the keys are ``[cache (L) ++ chunk (T)]``; query
``t`` sits at key index ``L + t`` and may read key ``u`` when

- ``0 <= L + t - u <= L``: the ``L`` steps before it and itself (a query always reads at least
  itself, so no row of the mask is empty and no softmax is over nothing);
- the key is valid: a chunk step always is, a cache slot as its validity flag says;
- the key is in the query's episode: no reset falls after it, up to the query.

The state after step ``t`` keeps keys ``t + 1 .. t + L`` (what step ``t + 1`` would read besides
itself), by the same rules.
"""

from __future__ import annotations

import math
from typing import NamedTuple

import torch
from torch import Tensor, nn
from torch.nn import functional as F

__all__ = ["Block", "GRUGate", "Positions", "Window", "attention_window"]


class Window(NamedTuple):
    """Which keys of ``[cache (L) ++ chunk (T)]`` each query reads (see the module doc)."""

    mask: Tensor  #: ``(B, T, L + T)`` bool: query ``t`` reads key ``u``
    key_ok: Tensor  #: ``(B, L + T)`` bool: the key holds a step (valid cache slot or chunk step)
    key_seg: Tensor  #: ``(B, L + T)`` episode number of each key (0: the one the cache is in)
    seg: Tensor  #: ``(T, B)`` episode number of each query
    pos: Tensor  #: ``(T, B)`` long: episode step of each query

    def after(self, t: Tensor, b: Tensor) -> tuple[Tensor, Tensor, Tensor]:
        """The window kept after steps ``t`` of slots ``b`` (``(n,)`` each): key indices
        ``(n, L)`` (``t + 1 .. t + L``), their validity ``(n, L)`` and the next episode step
        ``(n,)``."""
        L = self.key_ok.shape[1] - self.seg.shape[0]
        idx = t.unsqueeze(1) + 1 + torch.arange(L, device=t.device)
        bi = b.unsqueeze(1)
        ok = self.key_ok[bi, idx] & (self.key_seg[bi, idx] == self.seg[t, b].unsqueeze(1))
        return idx, ok, self.pos[t, b] + 1

    def final(self) -> tuple[Tensor, Tensor]:
        """Validity ``(B, L)`` of the window after the last step and the next episode step
        ``(B,)``: :meth:`after` of step ``T - 1`` for every slot, by slicing."""
        T = self.seg.shape[0]
        ok = self.key_ok[:, T:] & (self.key_seg[:, T:] == self.seg[-1].unsqueeze(1))
        return ok, self.pos[-1] + 1


def attention_window(valid: Tensor, step: Tensor, resets: Tensor) -> Window:
    """The :class:`Window` of a chunk ``resets (T, B)`` run from a cache with validity
    ``valid (B, L)`` (bool) at episode step ``step (B,)`` (long). A reset at ``t = 0`` is the
    caller's (it resets the state first) and is ignored here."""
    T, B = resets.shape
    L, dev = valid.shape[1], valid.device
    key_ok = torch.cat([valid, valid.new_ones(B, T)], 1)
    if T == 1:  # an acting step: one episode, every key in reach; the same window, fewer ops
        seg = step.new_zeros(1, B)
        return Window(key_ok.unsqueeze(1), key_ok, step.new_zeros(B, L + 1), seg, step[None])
    inner = resets.bool().clone()
    inner[0] = False
    seg = inner.long().cumsum(0)  # (T, B)
    t = torch.arange(T, device=dev).unsqueeze(1)
    start = torch.where(inner, t, 0).cummax(0).values  # first step of each query's episode
    pos = torch.where(seg == 0, step.unsqueeze(0) + t, t - start)
    key_seg = torch.cat([seg.new_zeros(B, L), seg.t()], 1)
    age = (L + t) - torch.arange(L + T, device=dev)  # (T, L + T): query index minus key index
    in_reach = (age >= 0) & (age <= L)
    mask = in_reach & key_ok.unsqueeze(1) & (key_seg.unsqueeze(1) == seg.t().unsqueeze(2))
    return Window(mask, key_ok, key_seg, seg, pos)


class Positions(nn.Module):
    """Absolute positional encoding by episode step: ``"sinusoid"`` (Vaswani et al. 2017:
    ``sin``/``cos`` pairs at wavelengths ``2 pi * 10000^(2i/D)``, interleaved), ``"learned"`` (a
    table of ``max_position`` rows; later steps share the last row) or ``"none"`` (zeros)."""

    def __init__(self, kind: str, dim: int, max_position: int) -> None:
        super().__init__()
        self.kind, self.dim, self.max_position = kind, dim, max_position
        half = -(-dim // 2)
        freqs = torch.exp(torch.arange(half) * (-2.0 * math.log(10000.0) / dim))
        self.register_buffer("freqs", freqs, persistent=False)
        self.table = nn.Embedding(max_position, dim) if kind == "learned" else None
        if self.table is not None:
            nn.init.normal_(self.table.weight, std=0.02)

    def forward(self, pos: Tensor, like: Tensor) -> Tensor:
        """Encodings of the long steps ``pos (...)``: ``(..., D)`` in ``like``'s dtype."""
        if self.table is not None:
            return self.table(pos.clamp(max=self.max_position - 1)).to(like.dtype)
        if self.kind == "none":
            return like.new_zeros(*pos.shape, self.dim)
        angles = pos.unsqueeze(-1).to(like.dtype) * self.freqs.to(like.dtype)
        return torch.stack([angles.sin(), angles.cos()], -1).flatten(-2)[..., : self.dim]


class GRUGate(nn.Module):
    """GTrXL's gated residual (Parisotto et al. 2020, eq. 5-7): from the stream ``x`` and a
    sublayer's output ``y``, ``r = sigmoid(W_r y + U_r x)``, ``z = sigmoid(W_z y + U_z x - b)``,
    ``h = tanh(W_h y + U_h (r * x))``, out ``(1 - z) * x + z * h``. The bias ``b`` (a parameter,
    initially ``gate_bias``) above 0 starts the block near the identity."""

    def __init__(self, dim: int, gate_bias: float) -> None:
        super().__init__()
        self.w = nn.Linear(dim, 3 * dim, bias=False)  # W_r, W_z, W_h on y
        self.u = nn.Linear(dim, 2 * dim, bias=False)  # U_r, U_z on x
        self.u_h = nn.Linear(dim, dim, bias=False)
        self.bias = nn.Parameter(torch.full((dim,), float(gate_bias)))
        for lin in (self.w, self.u, self.u_h):
            nn.init.xavier_uniform_(lin.weight)

    def forward(self, x: Tensor, y: Tensor) -> Tensor:
        w_r, w_z, w_h = self.w(y).chunk(3, -1)
        u_r, u_z = self.u(x).chunk(2, -1)
        r = torch.sigmoid(w_r + u_r)
        z = torch.sigmoid(w_z + u_z - self.bias)
        h = torch.tanh(w_h + self.u_h(r * x))
        return torch.lerp(x, h, z)


class Attention(nn.Module):
    """Multi-head attention of ``T`` queries over ``K`` keys under a boolean mask."""

    def __init__(self, dim: int, n_heads: int) -> None:
        super().__init__()
        self.n_heads = n_heads
        self.q = nn.Linear(dim, dim)
        self.kv = nn.Linear(dim, 2 * dim)
        self.out = nn.Linear(dim, dim)

    def forward(self, queries: Tensor, keys: Tensor, mask: Tensor) -> Tensor:
        """``queries (B, T, D)``, ``keys (B, K, D)``, ``mask (B, T, K)`` -> ``(B, T, D)``."""
        B, T, D = queries.shape
        nh = self.n_heads
        q = self.q(queries).view(B, T, nh, D // nh).transpose(1, 2)
        k, v = self.kv(keys).view(B, -1, 2, nh, D // nh).permute(2, 0, 3, 1, 4)
        ctx = F.scaled_dot_product_attention(q, k, v, attn_mask=mask.unsqueeze(1))
        return self.out(ctx.transpose(1, 2).reshape(B, T, D))


class Block(nn.Module):
    """One transformer block: attention over the window, then a feed-forward layer
    (``Linear(D, D)``, ReLU, ``Linear(D, D)``), each merged into the stream by a residual sum
    or, with ``gating``, by a :class:`GRUGate` (the sublayer's output through a ReLU first, as
    in GTrXL). ``"pre"`` layer norm normalises each sublayer's input (keys included), ``"post"``
    the stream after each merge."""

    def __init__(
        self, dim: int, n_heads: int, layer_norm: str, gating: bool, gate_bias: float
    ) -> None:
        super().__init__()
        self.pre = layer_norm == "pre"
        self.attn = Attention(dim, n_heads)
        self.ffn = nn.Sequential(nn.Linear(dim, dim), nn.ReLU(), nn.Linear(dim, dim))
        self.norm1, self.norm2 = nn.LayerNorm(dim), nn.LayerNorm(dim)
        self.gates = nn.ModuleList([GRUGate(dim, gate_bias) for _ in range(2)]) if gating else None

    def _merge(self, i: int, x: Tensor, sub: Tensor) -> Tensor:
        if self.gates is None:
            return x + sub
        return self.gates[i](x, torch.relu(sub))

    def forward(self, seq: Tensor, mask: Tensor) -> Tensor:
        """``seq (B, L + T, D)``: the block's inputs, cache then chunk; the chunk's ``T``
        outputs ``(B, T, D)``."""
        T = mask.shape[1]
        x = seq[:, -T:]
        if self.pre:
            keys = self.norm1(seq)
            y = self._merge(0, x, self.attn(keys[:, -T:], keys, mask))
            return self._merge(1, y, self.ffn(self.norm2(y)))
        y = self.norm1(self._merge(0, x, self.attn(x, seq, mask)))
        return self.norm2(self._merge(1, y, self.ffn(y)))
