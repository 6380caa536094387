"""The frame-stack core (``kind="framestack"``): an MLP over the last ``k`` inputs."""

from __future__ import annotations

import torch
from torch import Tensor, nn

from marlgrid.agents.memory.base import MemoryCore, register_core
from marlgrid.agents.memory.scan import steps_since_reset
from marlgrid.config import check_int


@register_core("framestack")
class FrameStack(MemoryCore):
    """POPGym's frame stack: each input is mapped by ``Linear(F, ceil(H / k))`` to a *frame*;
    the last ``k`` frames, oldest first, are concatenated and go through ``Linear``, LeakyReLU,
    ``Linear(H, H)``, LeakyReLU. State ``{"frames": (k - 1) * ceil(H / k)}``: the last ``k - 1``
    frames, oldest first (``{}`` for ``k = 1``).

    A frame from before a reset (or of a fresh state) is zero: the window of a step ``j < k - 1``
    steps into an episode holds ``k - 1 - j`` zero frames, then the episode's frames.

    Options: ``k`` (default 4, POPGym's stack size; with ``H = 256`` a frame is 64 wide).
    """

    def __init__(self, input_size: int, hidden_size: int, *, k: int = 4) -> None:
        super().__init__(input_size, hidden_size)
        self.k = check_int("framestack k", k, low=1)
        self.frame_size = -(-hidden_size // self.k)
        self.frame = nn.Linear(input_size, self.frame_size)
        self.mlp = nn.Sequential(
            nn.Linear(self.k * self.frame_size, hidden_size),
            nn.LeakyReLU(),
            nn.Linear(hidden_size, hidden_size),
            nn.LeakyReLU(),
        )
        gain = nn.init.calculate_gain("leaky_relu")
        for layer, g in ((self.frame, 1.0), (self.mlp[0], gain), (self.mlp[2], gain)):
            nn.init.orthogonal_(layer.weight, g)
            nn.init.zeros_(layer.bias)

    @property
    def state_layout(self) -> dict[str, int]:
        return {"frames": (self.k - 1) * self.frame_size} if self.k > 1 else {}

    def _windows(self, x: Tensor, state: Tensor, resets: Tensor) -> Tensor:
        """The ``k`` frames each step sees, ``(T, B, k, frame_size)``, oldest first."""
        T, B, _ = x.shape
        k, D = self.k, self.frame_size
        old = state.reshape(B, k - 1, D).transpose(0, 1)  # (k - 1, B, D), oldest first
        frames = torch.cat([old, self.frame(x)])  # frame of step t at index t + k - 1
        windows = frames.unfold(0, k, 1).transpose(-1, -2)  # (T, B, k, D)
        age, fresh = steps_since_reset(resets)
        # slot i of step t holds the frame of step t - (k - 1 - i): kept if no reset falls
        # after it, that is (where the episode started in the sequence) if it is that recent
        back = torch.arange(k - 1, -1, -1, device=x.device)
        keep = ~fresh.unsqueeze(-1) | (back <= age.unsqueeze(-1))
        return windows.masked_fill(~keep.unsqueeze(-1), 0.0)

    def forward(self, x: Tensor, state: Tensor, resets: Tensor) -> tuple[Tensor, Tensor]:
        windows = self._windows(x, state, resets)
        return self.mlp(windows.flatten(-2)), windows[-1, :, 1:].flatten(-2)

    def unroll(self, x: Tensor, state: Tensor, resets: Tensor) -> tuple[Tensor, Tensor]:
        windows = self._windows(x, state, resets)
        return self.mlp(windows.flatten(-2)), windows[:, :, 1:].flatten(-2)
