"""Chance levels of the social metrics: what a novice that ignores the experts scores.

:func:`chance_levels` puts a uniformly random policy in the novice's slot beside the same
scripted experts and returns the novice's mean of every social metric of
:class:`marlgrid.metrics.social.SocialTracker`; :func:`social_levels` does the same for any scripted
novice (a ``follower``, an ``oracle``); :func:`against_chance` lays a measured value beside its
chance level. Scripted policies only (no torch); episodes run on a
:class:`marlgrid.vector.VectorEnv` exactly as the training rollout steps it.

Which control to use:

* **The time-shuffled control** (``repeat_<kind>_shuffled``, logged with every run by the
  tracker) comes from the very episodes of the agent under study: the experts' entries shifted
  in time against the agent's own. It keeps the agent's and the experts' rates of entering
  each tile and breaks only their timing, so ``repeat_<kind>_excess`` > 0 says the agent
  enters tiles *because* (or just after) the experts did. Use it to read the repeat metrics of
  any run, learner or scripted, at no extra cost. It exists for the repeat metrics only.
* **The random-novice control** (this module) needs a separate run but covers every metric
  (in view, distance, follow, repeat): it is what the map, the experts' presence and their
  pace give an agent that acts on nothing. Use it for the metrics without a shuffled control
  (``follow_*``, ``*_in_view``, ``*_distance``) and to say whether a number is above what
  wandering scores. A random walker moves less and enters fewer tiles than a trained novice,
  so it is a floor for "no policy", not for "a policy that ignores the experts": for
  following, prefer the shuffled control, which holds the novice's own movement fixed.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from marlgrid.config import ConfigError, check_int
from marlgrid.metrics.following import DEFAULT_REPEAT_WINDOW, DEFAULT_TRAIL_WINDOW
from marlgrid.metrics.social import DEFAULT_WINDOW, SocialTracker
from marlgrid.policies import ScriptedPolicy, make_policy
from marlgrid.registry import make_vec

PolicySpec = ScriptedPolicy | str


def play_scripted(
    env_id: str,
    settings: Mapping[str, Any] | None,
    policies: Mapping[str, PolicySpec],
    experts: Sequence[str],
    episodes: int = 64,
    seed: int = 0,
    num_envs: int = 16,
    window: int = DEFAULT_WINDOW,
    repeat_window: int = DEFAULT_REPEAT_WINDOW,
    order_lag: int | None = None,
    trail_window: int = DEFAULT_TRAIL_WINDOW,
) -> tuple[dict[str, np.ndarray], list[str]]:
    """Every social metric ``(episodes, K)`` of scripted ``policies`` (agent id -> policy or
    policy name, seeded with ``seed``) playing ``episodes`` episodes of ``env_id`` with
    ``settings``; ``experts``: the agents the ``expert_*`` metrics refer to. Returns the rows
    and the agent ids (the columns). The first ``episodes`` episodes to end are kept: where
    episodes differ in length that leans toward short ones (goal-cycle episodes all last
    ``max_steps``, so there it does not)."""
    episodes = check_int("episodes", episodes, low=1)
    num_envs = check_int("num_envs", num_envs, low=1)
    seed = check_int("seed", seed, low=0)
    vec = make_vec(env_id, num_envs, **dict(settings or {}))
    agents = list(vec.possible_agents)
    missing = [a for a in agents if a not in policies]
    unknown = sorted(set(policies) - set(agents))
    if missing or unknown:
        raise ConfigError(
            f"policies must give one policy for each agent of {env_id} ({agents}); "
            f"missing {missing}, unknown {unknown}"
        )
    bad = sorted(set(experts) - set(agents))
    if bad:
        raise ConfigError(f"experts {bad} are not agents of {env_id}; agents are {agents}")
    scripted = [
        make_policy(p, seed + k) if isinstance(p, str) else p
        for k, p in enumerate(policies[a] for a in agents)
    ]
    tracker = SocialTracker.for_engine(
        vec.engine, [agents.index(a) for a in experts], window, repeat_window, order_lag,
        trail_window,
    )  # fmt: skip
    vec.reset(seed=seed)
    actions = np.zeros((num_envs, len(agents)), dtype=np.int64)
    rows: dict[str, list[np.ndarray]] = {name: [] for name in tracker.names}
    done = 0
    while done < episodes:
        for k, policy in enumerate(scripted):
            actions[:, k] = policy.scripted_actions(vec.engine, k)
        tracker.observe(vec.engine)
        _, rewards, _, _, infos = vec.step(actions)
        tracker.record(vec.engine, actions, rewards, infos.get("_episode"))
        if "_episode" in infos:
            ended = tracker.pop()
            for name, values in ended.items():
                rows[name].append(values)
            done += len(ended["return"])
    return {name: np.concatenate(v)[:episodes] for name, v in rows.items()}, agents


def social_levels(
    env_id: str,
    settings: Mapping[str, Any] | None,
    experts: Mapping[str, PolicySpec],
    novice_policy: PolicySpec,
    novice: str = "agent_0",
    episodes: int = 64,
    seed: int = 0,
    **options: Any,
) -> dict[str, float]:
    """The ``novice``'s mean of every social metric with ``novice_policy`` in its slot beside
    ``experts`` (agent id -> scripted policy or name; every other agent of the env), over
    ``episodes`` episodes (NaN episodes left out). ``options``: ``num_envs``, ``window``,
    ``repeat_window``, ``order_lag``, ``trail_window`` of :func:`play_scripted`."""
    if novice in experts:
        raise ConfigError(f"novice {novice!r} is also among the experts {sorted(experts)}")
    policies = {**experts, novice: novice_policy}
    rows, agents = play_scripted(
        env_id, settings, policies, list(experts), episodes, seed, **options
    )
    column = agents.index(novice)
    return {name: _nanmean(values[:, column]) for name, values in rows.items()}


def chance_levels(
    env_id: str,
    settings: Mapping[str, Any] | None,
    experts: Mapping[str, PolicySpec],
    novice: str = "agent_0",
    episodes: int = 64,
    seed: int = 0,
    **options: Any,
) -> dict[str, float]:
    """Every social metric's chance level: :func:`social_levels` of a uniformly random policy
    (seeded with ``seed``) in the ``novice``'s slot beside the same ``experts``.

    ``chance_levels("MarlGrid-GoalCycle-13x13-3Agents-v0", {"size": 7, "max_steps": 100},
    {"agent_1": "oracle", "agent_2": "oracle"})`` is the chance of the small-scale
    novice-with-experts preset. See the module docstring for when to prefer the shuffled control.
    """
    random_policy = make_policy("random", seed)
    return social_levels(
        env_id, settings, experts, random_policy, novice, episodes, seed, **options
    )


def against_chance(measured: Mapping[str, float], chance: Mapping[str, float]) -> dict[str, float]:
    """For each metric of both: ``<metric>``, ``<metric>_chance`` and ``<metric>_minus_chance``
    (the measured value less its chance level)."""
    out: dict[str, float] = {}
    for name in (n for n in measured if n in chance):
        value, level = float(measured[name]), float(chance[name])
        out[name], out[f"{name}_chance"] = value, level
        out[f"{name}_minus_chance"] = value - level
    return out


def _nanmean(values: np.ndarray) -> float:
    kept = values[~np.isnan(values)]
    return float(kept.mean()) if kept.size else math.nan
