"""Helpers for observations that are an array or a dict of arrays (numpy or torch).

Every function here takes either form and returns the same form, so learners, storage and
rollouts never branch on ``isinstance(obs, dict)`` themselves.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

import numpy as np
import torch
from gymnasium import spaces
from torch import Tensor

Obs = Tensor | dict[str, Tensor]


def tree_map(fn: Callable[[Any], Any], obs: Any) -> Any:
    """Apply ``fn`` to the array, or to every array of a dict."""
    if isinstance(obs, Mapping):
        return {k: fn(v) for k, v in obs.items()}
    return fn(obs)


def space_dtype(space: spaces.Space) -> torch.dtype:
    """The torch dtype observations of ``space`` are stored in (``long`` for discrete spaces)."""
    if isinstance(space, spaces.Discrete | spaces.MultiDiscrete):
        return torch.long
    return torch.from_numpy(np.zeros(0, dtype=space.dtype)).dtype


def alloc_obs(space: spaces.Space, lead: tuple[int, ...], device: torch.device | str) -> Obs:
    """Zero observation storage of shape ``lead + space.shape`` (a dict for ``Dict`` spaces)."""
    if isinstance(space, spaces.Dict):
        return {k: alloc_obs(s, lead, device) for k, s in space.spaces.items()}  # type: ignore[misc]
    return torch.zeros(*lead, *space.shape, dtype=space_dtype(space), device=device)


def obs_to_tensor(obs: Any, device: torch.device | str = "cpu") -> Obs:
    """numpy observations (array or dict of arrays, batch first) -> tensors (no copy on CPU)."""
    return tree_map(lambda v: torch.as_tensor(np.asarray(v), device=device), obs)


def obs_index(obs: Any, index: Any) -> Any:
    """Index every array of an observation with the same index."""
    return tree_map(lambda v: v[index], obs)


def obs_copy_(dst: Any, index: Any, src: Any) -> None:
    """``dst[index] = src`` for every array (``src`` of the same form)."""
    if isinstance(dst, Mapping):
        for k, v in dst.items():
            v[index] = src[k]
    else:
        dst[index] = src


def obs_cat(parts: list[Any]) -> Any:
    """Concatenate observations along their first axis."""
    if isinstance(parts[0], Mapping):
        return {k: torch.cat([p[k] for p in parts]) for k in parts[0]}
    return torch.cat(parts)


def obs_repeat(obs: Any, times: int) -> Any:
    """Each row of ``obs`` ``times`` times in a row (``(N, ...)`` -> ``(N * times, ...)``)."""
    if times == 1:
        return obs
    return tree_map(lambda v: v.repeat_interleave(times, 0), obs)


def obs_flatten_time(obs: Any) -> Any:
    """``(T, B, ...)`` -> ``(T * B, ...)`` for every array."""
    return tree_map(lambda v: v.flatten(0, 1), obs)


def obs_unsqueeze(obs: Any) -> Any:
    """A batch ``(B, ...)`` as a sequence of one step ``(1, B, ...)``."""
    return tree_map(lambda v: v[None], obs)


def final_obs_rows(final_obs: Any, ids: np.ndarray) -> Any:
    """Rows ``ids`` of ``infos["final_obs"]``: a batched array (or dict of arrays), or a numpy
    object array holding one observation per slot (gymnasium's vector envs)."""
    if isinstance(final_obs, np.ndarray) and final_obs.dtype == object:
        rows = [final_obs[i] for i in ids]
        if isinstance(rows[0], Mapping):
            return {k: np.stack([r[k] for r in rows]) for k in rows[0]}
        return np.stack(rows)
    return tree_map(lambda v: np.asarray(v)[ids], final_obs)
