"""The GRU core (``kind="gru"``)."""

from __future__ import annotations

import torch
from torch import Tensor, nn

from marlgrid.agents.memory.base import ChunkPass, index_pairs, register_core
from marlgrid.agents.memory.rnn import FusedRNNCore, Hx, big


@register_core("gru")
class GRUCore(FusedRNNCore):
    """Single-layer GRU; state ``{"h": H}``.

    Options: ``update_bias`` (default 0): initial bias of the update gate ``z``; a positive value
    makes a fresh GRU keep its state over more steps (``h_t = (1 - z) n_t + z h_{t-1}``).

    A GRU's state after a step is its output, so every path is one fused call (see
    :mod:`.rnn`): :meth:`chunk_unroll` reads the chunk-start and post-step states from it.
    """

    chunk_paths = ("fused",)

    def __init__(self, input_size: int, hidden_size: int, *, update_bias: float = 0.0) -> None:
        super().__init__(input_size, hidden_size)
        self.update_bias = float(update_bias)
        self._init_rnn(nn.GRU(input_size, hidden_size))
        with torch.no_grad():
            self.rnn.bias_ih_l0[hidden_size : 2 * hidden_size].fill_(self.update_bias)

    @property
    def state_layout(self) -> dict[str, int]:
        return {"h": self.hidden_size}

    def _flag_columns(self) -> Tensor:
        H, r = self.hidden_size, self.rnn  # gate order of nn.GRU: r, z, n
        cols, inf = r.weight_ih_l0.new_zeros(3 * H, 2), big(r.weight_ih_l0.dtype)
        cols[: 2 * H, 0] = -inf  # reset: r = z = 0, ...
        cols[2 * H :, 0] = -r.bias_ih_l0[2 * H :]  # ... n = tanh(0) = 0, so h = 0
        cols[H : 2 * H, 1] = inf  # hold: z = 1, so h stays
        return cols

    def _call(self, x: Tensor, hx: Hx, w_ih: Tensor) -> tuple[Tensor, Hx]:
        # the op behind nn.GRU.forward (as LSTMCore._call)
        r = self.rnn
        weights = [w_ih, r.weight_hh_l0, r.bias_ih_l0, r.bias_hh_l0]
        out, h = torch.gru(x, hx[0], weights, True, 1, 0.0, torch.is_grad_enabled(), False, False)
        return out, (h,)

    def _cell(self, x: Tensor, state: Tensor) -> tuple[Tensor, Tensor]:
        r = self.rnn
        h = torch.gru_cell(x, state, r.weight_ih_l0, r.weight_hh_l0, r.bias_ih_l0, r.bias_hh_l0)
        return h, h

    def unroll(self, x: Tensor, state: Tensor, resets: Tensor) -> tuple[Tensor, Tensor]:
        out, _ = self.forward(x, state, resets)
        return out, out

    def chunk_unroll(
        self,
        x: Tensor,
        state: Tensor,
        resets: Tensor,
        chunk_len: int,
        post_t: Tensor | None = None,
        post_b: Tensor | None = None,
    ) -> ChunkPass:
        """Exact :meth:`MemoryCore.chunk_unroll`: one fused call, states read from outputs."""
        T, L = x.shape[0], chunk_len
        post_t, post_b = index_pairs(post_t, post_b, x.device)
        state = self.reset_state(state, resets[0])
        out, _ = self._fused(x, state, resets)
        t_end = (
            torch.arange(1, -(-T // L), device=x.device) * L - 1
        )  # last steps before chunk starts
        starts = torch.cat([state.unsqueeze(0), self.reset_state(out[t_end], resets[t_end + 1])])
        return ChunkPass(out, starts, out[-1], out[post_t, post_b])
