"""The positional MLP core (``kind="positional_mlp"``): an MLP that knows the episode step."""

from __future__ import annotations

import math

import torch
from torch import Tensor, nn

from marlgrid.agents.memory.base import MemoryCore, register_core
from marlgrid.agents.memory.scan import steps_since_reset
from marlgrid.config import check_int


def sine_encoding(step: Tensor, size: int, max_len: int) -> Tensor:
    """Sine/cosine encoding ``(..., size)`` of (real) positions ``step (...)``: entry ``i`` is
    ``sin(step * w)`` for even ``i``, ``cos(step * w)`` for odd ``i``, with
    ``w = max_len ** (-2 * (i // 2) / size)`` (the transformer encoding with ``max_len`` in
    place of 10000, as POPGym)."""
    i = torch.arange(size, device=step.device)
    w = torch.exp((i // 2).to(step.dtype) * (-2.0 * math.log(max_len) / size))
    angle = step.unsqueeze(-1) * w
    return torch.where(i % 2 == 0, angle.sin(), angle.cos())


@register_core("positional_mlp")
class PositionalMLP(MemoryCore):
    """POPGym's "positional MLP": no memory but the episode step. State ``{"step": 1}``, the
    number of steps the episode has run (0 when it starts; real-valued, so it is a state like
    any other).

    Each step the input is blended with :func:`sine_encoding` of the step,
    ``x (1 - s) + enc(step) s`` with a learned strength ``s = sigmoid(l)`` in ``(0, 1)``
    (0.5 at first), then goes through ``Linear(F, H)``, LeakyReLU, ``Linear(H, H)``, LeakyReLU.

    Options: ``max_len`` (default 1024, POPGym's): the longest period of the encoding is
    ``2 pi max_len`` steps.
    """

    def __init__(self, input_size: int, hidden_size: int, *, max_len: int = 1024) -> None:
        super().__init__(input_size, hidden_size)
        self.max_len = check_int("positional_mlp max_len", max_len, low=1)
        self.strength_logit = nn.Parameter(torch.zeros(()))
        self.mlp = nn.Sequential(
            nn.Linear(input_size, hidden_size),
            nn.LeakyReLU(),
            nn.Linear(hidden_size, hidden_size),
            nn.LeakyReLU(),
        )
        for layer in self.mlp[::2]:
            nn.init.orthogonal_(layer.weight, nn.init.calculate_gain("leaky_relu"))
            nn.init.zeros_(layer.bias)

    @property
    def state_layout(self) -> dict[str, int]:
        return {"step": 1}

    def _steps(self, state: Tensor, resets: Tensor) -> Tensor:
        """The episode step at every step of the sequence, ``(T, B)``."""
        age, fresh = steps_since_reset(resets)
        return torch.where(fresh, age.to(state.dtype), state[:, 0] + age)

    def _out(self, x: Tensor, steps: Tensor) -> Tensor:
        s = torch.sigmoid(self.strength_logit)
        enc = sine_encoding(steps, self.input_size, self.max_len)
        return self.mlp(torch.lerp(x, enc, s))

    def forward(self, x: Tensor, state: Tensor, resets: Tensor) -> tuple[Tensor, Tensor]:
        steps = self._steps(state, resets)
        return self._out(x, steps), (steps[-1] + 1).unsqueeze(-1)

    def unroll(self, x: Tensor, state: Tensor, resets: Tensor) -> tuple[Tensor, Tensor]:
        steps = self._steps(state, resets)
        return self._out(x, steps), (steps + 1).unsqueeze(-1)
