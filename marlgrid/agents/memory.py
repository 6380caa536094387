"""Memory cores (LSTM, GRU, none) behind one interface.

Every core maps a sequence ``x`` of shape ``(T, B, F)`` to outputs ``(T, B, H)`` and carries one
state tensor of shape ``(B, state_size)`` (batch first):

- ``lstm``: ``state = cat([h, c], -1)``, ``state_size = 2 * H``;
- ``gru``: ``state = h``, ``state_size = H``;
- ``none``: a memoryless ``Linear + ReLU`` layer, ``state_size = 0``.

A reset flag ``resets[t, b]`` (episode start) zeroes row ``b`` of the state *before* step ``t`` is
processed, so running a sequence with a reset at ``t`` gives, from ``t`` on, exactly the outputs of
running the rest from a zero state.

Speed (measured on CPU, one thread):

- :meth:`MemoryCore.forward` over one step (acting) is one fused cell op (``torch.lstm_cell`` /
  ``torch.gru_cell``). Over a sequence with no reset strictly inside, it is one
  ``nn.LSTM``/``nn.GRU`` call (a reset at ``t = 0`` only masks the initial state); otherwise a
  step loop reuses the module's weights (the input projection of all steps is one matrix product;
  each step is one ``addmm`` plus the gate arithmetic).
- :meth:`MemoryCore.outputs` (training, no final state) cuts the sequences at their inner resets
  into zero-padded rows and makes one ``nn`` call (fused forward and backward).
- :meth:`MemoryCore.chunk_unroll` (hidden-state refreshing) needs the outputs at every step but
  states only at chunk starts: ``ceil(T / chunk_len)`` sequential ``nn`` calls over the whole
  batch, plus one packed call for the pieces that start at a reset inside a chunk (see there).
- :meth:`MemoryCore.unroll` (every post-step state) is the step loop; it is the reference that the
  fast paths are tested against.
"""

from __future__ import annotations

import math
from typing import NamedTuple

import torch
from torch import Tensor, nn
from torch.nn.utils.rnn import pack_padded_sequence, pad_packed_sequence

MEMORY_KINDS = ("lstm", "gru", "none")


class ChunkPass(NamedTuple):
    """What :meth:`MemoryCore.chunk_unroll` returns."""

    out: Tensor  #: outputs at every step ``(T, B, H)``
    starts: Tensor  #: state used at each chunk start ``(ceil(T / chunk_len), B, S)``
    final: Tensor  #: state after the last step ``(B, S)``
    post: Tensor  #: states after the requested steps ``(n, S)``


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

    def outputs(self, x: Tensor, state: Tensor, resets: Tensor) -> Tensor:
        """Only the outputs of :meth:`forward` (cores may use a faster path for this)."""
        return self.forward(x, state, resets)[0]

    def unroll(self, x: Tensor, state: Tensor, resets: Tensor) -> tuple[Tensor, Tensor]:
        """Like :meth:`forward` but returns the state after every step, ``(T, B, S)``.

        ``post[t]`` is the state after step ``t`` before any reset of step ``t + 1``; the state
        used at the start of step ``t + 1`` is ``post[t]`` zeroed where ``resets[t + 1]``.
        """
        raise NotImplementedError

    def chunk_unroll(
        self,
        x: Tensor,
        state: Tensor,
        resets: Tensor,
        chunk_len: int,
        post_t: Tensor | None = None,
        post_b: Tensor | None = None,
    ) -> ChunkPass:
        """Outputs at every step, but states only where a learner reads them (no gradients).

        Returns :class:`ChunkPass`: ``starts[k]`` is the state used at step ``k * chunk_len``
        (after its reset), ``final`` the state after step ``T - 1``, and ``post[i]`` the state
        after step ``post_t[i]`` of slot ``post_b[i]`` (before any reset of the next step).

        This generic version takes every state from :meth:`unroll`; the ``nn.LSTM``/``nn.GRU``
        cores override it with a faster one.
        """
        out, post = self.unroll(x, state, resets)
        starts = torch.cat([state[None], post[:-1]]) * _keep(resets, x.dtype)
        post_t, post_b = _pairs(post_t, post_b, x.device)
        return ChunkPass(out, starts[::chunk_len], post[-1], post[post_t, post_b])


