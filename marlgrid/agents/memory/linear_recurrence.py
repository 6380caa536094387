"""The diagonal linear recurrence core (``kind="linear_recurrence"``), LRU-style."""

from __future__ import annotations

import math

import torch
from torch import Tensor, nn
from torch.nn import functional as fn

from marlgrid.agents.memory.base import MemoryCore, register_core
from marlgrid.agents.memory.scan import linear_scan
from marlgrid.config import ConfigError, check_bool, check_float, check_int


@register_core("linear_recurrence")
class LinearRecurrence(MemoryCore):
    """A linear recurrent unit (Orvieto et al. 2023): a diagonal linear recurrence read out
    through a gated nonlinearity, with a skip.

    Per step, with ``u = Linear(F, H)(x)``::

        h_t = lam * h_{t-1} + gamma * (B u_t)        # N states, elementwise
        y_t = Re(C h_t) + D * u_t
        out_t = GLU(Linear(H, 2H)(GELU(y_t))) + u_t

    ``lam = exp(-exp(nu) + i exp(theta))`` keeps ``|lam| < 1`` (stable) whatever the parameters;
    ``gamma`` (learned, ``sqrt(1 - |lam|^2)`` at first) keeps the states' scale. A reset sets
    the carry ``h_{t-1}`` to zero before step ``t``. State ``{"re": N, "im": N}`` (``{"h": N}``
    for a real recurrence).

    A sequence runs in one :func:`.scan.linear_scan` (``log2 T`` rounds over all steps; resets
    are zero factors), which also gives every step's state, so ``unroll`` and the generic
    ``chunk_unroll`` cost one pass.

    Options: ``state_size`` (N; default ``hidden_size``), ``complex_state`` (default True; False
    drops ``theta`` and the imaginary parts), ``r_min`` / ``r_max`` (defaults 0.9 / 0.999, the
    LRU's: ``|lam|^2`` starts uniform between their squares) and ``max_phase`` (default
    ``2 pi``: ``theta`` starts uniform in ``(0, max_phase)``).
    """

    def __init__(
        self,
        input_size: int,
        hidden_size: int,
        *,
        state_size: int | None = None,
        complex_state: bool = True,
        r_min: float = 0.9,
        r_max: float = 0.999,
        max_phase: float = 2 * math.pi,
    ) -> None:
        super().__init__(input_size, hidden_size)
        name = "linear_recurrence"
        N = hidden_size if state_size is None else check_int(f"{name} state_size", state_size, 1)
        self.n_states = N
        self.complex_state = check_bool(f"{name} complex_state", complex_state)
        self.r_max = check_float(f"{name} r_max", r_max, 0.0, 1.0, low_open=True, high_open=True)
        self.r_min = check_float(f"{name} r_min", r_min, 0.0, 1.0, low_open=True, high_open=True)
        if self.r_min >= self.r_max:
            raise ConfigError(f"{name} r_min must be < r_max={self.r_max:g}, got {r_min!r}")
        self.max_phase = check_float(f"{name} max_phase", max_phase, 0.0, low_open=True)
        H, parts = hidden_size, 2 if self.complex_state else 1

        self.proj = nn.Linear(input_size, H)
        nn.init.orthogonal_(self.proj.weight)
        nn.init.zeros_(self.proj.bias)
        radius2 = torch.rand(N) * (self.r_max**2 - self.r_min**2) + self.r_min**2
        self.nu_log = nn.Parameter(torch.log(-0.5 * torch.log(radius2)))
        self.gamma_log = nn.Parameter(0.5 * torch.log(1 - radius2))
        if self.complex_state:
            phase = (torch.rand(N) * self.max_phase).clamp_min(1e-6)
            self.theta_log = nn.Parameter(torch.log(phase))
        self.B = nn.Parameter(torch.randn(parts, N, H) / math.sqrt(parts * H))
        self.C = nn.Parameter(torch.randn(parts, H, N) / math.sqrt(N))
        self.D = nn.Parameter(torch.randn(H))
        self.glu = nn.Linear(H, 2 * H)
        nn.init.orthogonal_(self.glu.weight)
        nn.init.zeros_(self.glu.bias)

    @property
    def state_layout(self) -> dict[str, int]:
        N = self.n_states
        return {"re": N, "im": N} if self.complex_state else {"h": N}

    def decay(self) -> Tensor:
        """``lam (N,)``: complex, or real in ``(0, 1)`` for a real recurrence."""
        log_radius = -torch.exp(self.nu_log)
        if not self.complex_state:
            return torch.exp(log_radius)
        return torch.exp(torch.complex(log_radius, torch.exp(self.theta_log)))

    def _run(self, x: Tensor, state: Tensor, resets: Tensor) -> tuple[Tensor, Tensor]:
        """Outputs and the state after every step (one matrix product in, one out)."""
        u = self.proj(x)
        gamma = torch.exp(self.gamma_log).repeat(self.B.shape[0])
        drive = (u @ self.B.flatten(0, 1).t()) * gamma  # (T, B, parts * N): real, imaginary
        keep = (~resets.bool()).unsqueeze(-1).to(u.dtype)
        a = self.decay() * keep  # a reset drops the carry
        if self.complex_state:
            h = linear_scan(
                a, torch.complex(*drive.chunk(2, -1)), torch.complex(*state.chunk(2, -1))
            )
            post = torch.cat([h.real, h.imag], -1)
            readout = torch.cat([self.C[0], -self.C[1]], -1)  # Re(C h) = C_re h_re - C_im h_im
        else:
            post, readout = linear_scan(a, drive, state), self.C[0]
        y = post @ readout.t() + self.D * u
        return fn.glu(self.glu(fn.gelu(y)), -1) + u, post

    def forward(self, x: Tensor, state: Tensor, resets: Tensor) -> tuple[Tensor, Tensor]:
        out, post = self._run(x, state, resets)
        return out, post[-1]

    def unroll(self, x: Tensor, state: Tensor, resets: Tensor) -> tuple[Tensor, Tensor]:
        return self._run(x, state, resets)
