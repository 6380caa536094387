"""The torch device a config names, checked before anything runs."""

from __future__ import annotations

import torch

from marlgrid.config import ConfigError

__all__ = ["check_device"]


def check_device(name: str, device: str) -> None:
    """A torch device string that this machine has; :class:`~marlgrid.config.ConfigError`
    naming ``name`` otherwise."""
    try:
        dev = torch.device(device)
    except (RuntimeError, TypeError) as exc:
        raise ConfigError(f"{name} must be a torch device, got {device!r}") from exc
    if dev.type == "cuda" and not torch.cuda.is_available():
        raise ConfigError(f"{name} is {device!r} but CUDA is not available")
