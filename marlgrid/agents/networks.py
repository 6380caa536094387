"""Observation encoders and the recurrent actor-critic network.

Encoders are chosen from the gymnasium observation space:

- 3-D ``Box`` images ``(H, W, C)`` (channels last):
  - ``symbolic``: uint8 ``(v, v, 3)`` MiniGrid cells ``(type, color, state)``, one embedding table
    per channel, concatenated, then a small conv stack;
  - ``pixels``: uint8 RGB ``(v * tile, v * tile, 3)``; the first conv has kernel and stride equal to
    the tile size, so each unit sees exactly one cell;
  - ``onehot``: any other channel count or a float image, cast to float and fed to a conv stack.

  With ``image_mode='auto'``, a uint8 3-channel image is ``pixels`` when its height is above 16 and
  ``symbolic`` otherwise (set ``image_mode`` when that guess is wrong);
- other ``Box`` spaces: flattened floats; ``Discrete``: one-hot; ``MultiDiscrete``: one-hots;
- ``Dict``: one encoder per key (e.g. ``image`` plus ``reward``, ``position``, ``direction``),
  outputs concatenated in sorted key order.

Then an MLP trunk, a memory core (:mod:`marlgrid.agents.memory`) and separate policy and value
heads. Sequences are time-major, ``(T, B, ...)``; observations may be a tensor or a dict of tensors.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import torch
from gymnasium import spaces
from torch import Tensor, nn

from marlgrid.agents.memory import MemoryCore, make_memory

Obs = Tensor | dict[str, Tensor]


@dataclass
class NetworkConfig:
    """Architecture of :class:`ActorCritic`."""

    memory: str = "lstm"  # memory core: 'lstm', 'gru' or 'none'
    hidden_size: int = 128  # memory core width (output size of 'none')
    trunk_sizes: tuple[int, ...] = (128,)  # MLP between encoder and memory core
    head_sizes: tuple[int, ...] = (64,)  # hidden layers of each of the policy and value heads
    conv_channels: tuple[int, ...] = (32, 32)  # conv layers applied on the cell grid
    conv_kernel: int = 3  # kernel size of those conv layers
    conv_padding: int = 1  # zero padding of those conv layers (1 keeps a 3x3 conv's grid size)
    embed_dim: int = 8  # embedding width per symbolic channel (type, color, state)
    symbolic_vocab: tuple[int, int, int] = (16, 32, 8)  # minimum table sizes (type, color, state)
    tile_size: int = 8  # pixels per cell for pixel observations
    image_mode: str = "auto"  # 'auto', 'symbolic', 'pixels' or 'onehot'


def _init_linear(layer: nn.Linear, gain: float) -> nn.Linear:
    nn.init.orthogonal_(layer.weight, gain)
    nn.init.zeros_(layer.bias)
    return layer


def mlp(
    in_size: int, sizes: Sequence[int], out_size: int | None = None, out_gain: float = 1.0
) -> tuple[nn.Sequential, int]:
    """ReLU MLP ``in -> sizes... [-> out]`` with orthogonal init; returns ``(module, out_dim)``."""
    layers: list[nn.Module] = []
    d = in_size
    for s in sizes:
        layers += [_init_linear(nn.Linear(d, s), math.sqrt(2)), nn.ReLU()]
        d = s
    if out_size is not None:
        layers.append(_init_linear(nn.Linear(d, out_size), out_gain))
        d = out_size
    return nn.Sequential(*layers), d


def _conv_stack(
    in_ch: int, channels: Sequence[int], cfg: NetworkConfig, size: tuple[int, int]
) -> tuple[nn.Sequential, int]:
    """Conv + ReLU layers (``cfg.conv_kernel``, ``cfg.conv_padding``) on a ``size`` grid;
    returns ``(module, number of output features)``."""
    k, pad = cfg.conv_kernel, cfg.conv_padding
    if k < 1 or pad < 0:
        raise ValueError(f"conv_kernel must be >= 1 and conv_padding >= 0, got {k} and {pad}")
    layers: list[nn.Module] = []
    h, w = size
    for ch in channels:
        h, w = h + 2 * pad - k + 1, w + 2 * pad - k + 1
        if h < 1 or w < 1:
            raise ValueError(
                f"{len(channels)} conv layers of kernel {k} and padding {pad} shrink the "
                f"{size[0]}x{size[1]} grid to nothing; use fewer layers or more padding"
            )
        layers += [nn.Conv2d(in_ch, ch, k, padding=pad), nn.ReLU(inplace=True)]
        in_ch = ch
    return nn.Sequential(*layers), in_ch * h * w


def flatten_cells(x: Tensor) -> Tensor:
    """Conv features ``(N, C, H, W)`` -> ``(N, H * W * C)``, cell by cell (channels last).

    Convs on views of channels-last observations keep that memory layout, so this is a free view
    where flattening channel by channel would copy (about a fifth of the encoder's time).
    """
    return x.permute(0, 2, 3, 1).reshape(x.shape[0], -1)


class _Lookup(torch.autograd.Function):
    """``weight[idx]`` whose backward is one ``index_add_`` (``nn.Embedding``'s CPU backward
    sorts the indices first and costs several times more on small tables)."""

    @staticmethod
    def forward(ctx: torch.autograd.function.FunctionCtx, weight: Tensor, idx: Tensor) -> Tensor:
        ctx.save_for_backward(idx)
        ctx.num_rows = weight.shape[0]  # type: ignore[attr-defined]
        return weight.index_select(0, idx.reshape(-1)).view(*idx.shape, weight.shape[1])

    @staticmethod
    def backward(  # type: ignore[override]
        ctx: torch.autograd.function.FunctionCtx, grad: Tensor
    ) -> tuple[Tensor, None]:
        (idx,) = ctx.saved_tensors  # type: ignore[attr-defined]
        flat = grad.reshape(-1, grad.shape[-1])
        out = flat.new_zeros(ctx.num_rows, flat.shape[1])  # type: ignore[attr-defined]
        return out.index_add_(0, idx.reshape(-1), flat), None


class Encoder(nn.Module):
    """Maps a batch of observations ``(N, ...)`` to features ``(N, output_size)``."""

    output_size: int


class FlatEncoder(Encoder):
    """Flattens a ``Box`` to floats."""

    def __init__(self, space: spaces.Box) -> None:
        super().__init__()
        self.output_size = int(np.prod(space.shape))

    def forward(self, obs: Tensor) -> Tensor:
        return obs.reshape(obs.shape[0], -1).float()


class OneHotDiscreteEncoder(Encoder):
    """One-hot for ``Discrete`` (shape ``(N,)``) or ``MultiDiscrete`` (shape ``(N, k)``)."""

    def __init__(self, space: spaces.Discrete | spaces.MultiDiscrete) -> None:
        super().__init__()
        if isinstance(space, spaces.Discrete):
            nvec, self.start = [int(space.n)], int(space.start)
        else:
            if np.ndim(space.nvec) != 1 or np.any(space.start != 0):
                raise ValueError(f"only flat MultiDiscrete spaces with start 0 supported: {space}")
            nvec, self.start = [int(n) for n in space.nvec], 0
        self.register_buffer("offsets", torch.tensor(np.cumsum([0, *nvec[:-1]])), persistent=False)
        self.output_size = int(sum(nvec))

    def forward(self, obs: Tensor) -> Tensor:
        idx = obs.reshape(obs.shape[0], -1).long() - self.start + self.offsets
        out = obs.new_zeros((obs.shape[0], self.output_size), dtype=torch.float32)
        return out.scatter_(1, idx, 1.0)


class SymbolicEncoder(Encoder):
    """MiniGrid cells ``(v, v, 3)`` uint8: per-channel embeddings, concatenated, then convs."""

    def __init__(self, space: spaces.Box, cfg: NetworkConfig) -> None:
        super().__init__()
        h, w, c = space.shape
        if c != 3:
            raise ValueError(f"symbolic observations need 3 channels, got shape {space.shape}")
        high = np.broadcast_to(space.high, space.shape).reshape(-1, 3).max(0)
        vocab = [max(int(v), int(hi) + 1) for v, hi in zip(cfg.symbolic_vocab, high, strict=True)]
        self.register_buffer("offsets", torch.tensor(np.cumsum([0, *vocab[:-1]])), persistent=False)
        self.embed = nn.Embedding(sum(vocab), cfg.embed_dim)
        self.convs, self.output_size = _conv_stack(
            3 * cfg.embed_dim, cfg.conv_channels, cfg, (h, w)
        )

    def forward(self, obs: Tensor) -> Tensor:
        n, h, w, _ = obs.shape
        x = _Lookup.apply(self.embed.weight, obs.long() + self.offsets)
        return flatten_cells(self.convs(x.view(n, h, w, -1).permute(0, 3, 1, 2)))


class PixelEncoder(Encoder):
    """RGB uint8 ``(v * tile, v * tile, 3)``: per-cell conv (kernel = stride = tile), then convs."""

    def __init__(self, space: spaces.Box, cfg: NetworkConfig) -> None:
        super().__init__()
        h, w, c = space.shape
        ts = cfg.tile_size
        if h % ts or w % ts:
            raise ValueError(
                f"pixel observation {h}x{w} is not a multiple of tile_size={ts}; "
                "set NetworkConfig.tile_size"
            )
        first = cfg.conv_channels[0] if cfg.conv_channels else 32
        self.cell = nn.Conv2d(c, first, kernel_size=ts, stride=ts)
        self.convs, self.output_size = _conv_stack(
            first, cfg.conv_channels[1:], cfg, (h // ts, w // ts)
        )

    def forward(self, obs: Tensor) -> Tensor:
        x = obs.permute(0, 3, 1, 2).float() / 255.0
        return flatten_cells(self.convs(torch.relu(self.cell(x))))


class OneHotImageEncoder(Encoder):
    """Channels-last one-hot (or any float) grid ``(v, v, C)``: cast to float, then convs."""

    def __init__(self, space: spaces.Box, cfg: NetworkConfig) -> None:
        super().__init__()
        h, w, c = space.shape
        self.convs, self.output_size = _conv_stack(c, cfg.conv_channels, cfg, (h, w))

    def forward(self, obs: Tensor) -> Tensor:
        return flatten_cells(self.convs(obs.permute(0, 3, 1, 2).float()))


class DictEncoder(Encoder):
    """One encoder per key of a ``Dict`` space; features concatenated in sorted key order."""

    def __init__(self, space: spaces.Dict, cfg: NetworkConfig) -> None:
        super().__init__()
        self.keys = sorted(space.spaces)
        self.encoders = nn.ModuleDict({k: make_encoder(space[k], cfg) for k in self.keys})
        self.output_size = sum(e.output_size for e in self.encoders.values())

    def forward(self, obs: dict[str, Tensor]) -> Tensor:
        return torch.cat([self.encoders[k](obs[k]) for k in self.keys], -1)


def image_kind(space: spaces.Box, cfg: NetworkConfig) -> str:
    """Which image encoder a 3-D ``Box`` gets: ``'symbolic'``, ``'pixels'`` or ``'onehot'``."""
    if cfg.image_mode != "auto":
        if cfg.image_mode not in ("symbolic", "pixels", "onehot"):
            raise ValueError(f"unknown image_mode {cfg.image_mode!r}")
        return cfg.image_mode
    if space.dtype != np.uint8 or space.shape[-1] != 3:
        return "onehot"
    return "pixels" if space.shape[0] > 16 else "symbolic"


def make_encoder(space: spaces.Space, cfg: NetworkConfig) -> Encoder:
    """Pick an encoder for ``space`` (see the module docstring)."""
    if isinstance(space, spaces.Dict):
        return DictEncoder(space, cfg)
    if isinstance(space, spaces.Discrete | spaces.MultiDiscrete):
        return OneHotDiscreteEncoder(space)
    if isinstance(space, spaces.Box):
        if len(space.shape) == 3:
            kind = image_kind(space, cfg)
            if kind == "symbolic":
                return SymbolicEncoder(space, cfg)
            if kind == "pixels":
                return PixelEncoder(space, cfg)
            return OneHotImageEncoder(space, cfg)
        return FlatEncoder(space)
    raise TypeError(f"no encoder for observation space {space}")


def _flatten_time(obs: Obs) -> Obs:
    if isinstance(obs, dict):
        return {k: v.flatten(0, 1) for k, v in obs.items()}
    return obs.flatten(0, 1)


def log_prob_entropy(logits: Tensor, actions: Tensor) -> tuple[Tensor, Tensor]:
    """Log-probability of ``actions`` and entropy of the categorical given by ``logits``."""
    logp_all = logits.log_softmax(-1)
    logp = logp_all.gather(-1, actions.long().unsqueeze(-1)).squeeze(-1)
    entropy = -(logp_all.exp() * logp_all).sum(-1)
    return logp, entropy


def sample_actions(logits: Tensor, generator: torch.Generator | None = None) -> Tensor:
    """Sample one action per row of ``logits (B, A)``."""
    return torch.multinomial(logits.softmax(-1), 1, generator=generator).squeeze(-1)


class ActorCritic(nn.Module):
    """Encoder -> MLP trunk -> memory core -> separate policy and value heads.

    The state is one tensor ``(B, state_size)`` (see :mod:`marlgrid.agents.memory`). Only
    ``Discrete`` action spaces are supported.
    """

    def __init__(
        self,
        observation_space: spaces.Space,
        action_space: spaces.Space,
        cfg: NetworkConfig | None = None,
    ) -> None:
        super().__init__()
        cfg = cfg or NetworkConfig()
        if not isinstance(action_space, spaces.Discrete):
            raise NotImplementedError(f"only Discrete action spaces supported, got {action_space}")
        self.cfg = cfg
        self.num_actions = int(action_space.n)
        self.action_start = int(action_space.start)
        self.encoder = make_encoder(observation_space, cfg)
        self.trunk, trunk_out = mlp(self.encoder.output_size, cfg.trunk_sizes)
        self.memory: MemoryCore = make_memory(cfg.memory, trunk_out, cfg.hidden_size)
        self.policy_head, _ = mlp(cfg.hidden_size, cfg.head_sizes, self.num_actions, out_gain=0.01)
        self.value_head, _ = mlp(cfg.hidden_size, cfg.head_sizes, 1, out_gain=1.0)

    @property
    def state_size(self) -> int:
        return self.memory.state_size

    def initial_state(self, batch_size: int) -> Tensor:
        """Zero memory state ``(batch_size, state_size)``."""
        return self.memory.initial_state(batch_size)

    def features(self, obs: Obs, T: int, B: int) -> Tensor:
        """Encoder and trunk over ``(T, B, ...)`` observations -> ``(T, B, F)``."""
        return self.trunk(self.encoder(_flatten_time(obs))).view(T, B, -1)

    def heads(self, core_out: Tensor, policy: bool = True) -> tuple[Tensor | None, Tensor]:
        """Policy logits (or ``None``) and values from memory outputs."""
        logits = self.policy_head(core_out) if policy else None
        return logits, self.value_head(core_out).squeeze(-1)

    def forward(self, obs: Obs, state: Tensor, resets: Tensor) -> tuple[Tensor, Tensor, Tensor]:
        """Sequences ``(T, B, ...)`` -> ``(logits (T, B, A), values (T, B), final_state)``."""
        T, B = resets.shape
        out, state = self.memory(self.features(obs, T, B), state, resets)
        logits, values = self.heads(out)
        return logits, values, state

    def evaluate(self, obs: Obs, state: Tensor, resets: Tensor) -> tuple[Tensor, Tensor]:
        """Like :meth:`forward` without the final state, by the core's fastest path (training)."""
        T, B = resets.shape
        logits, values = self.heads(self.memory.outputs(self.features(obs, T, B), state, resets))
        assert logits is not None
        return logits, values

    def unroll(
        self, obs: Obs, state: Tensor, resets: Tensor, policy: bool = True
    ) -> tuple[Tensor | None, Tensor, Tensor]:
        """Like :meth:`forward` but returns every post-step state ``(T, B, S)``."""
        T, B = resets.shape
        out, post = self.memory.unroll(self.features(obs, T, B), state, resets)
        logits, values = self.heads(out, policy)
        return logits, values, post

    def step(
        self, obs: Obs, state: Tensor, resets: Tensor | None = None
    ) -> tuple[Tensor, Tensor, Tensor]:
        """One step for a batch: obs ``(B, ...)`` -> ``(logits (B, A), values (B,), new_state)``.

        ``resets (B,)`` zeroes those slots' states first (None: no reset).
        """
        B = state.shape[0]
        if resets is None:
            resets = torch.zeros(1, B, dtype=torch.bool, device=state.device)
        seq = {k: v.unsqueeze(0) for k, v in obs.items()} if isinstance(obs, dict) else obs[None]
        logits, values, state = self.forward(seq, state, resets.view(1, B))
        return logits[0], values[0], state

    def act(
        self,
        obs: Obs,
        state: Tensor,
        resets: Tensor | None = None,
        deterministic: bool = False,
        generator: torch.Generator | None = None,
    ) -> tuple[Tensor, Tensor, Tensor, Tensor]:
        """Sample (or argmax) actions for a batch: ``(actions, logp, values, new_state)``.

        Actions are indices ``0..n-1``; add :attr:`action_start` before passing them to an env.
        """
        logits, values, state = self.step(obs, state, resets)
        logp_all = logits.log_softmax(-1)
        if deterministic:
            idx = logits.argmax(-1)
        else:
            idx = torch.multinomial(logp_all.exp(), 1, generator=generator).squeeze(-1)
        logp = logp_all.gather(-1, idx.unsqueeze(-1)).squeeze(-1)
        return idx, logp, values, state