def _keep(resets: Tensor, dtype: torch.dtype) -> Tensor:
    """``1 - resets`` as ``(T, B, 1)`` floats."""
    return (~resets.bool()).to(dtype).unsqueeze(-1)


def _has_inner_reset(resets: Tensor) -> bool:
    return resets.shape[0] > 1 and bool(resets[1:].any())


def _pairs(
    post_t: Tensor | None, post_b: Tensor | None, device: torch.device
) -> tuple[Tensor, Tensor]:
    if post_t is None or post_b is None:
        empty = torch.zeros(0, dtype=torch.long, device=device)
        return empty, empty
    return post_t.long(), post_b.long()


def segment_layout(resets: Tensor) -> tuple[Tensor, Tensor, Tensor, int]:
    """Cut every column of ``resets (T, N)`` at its inner resets into left-aligned rows.

    Returns ``(tau, row, first_row, R)``: step ``(t, n)`` goes to position ``tau[t, n]`` of row
    ``row[t, n]`` of a ``(T, R)`` layout; ``first_row[n]`` is the row holding column ``n``'s first
    segment (the only one that starts from the given state; the others start from zero).
    """
    T, N = resets.shape
    inner = resets.clone()
    inner[0] = False
    seg = inner.long().cumsum(0)  # segment number within the column
    n_seg = seg[-1] + 1
    first_row = n_seg.cumsum(0) - n_seg
    row = first_row + seg
    t_idx = torch.arange(T, device=resets.device).unsqueeze(1).expand(T, N)
    seg_start = torch.where(inner, t_idx, 0).cummax(0).values
    return t_idx - seg_start, row, first_row, int(n_seg.sum())


