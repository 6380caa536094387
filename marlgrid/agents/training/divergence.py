"""A learner whose update left weights that are not finite: stop with a clear error.

A learning rate far too large (``agent.lr=1e30``) makes one update write ``inf`` into the
weights, and the next forward fails deep inside torch ("probability tensor contains either inf,
nan or element < 0"). :func:`check_finite` runs after every update and raises
:class:`TrainingDiverged` instead, naming the learner, the first weight that is not finite and
the settings that set the step size. The newest checkpoint on disk, written before, stays the
run's last finite state.
"""

from __future__ import annotations

from typing import Any

import torch

from marlgrid.config import ConfigError

__all__ = ["TrainingDiverged", "check_finite", "modules_of"]

#: config fields that set the size of a step, named in the error when the config has them
STEP_SIZE_KEYS = ("lr", "lr_final", "max_grad_norm")


class TrainingDiverged(ConfigError):
    """An update left weights that are not finite (the step size settings are the usual cause)."""


def modules_of(learner: Any) -> dict[str, torch.nn.Module]:
    """The torch modules a learner holds as attributes (its networks), by attribute name."""
    return {k: v for k, v in vars(learner).items() if isinstance(v, torch.nn.Module)}


def check_finite(name: str, learner: Any, key: str, update: int) -> None:
    """Raise :class:`TrainingDiverged` if any weight of ``learner`` is NaN or infinite.

    ``key`` is where the learner's settings sit on the command line (``agent`` for the main
    learner, ``learners.<name>`` for others); ``update`` the iteration it happened in.
    """
    for attr, module in modules_of(learner).items():
        for pname, p in module.named_parameters():
            if not bool(torch.isfinite(p).all()):
                cfg = getattr(learner, "cfg", None)
                settings = ", ".join(
                    f"{key}.{k}={getattr(cfg, k)!r}"
                    for k in STEP_SIZE_KEYS
                    if getattr(cfg, k, None) is not None
                )
                raise TrainingDiverged(
                    f"learner {name!r} diverged in update {update}: weight {attr}.{pname} is no "
                    f"longer finite. Its step size settings are {settings or 'unknown'}: lower "
                    "the learning rate; the newest checkpoint holds the last finite state"
                )
