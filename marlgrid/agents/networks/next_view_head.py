"""The ``next_view`` decoder head: ``(memory output h_t, one-hot a_t)`` -> a predicted view.

Registered as the head kind ``next_view`` (:mod:`marlgrid.agents.networks.registry`). The loss
term of the same name (:mod:`marlgrid.agents.algorithms.next_view`) declares this head itself,
with options that describe the view it decodes (plain data, saved with the run's config), so a
run configures only the term. :func:`view_spec` reads those options off an observation space.

The decoder: ``Linear(H + A -> hidden)``, ReLU, then for image views (``(h, w, c)``) a layer to
``cell_dim`` features per cell (ReLU) and one linear map per cell, shared by all cells, to that
cell's outputs (as a transposed conv of kernel = stride = one cell); for flat views one linear
layer to the view's size. What it outputs, per ``view`` kind:

- ``symbolic`` (MiniGrid cells ``(h, w, 3)`` of type, colour, state ids): per-cell logits
  ``(..., h, w, sum(vocab))``, one block of ``vocab[i]`` classes per channel;
- ``pixels`` (RGB ``(h * tile, w * tile, 3)``): ``(..., H, W, 3)`` pre-sigmoid pixel values, each
  cell's ``tile x tile`` block from its own features;
- ``unit`` (values in [0, 1], e.g. one-hot images) and ``real`` (any other ``Box``): the view's
  shape, pre-sigmoid for ``unit``, raw for ``real``.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import numpy as np
import torch
from gymnasium import spaces
from torch import Tensor, nn

from marlgrid.agents.networks.config import NetworkConfig
from marlgrid.agents.networks.encoders import image_kind, init_linear
from marlgrid.agents.networks.registry import one_hot_size, register_head
from marlgrid.config import ConfigError

__all__ = ["VIEW_KINDS", "NextViewHead", "view_spec"]

#: what a view can be (``NextViewHead``'s ``view`` option)
VIEW_KINDS = ("symbolic", "pixels", "unit", "real")


def view_spec(space: spaces.Box, network: NetworkConfig) -> dict[str, Any]:
    """The :class:`NextViewHead` options that describe views of ``space`` (a ``Box``), read as
    the network's encoder reads it (``network.image_mode``): ``view``, ``shape`` and, for
    ``symbolic``, ``vocab`` (``network.symbolic_vocab``: classes per channel; an id at or above
    its channel's count is taken as the last class, as the ``bag`` encoder does, and marlgrid's
    ids stay below the default (16, 32, 8)); for ``pixels``, ``tile_size``."""
    shape = [int(s) for s in space.shape]
    if len(shape) == 3:
        kind = image_kind(space, network)
        if kind == "symbolic":
            vocab = [int(v) for v in network.symbolic_vocab]
            return {"view": "symbolic", "shape": shape, "vocab": vocab}
        if kind == "pixels":
            return {"view": "pixels", "shape": shape, "tile_size": int(network.tile_size)}
    low, high = np.asarray(space.low), np.asarray(space.high)
    unit = bool(np.all(low >= 0) and np.all(high <= 1))
    return {"view": "unit" if unit else "real", "shape": shape}


class NextViewHead(nn.Module):
    """Decodes a view from ``(features (..., H), one-hot action (..., A))`` (see the module
    docstring for the layers and what each ``view`` kind outputs)."""

    def __init__(
        self,
        input_size: int,
        action_space: spaces.Space,
        view: str,
        shape: Sequence[int],
        hidden: int = 256,
        vocab: Sequence[int] | None = None,
        tile_size: int | None = None,
        cell_dim: int = 32,
    ) -> None:
        super().__init__()
        if view not in VIEW_KINDS:
            raise ConfigError(
                f"next_view head: view must be one of {list(VIEW_KINDS)}, got {view!r}"
            )
        self.view, self.shape = view, tuple(int(s) for s in shape)
        self.vocab = tuple(int(v) for v in vocab) if vocab is not None else None
        self.tile = 1
        if view == "symbolic":
            if self.vocab is None or len(self.vocab) != 3 or len(self.shape) != 3:
                raise ConfigError(
                    f"next_view head: a symbolic view needs shape (h, w, 3) and 3 vocab sizes, "
                    f"got shape {list(self.shape)} and vocab {vocab!r}"
                )
            per_cell = sum(self.vocab)
        elif view == "pixels":
            self.tile = int(tile_size or 0)
            if len(self.shape) != 3 or self.tile < 1 or self.shape[0] % self.tile:
                raise ConfigError(
                    f"next_view head: pixel views need shape (h * tile, w * tile, c) and "
                    f"tile_size >= 1, got shape {list(self.shape)} and tile_size {tile_size!r}"
                )
            if self.shape[1] % self.tile:
                raise ConfigError(
                    f"next_view head: pixel view width {self.shape[1]} is not a multiple of "
                    f"tile_size {self.tile}"
                )
            per_cell = self.tile * self.tile * self.shape[2]
        else:
            per_cell = self.shape[-1] if len(self.shape) == 3 else 0
        self.onehot_size = one_hot_size(action_space)
        self.fc = init_linear(nn.Linear(input_size + self.onehot_size, hidden), math.sqrt(2))
        self.grid: tuple[int, int] | None = None
        if len(self.shape) == 3:
            self.grid = (self.shape[0] // self.tile, self.shape[1] // self.tile)
            cells = self.grid[0] * self.grid[1]
            self.cells = init_linear(nn.Linear(hidden, cells * cell_dim), math.sqrt(2))
            self.out = init_linear(nn.Linear(cell_dim, per_cell), 1.0)
        else:
            self.out = init_linear(nn.Linear(hidden, int(np.prod(self.shape))), 1.0)
        self.cell_dim = cell_dim

    def forward(self, features: Tensor, onehot: Tensor | None = None) -> Tensor:
        if onehot is None:
            raise ValueError("the next_view head reads the actions taken but got none")
        x = torch.relu(self.fc(torch.cat([features, onehot], -1)))
        lead = x.shape[:-1]
        if self.grid is None:
            return self.out(x).view(*lead, *self.shape)
        gh, gw = self.grid
        y = self.out(torch.relu(self.cells(x)).view(*lead, gh, gw, self.cell_dim))
        if self.view != "pixels":
            return y
        ts, c = self.tile, self.shape[2]
        y = y.view(*lead, gh, gw, ts, ts, c).transpose(-4, -3)  # (..., gh, ts, gw, ts, c)
        return y.reshape(*lead, *self.shape)


register_head("next_view", NextViewHead)
