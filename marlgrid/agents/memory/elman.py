"""The Elman RNN core (``kind="elman"``): POPGym's cheapest recurrent baseline."""

from __future__ import annotations

import torch
from torch import Tensor, nn

from marlgrid.agents.memory.base import MemoryCore, register_core
from marlgrid.agents.memory.layout import segment_layout
from marlgrid.agents.memory.rnn import has_inner_reset


@register_core("elman")
class ElmanCore(MemoryCore):
    """Single-layer tanh RNN (``nn.RNN``), ``h_t = tanh(W x_t + U h_{t-1} + b)``; state
    ``{"h": H}``, the output. No options. Orthogonal weights, zero biases.

    A sequence is one ``torch.rnn_tanh`` call whatever its resets: with none it runs the lanes
    as they are; with resets inside, every piece between resets becomes a lane of its own,
    packed (as a ``PackedSequence``: longest first, a step runs only the lanes still going), so
    the call does ``T * B`` cell steps, as many as without resets, and each piece after a reset
    starts from zero. The state after a step is its output, so ``unroll`` and the generic
    ``chunk_unroll`` read every state from that one call.
    """

    def __init__(self, input_size: int, hidden_size: int) -> None:
        super().__init__(input_size, hidden_size)
        self.rnn = nn.RNN(input_size, hidden_size, nonlinearity="tanh")
        for name, p in self.rnn.named_parameters():
            if "weight" in name:
                nn.init.orthogonal_(p)
            else:
                nn.init.zeros_(p)

    @property
    def state_layout(self) -> dict[str, int]:
        return {"h": self.hidden_size}

    def _weights(self) -> list[Tensor]:
        r = self.rnn
        return [r.weight_ih_l0, r.weight_hh_l0, r.bias_ih_l0, r.bias_hh_l0]

    def forward(self, x: Tensor, state: Tensor, resets: Tensor) -> tuple[Tensor, Tensor]:
        out = self.outputs(x, state, resets)
        return out, out[-1]

    def outputs(self, x: Tensor, state: Tensor, resets: Tensor) -> Tensor:
        state = self.reset_state(state, resets[0])
        if x.shape[0] == 1:  # acting: one cell op
            return torch.rnn_tanh_cell(x[0], state, *self._weights()).unsqueeze(0)
        grad = torch.is_grad_enabled()
        if not has_inner_reset(resets):
            args = (self._weights(), True, 1, 0.0, grad, False, False)
            return torch.rnn_tanh(x, state.unsqueeze(0), *args)[0]
        return self._packed(x, state, resets)

    def _packed(self, x: Tensor, state: Tensor, resets: Tensor) -> Tensor:
        """Outputs by one packed call over the pieces cut at the inner resets; ``state`` is
        already reset for step 0."""
        T, B, F = x.shape
        tau, row, first_row, R = segment_layout(resets)  # piece row[t, b], its step tau[t, b]
        length = torch.zeros(R, dtype=torch.long, device=x.device)
        length.scatter_reduce_(0, row.view(-1), tau.view(-1) + 1, "amax")
        order = length.argsort(descending=True, stable=True)  # rank -> row
        rank = torch.empty_like(order)
        rank[order] = torch.arange(R, device=x.device)
        active = torch.arange(T, device=x.device).unsqueeze(1) < length[order]  # (T, R)
        batch_sizes = active.sum(1)
        batch_sizes = batch_sizes[batch_sizes > 0]
        step_start = batch_sizes.cumsum(0) - batch_sizes  # packed offset of each position
        pos = (step_start[tau] + rank[row]).view(-1)  # packed position of every (t, b)
        data = x.new_empty(T * B, F).index_copy(0, pos, x.reshape(T * B, F))
        h0 = state.new_zeros(R, state.shape[1]).index_copy(0, rank[first_row], state)
        grad = torch.is_grad_enabled()
        args = (self._weights(), True, 1, 0.0, grad, False)
        packed, _ = torch.rnn_tanh(data, batch_sizes.cpu(), h0.unsqueeze(0), *args)
        return packed.index_select(0, pos).view(T, B, -1)

    def unroll(self, x: Tensor, state: Tensor, resets: Tensor) -> tuple[Tensor, Tensor]:
        out = self.outputs(x, state, resets)
        return out, out
