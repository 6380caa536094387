"""Metric observers: step observers that turn the episodes they saw into log entries.

A stream asks every registered factory for an observer when it starts its rollout; a factory
returns ``None`` where its metrics do not apply (the goal-cycle social metrics, for example,
in an env without cycle tiles). Register your own with :func:`register_metric_observer` (a
callable, or ``"module:attribute"`` imported when first needed)::

    register_metric_observer("mypkg.metrics:TrailObserver.for_roles")

A factory is called as ``factory(vec, groups, scripted)`` (the stream's batched env, its
policy groups and its scripted policies by agent id); what it returns must have the
:class:`~marlgrid.agents.training.rollout.StepObserver` methods and ``pop(columns)``, giving
the metrics of the episodes ended since the last call, averaged over ``columns``' agents.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable, Sequence
from typing import Any, Protocol

import numpy as np

from marlgrid.agents.training.rollout import PolicyGroup


class MetricObserver(Protocol):
    def before_step(self, vec: Any, actions: np.ndarray) -> None: ...

    def after_step(
        self, vec: Any, actions: np.ndarray, rewards: np.ndarray, infos: dict[str, Any]
    ) -> None: ...

    def pop(self, columns: list[int] | None = None) -> dict[str, float]: ...


Factory = Callable[[Any, Sequence[PolicyGroup], dict[str, Any]], "MetricObserver | None"]

#: the factories every stream asks, in order (a string is ``"module:attribute.path"``)
METRIC_OBSERVERS: list[Factory | str] = [
    "marlgrid.agents.training.social_observer:SocialObserver.for_roles",
]


def register_metric_observer(factory: Factory | str) -> None:
    """Add ``factory`` to the observers every stream builds (once)."""
    if not (callable(factory) or (isinstance(factory, str) and ":" in factory)):
        msg = f"a metric observer factory is a callable or 'module:attribute', got {factory!r}"
        raise TypeError(msg)
    if factory not in METRIC_OBSERVERS:
        METRIC_OBSERVERS.append(factory)


def _resolve(factory: Factory | str) -> Factory:
    if callable(factory):
        return factory
    module, _, path = factory.partition(":")
    out: Any = importlib.import_module(module)
    for attr in path.split("."):
        out = getattr(out, attr)
    return out


def build_metric_observers(
    vec: Any, groups: Sequence[PolicyGroup], scripted: dict[str, Any]
) -> list[MetricObserver]:
    """The observers of every registered factory that apply to ``vec``."""
    built = (_resolve(factory)(vec, groups, scripted) for factory in METRIC_OBSERVERS)
    return [observer for observer in built if observer is not None]
