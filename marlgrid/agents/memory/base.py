"""The memory-core interface, its state layout, its options and the registry of cores."""

from __future__ import annotations

import inspect
from collections.abc import Callable, Mapping
from typing import Any, ClassVar, NamedTuple, TypeVar

import torch
from torch import Tensor, nn

__all__ = ["CORES", "ChunkPass", "MemoryCore", "register_core", "unregister_core", "zero_where"]


class ChunkPass(NamedTuple):
    """What :meth:`MemoryCore.chunk_unroll` returns."""

    out: Tensor  #: outputs at every step ``(T, B, H)``
    starts: Tensor  #: state used at each chunk start ``(ceil(T / chunk_len), B, S)``
    final: Tensor  #: state after the last step ``(B, S)``
    post: Tensor  #: states after the requested steps ``(n, S)``


def zero_where(x: Tensor, resets: Tensor) -> Tensor:
    """``x (..., D)`` with the rows where ``resets (...)`` is true set to zero."""
    return x.masked_fill(resets.bool().unsqueeze(-1), 0.0)


class MemoryCore(nn.Module):
    """Interface shared by all memory cores (shapes and reset rule: see :mod:`..memory`).

    A subclass declares :attr:`state_layout`, implements :meth:`forward` and :meth:`unroll`, and
    may override :meth:`reset_state` (how a reset changes its state), :meth:`outputs` and
    :meth:`chunk_unroll` (faster paths), keeping their results. Its options are the keyword-only
    parameters of its ``__init__`` (``def __init__(self, input_size, hidden_size, *, opt=...)``);
    :func:`~marlgrid.agents.memory.make_memory` rejects any other keyword.
    """

    kind: ClassVar[str] = ""  #: the name it is registered under (set by :func:`register_core`)
    #: exact alternatives for :meth:`chunk_unroll` and :meth:`outputs`, chosen by
    #: :attr:`chunk_path` / :attr:`outputs_path` ("auto" picks by speed); the conformance suite
    #: checks every one of them
    chunk_paths: ClassVar[tuple[str, ...]] = ()
    outputs_paths: ClassVar[tuple[str, ...]] = ()
    chunk_path: str = "auto"
    outputs_path: str = "auto"

    def __init__(self, input_size: int, hidden_size: int) -> None:
        super().__init__()
        self.input_size, self.hidden_size = input_size, hidden_size

    # -- state -----------------------------------------------------------------------------------

    @property
    def state_layout(self) -> dict[str, int]:
        """Named parts of the flat state and their sizes, in order (``{"h": H, "c": H}``).

        The state is always one tensor ``(..., state_size)`` holding these parts side by side;
        :meth:`split_state` and :meth:`join_state` convert. A part need not be recurrent (a
        transformer window would hold ``{"cache": L * layers * D, "valid": L, "step": 1}``).
        """
        raise NotImplementedError

    @property
    def state_size(self) -> int:
        return sum(self.state_layout.values())

    def split_state(self, state: Tensor) -> dict[str, Tensor]:
        """``state (..., S)`` -> its named parts (views), as declared by :attr:`state_layout`."""
        layout = self.state_layout
        return dict(zip(layout, state.split(list(layout.values()), -1), strict=True))

    def join_state(self, parts: Mapping[str, Tensor]) -> Tensor:
        """Inverse of :meth:`split_state`: the parts (every one of the layout) side by side.
        An empty layout has nothing to join (its states are ``(..., 0)``)."""
        layout = self.state_layout
        if not layout or set(parts) != set(layout):
            name = type(self).__name__
            raise ValueError(f"{name} state parts are {list(layout)}, got {list(parts)}")
        return torch.cat([parts[name] for name in layout], -1)

    def initial_state(
        self,
        batch_size: int,
        device: torch.device | str | None = None,
        dtype: torch.dtype | None = None,
    ) -> Tensor:
        """The state of a fresh episode, ``(batch_size, state_size)``: zero for every part
        (a core whose fresh state is not zero overrides this and :meth:`reset_state`).
        Device and dtype default to the core's parameters'."""
        p = next(self.parameters(), None)
        device = device if device is not None else (p.device if p is not None else None)
        dtype = dtype if dtype is not None else (p.dtype if p is not None else None)
        return torch.zeros(batch_size, self.state_size, device=device, dtype=dtype)

    def reset_state(self, state: Tensor, resets: Tensor) -> Tensor:
        """The state where ``resets`` says an episode starts made fresh; the others unchanged.

        ``state (..., S)``, ``resets (...)`` (bool). Every path of a core resets through here (the
        fused paths of the RNN cores realise the same rule inside one call; the suite checks
        that they agree). The default zeroes whole rows, as :meth:`initial_state` is zero; a
        core whose state holds more than recurrent values decides here what a reset means, e.g.
        clearing a validity mask and leaving a cache to be masked rather than zeroing it.
        """
        return zero_where(state, resets)

    # -- sequences -------------------------------------------------------------------------------

    def forward(self, x: Tensor, state: Tensor, resets: Tensor) -> tuple[Tensor, Tensor]:
        """Run ``x (T, B, F)`` from ``state (B, S)``; returns ``(out (T, B, H), final_state)``."""
        raise NotImplementedError

    def outputs(self, x: Tensor, state: Tensor, resets: Tensor) -> Tensor:
        """Only the outputs of :meth:`forward` (cores may use a faster path for this)."""
        return self.forward(x, state, resets)[0]

    def unroll(self, x: Tensor, state: Tensor, resets: Tensor) -> tuple[Tensor, Tensor]:
        """Like :meth:`forward` but returns the state after every step, ``(T, B, S)``.

        ``post[t]`` is the state after step ``t`` before any reset of step ``t + 1``; the state
        used at the start of step ``t + 1`` is ``reset_state(post[t], resets[t + 1])``.
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

        This generic version takes every state from :meth:`unroll`; cores may override it.
        """
        out, post = self.unroll(x, state, resets)
        used = self.reset_state(torch.cat([state[None], post[:-1]]), resets)
        post_t, post_b = index_pairs(post_t, post_b, x.device)
        return ChunkPass(out, used[::chunk_len], post[-1], post[post_t, post_b])

    # -- options ---------------------------------------------------------------------------------

    @classmethod
    def options(cls) -> dict[str, Any]:
        """The core's options (``memory_kwargs``) and their defaults."""
        params = inspect.signature(cls.__init__).parameters.values()
        return {p.name: p.default for p in params if p.kind is inspect.Parameter.KEYWORD_ONLY}

    @classmethod
    def check_options(cls, kwargs: Mapping[str, Any]) -> None:
        """Raise ``ValueError`` naming the core, the unknown keys and the allowed ones."""
        allowed = cls.options()
        bad = [k for k in kwargs if k not in allowed]
        if bad:
            name = f"{cls.kind!r} ({cls.__name__})" if cls.kind else cls.__name__
            takes = f"its options are {sorted(allowed)}" if allowed else "it takes no options"
            keys = ", ".join(map(repr, bad))
            raise ValueError(f"memory core {name} has no option {keys}; {takes}")


