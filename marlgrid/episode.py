"""One episode runner and one policy resolution for every front end.

:func:`resolve_policies` turns what a user passes into one policy per agent, :func:`policy_actions`
gives one step's actions and :func:`run_episode` plays one episode of a PettingZoo marlgrid env.
:mod:`marlgrid.viewing.video`, :mod:`marlgrid.viewing.record`, :mod:`marlgrid.viewing.play` and
:mod:`marlgrid.wrappers` all use them. A policy is one of:

* a **name** of a scripted policy (``random``, ``oracle``, ``discoverer``), resolved into a fresh
  instance per agent;
* a **scripted policy**: an object with ``scripted_actions(engine, k) -> (num_envs,) int``
  (:mod:`marlgrid.policies`); it reads the engine, not the observation;
* a **joint policy**: an object with ``reset()`` and ``actions(env, obs) -> {agent: action}``
  that acts for every agent mapped to it with one call per step (e.g. a learner group doing one
  forward for several agents). ``obs`` holds the observations of its live agents; ``reset()``
  is called after each ``env.reset``;
* a **callable** ``(obs, agent) -> action`` (or ``(obs) -> action``) from one agent's
  observation.

The kind is checked in that order, so an object is a scripted policy only if it has
``scripted_actions``: a learner's ``act`` never routes to the scripted call.
"""

from __future__ import annotations

import contextlib
import inspect
import weakref
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from marlgrid.config import check_int

Policy = Any  # a scripted policy name or object, a joint policy, or a callable (see above)

SCRIPTED, JOINT, CALLABLE = "scripted", "joint", "callable"


@dataclass(frozen=True)
class EpisodeResult:
    """What :func:`run_episode` returns: each agent's return and the steps played."""

    returns: dict[str, float]
    steps: int


def policy_kind(policy: Policy) -> str:
    """``scripted``, ``joint`` or ``callable``; anything else raises ``TypeError``."""
    if callable(getattr(policy, "scripted_actions", None)):
        return SCRIPTED
    if callable(getattr(policy, "actions", None)) and callable(getattr(policy, "reset", None)):
        return JOINT
    if callable(policy):
        return CALLABLE
    hint = ""
    if hasattr(policy, "act"):
        hint = "; scripted policies define scripted_actions(engine, k) (act is a learner's name)"
    raise TypeError(
        "a policy must be a scripted policy name, an object with scripted_actions(engine, k), "
        "an object with reset() and actions(env, obs), or a callable (obs, agent) -> action; "
        f"got {type(policy).__name__}{hint}"
    )


def resolve_policies(
    env: Any,
    spec: Policy | Mapping[str, Policy],
    agents: Sequence[str] | None = None,
    seed: int | None = None,
) -> dict[str, Policy]:
    """One policy per agent of ``agents`` (default: all of ``env``'s).

    ``spec`` is one policy for every agent or a dict agent -> policy. Names become fresh scripted
    policies, one instance per agent, the ``i``-th of ``agents`` seeded with ``seed + i`` (unseeded
    without ``seed``). Objects are used as they are. Raises ``ValueError`` for agents without a
    policy or unknown names and ``TypeError`` for objects that are no policy.
    """
    from marlgrid.policies import make_policy

    names = list(env.possible_agents if agents is None else agents)
    if isinstance(spec, Mapping):
        missing = [a for a in names if a not in spec]
        if missing:
            raise ValueError(f"no policy for {missing}")
        chosen = {a: spec[a] for a in names}
    else:
        chosen = dict.fromkeys(names, spec)
    if seed is not None:
        check_int("seed", seed, low=0)
    out: dict[str, Policy] = {}
    for i, (name, policy) in enumerate(chosen.items()):
        if isinstance(policy, str):
            policy = make_policy(policy, None if seed is None else seed + i)
        policy_kind(policy)
        out[name] = policy
    return out


_ARITY: weakref.WeakKeyDictionary[Any, int] = weakref.WeakKeyDictionary()


