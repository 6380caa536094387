"""Memory cores (LSTM, GRU, none) behind one interface.

Every core maps a sequence ``x`` of shape ``(T, B, F)`` to outputs ``(T, B, H)`` and carries one
state tensor of shape ``(B, state_size)`` (batch first):

- ``lstm``: ``state = cat([h, c], -1)``, ``state_size = 2 * H``;
- ``gru``: ``state = h``, ``state_size = H``;
- ``none``: a memoryless ``Linear + ReLU`` layer, ``state_size = 0``.

A reset flag ``resets[t, b]`` (episode start) zeroes row ``b`` of the state *before* step ``t`` is
processed, so running a sequence with a reset at ``t`` gives, from ``t`` on, exactly the outputs of
running the rest from a zero state.

Speed: when no reset falls strictly inside the sequence, the whole sequence goes through one
``nn.LSTM``/``nn.GRU`` call (a reset at ``t = 0`` only masks the initial state). Otherwise the core
runs a step loop over ``T`` that reuses the module's weights: the input projection of all steps is
one matrix product, and each step is one ``addmm`` plus the gate arithmetic. On CPU with one thread
the loop matched or beat ``nn.LSTM`` split into reset-free segments, and it also yields the state
after every step (needed to refresh stored LSTM cell states), which ``nn.LSTM`` does not return.
"""

from __future__ import annotations

import math

import torch
from torch import Tensor, nn

MEMORY_KINDS = ("lstm", "gru", "none")


class MemoryCore(nn.Module):
    """Interface shared by all memory cores (see the module docstring for shapes)."""

    input_size: int
    hidden_size: int
    state_size: int

    def initial_state(self, batch_size: int, device: torch.device | str | None = None) -> Tensor:
        """Zero state of shape ``(batch_size, state_size)``."""
        if device is None:
            device = next(self.parameters()).device
        return torch.zeros(batch_size, self.state_size, device=device)

    def forward(self, x: Tensor, state: Tensor, resets: Tensor) -> tuple[Tensor, Tensor]:
        """Run ``x (T, B, F)`` from ``state (B, S)``; returns ``(out (T, B, H), final_state)``."""
        raise NotImplementedError

    def unroll(self, x: Tensor, state: Tensor, resets: Tensor) -> tuple[Tensor, Tensor]:
        """Like :meth:`forward` but returns the state after every step, ``(T, B, S)``.

        ``post[t]`` is the state after step ``t`` before any reset of step ``t + 1``; the state
        used at the start of step ``t + 1`` is ``post[t]`` zeroed where ``resets[t + 1]``.
        """
        raise NotImplementedError


def _keep(resets: Tensor, dtype: torch.dtype) -> Tensor:
    """``1 - resets`` as ``(T, B, 1)`` floats."""
    return (~resets.bool()).to(dtype).unsqueeze(-1)


def _has_inner_reset(resets: Tensor) -> bool:
    return resets.shape[0] > 1 and bool(resets[1:].any())


class LSTMCore(MemoryCore):
    """Single-layer LSTM; state ``cat([h, c], -1)``."""

    def __init__(self, input_size: int, hidden_size: int) -> None:
        super().__init__()
        self.input_size, self.hidden_size = input_size, hidden_size
        self.state_size = 2 * hidden_size
        self.rnn = nn.LSTM(input_size, hidden_size)
        for name, p in self.rnn.named_parameters():
            if "weight" in name:
                nn.init.orthogonal_(p)
            else:
                nn.init.zeros_(p)

    def forward(self, x: Tensor, state: Tensor, resets: Tensor) -> tuple[Tensor, Tensor]:
        keep = _keep(resets, x.dtype)
        if x.shape[0] > 1 and not _has_inner_reset(resets):
            state = state * keep[0]
            h, c = state.chunk(2, -1)
            out, (h, c) = self.rnn(x, (h.unsqueeze(0).contiguous(), c.unsqueeze(0).contiguous()))
            return out, torch.cat([h[0], c[0]], -1)
        out, h, c, _ = self._loop(x, state, keep, resets, collect=False)
        return out, torch.cat([h, c], -1)

    def unroll(self, x: Tensor, state: Tensor, resets: Tensor) -> tuple[Tensor, Tensor]:
        out, _, _, cs = self._loop(x, state, _keep(resets, x.dtype), resets, collect=True)
        return out, torch.cat([out, torch.stack(cs)], -1)

    def _loop(
        self, x: Tensor, state: Tensor, keep: Tensor, resets: Tensor, collect: bool
    ) -> tuple[Tensor, Tensor, Tensor, list[Tensor]]:
        T, B, _ = x.shape
        H = self.hidden_size
        r = self.rnn
        xp = torch.addmm(r.bias_ih_l0 + r.bias_hh_l0, x.reshape(T * B, -1), r.weight_ih_l0.t())
        xp = xp.view(T, B, 4 * H)
        w_hh = r.weight_hh_l0.t()
        any_reset = resets.reshape(T, -1).any(1).tolist()
        h, c = state.chunk(2, -1)
        hs: list[Tensor] = []
        cs: list[Tensor] = []
        for t in range(T):
            if any_reset[t]:
                h, c = h * keep[t], c * keep[t]
            gates = torch.addmm(xp[t], h, w_hh)  # gate order of nn.LSTM: i, f, g, o
            s = gates.sigmoid()
            c = s[:, H : 2 * H] * c + s[:, :H] * gates[:, 2 * H : 3 * H].tanh()
            h = s[:, 3 * H :] * c.tanh()
            hs.append(h)
            if collect:
                cs.append(c)
        return torch.stack(hs), h, c, cs


