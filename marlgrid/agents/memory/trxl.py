"""The Transformer-XL memory cores (``kind="trxl"``, and ``"gtrxl"``: the same, gated).

An episodic sliding window: in every block, a step attends to the block's inputs at the last
``memory_length`` steps of its episode and at itself. Inputs of upper blocks already mix the
steps before them, so a step reaches ``n_layers * memory_length`` steps back (Transformer-XL's
reach), no further. The state is one flat tensor
``(B, S)``, ``S = n_layers * L * D + L + 1`` (``L = memory_length``, ``D = hidden_size``):

- ``"cache"``: the inputs of every block at the last ``L`` steps, ``(n_layers, L, D)`` flat,
  oldest slot first; slots that hold no step of the episode are zero;
- ``"valid"``: 1 for the slots holding a step of the current episode, else 0;
- ``"step"``: the episode step of the next input (its position).

A reset zeroes the state (the default :meth:`MemoryCore.reset_state`), so the fresh state is the
initial one; what keeps the past out is the validity mask, which the attention obeys, not the
zeros (a zero slot read as a key would still weigh in the softmax). Read from any state, the
validity is ``valid > 0.5`` and the step ``max(0, round(step))``.

Every path is one layer-parallel pass (:meth:`TrXLCore._pass`): for each block the ``T``
queries of a chunk attend to ``[cache (L) ++ the chunk's block inputs (T)]`` under one mask from
:func:`.trxl_blocks.attention_window`, which every path shares (acting is the ``T = 1`` case),
so acting, training chunks, bootstrap values and refreshes read the same indices. The states
at chunk starts, after requested steps and at the end are slices of the same pass, so
:meth:`chunk_unroll` (an exact refresh) is one pass too.

The first step of an episode reads itself only: a query is always one of its own keys, so no
attention row is empty (no NaN, no arbitrary context from padding).

Speed (CPU, one thread, ``experiments/benchmarks/core_speed.py``): a 128-step chunk pass is about
10x faster than 128 acting steps (B 16-32, D 64-128, L 32-64, 2 layers). An acting step
recomputes keys and values of its whole window from the cached inputs, so it costs about
``L + 1`` rows of attention projections per block.
"""

from __future__ import annotations

import torch
from torch import Tensor, nn

from marlgrid.agents.memory.base import ChunkPass, MemoryCore, index_pairs, register_core
from marlgrid.agents.memory.trxl_blocks import Block, Positions, Window, attention_window
from marlgrid.config import ConfigError, check_bool, check_choice, check_float, check_int

__all__ = ["GTrXLCore", "TrXLCore"]

POSITIONALS = ("sinusoid", "learned", "none")
LAYER_NORMS = ("pre", "post")