def index_pairs(
    post_t: Tensor | None, post_b: Tensor | None, device: torch.device
) -> tuple[Tensor, Tensor]:
    """``(post_t, post_b)`` as long tensors (empty when not given)."""
    if post_t is None or post_b is None:
        empty = torch.zeros(0, dtype=torch.long, device=device)
        return empty, empty
    return post_t.long().to(device), post_b.long().to(device)


# -- registry --------------------------------------------------------------------------------------

#: every registered core by name; ``make_memory(kind, ...)`` builds ``CORES[kind]``
CORES: dict[str, type[MemoryCore]] = {}

C = TypeVar("C", bound=type[MemoryCore])


def register_core(kind: str) -> Callable[[C], C]:
    """Class decorator: register a :class:`MemoryCore` under ``kind``.

    Registering another class under a taken name raises; registering the same class again (a
    module reload) replaces it.
    """

    def add(cls: C) -> C:
        old = CORES.get(kind)
        if old is not None and old.__qualname__ != cls.__qualname__:
            raise ValueError(f"memory core {kind!r} is already registered ({old.__name__})")
        cls.kind = kind
        CORES[kind] = cls
        return cls

    return add


def unregister_core(kind: str) -> None:
    """Remove a registered core (for tests and plugins)."""
    del CORES[kind]
