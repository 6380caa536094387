"""Shared machinery of the cores that wrap ``nn.LSTM`` / ``nn.GRU``: one fused call with resets.

A fused ``torch.lstm`` / ``torch.gru`` call cannot reset a lane's state between two steps, so
the input gets two flag columns, fed through two extra columns of the input weights:

- a *reset step* (first flag) drives every gate that keeps or writes state to exactly 0 or 1
  with a huge pre-activation: for the LSTM ``i = f = o = 0``, so ``c = 0`` and ``h = 0``; for the
  GRU ``r = z = 0`` and the candidate's pre-activation cancels its bias, so ``h = tanh(0) = 0``.
  A reset step placed before step ``t`` is therefore exactly a reset before step ``t``;
- a *hold step* (second flag) keeps the state: ``f = 1, i = 0`` keeps the LSTM's ``c`` exactly
  (its ``h`` changes and is read from the lane's last output instead); ``z = 1`` keeps the
  GRU's ``h`` up to rounding (not relied on: a GRU's state is read from its outputs).

:mod:`.layout` places them. The flag columns are no parameters; gradients through reset steps
are exactly zero, as through a real reset. The conformance suite checks all of this against
step-by-step acting.
"""

from __future__ import annotations

import torch
from torch import Tensor, nn

from marlgrid.agents.memory.base import MemoryCore
from marlgrid.agents.memory.layout import segment_layout, step_layout

#: magnitude of the flag pre-activations (sigmoid of it is exactly 0 or 1 in float32/64)
BIG = 1e18


def big(dtype: torch.dtype) -> float:
    """:data:`BIG`, or less where ``dtype`` cannot hold it (never inf: ``inf * 0`` is NaN)."""
    return min(BIG, torch.finfo(dtype).max / 4)


def has_inner_reset(resets: Tensor) -> bool:
    """Whether a reset falls on a step after the first."""
    return resets.shape[0] > 1 and bool(resets[1:].any())


Hx = tuple[Tensor, ...]  #: the ``nn`` module's state: ``(h,)`` or ``(h, c)``, each ``(1, B, H)``


class FusedRNNCore(MemoryCore):
    """Base of :class:`.lstm.LSTMCore` and :class:`.gru.GRUCore`: ``forward`` and ``outputs`` as
    one fused call whatever the resets, the acting step as one cell op.

    Its reset is zeroing (what the reset steps do); :meth:`reset_state` is not to be overridden.
    Inside a call the state travels in the module's own format (:data:`Hx`), converted at the
    ends (:meth:`_hx`, :meth:`_state`).
    """

    rnn: nn.LSTM | nn.GRU
    outputs_paths = ("rows", "steps")
    #: :meth:`outputs` lays out segment rows while rows / B <= steps / T + this (measured on
    #: CPU, forward and backward: rows win for T = 8 chunks, reset steps for T >= 32)
    rows_margin: float = 0.25

    def _init_rnn(self, rnn: nn.LSTM | nn.GRU) -> None:
        self.rnn = rnn
        for name, p in rnn.named_parameters():
            if "weight" in name:
                nn.init.orthogonal_(p)
            else:
                nn.init.zeros_(p)

    # -- per core ----------------------------------------------------------------------------

    def _flag_columns(self) -> Tensor:
        """``(gates * H, 2)`` input weights of the reset and hold flags."""
        raise NotImplementedError

    def _call(self, x: Tensor, hx: Hx, w_ih: Tensor) -> tuple[Tensor, Hx]:
        """One ``torch.lstm`` / ``torch.gru`` call over ``x`` from ``hx`` with input weights
        ``w_ih``: the outputs and the op's final state."""
        raise NotImplementedError

    def _cell(self, x: Tensor, state: Tensor) -> tuple[Tensor, Tensor]:
        """One step ``x (B, F)`` from ``state (B, S)`` by the fused cell op: ``(out, state)``."""
        raise NotImplementedError

    def _hx(self, state: Tensor) -> Hx:
        return tuple(p.unsqueeze(0).contiguous() for p in self.split_state(state).values())

    def _state(self, hx: Hx) -> Tensor:
        return torch.cat([p[0] for p in hx], -1) if len(hx) > 1 else hx[0][0]

    # -- paths -------------------------------------------------------------------------------

    def forward(self, x: Tensor, state: Tensor, resets: Tensor) -> tuple[Tensor, Tensor]:
        state = self.reset_state(state, resets[0])
        if x.shape[0] == 1:  # acting: one cell op (about twice as fast as a sequence call)
            out, state = self._cell(x[0], state)
            return out.unsqueeze(0), state
        out, hx = self._fused(x, state, resets)
        return out, self._state(hx)

    def outputs(self, x: Tensor, state: Tensor, resets: Tensor) -> Tensor:
        """Outputs only (training): one call, over reset steps (``"steps"``) or over segment
        rows (``"rows"``), whichever adds less: rows for short sequences such as training
        chunks, steps for long ones (see :attr:`rows_margin`)."""
        T, B = resets.shape
        state = self.reset_state(state, resets[0])
        if T == 1 or not has_inner_reset(resets):
            return self.forward(x, state, resets)[0]
        if self.outputs_path == "auto":
            counts = resets[1:].sum(0)  # inner resets per lane
            rows, steps = B + int(counts.sum()), T + int(counts.max())
            use_rows = rows / B <= steps / T + self.rows_margin
        else:
            use_rows = self.outputs_path == "rows"
        if use_rows:
            return self._segments(x, state, resets)
        return self._fused(x, state, resets)[0]

    def _segments(self, x: Tensor, state: Tensor, resets: Tensor) -> Tensor:
        """Outputs by one call over the sequences cut at their inner resets into zero-padded,
        left-aligned rows (:func:`.layout.segment_layout`; padding only follows real steps);
        ``state`` is already reset for step 0."""
        T, B, F = x.shape
        tau, row, first_row, R = segment_layout(resets)
        pos = (tau * R + row).view(-1)
        xs = x.new_zeros(T * R, F).index_copy(0, pos, x.reshape(T * B, F)).view(T, R, F)
        s0 = state.new_zeros(R, state.shape[1]).index_copy(0, first_row, state)
        out, _ = self._call(xs, self._hx(s0), self.rnn.weight_ih_l0)
        return out.reshape(T * R, -1).index_select(0, pos).view(T, B, -1)

    def _fused(self, x: Tensor, state: Tensor, resets: Tensor) -> tuple[Tensor, Hx]:
        """Outputs at every step and the final state, one call (:func:`.layout.step_layout`
        where a reset falls inside); ``state`` is already reset for step 0. A lane that ends
        before the call does is held: its final ``h`` is read from its last output, the rest of
        its state is the call's."""
        T, B, F = x.shape
        hx = self._hx(state)
        if not has_inner_reset(resets):
            return self._call(x, hx, self.rnn.weight_ih_l0)
        lay = step_layout(resets)
        rows = x.new_empty(T * B + 2, F + 2)  # the steps, then a reset row and a hold row
        rows[: T * B, :F] = x.reshape(T * B, F)
        rows[:, F:] = 0.0
        rows[T * B :, :F] = 0.0
        rows[T * B, F] = rows[T * B + 1, F + 1] = 1.0
        xa = rows.index_select(0, lay.src).view(lay.length, B, F + 2)
        w_ih = torch.cat([self.rnn.weight_ih_l0, self._flag_columns()], 1)
        o, hx = self._call(xa, hx, w_ih)
        out = o.reshape(lay.length * B, -1).index_select(0, lay.dst).view(T, B, -1)
        return out, (out[-1].unsqueeze(0), *hx[1:])