def _arity(fn: Callable) -> int:
    """2 if ``fn`` takes ``(obs, agent)``, else 1 (it takes the observation alone)."""
    try:
        return _ARITY[fn]
    except (KeyError, TypeError):
        pass
    try:
        params = inspect.signature(fn).parameters.values()
    except (TypeError, ValueError):  # no signature (a builtin): the documented two arguments
        n = 2
    else:
        positional = [p for p in params if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)]
        varargs = any(p.kind == p.VAR_POSITIONAL for p in params)
        n = 2 if varargs or len(positional) >= 2 else 1
    with contextlib.suppress(TypeError):  # not weak-referenceable: inspected again next time
        _ARITY[fn] = n
    return n


def _as_action(value: Any, agent: str) -> int:
    arr = np.asarray(value).reshape(-1)
    if arr.size != 1:
        raise ValueError(f"the policy of {agent} returned {value!r}, not one action")
    return int(arr[0])


def policy_actions(
    env: Any,
    policies: Mapping[str, Policy],
    obs: Mapping[str, Any],
    agents: Sequence[str] | None = None,
) -> dict[str, int]:
    """One step's actions of ``agents`` (default: ``env.agents``, the live ones).

    ``policies`` maps each agent to a resolved policy (see :func:`resolve_policies`); a joint
    policy is called once for all of its agents.
    """
    from marlgrid.policies import scripted_action

    live = list(env.agents if agents is None else agents)
    out: dict[str, int] = {}
    for agent in live:
        if agent in out:
            continue
        policy = policies[agent]
        kind = policy_kind(policy)
        if kind == SCRIPTED:
            out[agent] = scripted_action(policy, env, agent)
        elif kind == JOINT:
            members = [a for a in live if policies[a] is policy]
            acts = policy.actions(env, {a: obs[a] for a in members})
            missing = [a for a in members if a not in acts]
            if missing:
                name = type(policy).__name__
                raise ValueError(f"joint policy {name} gave no action for {missing}")
            out.update({a: _as_action(acts[a], a) for a in members})
        elif _arity(policy) == 2:
            out[agent] = _as_action(policy(obs[agent], agent), agent)
        else:
            out[agent] = _as_action(policy(obs[agent]), agent)
    return out


def policy_action(policy: Policy, env: Any, agent: str, obs: Any) -> int:
    """One action of ``policy`` for ``agent`` given its observation ``obs``."""
    return policy_actions(env, {agent: policy}, {agent: obs}, [agent])[agent]


def reset_joint(policies: Mapping[str, Policy]) -> None:
    """Call ``reset()`` once on every joint policy among ``policies``."""
    seen: set[int] = set()
    for policy in policies.values():
        if id(policy) not in seen and policy_kind(policy) == JOINT:
            seen.add(id(policy))
            policy.reset()


def run_episode(
    env: Any,
    policies: Policy | Mapping[str, Policy],
    seed: int | None = None,
    on_frame: Callable[[Any], None] | None = None,
    max_steps: int | None = None,
    options: dict[str, Any] | None = None,
) -> EpisodeResult:
    """Play one episode of a PettingZoo marlgrid env (or a wrapper of one).

    ``policies`` is resolved with :func:`resolve_policies` (names become unseeded policies; pass
    resolved ones to seed them). ``on_frame(env)`` runs after the reset and after every step
    (e.g. to render a video frame). The episode ends when no agent is left or after
    ``max_steps`` steps.
    """
    if max_steps is not None:
        max_steps = check_int("max_steps", max_steps, low=0)
    chosen = resolve_policies(env, policies)
    obs, _ = env.reset(seed=seed, options=options)
    reset_joint(chosen)
    if on_frame is not None:
        on_frame(env)
    returns = dict.fromkeys(env.possible_agents, 0.0)
    steps = 0
    while env.agents and (max_steps is None or steps < max_steps):
        obs, rewards, _, _, _ = env.step(policy_actions(env, chosen, obs))
        for agent, r in rewards.items():
            returns[agent] += float(r)
        steps += 1
        if on_frame is not None:
            on_frame(env)
    return EpisodeResult(returns, steps)
