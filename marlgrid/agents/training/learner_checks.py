"""Checks of learner configs, fresh or saved: what a config must pass before a network is built.

- :func:`check_learner_config`: a config dataclass's ``algo`` is registered, the config is that
  algorithm's class, and its own ``validate(key, num_slots)`` passes (a run's ``agent`` and
  ``learners`` get it from :func:`~marlgrid.agents.training.train_config.validate_learners`).
- :func:`check_saved_learners`: the learners of a checkpoint's payload (a run's checkpoint or an
  exported policy file), each with a ``config`` rebuilt through its config class and given the same
  checks as a fresh one, and every floating-point tensor finite. Frozen roles, evaluation and
  export call it through :func:`~marlgrid.agents.bookkeeping.checkpoint.check_learners`, which names
  the file.

Every check raises :class:`~marlgrid.config.ConfigError` naming the dotted key at fault.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from torch import Tensor

from marlgrid.agents.learner import LEARNERS, config_from_dict, load_builtin_learners
from marlgrid.config import ConfigError

__all__ = ["check_learner_config", "check_saved_learners", "first_non_finite"]

#: entries of a learner's saved state that are not weights (plain data, or experience)
NOT_WEIGHTS = ("config", "replay")


def check_learner_config(key: str, cfg: Any, num_slots: int | None = None) -> None:
    """``cfg`` is a config of a registered algorithm, of that algorithm's class, and passes its
    own ``validate(key, num_slots)``; ``key`` (``agent``, ``learners.<name>``) prefixes errors."""
    load_builtin_learners()
    algo = getattr(cfg, "algo", None)
    if algo not in LEARNERS:
        raise ConfigError(f"{key}.algo must be one of {sorted(LEARNERS)}, got {algo!r}")
    if not isinstance(cfg, LEARNERS[algo].config):
        raise ConfigError(
            f"{key} must be a {LEARNERS[algo].config.__name__} (algo {algo!r}), got "
            f"{type(cfg).__name__}"
        )
    check = getattr(cfg, "validate", None)
    if callable(check):
        check(key, num_slots)


def check_saved_learners(payload: Any, names: Iterable[str] | None = None) -> dict[str, Any]:
    """The ``learners`` of a checkpoint ``payload``, checked: those in ``names`` (default all)
    each hold a ``config`` that rebuilds as its algorithm's config class and passes
    :func:`check_learner_config`, and finite floating-point tensors only."""
    learners = payload.get("learners") if isinstance(payload, Mapping) else None
    if not isinstance(learners, Mapping) or not learners:
        found = sorted(map(str, payload)) if isinstance(payload, Mapping) else []
        raise ConfigError(
            f"holds no 'learners' entry of learner states (its entries are {found}): not a file "
            "that marlgrid's trainer or export_expert wrote"
        )
    for name in learners if names is None else names:
        key = f"learners.{name}"
        state = learners.get(name)
        if not isinstance(state, Mapping) or not isinstance(state.get("config"), Mapping):
            found = sorted(map(str, state)) if isinstance(state, Mapping) else []
            raise ConfigError(f"{key} has no 'config' entry (its entries are {found})")
        try:
            cfg = config_from_dict(state["config"])
        except (ValueError, TypeError) as exc:
            raise ConfigError(f"{key}.config: {exc}") from None
        check_learner_config(f"{key}.config", cfg)
        weights = {k: v for k, v in state.items() if k not in NOT_WEIGHTS}
        bad = first_non_finite(weights, f"{key}.")
        if bad is not None:
            raise ConfigError(
                f"{bad} holds NaN or infinite values (the training that wrote it diverged, or "
                "the file was altered): this learner cannot act"
            )
    return dict(learners)


def first_non_finite(value: Any, prefix: str = "") -> str | None:
    """The dotted name of the first floating-point tensor in ``value`` (nested mappings,
    lists and tuples) holding a NaN or an infinity; None when all are finite."""
    if isinstance(value, Tensor):
        finite = not value.is_floating_point() or bool(value.isfinite().all())
        return None if finite else prefix.rstrip(".")
    if isinstance(value, Mapping):
        items: Iterable[tuple[Any, Any]] = value.items()
    elif isinstance(value, list | tuple):
        items = enumerate(value)
    else:
        return None
    for key, item in items:
        found = first_non_finite(item, f"{prefix}{key}.")
        if found is not None:
            return found
    return None