class _TorchRNNCore(MemoryCore):
    """Shared parts of the cores that wrap ``nn.LSTM`` / ``nn.GRU``."""

    #: :meth:`outputs` splits sequences at inner resets into padded rows for one ``nn`` call while
    #: the rows number at most this many times the columns; above it the step loop is faster.
    split_ratio: float = 1.5
    #: the state after a step is the output at that step (GRU)
    state_is_output: bool = False
    rnn: nn.LSTM | nn.GRU

    def _init_rnn(self, rnn: nn.LSTM | nn.GRU) -> None:
        self.rnn = rnn
        for name, p in rnn.named_parameters():
            if "weight" in name:
                nn.init.orthogonal_(p)
            else:
                nn.init.zeros_(p)

    def _torch_rnn(self, x: Tensor, state: Tensor) -> tuple[Tensor, Tensor]:
        """One ``nn.LSTM`` / ``nn.GRU`` call over ``x`` from ``state``, no resets."""
        raise NotImplementedError

    def _loop(self, x: Tensor, state: Tensor, resets: Tensor) -> tuple[Tensor, Tensor]:
        """Step loop with resets: ``(out, final_state)``."""
        raise NotImplementedError

    def _cell(self, x: Tensor, state: Tensor) -> tuple[Tensor, Tensor]:
        """One step ``x (B, F)`` from ``state (B, S)`` by the module's fused cell op:
        ``(out (B, H), new_state)``."""
        raise NotImplementedError

    def forward(self, x: Tensor, state: Tensor, resets: Tensor) -> tuple[Tensor, Tensor]:
        if x.shape[0] == 1:  # acting: one cell op (about twice as fast as nn.LSTM or the loop)
            if bool(resets.any()):
                state = state * _keep(resets, x.dtype)[0]
            out, state = self._cell(x[0], state)
            return out.unsqueeze(0), state
        if not _has_inner_reset(resets):
            return self._torch_rnn(x, state * _keep(resets[:1], x.dtype)[0])
        return self._loop(x, state, resets)

    def outputs(self, x: Tensor, state: Tensor, resets: Tensor) -> Tensor:
        """Outputs only (no final state), by the fastest exact path (used for training).

        With few inner resets, each column is cut into segments at its resets, the segments are
        laid out as left-aligned zero-padded rows (the first from ``state``, the others from zero)
        and run through one ``nn`` call; padding only follows real steps, so it changes nothing.
        """
        T, N, F = x.shape
        if T == 1 or not _has_inner_reset(resets):
            return self.forward(x, state, resets)[0]
        if int(resets[1:].sum()) + N > self.split_ratio * N:
            return self._loop(x, state, resets)[0]
        tau, row, first_row, R = segment_layout(resets.bool())
        xs = x.new_zeros(T, R, F).index_put((tau, row), x)
        s0 = state.new_zeros(R, state.shape[1])
        s0 = s0.index_copy(0, first_row, state * _keep(resets[:1], x.dtype)[0])
        out, _ = self._torch_rnn(xs, s0)
        return out[tau, row]

    # -- refreshing: outputs everywhere, states at chunk starts ----------------------------------

    def _hx(self, state: Tensor) -> Tensor | tuple[Tensor, Tensor]:
        """``(B, S)`` state -> the ``hx`` argument of the ``nn`` module."""
        raise NotImplementedError

    def _state(self, hx: Tensor | tuple[Tensor, Tensor]) -> Tensor:
        """The ``nn`` module's final ``hx`` -> ``(B, S)`` state."""
        raise NotImplementedError

    def _packed(self, x: Tensor, lengths: Tensor, state: Tensor | None) -> tuple[Tensor, Tensor]:
        """Rows of different lengths (left-aligned in ``x (L, R, F)``) in one packed ``nn`` call.

        Returns the padded outputs ``(L, R, H)`` and the state after each row's last real step.
        """
        packed = pack_padded_sequence(x, lengths.cpu(), enforce_sorted=False)
        out, hx = self.rnn(packed, None if state is None else self._hx(state))
        return pad_packed_sequence(out, total_length=x.shape[0])[0], self._state(hx)

    def chunk_unroll(
        self,
        x: Tensor,
        state: Tensor,
        resets: Tensor,
        chunk_len: int,
        post_t: Tensor | None = None,
        post_b: Tensor | None = None,
    ) -> ChunkPass:
        """Fast exact :meth:`MemoryCore.chunk_unroll` (no gradients).

        Each column is cut into *pieces* at its resets and at chunk starts. A piece that starts
        at a reset inside a chunk starts from zero, so all of those run at once, as rows of one
        packed call (which also gives each row's final state). The other pieces start at a chunk
        start and continue the column: one plain ``nn`` call per chunk over the whole batch, from
        the states at that chunk start, whose outputs count up to the column's first inner reset;
        the state at the next chunk start is its final state, or, where the column reset inside
        the chunk, the final state of the chunk's last piece from the packed call.

        A requested post-step state must end a piece (the next step resets or starts a chunk, or
        it is the last step), as truncated steps do; otherwise :meth:`unroll` does the work.
        """
        T, B, _ = x.shape
        L, dev = chunk_len, x.device
        K = -(-T // L)
        if L == 1:  # a state at every step: the step loop is faster than T calls
            return super().chunk_unroll(x, state, resets, chunk_len, post_t, post_b)
        post_t, post_b = _pairs(post_t, post_b, dev)
        resets = resets.bool()
        t_idx = torch.arange(T, device=dev).unsqueeze(1)  # (T, 1)
        chunk_start = t_idx % L == 0
        inner = resets & ~chunk_start  # resets that cut a chunk
        if post_t.numel():
            ends_piece = (post_t == T - 1) | ((post_t + 1) % L == 0)
            nxt = (post_t + 1).clamp(max=T - 1)
            if not bool((ends_piece | resets[nxt, post_b]).all()):
                return super().chunk_unroll(x, state, resets, chunk_len, post_t, post_b)
        keep = _keep(resets, x.dtype)
        n_inner = int(inner.sum())
        if n_inner:
            # pieces that start at an inner reset: rows of one packed call from zero states
            piece_t0 = torch.where(resets | chunk_start, t_idx, 0).cummax(0).values  # (T, B)
            in_p1 = inner.gather(0, piece_t0)  # step lies in such a piece
            row = (inner.view(-1).cumsum(0).view(T, B) - 1).gather(0, piece_t0)
            tau1, row1 = (t_idx - piece_t0)[in_p1], row[in_p1]
            x1 = x.new_zeros(L, n_inner, x.shape[2]).index_put_((tau1, row1), x[in_p1])
            out1, fin1 = self._packed(x1, torch.bincount(row1, minlength=n_inner), None)
            # per chunk and column: inner reset? then the final state of its last piece
            pad = K * L - T
            has_inner = torch.nn.functional.pad(inner, (0, 0, 0, pad)).view(K, L, B).any(1)
            chunk_end = torch.arange(K, device=dev).mul(L).add(L - 1).clamp(max=T - 1)
            last_piece_end = fin1[row[chunk_end].clamp(min=0)].masked_fill(
                ~has_inner.unsqueeze(-1), 0.0
            )  # (K, B, S)
        # the chain: one call per chunk over all columns, from the states at the chunk start
        reset_at = resets[::L].any(1).tolist()  # per chunk: does any column reset at its start?
        cut = has_inner.any(1).tolist() if n_inner else [False] * K  # ... or inside it?
        outs, starts, chain_fin = [], [], []
        s = state
        for k in range(K):
            if reset_at[k]:
                s = s * keep[k * L]
            starts.append(s)
            o, fin = self._torch_rnn(x[k * L : k * L + L], s)
            outs.append(o)
            chain_fin.append(fin)
            s = torch.where(has_inner[k].unsqueeze(-1), last_piece_end[k], fin) if cut[k] else fin
        out = torch.cat(outs)
        if n_inner:
            out[in_p1] = out1[tau1, row1]
        starts_t = torch.stack(starts)
        if self.state_is_output:  # a GRU's state after a step is its output
            return ChunkPass(out, starts_t, s, out[post_t, post_b])
        if not post_t.numel():
            return ChunkPass(out, starts_t, s, out.new_zeros(0, self.state_size))
        # post-step states: the chained call's final state at a chunk's last step; the packed
        # call's for a piece that started at an inner reset; pieces that start at a chunk start and
        # end inside it are run again, as rows of one packed call from their chunk-start states
        k = torch.div(post_t, L, rounding_mode="floor")
        post = torch.stack(chain_fin)[k, post_b]
        from_p1 = in_p1[post_t, post_b] if n_inner else torch.zeros_like(post_t, dtype=torch.bool)
        mid = ~from_p1 & ((post_t + 1) % L != 0) & (post_t != T - 1)
        if bool(mid.any()):
            km, bm, n = k[mid], post_b[mid], post_t[mid] - k[mid] * L + 1
            steps = (km * L + torch.arange(L, device=dev).unsqueeze(1)).clamp(max=T - 1)
            post[mid] = self._packed(x[steps, bm], n, starts_t[km, bm])[1]
        if n_inner and bool(from_p1.any()):
            post[from_p1] = fin1[row[post_t, post_b][from_p1]]
        return ChunkPass(out, starts_t, s, post)


class LSTMCore(_TorchRNNCore):
    """Single-layer LSTM; state ``cat([h, c], -1)``."""

    def __init__(self, input_size: int, hidden_size: int) -> None:
        super().__init__()
        self.input_size, self.hidden_size = input_size, hidden_size
        self.state_size = 2 * hidden_size
        self._init_rnn(nn.LSTM(input_size, hidden_size))

    def _torch_rnn(self, x: Tensor, state: Tensor) -> tuple[Tensor, Tensor]:
        # the op behind nn.LSTM.forward (1 layer, biases, no dropout, time-major), without its
        # per-call argument checks; "train" only keeps what the backward pass needs
        train = torch.is_grad_enabled()
        out, h, c = torch.lstm(
            x, self._hx(state), self.rnn._flat_weights, True, 1, 0.0, train, False, False
        )
        return out, torch.cat([h[0], c[0]], -1)

    def _hx(self, state: Tensor) -> tuple[Tensor, Tensor]:
        h, c = state.unsqueeze(0).chunk(2, -1)
        return h.contiguous(), c.contiguous()

    def _cell(self, x: Tensor, state: Tensor) -> tuple[Tensor, Tensor]:
        r = self.rnn
        h, c = torch.lstm_cell(
            x, state.chunk(2, -1), r.weight_ih_l0, r.weight_hh_l0, r.bias_ih_l0, r.bias_hh_l0
        )
        return h, torch.cat([h, c], -1)

    def _state(self, hx: Tensor | tuple[Tensor, Tensor]) -> Tensor:
        h, c = hx
        return torch.cat([h[0], c[0]], -1)

    def _input_projection(self, x: Tensor) -> Tensor:
        T, B, _ = x.shape
        r = self.rnn
        xp = torch.addmm(r.bias_ih_l0 + r.bias_hh_l0, x.reshape(T * B, -1), r.weight_ih_l0.t())
        return xp.view(T, B, -1)

    def _loop(self, x: Tensor, state: Tensor, resets: Tensor) -> tuple[Tensor, Tensor]:
        out, final, _ = self._lstm_loop(x, state, resets, collect=False)
        return out, final

    def unroll(self, x: Tensor, state: Tensor, resets: Tensor) -> tuple[Tensor, Tensor]:
        # The step loop is the fastest way measured to get every cell state: nn.LSTM does not
        # return them, and recomputing them from its outputs doubles the matrix products.
        out, _, cs = self._lstm_loop(x, state, resets, collect=True)
        assert cs is not None
        return out, torch.cat([out, cs], -1)

    def _lstm_loop(
        self, x: Tensor, state: Tensor, resets: Tensor, collect: bool
    ) -> tuple[Tensor, Tensor, Tensor | None]:
        H = self.hidden_size
        keep = _keep(resets, x.dtype)
        xp = self._input_projection(x)
        w_hh = self.rnn.weight_hh_l0.t()
        any_reset = resets.reshape(x.shape[0], -1).any(1).tolist()
        h, c = state.chunk(2, -1)
        hs: list[Tensor] = []
        cs: list[Tensor] = []
        for t in range(x.shape[0]):
            if any_reset[t]:
                h, c = h * keep[t], c * keep[t]
            gates = torch.addmm(xp[t], h, w_hh)  # gate order of nn.LSTM: i, f, g, o
            s = gates.sigmoid()
            c = s[:, H : 2 * H] * c + s[:, :H] * gates[:, 2 * H : 3 * H].tanh()
            h = s[:, 3 * H :] * c.tanh()
            hs.append(h)
            if collect:
                cs.append(c)
        return torch.stack(hs), torch.cat([h, c], -1), torch.stack(cs) if collect else None


class GRUCore(_TorchRNNCore):
    """Single-layer GRU; state ``h``."""

    split_ratio = 1.0  # measured: the GRU step loop is as fast as nn.GRU on split rows
    state_is_output = True

    def __init__(self, input_size: int, hidden_size: int) -> None:
        super().__init__()
        self.input_size, self.hidden_size, self.state_size = input_size, hidden_size, hidden_size
        self._init_rnn(nn.GRU(input_size, hidden_size))

    def _torch_rnn(self, x: Tensor, state: Tensor) -> tuple[Tensor, Tensor]:
        # the op behind nn.GRU.forward (as LSTMCore._torch_rnn)
        train = torch.is_grad_enabled()
        out, h = torch.gru(
            x, self._hx(state), self.rnn._flat_weights, True, 1, 0.0, train, False, False
        )
        return out, h[0]

    def _hx(self, state: Tensor) -> Tensor:
        return state.unsqueeze(0).contiguous()

    def _cell(self, x: Tensor, state: Tensor) -> tuple[Tensor, Tensor]:
        r = self.rnn
        h = torch.gru_cell(x, state, r.weight_ih_l0, r.weight_hh_l0, r.bias_ih_l0, r.bias_hh_l0)
        return h, h

    def _state(self, hx: Tensor | tuple[Tensor, Tensor]) -> Tensor:
        assert isinstance(hx, Tensor)
        return hx[0]

    def _loop(self, x: Tensor, state: Tensor, resets: Tensor) -> tuple[Tensor, Tensor]:
        T, B, _ = x.shape
        H = self.hidden_size
        r = self.rnn
        keep = _keep(resets, x.dtype)
        xp = torch.addmm(r.bias_ih_l0, x.reshape(T * B, -1), r.weight_ih_l0.t()).view(T, B, 3 * H)
        w_hh, b_hh = r.weight_hh_l0.t(), r.bias_hh_l0
        any_reset = resets.reshape(T, -1).any(1).tolist()
        h = state
        hs: list[Tensor] = []
        for t in range(T):
            if any_reset[t]:
                h = h * keep[t]
            hp = torch.addmm(b_hh, h, w_hh)  # gate order of nn.GRU: r, z, n
            rz = (xp[t, :, : 2 * H] + hp[:, : 2 * H]).sigmoid()
            n = (xp[t, :, 2 * H :] + rz[:, :H] * hp[:, 2 * H :]).tanh()
            h = n + rz[:, H:] * (h - n)
            hs.append(h)
        return torch.stack(hs), h

    def unroll(self, x: Tensor, state: Tensor, resets: Tensor) -> tuple[Tensor, Tensor]:
        out, _ = self.forward(x, state, resets)
        return out, out  # a GRU's state is its output


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
