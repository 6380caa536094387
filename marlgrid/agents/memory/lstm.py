"""The LSTM core (``kind="lstm"``)."""

from __future__ import annotations

import math

import torch
from torch import Tensor, nn

from marlgrid.agents.memory.base import ChunkPass, index_pairs, register_core
from marlgrid.agents.memory.layout import piece_layout
from marlgrid.agents.memory.rnn import FusedRNNCore, Hx, big


def scan_block(T: int) -> int:
    """Block length of a :class:`CellScan` over ``T`` steps: near ``sqrt(T)``, a divisor of
    ``T`` if one lies within a factor 2 below it (no padding)."""
    root = max(1, math.isqrt(T))
    for d in range(root, root // 2, -1):
        if T % d == 0:
            return d
    return root


class CellScan:
    """Every cell state of an LSTM from the linear recurrence ``c_t = a_t * c_{t-1} + u_t``.

    ``a = f`` (0 where the state was reset) and ``u = i * g`` come from one gate product (see
    :meth:`LSTMCore._gates`). The recurrence runs in blocks of ``m ~ sqrt(T)`` steps: all
    blocks at once from zero (``m`` steps), the products of ``a`` in one ``cumprod``, then one
    carry per block, so ``c_t = C_t + A_t * carry_block(t)`` costs ``m + T / m`` small ops.
    """

    def __init__(self, a: Tensor, u: Tensor, c0: Tensor) -> None:
        T, B, H = a.shape
        m = scan_block(T)
        K = -(-T // m)
        a, u = _pad_steps(a, u, K * m)
        a, u = a.reshape(K, m, B, H), u.reshape(K, m, B, H)
        Cs = [u[:, 0]]
        for j in range(1, m):
            Cs.append(torch.addcmul(u[:, j], a[:, j], Cs[-1]))
        self.C, self.A = torch.stack(Cs, 1), a.cumprod(1)  # (K, m, B, H)
        carry = [c0]
        for k in range(K - 1):
            carry.append(torch.addcmul(Cs[-1][k], self.A[k, -1], carry[-1]))
        self.carry = torch.stack(carry)  # (K, B, H): the state each block starts from
        self.m, self.T = m, T

    def at(self, t: Tensor, b: Tensor) -> Tensor:
        """``c`` after steps ``t`` of slots ``b``, ``(n, H)``."""
        k, j = torch.div(t, self.m, rounding_mode="floor"), t % self.m
        return torch.addcmul(self.C[k, j, b], self.A[k, j, b], self.carry[k, b])

    def all(self) -> Tensor:
        """``c`` after every step, ``(T, B, H)``."""
        c = torch.addcmul(self.C, self.A, self.carry.unsqueeze(1))
        return c.flatten(0, 1)[: self.T]


def block_end_cells(a: Tensor, u: Tensor, c0: Tensor, m: int) -> Tensor:
    """``c`` after the last step of every block of ``m`` steps (the last block may be
    shorter), ``(ceil(T / m), B, H)``: the blocks from zero at once (``m`` ops), their products
    of ``a``, then one carry per block; fewer ops and passes than :class:`CellScan`."""
    T, B, H = a.shape
    K = -(-T // m)
    a, u = _pad_steps(a, u, K * m)
    a, u = a.reshape(K, m, B, H), u.reshape(K, m, B, H)
    C = u[:, 0]
    for j in range(1, m):
        C = torch.addcmul(u[:, j], a[:, j], C)
    A, ends, c = a.prod(1), [], c0
    for k in range(K):
        c = torch.addcmul(C[k], A[k], c)
        ends.append(c)
    return torch.stack(ends)


def _pad_steps(a: Tensor, u: Tensor, steps: int) -> tuple[Tensor, Tensor]:
    """Extend to ``steps`` steps with ``a = 1, u = 0`` (steps that keep ``c``)."""
    if steps == a.shape[0]:
        return a, u
    pad = (0, 0, 0, 0, 0, steps - a.shape[0])
    return nn.functional.pad(a, pad, value=1.0), nn.functional.pad(u, pad)


@register_core("lstm")
class LSTMCore(FusedRNNCore):
    """Single-layer LSTM; state ``{"h": H, "c": H}``.

    Options: ``forget_bias`` (default 0): initial bias of the forget gate; 1 (Gers et al. 2000,
    Jozefowicz et al. 2015) makes a fresh LSTM keep its cell state over more steps.

    Paths: :meth:`forward` and :meth:`outputs` are one fused call (see :mod:`.rnn`).
    ``nn.LSTM`` returns no cell state but the last, so :meth:`unroll` recomputes every ``c``
    from the outputs (:meth:`_gates`, :class:`CellScan`). :meth:`chunk_unroll` has two exact
    paths for the states at chunk starts: ``"fused"``, one call plus that recomputation (a gate
    product over every step: about 0.3x a pass for CartPole's LSTM(4, 64) and 0.6x when
    ``F ~ H``), and ``"chained"``, one call per chunk with a lane per piece
    (:func:`.layout.piece_layout`), whose final states are the states at chunk starts and at
    truncations (each call costs a set-up, about 0.1-0.4 ms on CPU). ``"auto"`` chains when a
    chunk's gate product is large, ``chunk_len * B * (F + H) * H >`` :attr:`chain_above`
    (measured crossover between CartPole/marlgrid ``B 16, H 64`` and ``B 16, H 128``).
    """

    chunk_paths = ("fused", "chained")
    chain_above: float = 2e6

    def __init__(self, input_size: int, hidden_size: int, *, forget_bias: float = 0.0) -> None:
        super().__init__(input_size, hidden_size)
        self.forget_bias = float(forget_bias)
        self._flags: tuple[tuple[torch.dtype, torch.device], Tensor] | None = None
        self._init_rnn(nn.LSTM(input_size, hidden_size))
        with torch.no_grad():
            self.rnn.bias_ih_l0[hidden_size : 2 * hidden_size].fill_(self.forget_bias)

    @property
    def state_layout(self) -> dict[str, int]:
        return {"h": self.hidden_size, "c": self.hidden_size}

    # -- the fused call ----------------------------------------------------------------------

    def _flag_columns(self) -> Tensor:
        H, w = self.hidden_size, self.rnn.weight_ih_l0  # gate order of nn.LSTM: i, f, g, o
        key = (w.dtype, w.device)
        if self._flags is None or self._flags[0] != key:  # constants: made once per dtype
            with torch.inference_mode(False), torch.no_grad():  # a plain tensor, kept
                cols, inf = w.new_zeros(4 * H, 2), big(w.dtype)
                cols[: 2 * H, 0] = cols[3 * H :, 0] = -inf  # reset: i = f = o = 0: c = h = 0
                cols[:H, 1], cols[H : 2 * H, 1] = -inf, inf  # hold: i = 0, f = 1: c stays
            self._flags = (key, cols)
        return self._flags[1]

    def _call(self, x: Tensor, hx: Hx, w_ih: Tensor) -> tuple[Tensor, Hx]:
        # the op behind nn.LSTM.forward (1 layer, biases, no dropout, time-major) without its
        # per-call argument checks; "train" only keeps what a backward pass needs
        r = self.rnn
        weights = [w_ih, r.weight_hh_l0, r.bias_ih_l0, r.bias_hh_l0]
        out, h, c = torch.lstm(x, hx, weights, True, 1, 0.0, torch.is_grad_enabled(), False, False)
        return out, (h, c)

    def _cell(self, x: Tensor, state: Tensor) -> tuple[Tensor, Tensor]:
        r = self.rnn
        h, c = torch.lstm_cell(
            x, state.chunk(2, -1), r.weight_ih_l0, r.weight_hh_l0, r.bias_ih_l0, r.bias_hh_l0
        )
        return h, torch.cat([h, c], -1)

    # -- cell states from outputs ------------------------------------------------------------

    def _gates(
        self, x: Tensor, out: Tensor, state: Tensor, resets: Tensor
    ) -> tuple[Tensor, Tensor]:
        """``a = f`` (0 where the step resets) and ``u = i * g`` of every step of a run of ``x``
        from ``state`` (already reset for step 0) with outputs ``out``, ``(T, B, H)`` each.

        One matrix product of ``x_t`` and ``h_{t-1}`` gives the gates ``i, f, g`` (``o`` is not
        needed); ``g = tanh(p) = 2 sigmoid(2 p) - 1`` shares one ``sigmoid`` with the others
        (``tanh`` is about 3x slower per element on CPU). Resets are few, so they are patched
        into the pre-activations row by row: no ``h_{t-1}`` term, and ``f = 0``.
        """
        T, B, F = x.shape
        H, r = self.hidden_size, self.rnn
        w_h = r.weight_hh_l0[: 3 * H].t()
        bias = (r.bias_ih_l0 + r.bias_hh_l0)[: 3 * H]
        pre = torch.addmm(bias, x.reshape(T * B, F), r.weight_ih_l0[: 3 * H].t())
        pre[:B].addmm_(state[:, :H], w_h)  # h_{-1}: the given state
        rows = resets[1:].reshape(-1).nonzero().squeeze(1) + B  # steps t >= 1 that reset
        kept = pre.index_select(0, rows)
        kept[:, H : 2 * H] = -big(x.dtype)
        pre[B:].addmm_(out[:-1].reshape(-1, H), w_h)
        pre.index_copy_(0, rows, kept)
        pre[:, 2 * H :].mul_(2.0)
        i, f, sg = pre.sigmoid_().view(T, B, 3 * H).split(H, -1)
        return f, torch.addcmul(-i, i, sg, value=2.0)  # u = i * (2 sigmoid(2 p) - 1)

    # -- paths -------------------------------------------------------------------------------

    def unroll(self, x: Tensor, state: Tensor, resets: Tensor) -> tuple[Tensor, Tensor]:
        state = self.reset_state(state, resets[0])
        out, _ = self._fused(x, state, resets)
        a, u = self._gates(x, out, state, resets)
        return out, torch.cat([out, CellScan(a, u, state[:, self.hidden_size :]).all()], -1)

    def _chained(self, x: Tensor, chunk_len: int) -> bool:
        """Whether :meth:`chunk_unroll` takes the ``"chained"`` path."""
        if self.chunk_path != "auto":
            return self.chunk_path == "chained"
        T, B, F = x.shape
        if chunk_len >= T or chunk_len < 4:  # one chunk: no states to chain; tiny: too many calls
            return False
        return chunk_len * B * (F + self.hidden_size) * self.hidden_size > self.chain_above

    def chunk_unroll(
        self,
        x: Tensor,
        state: Tensor,
        resets: Tensor,
        chunk_len: int,
        post_t: Tensor | None = None,
        post_b: Tensor | None = None,
    ) -> ChunkPass:
        """Exact :meth:`MemoryCore.chunk_unroll` by the ``"fused"`` or the ``"chained"`` path."""
        post_t, post_b = index_pairs(post_t, post_b, x.device)
        state = self.reset_state(state, resets[0])
        run = self._chunk_chained if self._chained(x, chunk_len) else self._chunk_fused
        return run(x, state, resets, chunk_len, post_t, post_b)

    def _chunk_fused(
        self, x: Tensor, state: Tensor, resets: Tensor, L: int, post_t: Tensor, post_b: Tensor
    ) -> ChunkPass:
        """One fused call; the cell states at chunk starts and post-step states from
        :meth:`_gates` and a scan (:func:`block_end_cells`, :class:`CellScan`)."""
        T, H = x.shape[0], self.hidden_size
        out, hx = self._fused(x, state, resets)
        K = -(-T // L)
        starts, gates = state.unsqueeze(0), None
        if K > 1 or post_t.numel():
            gates = a, u = self._gates(x, out, state, resets)
        if K > 1:
            c0 = state[:, H:]
            c_ends = block_end_cells(a, u, c0, L) if L > 2 else CellScan(a, u, c0).all()[L - 1 :: L]
            t_end = torch.arange(1, K, device=x.device) * L - 1  # the last steps before starts
            prev = torch.cat([out[t_end], c_ends[: K - 1]], -1)
            starts = torch.cat([starts, self.reset_state(prev, resets[t_end + 1])])
        c_post = self._post_cells(x, out, starts, resets, L, post_t, post_b, gates)
        return ChunkPass(out, starts, self._state(hx), torch.cat([out[post_t, post_b], c_post], -1))

    def _chunk_chained(
        self, x: Tensor, state: Tensor, resets: Tensor, L: int, post_t: Tensor, post_b: Tensor
    ) -> ChunkPass:
        """One call per chunk with a lane per piece (:func:`.layout.piece_layout`): the state
        at each piece's end, so at each chunk's end and at each truncation, is a final state."""
        T, B, F = x.shape
        H = self.hidden_size
        lay = piece_layout(resets, L)
        rows = x.new_empty(T * B + 1, F + 1)  # the steps, then a hold row
        rows[: T * B, :F] = x.reshape(T * B, F)
        rows[:, F] = 0.0
        rows[T * B, :F] = 0.0
        rows[T * B, F] = 1.0
        xa = rows.index_select(0, lay.src)
        w_ih = torch.cat([self.rnn.weight_ih_l0, self._flag_columns()[:, 1:]], 1)
        grad = torch.is_grad_enabled()  # out= (no copy) only without autograd
        out, outs = x.new_empty(T * B, H), []
        end, starts, lanes = state, [], []
        for k, (off, n, W, first) in enumerate(lay.blocks):
            s = self.reset_state(end, resets[k * L]) if k else state
            starts.append(s)
            fresh = s.new_zeros(W - B, H)  # lanes of pieces that start at a reset
            hx = tuple(torch.cat([p, fresh]).unsqueeze(0) for p in (s[:, :H], s[:, H:]))
            o, (_, c) = self._call(xa[off : off + n * W].view(n, W, F + 1), hx, w_ih)
            o = o.reshape(n * W, H)
            steps = lay.dst[k * L : k * L + n].reshape(-1)  # this chunk's steps in (t, b) order
            if grad:
                outs.append(o.index_select(0, steps))
            else:
                torch.index_select(o, 0, steps, out=out[k * L * B : (k * L + n) * B])
            lanes.append(torch.cat([o.index_select(0, lay.last[first : first + W]), c[0]], -1))
            end = lanes[-1].index_select(0, lay.end_lane[k])
        out = (torch.cat(outs) if grad else out).view(T, B, H)
        starts_t = torch.stack(starts)
        post = torch.cat(lanes).index_select(0, lay.lane[post_t, post_b])  # where pieces end
        mid = ~lay.ends_piece[post_t, post_b]
        if bool(mid.any()):
            tm, bm = post_t[mid], post_b[mid]
            c_mid = self._post_cells(x, out, starts_t, resets, L, tm, bm)
            post[mid] = torch.cat([out[tm, bm], c_mid], -1)
        return ChunkPass(out, starts_t, end, post)

    def _post_cells(
        self,
        x: Tensor,
        out: Tensor,
        starts: Tensor,
        resets: Tensor,
        L: int,
        t: Tensor,
        b: Tensor,
        gates: tuple[Tensor, Tensor] | None = None,
    ) -> Tensor:
        """Cell states after steps ``t`` of slots ``b``, scanned from their chunks' starts over
        the steps of their chunks (``gates``: :meth:`_gates` of the whole run, if at hand)."""
        if not t.numel():
            return out.new_zeros(0, self.hidden_size)
        k = torch.div(t, L, rounding_mode="floor")
        window = torch.arange(min(L, x.shape[0]), device=x.device).unsqueeze(1)
        steps = (k * L + window).clamp(max=x.shape[0] - 1)
        start = starts[k, b]
        if gates is None:
            sub_resets = resets[steps, b].clone()
            sub_resets[0] = False  # the chunk-start state is already reset
            a, u = self._gates(x[steps, b], out[steps, b], start, sub_resets)
        else:
            a, u = gates[0][steps, b], gates[1][steps, b]
        scan = CellScan(a, u, start[:, self.hidden_size :])
        return scan.at(t - k * L, torch.arange(t.numel(), device=x.device))
