"""The memoryless core (``kind="none"``)."""

from __future__ import annotations

from collections.abc import Callable

import torch
from torch import Tensor, nn

from marlgrid.agents.memory.base import MemoryCore, register_core

ACTIVATIONS: dict[str, tuple[Callable[[Tensor], Tensor], float]] = {
    "relu": (torch.relu, nn.init.calculate_gain("relu")),
    "tanh": (torch.tanh, nn.init.calculate_gain("tanh")),
    "identity": (lambda x: x, 1.0),
}


@register_core("none")
class NoMemory(MemoryCore):
    """Memoryless core: ``activation(Linear(x))`` per step, empty state ``{}`` (``(B, 0)``).

    Options: ``activation`` (default ``"relu"``): one of ``"relu"``, ``"tanh"``, ``"identity"``
    (a plain linear layer, e.g. when the trunk already ends in a nonlinearity); the orthogonal
    init uses its gain.
    """

    def __init__(self, input_size: int, hidden_size: int, *, activation: str = "relu") -> None:
        super().__init__(input_size, hidden_size)
        if activation not in ACTIVATIONS:
            raise ValueError(
                f"NoMemory activation must be one of {list(ACTIVATIONS)}, got {activation!r}"
            )
        self.activation = activation
        self._act, gain = ACTIVATIONS[activation]
        self.linear = nn.Linear(input_size, hidden_size)
        nn.init.orthogonal_(self.linear.weight, gain)
        nn.init.zeros_(self.linear.bias)

    @property
    def state_layout(self) -> dict[str, int]:
        return {}

    def forward(self, x: Tensor, state: Tensor, resets: Tensor) -> tuple[Tensor, Tensor]:
        return self._act(self.linear(x)), state

    def unroll(self, x: Tensor, state: Tensor, resets: Tensor) -> tuple[Tensor, Tensor]:
        return self._act(self.linear(x)), state.new_zeros(*x.shape[:2], 0)
