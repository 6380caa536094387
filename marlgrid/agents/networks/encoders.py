"""Observation encoders, chosen from the gymnasium observation space, and the layers they use.

- 3-D ``Box`` images ``(H, W, C)`` (channels last):
  - ``symbolic``: uint8 ``(v, v, 3)`` MiniGrid cells ``(type, color, state)``, one embedding table
    per channel, concatenated, then a small conv stack (``symbolic_encoder='conv'``, the
    default), or ``symbolic_encoder='bag'``: one learned vector per (cell, channel, id), summed
    (a linear layer on the one-hot view, computed as a lookup; several times cheaper, see
    :class:`BagEncoder`);
  - ``pixels``: uint8 RGB ``(v * tile, v * tile, 3)``; the first conv has kernel and stride equal to
    the tile size, so each unit sees exactly one cell;
  - ``onehot``: any other channel count or a float image, cast to float and fed to a conv stack.

  ``image_mode`` names the kind. The trainer sets it from the env's observation settings
  (:mod:`~marlgrid.agents.networks.observation`), so on marlgrid envs the kind is never guessed.
  A space given alone with ``image_mode='auto'`` (other env sources, direct use, networks saved
  before) is guessed from its shape: a uint8 3-channel image is ``pixels`` when its height is
  above 16 and ``symbolic`` otherwise (set ``image_mode`` when that guess is wrong);
- other ``Box`` and ``MultiBinary`` spaces: flattened floats; ``Discrete``: one-hot (of
  ``x - start``); ``MultiDiscrete``: one one-hot per entry, concatenated in flat (C) order;
- ``Dict``: one encoder per key (e.g. ``image`` plus ``reward``, ``position``, ``direction``),
  outputs concatenated in sorted key order; ``Tuple``: one encoder per element, concatenated in
  element order (observations a sequence of tensors).

Any other space raises a ``TypeError`` that names it and lists these.

Encoders map a batch ``(N, ...)`` to features ``(N, output_size)``; they read their settings from a
:class:`~marlgrid.agents.networks.NetworkConfig`.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np
import torch
import torch.nn.functional as F
from gymnasium import spaces
from numba import njit
from torch import Tensor, nn

from marlgrid.agents.networks.config import SYMBOLIC_ENCODERS, NetworkConfig
from marlgrid.config import ConfigError


def init_linear(layer: nn.Linear, gain: float) -> nn.Linear:
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
        layers += [init_linear(nn.Linear(d, s), math.sqrt(2)), nn.ReLU()]
        d = s
    if out_size is not None:
        layers.append(init_linear(nn.Linear(d, out_size), out_gain))
        d = out_size
    return nn.Sequential(*layers), d


def _conv_stack(
    in_ch: int, channels: Sequence[int], cfg: NetworkConfig, size: tuple[int, int]
) -> tuple[nn.Sequential, int]:
    """Conv + ReLU layers (``cfg.conv_kernel``, ``cfg.conv_padding``) on a ``size`` grid;
    returns ``(module, number of output features)``."""
    k, pad = cfg.conv_kernel, cfg.conv_padding
    if k < 1 or pad < 0:
        raise ConfigError(
            f"network.conv_kernel must be >= 1 and network.conv_padding >= 0, got {k} and {pad}"
        )
    layers: list[nn.Module] = []
    h, w = size
    for ch in channels:
        h, w = h + 2 * pad - k + 1, w + 2 * pad - k + 1
        if h < 1 or w < 1:
            raise ConfigError(
                f"{len(channels)} conv layers of network.conv_kernel={k} and "
                f"network.conv_padding={pad} shrink the {size[0]}x{size[1]} grid to nothing; "
                "use fewer layers, a smaller kernel or more padding"
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


@njit(cache=True, nogil=True)
def _bag_grad_kernel(idx: np.ndarray, grad: np.ndarray, out: np.ndarray) -> None:
    """``out[idx[n, k]] += grad[n]`` for every ``n, k``, in that order."""
    n_rows, n_ids = idx.shape
    for n in range(n_rows):
        g = grad[n]
        for k in range(n_ids):
            row = out[idx[n, k]]
            for d in range(g.shape[0]):
                row[d] += g[d]


class _BagSum(torch.autograd.Function):
    """``weight[idx].sum(1)`` by ``embedding_bag``, whose backward is one compiled scatter-add
    on CPU (``embedding_bag``'s own CPU backward sorts the ids first: about 8x slower here)."""

    @staticmethod
    def forward(ctx: torch.autograd.function.FunctionCtx, weight: Tensor, idx: Tensor) -> Tensor:
        ctx.save_for_backward(idx)
        ctx.num_rows = weight.shape[0]  # type: ignore[attr-defined]
        return F.embedding_bag(idx, weight, mode="sum")

    @staticmethod
    def backward(  # type: ignore[override]
        ctx: torch.autograd.function.FunctionCtx, grad: Tensor
    ) -> tuple[Tensor, None]:
        (idx,) = ctx.saved_tensors  # type: ignore[attr-defined]
        grad = grad.contiguous()
        out = grad.new_zeros(ctx.num_rows, grad.shape[1])  # type: ignore[attr-defined]
        _bag_grad_kernel(idx.numpy(), grad.numpy(), out.numpy())
        return out, None


def bag_sum(weight: Tensor, idx: Tensor) -> Tensor:
    """Rows ``idx (N, K)`` of ``weight (R, D)`` summed per batch row -> ``(N, D)``."""
    if weight.device.type == "cpu" and weight.dtype == torch.float32 and torch.is_grad_enabled():
        return _BagSum.apply(weight, idx)
    return F.embedding_bag(idx, weight, mode="sum")


class Encoder(nn.Module):
    """Maps a batch of observations ``(N, ...)`` to features ``(N, output_size)``."""

    output_size: int


class FlatEncoder(Encoder):
    """Flattens a ``Box`` (or ``MultiBinary``) to floats."""

    def __init__(self, space: spaces.Box | spaces.MultiBinary) -> None:
        super().__init__()
        self.output_size = int(np.prod(space.shape))

    def forward(self, obs: Tensor) -> Tensor:
        return obs.reshape(obs.shape[0], -1).float()


class OneHotDiscreteEncoder(Encoder):
    """One-hot for ``Discrete`` (shape ``(N,)``) or ``MultiDiscrete`` (shape ``(N, *nvec.shape)``):
    each entry ``x`` becomes a one-hot of ``x - start``; the one-hots are concatenated in flat
    (C) order of the entries."""

    def __init__(self, space: spaces.Discrete | spaces.MultiDiscrete) -> None:
        super().__init__()
        if isinstance(space, spaces.Discrete):
            nvec, start = [int(space.n)], [int(space.start)]
        else:
            nvec = [int(n) for n in np.ravel(space.nvec)]
            start = [int(s) for s in np.ravel(getattr(space, "start", np.zeros_like(space.nvec)))]
        first = np.cumsum([0, *nvec[:-1]]) - np.array(start)  # x + first[i] = column of x
        self.register_buffer("first", torch.tensor(first, dtype=torch.long), persistent=False)
        self.output_size = int(sum(nvec))

    def forward(self, obs: Tensor) -> Tensor:
        idx = obs.reshape(obs.shape[0], -1).long() + self.first
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


class BagEncoder(Encoder):
    """MiniGrid cells ``(v, v, 3)`` uint8 as a sum of learned vectors, one per (cell, channel,
    id): ``relu(bias + sum_{x, y, c} W[x, y, c, obs[x, y, c]])``, ``cfg.bag_dim`` wide.

    This is a linear layer on the one-hot view followed by a ReLU, computed as ``3 v^2`` row
    lookups, so an observation costs ``3 v^2 * bag_dim`` additions (7x7 views, 128 wide: about
    19k, against about 1M multiply-adds for the default conv encoder and its trunk layer). The
    tables have ``cfg.symbolic_vocab`` rows per channel (type, color, state); an id at or above
    its table's size shares the table's last row (marlgrid's ids stay below the default
    (16, 32, 8): types to 11, colors to 21 with prestige, states to 3).
    """

    def __init__(self, space: spaces.Box, cfg: NetworkConfig) -> None:
        super().__init__()
        h, w, c = space.shape
        if c != 3:
            raise ValueError(f"symbolic observations need 3 channels, got shape {space.shape}")
        vocab = [int(v) for v in cfg.symbolic_vocab]
        per_cell = sum(vocab)
        first = np.cumsum([0, *vocab[:-1]])
        base = np.arange(h * w).reshape(h, w, 1) * per_cell + first  # (h, w, 3) first row
        self.register_buffer("base", torch.tensor(base, dtype=torch.long), persistent=False)
        self.register_buffer("top", torch.tensor(vocab, dtype=torch.long) - 1, persistent=False)
        # each output sums 3 v^2 rows: this std gives pre-activations of variance 2, as a
        # sqrt(2)-gain layer on unit-variance inputs
        std = math.sqrt(2.0 / (h * w * c))
        self.weight = nn.Parameter(torch.randn(h * w * per_cell, cfg.bag_dim) * std)
        self.bias = nn.Parameter(torch.zeros(cfg.bag_dim))
        self.output_size = cfg.bag_dim

    def ids(self, obs: Tensor) -> Tensor:
        """Table rows ``(N, 3 v^2)`` of a batch of views ``(N, v, v, 3)``."""
        return (torch.minimum(obs.long(), self.top) + self.base).view(obs.shape[0], -1)

    def forward(self, obs: Tensor) -> Tensor:
        return torch.relu(bag_sum(self.weight, self.ids(obs)) + self.bias)


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


class TupleEncoder(Encoder):
    """One encoder per element of a ``Tuple`` space; features concatenated in element order."""

    def __init__(self, space: spaces.Tuple, cfg: NetworkConfig) -> None:
        super().__init__()
        self.encoders = nn.ModuleList(make_encoder(s, cfg) for s in space.spaces)
        self.output_size = sum(e.output_size for e in self.encoders)

    def forward(self, obs: Sequence[Tensor]) -> Tensor:
        if len(obs) != len(self.encoders):
            raise ValueError(f"expected {len(self.encoders)} tuple elements, got {len(obs)}")
        return torch.cat([enc(x) for enc, x in zip(self.encoders, obs, strict=True)], -1)


def image_kind(space: spaces.Box, cfg: NetworkConfig) -> str:
    """Which image encoder a 3-D ``Box`` gets: ``'symbolic'``, ``'pixels'`` or ``'onehot'``,
    as ``cfg.image_mode`` says; for ``auto`` (no observation settings given) guessed from the
    shape (see the module docstring)."""
    if cfg.image_mode != "auto":
        if cfg.image_mode not in ("symbolic", "pixels", "onehot"):
            raise ValueError(f"unknown image_mode {cfg.image_mode!r}")
        return cfg.image_mode
    if space.dtype != np.uint8 or space.shape[-1] != 3:
        return "onehot"
    return "pixels" if space.shape[0] > 16 else "symbolic"


def symbolic_encoder(space: spaces.Box, cfg: NetworkConfig) -> Encoder:
    """The encoder ``cfg.symbolic_encoder`` names for symbolic views."""
    if cfg.symbolic_encoder == "conv":
        return SymbolicEncoder(space, cfg)
    if cfg.symbolic_encoder == "bag":
        return BagEncoder(space, cfg)
    raise ValueError(
        f"unknown symbolic_encoder {cfg.symbolic_encoder!r}; choose one of {SYMBOLIC_ENCODERS}"
    )


#: the observation spaces :func:`make_encoder` accepts (containers may nest them)
SUPPORTED_SPACES = "Box, Discrete, MultiDiscrete, MultiBinary, and Tuple or Dict of those"


def make_encoder(space: spaces.Space, cfg: NetworkConfig) -> Encoder:
    """Pick an encoder for ``space`` (see the module docstring)."""
    if isinstance(space, spaces.Dict):
        return DictEncoder(space, cfg)
    if isinstance(space, spaces.Tuple):
        return TupleEncoder(space, cfg)
    if isinstance(space, spaces.Discrete | spaces.MultiDiscrete):
        return OneHotDiscreteEncoder(space)
    if isinstance(space, spaces.MultiBinary):
        return FlatEncoder(space)
    if isinstance(space, spaces.Box):
        if len(space.shape) == 3:
            kind = image_kind(space, cfg)
            if kind == "symbolic":
                return symbolic_encoder(space, cfg)
            if kind == "pixels":
                return PixelEncoder(space, cfg)
            return OneHotImageEncoder(space, cfg)
        return FlatEncoder(space)
    raise TypeError(
        f"no encoder for observation space {space} ({type(space).__name__}); "
        f"supported: {SUPPORTED_SPACES}"
    )
