"""Memory cores (LSTM, GRU, none) behind one interface, in a registry.

Every core maps a sequence ``x (T, B, F)`` to outputs ``(T, B, H)`` and carries one state
tensor ``(B, state_size)`` (batch first), whose named parts it declares in ``state_layout``:

- ``lstm`` (:class:`LSTMCore`): ``{"h": H, "c": H}``, option ``forget_bias``;
- ``gru`` (:class:`GRUCore`): ``{"h": H}``, option ``update_bias``;
- ``none`` (:class:`NoMemory`): ``{}`` (a per-step ``Linear`` + activation), option ``activation``;
- ``trxl`` / ``gtrxl`` (:class:`~.trxl.TrXLCore`): ``{"cache": n_layers * L * H, "valid": L,
  "step": 1}``, an episodic attention window (``gtrxl``: gated), options in :mod:`.trxl`;
- POPGym's cheap baselines: ``elman`` (:mod:`.elman`, tanh RNN, ``{"h": H}``), ``framestack``
  (:mod:`.framestack`, the last ``k`` inputs, option ``k``), ``positional_mlp``
  (:mod:`.positional`, an MLP that sees the episode step, ``{"step": 1}``),
  ``linear_recurrence`` (:mod:`.linear_recurrence`, LRU-style diagonal recurrence, option
  ``state_size``) and ``linear_attention`` (:mod:`.linear_attention`, FART, ``{"S": d * d,
  "z": d}``, option ``dim``).

A core owns its reset: ``resets[t, b]`` (an episode starts) makes slot ``b``'s state fresh
*before* step ``t`` (:meth:`MemoryCore.reset_state`; zero for these cores), so running a sequence
with a reset at ``t`` gives, from ``t`` on, exactly the outputs of running the rest from
``initial_state``. Callers pass ``resets`` and never zero or multiply a state themselves.

A new core is one class plus one registry entry::

    @register_core("mine")
    class MyCore(MemoryCore):
        def __init__(self, input_size, hidden_size, *, my_option: float = 1.0): ...
        state_layout = property(lambda self: {"h": self.hidden_size})
        def forward(self, x, state, resets): ...
        def unroll(self, x, state, resets): ...

``make_memory("mine", F, H, my_option=2.0)`` then builds it (an unknown option raises, naming
the allowed ones) and ``tests/agents/test_memory_conformance.py`` covers it unchanged.

Speed (CPU, one thread; ``experiments/benchmarks/core_speed.py``): acting (``T = 1``) is one
fused cell op. ``forward``, ``outputs`` and ``unroll`` over a sequence are one ``nn.LSTM`` /
``nn.GRU`` call whatever the resets (inner resets become reset steps or segment rows, see
:mod:`.layout` and :mod:`.rnn`); the LSTM's ``unroll`` adds its cell states by one gate product
and a blocked scan. ``chunk_unroll`` (hidden-state refreshing) is one call for the GRU, whose
states are its outputs; the LSTM adds its cell states at chunk starts, by that gate product or
by one call per chunk (see :class:`LSTMCore`).
"""

from __future__ import annotations

from typing import Any

from marlgrid.agents.memory.base import (
    CORES,
    ChunkPass,
    MemoryCore,
    register_core,
    unregister_core,
    zero_where,
)
from marlgrid.agents.memory.elman import ElmanCore  # noqa: F401 (registers elman)
from marlgrid.agents.memory.framestack import FrameStack  # noqa: F401 (registers framestack)
from marlgrid.agents.memory.gru import GRUCore
from marlgrid.agents.memory.layout import (
    PieceLayout,
    StepLayout,
    piece_layout,
    segment_layout,
    step_layout,
)
from marlgrid.agents.memory.linear_attention import LinearAttention  # noqa: F401 (registers it)
from marlgrid.agents.memory.linear_recurrence import LinearRecurrence  # noqa: F401 (registers it)
from marlgrid.agents.memory.lstm import LSTMCore
from marlgrid.agents.memory.none import NoMemory
from marlgrid.agents.memory.positional import PositionalMLP  # noqa: F401 (registers it)
from marlgrid.agents.memory.trxl import GTrXLCore, TrXLCore  # noqa: F401 (registers trxl, gtrxl)

__all__ = [
    "CORES",
    "MEMORY_KINDS",
    "ChunkPass",
    "GRUCore",
    "LSTMCore",
    "MemoryCore",
    "NoMemory",
    "PieceLayout",
    "StepLayout",
    "make_memory",
    "piece_layout",
    "register_core",
    "segment_layout",
    "step_layout",
    "unregister_core",
    "zero_where",
]


def __getattr__(name: str) -> Any:
    if name == "MEMORY_KINDS":  # the registered kinds, read when asked (CORES may grow)
        return tuple(CORES)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def make_memory(kind: str, input_size: int, hidden_size: int, **kwargs: Any) -> MemoryCore:
    """Build the core registered as ``kind`` with its options ``kwargs`` (``memory_kwargs``)."""
    cls = CORES.get(kind)
    if cls is None:
        raise ValueError(f"unknown memory kind {kind!r}; registered kinds: {tuple(CORES)}")
    cls.check_options(kwargs)
    return cls(input_size, hidden_size, **kwargs)