@register_core("trxl")
class TrXLCore(MemoryCore):
    """Transformer-XL over an episodic window of past block inputs (see :mod:`.trxl`).

    ``x (T, B, F)`` is embedded by ``Linear(F, D)`` plus the positional encoding of each step's
    episode step, then runs through ``n_layers`` blocks (:class:`.trxl_blocks.Block`); the
    output ``(T, B, D)`` is the last block's (layer-normed with ``"pre"``).

    Options (``memory_kwargs``):

    - ``memory_length`` (32): past steps each step attends to, ``L >= 1``;
    - ``n_layers`` (2) and ``n_heads`` (2; must divide ``hidden_size``);
    - ``positional`` (``"sinusoid"``): ``"sinusoid"``, ``"learned"`` or ``"none"``, added to
      the embedding by episode step; ``max_position`` (1024) rows of the learned table (later
      steps share the last row);
    - ``layer_norm`` (``"pre"``): ``"pre"`` or ``"post"``;
    - ``gating`` (False for ``trxl``, True for ``gtrxl``): GRU-gated residuals (GTrXL), with
      ``gate_bias`` (2.0) the initial bias that keeps a fresh gate near the identity.
    """

    def __init__(
        self,
        input_size: int,
        hidden_size: int,
        *,
        memory_length: int = 32,
        n_layers: int = 2,
        n_heads: int = 2,
        positional: str = "sinusoid",
        layer_norm: str = "pre",
        gating: bool = False,
        gate_bias: float = 2.0,
        max_position: int = 1024,
    ) -> None:
        super().__init__(input_size, hidden_size)
        D = hidden_size
        self.memory_length = check_int("memory_kwargs.memory_length", memory_length, low=1)
        self.n_layers = check_int("memory_kwargs.n_layers", n_layers, low=1)
        self.n_heads = check_int("memory_kwargs.n_heads", n_heads, low=1)
        if D % self.n_heads:
            raise ConfigError(
                f"memory_kwargs.n_heads must divide hidden_size={D}, got {self.n_heads}"
            )
        self.positional = check_choice("memory_kwargs.positional", positional, POSITIONALS)
        self.layer_norm = check_choice("memory_kwargs.layer_norm", layer_norm, LAYER_NORMS)
        self.gating = check_bool("memory_kwargs.gating", gating)
        self.gate_bias = check_float("memory_kwargs.gate_bias", gate_bias)
        self.max_position = check_int("memory_kwargs.max_position", max_position, low=1)
        self.embed = nn.Linear(input_size, D)
        self.positions = Positions(self.positional, D, self.max_position)
        self.blocks = nn.ModuleList(
            Block(D, self.n_heads, self.layer_norm, self.gating, self.gate_bias)
            for _ in range(self.n_layers)
        )
        self.final_norm = nn.LayerNorm(D) if self.layer_norm == "pre" else nn.Identity()

    @property
    def state_layout(self) -> dict[str, int]:
        L = self.memory_length
        return {"cache": self.n_layers * L * self.hidden_size, "valid": L, "step": 1}

    # -- the pass ----------------------------------------------------------------------------

    def _read(self, state: Tensor) -> tuple[Tensor, Tensor, Tensor]:
        """``state (B, S)`` -> cache ``(B, n_layers, L, D)``, validity ``(B, L)`` (bool) and
        episode step ``(B,)`` (long)."""
        parts = self.split_state(state)
        cache = parts["cache"].view(-1, self.n_layers, self.memory_length, self.hidden_size)
        step = parts["step"].squeeze(-1).round().clamp(min=0).long()
        return cache, parts["valid"] > 0.5, step

    def _pass(
        self, x: Tensor, state: Tensor, resets: Tensor
    ) -> tuple[Tensor, list[Tensor], Window]:
        """All blocks over the chunk at once: outputs ``(T, B, D)``, each block's keys
        ``[cache ++ chunk inputs]`` ``(B, L + T, D)`` and the window."""
        cache, valid, step = self._read(self.reset_state(state, resets[0]))
        win = attention_window(valid, step, resets)
        h = (self.embed(x) + self.positions(win.pos, x)).transpose(0, 1)  # (B, T, D)
        seqs = []
        for i, block in enumerate(self.blocks):
            seqs.append(torch.cat([cache[:, i], h], 1))
            h = block(seqs[-1], win.mask)
        return self.final_norm(h).transpose(0, 1), seqs, win

    def _join(self, cache: Tensor, ok: Tensor, step: Tensor) -> Tensor:
        """A state from cache ``(n, n_layers, L, D)``, validity ``(n, L)`` and step ``(n,)``;
        slots outside the episode are zeroed."""
        cache = torch.where(ok[:, None, :, None], cache, 0.0)
        dt = cache.dtype
        return torch.cat([cache.flatten(1), ok.to(dt), step.to(dt).unsqueeze(1)], 1)

    def _final(self, seqs: list[Tensor], win: Window) -> Tensor:
        """The state after the last step ``(B, S)``."""
        T = win.seg.shape[0]
        ok, step = win.final()
        return self._join(torch.stack([s[:, T:] for s in seqs], 1), ok, step)

    def _after(self, seqs: list[Tensor], win: Window, t: Tensor, b: Tensor) -> Tensor:
        """The states after steps ``t`` of slots ``b`` ``(n, S)``."""
        idx, ok, step = win.after(t, b)
        bi = b.unsqueeze(1)
        return self._join(torch.stack([s[bi, idx] for s in seqs], 1), ok, step)

    # -- paths -------------------------------------------------------------------------------

    def forward(self, x: Tensor, state: Tensor, resets: Tensor) -> tuple[Tensor, Tensor]:
        out, seqs, win = self._pass(x, state, resets)
        return out, self._final(seqs, win)

    def outputs(self, x: Tensor, state: Tensor, resets: Tensor) -> Tensor:
        return self._pass(x, state, resets)[0]

    def unroll(self, x: Tensor, state: Tensor, resets: Tensor) -> tuple[Tensor, Tensor]:
        T, B = resets.shape
        out, seqs, win = self._pass(x, state, resets)
        t = torch.arange(T, device=x.device).repeat_interleave(B)
        b = torch.arange(B, device=x.device).repeat(T)
        return out, self._after(seqs, win, t, b).view(T, B, -1)

    def chunk_unroll(
        self,
        x: Tensor,
        state: Tensor,
        resets: Tensor,
        chunk_len: int,
        post_t: Tensor | None = None,
        post_b: Tensor | None = None,
    ) -> ChunkPass:
        """Exact :meth:`MemoryCore.chunk_unroll` from one pass: every state is a slice of it."""
        T, B = resets.shape
        dev = x.device
        post_t, post_b = index_pairs(post_t, post_b, dev)
        state = self.reset_state(state, resets[0])
        out, seqs, win = self._pass(x, state, resets)
        t_end = torch.arange(1, -(-T // chunk_len), device=dev) * chunk_len - 1
        n, S = t_end.numel(), state.shape[1]
        slots = torch.arange(B, device=dev).repeat(n)
        ends = self._after(seqs, win, t_end.repeat_interleave(B), slots).view(n, B, S)
        starts = torch.cat([state.unsqueeze(0), self.reset_state(ends, resets[t_end + 1])])
        post = self._after(seqs, win, post_t, post_b)
        return ChunkPass(out, starts, self._final(seqs, win), post)


@register_core("gtrxl")
class GTrXLCore(TrXLCore):
    """:class:`TrXLCore` with ``gating=True`` by default: GTrXL (Parisotto et al. 2020)."""

    def __init__(
        self,
        input_size: int,
        hidden_size: int,
        *,
        memory_length: int = 32,
        n_layers: int = 2,
        n_heads: int = 2,
        positional: str = "sinusoid",
        layer_norm: str = "pre",
        gating: bool = True,
        gate_bias: float = 2.0,
        max_position: int = 1024,
    ) -> None:
        super().__init__(
            input_size,
            hidden_size,
            memory_length=memory_length,
            n_layers=n_layers,
            n_heads=n_heads,
            positional=positional,
            layer_norm=layer_norm,
            gating=gating,
            gate_bias=gate_bias,
            max_position=max_position,
        )