class GRUCore(MemoryCore):
    """Single-layer GRU; state ``h``."""

    def __init__(self, input_size: int, hidden_size: int) -> None:
        super().__init__()
        self.input_size, self.hidden_size, self.state_size = input_size, hidden_size, hidden_size
        self.rnn = nn.GRU(input_size, hidden_size)
        for name, p in self.rnn.named_parameters():
            if "weight" in name:
                nn.init.orthogonal_(p)
            else:
                nn.init.zeros_(p)

    def forward(self, x: Tensor, state: Tensor, resets: Tensor) -> tuple[Tensor, Tensor]:
        keep = _keep(resets, x.dtype)
        if x.shape[0] > 1 and not _has_inner_reset(resets):
            out, h = self.rnn(x, (state * keep[0]).unsqueeze(0).contiguous())
            return out, h[0]
        out = self._loop(x, state, keep, resets)
        return out, out[-1]

    def unroll(self, x: Tensor, state: Tensor, resets: Tensor) -> tuple[Tensor, Tensor]:
        out, _ = self.forward(x, state, resets)
        return out, out

    def _loop(self, x: Tensor, h: Tensor, keep: Tensor, resets: Tensor) -> Tensor:
        T, B, _ = x.shape
        H = self.hidden_size
        r = self.rnn
        xp = torch.addmm(r.bias_ih_l0, x.reshape(T * B, -1), r.weight_ih_l0.t()).view(T, B, 3 * H)
        w_hh, b_hh = r.weight_hh_l0.t(), r.bias_hh_l0
        any_reset = resets.reshape(T, -1).any(1).tolist()
        hs: list[Tensor] = []
        for t in range(T):
            if any_reset[t]:
                h = h * keep[t]
            hp = torch.addmm(b_hh, h, w_hh)  # gate order of nn.GRU: r, z, n
            rz = (xp[t, :, : 2 * H] + hp[:, : 2 * H]).sigmoid()
            n = (xp[t, :, 2 * H :] + rz[:, :H] * hp[:, 2 * H :]).tanh()
            h = n + rz[:, H:] * (h - n)
            hs.append(h)
        return torch.stack(hs)


class NoMemory(MemoryCore):
    """Memoryless core: ``ReLU(Linear(x))`` per step, empty state ``(B, 0)``."""

    def __init__(self, input_size: int, hidden_size: int) -> None:
        super().__init__()
        self.input_size, self.hidden_size, self.state_size = input_size, hidden_size, 0
        self.linear = nn.Linear(input_size, hidden_size)
        nn.init.orthogonal_(self.linear.weight, math.sqrt(2))
        nn.init.zeros_(self.linear.bias)

    def forward(self, x: Tensor, state: Tensor, resets: Tensor) -> tuple[Tensor, Tensor]:
        return torch.relu(self.linear(x)), state

    def unroll(self, x: Tensor, state: Tensor, resets: Tensor) -> tuple[Tensor, Tensor]:
        out = torch.relu(self.linear(x))
        return out, state.new_zeros(*x.shape[:2], 0)


def make_memory(kind: str, input_size: int, hidden_size: int) -> MemoryCore:
    """Build a memory core: ``kind`` is one of ``'lstm'``, ``'gru'``, ``'none'``."""
    cores = {"lstm": LSTMCore, "gru": GRUCore, "none": NoMemory}
    if kind not in cores:
        raise ValueError(f"unknown memory kind {kind!r}; expected one of {MEMORY_KINDS}")
    return cores[kind](input_size, hidden_size)
