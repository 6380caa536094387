"""Starting a run's learners from trained weights (``init_from=PATH``).

``PATH`` is a run directory (its newest checkpoint), one checkpoint file, or an exported agent
file (``experiments/experts/*.pt``). Each learner of the new run takes the network weights of
the saved learner of the same name, or of the file's only learner; its optimizer, counters,
schedules and RNG start fresh, as in any new run. The weights a learner class takes are the
entries its ``WEIGHTS`` class attribute names in its ``state_dict`` (``("net",)`` for the
network learners, the online and target Q-networks for DRQN). Weights of another shape raise
:class:`~marlgrid.agents.bookkeeping.checkpoint.CheckpointError` naming the first tensor that
differs, before anything is trained. Extra heads the saved network lacks (a loss term's head
added for the new run, such as ``next_reward``'s) keep their fresh initialisation; every other
weight must be in the saved file. A resumed run continues from its own checkpoint instead.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

from marlgrid.agents.bookkeeping.checkpoint import load_learners
from marlgrid.agents.bookkeeping.saved_run import SavedRun, SavedRunError
from marlgrid.agents.learner import Learner
from marlgrid.agents.training.roles import load_saved_state
from marlgrid.config import ConfigError


def saved_weights_file(target: str | Path) -> Path:
    """The checkpoint or exported file ``init_from`` names (a run directory: its newest)."""
    try:
        return SavedRun(target).checkpoint
    except SavedRunError as exc:
        raise ConfigError(f"init_from: {exc}") from None


#: where a network's state dict keeps its extra heads' weights
EXTRA_HEADS_PREFIX = "extra_heads."


def with_new_heads(saved: Any, current: Any) -> Any:
    """``saved`` (a network's state dict) plus the extra-head entries of ``current`` that it
    lacks (heads new in this run start as built); anything that is not a pair of state dicts
    is returned as saved."""
    if not isinstance(saved, Mapping) or not isinstance(current, Mapping):
        return saved
    new = {k: v for k, v in current.items() if k.startswith(EXTRA_HEADS_PREFIX) and k not in saved}
    return {**saved, **new} if new else saved


def warm_start(
    learners: Mapping[str, Learner],
    target: str | Path,
    env_settings: Mapping[str, Any] | None = None,
) -> dict[str, str]:
    """Load the saved network weights of ``target`` into ``learners`` (by name); returns, per
    learner started, the saved learner whose weights it took. ``env_settings``: this run's env
    settings, so that weights that do not fit can be told apart by the agents' ``extras``."""
    path = saved_weights_file(target)
    payload = load_learners(path)
    saved = payload["learners"]
    note = _extras_note(payload, env_settings)
    taken: dict[str, str] = {}
    for name, learner in learners.items():
        if name in saved:
            source = name
        elif len(saved) == 1:
            (source,) = saved
        else:
            raise ConfigError(
                f"init_from: {path} holds learners {sorted(saved)}, none named {name!r} (a "
                "file with one learner starts every learner of the run)"
            )
        keys = getattr(type(learner), "WEIGHTS", None)
        if not keys:
            raise ConfigError(
                f"init_from: learner {name!r} ({type(learner).__name__}) names no WEIGHTS, the "
                "state_dict entries that hold its networks"
            )
        state: dict[str, Any] = learner.state_dict()
        missing = [k for k in keys if k not in saved[source]]
        if missing:
            algo = dict(saved[source].get("config") or {}).get("algo", "?")
            held = sorted(k for k in saved[source] if k != "config")
            raise ConfigError(
                f"init_from: learner {source!r} of {path} has no {missing[0]!r}: it is a "
                f"{algo!r} learner (its entries are {held}), "
                f"and learner {name!r} of this run is a {type(learner).__name__}; init_from "
                "takes weights between learners of the same algorithm"
            )
        state.update({k: with_new_heads(saved[source][k], state[k]) for k in keys})
        load_saved_state(learner, state, f"init_from: learner {source!r} of {path} does not fit "
                         f"learner {name!r} of this run", note)  # fmt: skip
        taken[name] = source
    return taken


def _extras(settings: Mapping[str, Any] | None) -> list[str] | None:
    agent = dict(settings or {}).get("agent") or {}
    extras = agent.get("extras") if isinstance(agent, Mapping) else None
    return None if extras is None else list(extras)


def _extras_note(payload: Mapping[str, Any], env_settings: Mapping[str, Any] | None) -> str:
    """A note naming ``extras`` where the saved run's agents saw other extras than this run's
    (the usual reason for an input layer that does not fit); "" otherwise."""
    if env_settings is None:
        return ""
    saved = _extras(dict(payload.get("identity", {}).get("env", {})).get("settings"))
    here = _extras(env_settings)
    if (saved or []) == (here or []):
        return ""
    return (
        f" (its run's agents saw extras={saved or []}, this run's see extras={here or []}: give "
        f"env.settings.agent.extras={saved or []} to match it)"
    )
