"""Zero-shot transfer: a saved run's trained agent, frozen, playing an env it never trained in.

:func:`evaluate_transfer` loads the learner of one trained agent of a
:class:`~marlgrid.agents.bookkeeping.saved_run.SavedRun` (greedy or sampled, never training) and
plays it as ``role`` (default ``agent_0``) of ``target_env_id``, the other agents being scripted
``partners`` (:data:`marlgrid.policies.POLICIES` names) or absent: with no partners the target is
the same map with only the saved agent (``n_agents=1``; for the registered pairs this is the
1-agent id, e.g. ``MarlGrid-FourRooms-v0`` for ``MarlGrid-FourRooms-3Agents-v0``).

**Observation settings are carried over.** Each target agent gets the training env's resolved
agent settings (:class:`~marlgrid.config.AgentConfig`: view size and offset, observation kind,
tile size, ``hide``, ``extras``, action restriction, colour, prestige): the saved agent its own,
a partner those of the same agent number in training. The target's registered agent settings
give way to them. What cannot fit raises :class:`~marlgrid.config.ConfigError` before anything
runs, naming the setting and both values: target settings that ask another value of a carried
setting, a run or target that is not a marlgrid env, or an observation space that still differs
(the ``position`` extra's range follows the map size).

**Results** (:func:`evaluate_transfer` rows, one per condition and metric, each with ``mean``,
a Student-t 95% interval ``low``/``high`` over episodes and ``n``, the episodes with a value):
``return``, ``rewards`` and ``penalties`` (the sums of the saved agent's positive and negative
rewards per episode, so ``return = rewards + penalties``), ``length`` (env steps per episode)
and the saved agent's :mod:`marlgrid.metrics.social` metrics under their
:func:`marlgrid.metrics.social.summarize` keys (``social/rewards``, ``social/penalties``:
counts; ``social/expert_in_view``, ...; experts are the partners whose policy ``is_expert``).
Each env of the batch plays a fixed quota of episodes, so short episodes are not over-counted.
:data:`CONDITIONS` holds named sets of conditions (``social_transfer``);
``experiments/evaluate.py --transfer`` is the command line (it writes the rows as CSV or
markdown).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

import marlgrid
from marlgrid.agents.bookkeeping.logger import evaluation_bar
from marlgrid.agents.bookkeeping.saved_run import RunPolicies, SavedRun
from marlgrid.agents.bookkeeping.transfer_conditions import (  # noqa: F401  (re-exported)
    ALONE,
    CONDITIONS,
    TransferCondition,
    partners_from_text,
)
from marlgrid.agents.training.env_sources import is_marlgrid_id, make_env_source
from marlgrid.agents.training.rollout import MultiAgentRollout, PolicyGroup
from marlgrid.analysis.stats import t_interval
from marlgrid.base import observation_space_for
from marlgrid.config import AgentConfig, ConfigError
from marlgrid.metrics.social import SocialTracker
from marlgrid.policies import POLICIES, make_policy
from marlgrid.registry import spec

#: agent settings carried from the checkpoint's training env into the target env
CARRIED = (
    "view_size", "view_offset", "observation", "tile_size", "hide", "extras",
    "restrict_actions", "see_through_walls", "color", "prestige_beta", "prestige_scale",
)  # fmt: skip
# -- carrying the observation settings over ----------------------------------------------------


def _trained_env(policies: RunPolicies, target_env_id: str) -> Any:
    """The run's training env (a PettingZoo env, never reset) for its resolved agent settings."""
    train_id = policies.cfg.env.id
    if not is_marlgrid_id(train_id):
        raise ConfigError(
            f"the run trained on {train_id!r}, not a marlgrid env: its observations have no "
            f"marlgrid agent settings ({', '.join(CARRIED[:6])}) to carry to {target_env_id}"
        )
    return marlgrid.make(train_id, **policies.settings)


def _carried(cfg: AgentConfig) -> dict[str, Any]:
    return {name: getattr(cfg, name) for name in CARRIED}


def target_agent_settings(
    trained: list[AgentConfig],
    source: int,
    role: int,
    n_agents: int,
    asked: Mapping[str, Any] | None,
    target_env_id: str,
) -> list[AgentConfig]:
    """Agent settings of the target's ``n_agents`` agents: ``role`` gets the saved agent's
    (``trained[source]``), agent ``j`` those of training agent ``j`` (or of ``source`` beyond
    the trained agents, coloured by ``j``). ``asked`` (the target's ``agent`` setting) may set
    what is not carried; a carried setting asked with another value raises."""
    own, asked = _carried(trained[source]), dict(asked or {})
    wanted = AgentConfig.build(asked, None)  # validated, normalised (lists as tuples)
    for name, value in asked.items():
        if name in CARRIED and getattr(wanted, name) != own[name] and value is not None:
            raise ConfigError(
                f"agent.{name}: the target {target_env_id} is asked for {getattr(wanted, name)!r} "
                f"but the network was trained with {name}={own[name]!r}; a saved network sees "
                "only what it was trained on, so this setting is carried from the checkpoint "
                f"(leave agent.{name} out of the target settings)"
            )
    others = AgentConfig.build({k: v for k, v in asked.items() if k not in CARRIED}, None)
    uncarried = {k: getattr(others, k) for k in asked if k not in CARRIED}  # for every agent
    out = []
    for j in range(n_agents):
        if j == role:
            base = trained[source]
        elif j < len(trained):
            base = trained[j]
        else:
            base = dataclasses.replace(trained[source], color=None).with_default_color(j)
        out.append(dataclasses.replace(base, **uncarried))
    return out


def _entries(space: Any) -> dict[str, Any]:
    """An observation space by entry (a bare view is the ``image`` entry)."""
    return dict(space.spaces) if hasattr(space, "spaces") else {"image": space}


def _check_spaces(
    learner: Any, trained_space: Any, vec: Any, role: str, target_env_id: str, train_id: str
) -> None:
    """Raise naming the observation entry (and so the setting) that differs from the network's."""
    want = getattr(learner, "observation_space", None) or trained_space
    got = vec.single_observation_space(role)
    if got == want:
        return
    w, g = _entries(want), _entries(got)
    detail = f"the network takes {want}, the target gives {got}"
    for key in sorted(set(w) | set(g)):
        if w.get(key) != g.get(key):
            setting = "view_size / observation / tile_size" if key == "image" else "extras"
            detail = (
                f"setting {setting}: observation entry {key!r} is {w.get(key)} in {train_id} "
                f"(the network's) but {g.get(key)} in {target_env_id}"
            )
            if key == "position":
                detail += " (the position extra's range follows the map size)"
            break
    raise ConfigError(
        f"the saved network cannot play {role} of {target_env_id}: {detail}; it can only play "
        "an env whose observation space equals the one it was trained on"
    )


# -- episodes ----------------------------------------------------------------------------------


class _EpisodeLog:
    """A rollout observer: per ended episode (up to a quota per env), the saved agent's reward
    sums, the episode length and its social metrics."""

    def __init__(self, vec: Any, column: int, experts: list[int], quotas: np.ndarray) -> None:
        self.column, self.quotas = column, quotas
        self.tracker = SocialTracker.for_engine(vec.engine, experts)
        self.counts = np.zeros(vec.num_envs, dtype=np.int64)
        self.positive = np.zeros(vec.num_envs)
        self.negative = np.zeros(vec.num_envs)
        self.values: dict[str, list[float]] = {}

    @property
    def done(self) -> bool:
        return bool((self.counts >= self.quotas).all())

    def before_step(self, vec: Any, actions: np.ndarray) -> None:
        self.tracker.observe(vec.engine)

    def after_step(
        self, vec: Any, actions: np.ndarray, rewards: np.ndarray, infos: dict[str, Any]
    ) -> None:
        ended = infos.get("_episode")
        self.tracker.record(vec.engine, actions, rewards, ended)
        r = rewards[:, self.column]
        self.positive += np.maximum(r, 0.0)
        self.negative += np.minimum(r, 0.0)
        if ended is None or not ended.any():
            return
        envs = np.flatnonzero(ended)
        social = self.tracker.pop()  # rows in the order of ``envs``
        lengths = np.asarray(infos["episode"]["l"])
        for i, n in enumerate(envs):
            if self.counts[n] < self.quotas[n]:
                self.counts[n] += 1
                self._add("rewards", self.positive[n])
                self._add("penalties", self.negative[n])
                self._add("length", lengths[n])
                for name, rows in social.items():
                    self._add(f"social/{name}", rows[i, self.column])
        self.positive[envs] = 0.0
        self.negative[envs] = 0.0

    def _add(self, name: str, value: float) -> None:
        self.values.setdefault(name, []).append(float(value))

    def per_episode(self) -> dict[str, np.ndarray]:
        """Each metric's value per episode (NaN where it has none), ``return`` first."""
        v = {k: np.asarray(x) for k, x in self.values.items()}
        social = {k: x for k, x in v.items() if k.startswith("social/") and k != "social/return"}
        return {"return": v["social/return"], "rewards": v["rewards"],
                "penalties": v["penalties"], "length": v["length"], **social}  # fmt: skip


def _quotas(episodes: int, num_envs: int) -> np.ndarray:
    """Episodes per env, fixed in advance: ``episodes`` spread as evenly as possible."""
    quotas = np.full(num_envs, episodes // num_envs, dtype=np.int64)
    quotas[: episodes % num_envs] += 1
    return quotas


def _map_label(width: int, height: int, rules: Any) -> str:
    """A map as the tables name it: ``7x7, 100 steps`` (and ``, 3 tiles`` in a goal cycle)."""
    tiles = f", {rules.n_goals} tiles" if getattr(rules, "n_goals", 0) else ""
    return f"{width}x{height}, {rules.max_steps} steps{tiles}"


@dataclass
class TransferSetup:
    """A checked condition, ready to play (:func:`prepare_transfer`)."""

    labels: dict[str, Any]  # the table's condition columns
    vec: Any
    player: PolicyGroup
    scripted: dict[str, Any]
    experts: list[int]
    column: int
    quotas: np.ndarray
    seed: int


def _check_agents(
    target_env_id: str, settings: Mapping[str, Any], partners: Mapping[str, str], role: str
) -> list[str]:
    """The target's agent ids (``role`` and the partners'); bad requests raise."""
    if not is_marlgrid_id(target_env_id):
        raise ConfigError(
            f"target {target_env_id!r} is not a marlgrid env: the checkpoint's agent settings "
            f"({', '.join(CARRIED[:6])}) cannot be given to it"
        )
    spec(target_env_id)  # an unknown id raises, naming the closest
    for key in ("n_agents", "agents"):
        if key in settings:
            raise ConfigError(
                f"target setting {key!r}: the agents are set by the role and the partners "
                f"(role {role!r}, partners {dict(partners) or 'none'}), not by {key}"
            )
    ids = [f"agent_{j}" for j in range(1 + len(partners))]
    if role not in ids or sorted(partners) != sorted(a for a in ids if a != role):
        raise ConfigError(
            f"role {role!r} and partners {sorted(partners)} must be the agents {ids} of the "
            "target, each once (partners are numbered agent_0.. skipping the role)"
        )
    for agent, name in partners.items():
        if name not in POLICIES:
            raise ConfigError(
                f"partner {agent}: unknown policy {name!r}; choose from {sorted(POLICIES)}"
            )
    return ids


def prepare_transfer(
    policies: RunPolicies,
    target_env_id: str,
    env_settings: Mapping[str, Any] | None = None,
    partners: Mapping[str, str] | None = None,
    episodes: int = 100,
    seed: int = 12345,
    *,
    role: str = "agent_0",
    source_agent: str | None = None,
    num_envs: int = 16,
    condition: str | None = None,
) -> TransferSetup:
    """Check one condition and build its env batch and players (arguments as for
    :func:`evaluate_transfer`; ``policies`` from :meth:`SavedRun.policies`)."""
    if isinstance(episodes, bool) or not isinstance(episodes, int) or episodes < 1:
        raise ConfigError(f"episodes must be an integer >= 1, got {episodes!r}")
    partners, settings = dict(partners or {}), dict(env_settings or {})
    ids = _check_agents(target_env_id, settings, partners, role)
    learners = [policies.agents[k] for k in policies.learner_columns]
    source = learners[0] if source_agent is None else source_agent
    if source not in learners:
        raise ConfigError(
            f"source_agent must be a trained agent of the run {learners}, got {source!r}"
        )
    group = next(g for g in policies.groups if source in g.agents)
    trained = _trained_env(policies, target_env_id)
    k_src, column = policies.agents.index(source), ids.index(role)
    settings["agents"] = target_agent_settings(
        trained.agent_configs, k_src, column, len(ids), settings.pop("agent", None), target_env_id
    )
    vec = make_env_source(target_env_id, min(num_envs, episodes), settings)
    trained_space = observation_space_for(
        trained.agent_configs[k_src], trained.width, trained.height
    )
    _check_spaces(group.learner, trained_space, vec, role, target_env_id, policies.cfg.env.id)
    if vec.single_action_space(role) != trained.action_space(source):
        raise ConfigError(
            f"setting restrict_actions: {role} of {target_env_id} has actions "
            f"{vec.single_action_space(role)}, the network {trained.action_space(source)}"
        )
    greedy = not group.explore
    player = PolicyGroup(group.name, group.learner, [role], train=False, explore=group.explore)
    # each partner its own random streams (as chance.play_scripted: seed + agent index)
    scripted = {a: make_policy(name, seed=seed + ids.index(a)) for a, name in partners.items()}
    experts = [ids.index(a) for a, p in scripted.items() if getattr(p, "is_expert", False)]
    label = ", ".join(f"{a}={p}" for a, p in sorted(partners.items())) or "alone"
    engine = vec.engine
    here = _map_label(engine.grid.shape[1], engine.grid.shape[2], engine.rules)
    trained_map = _map_label(trained.width, trained.height, trained.rules)
    labels = {
        "condition": condition or f"{target_env_id}/{label}",
        "target": target_env_id,
        "map": here,
        "trained_map": trained_map,
        "partners": label,
        "role": role,
        "greedy": greedy,
        "checkpoint": str(policies.checkpoint),
    }
    quotas = _quotas(episodes, vec.num_envs)
    return TransferSetup(labels, vec, player, scripted, experts, column, quotas, seed)


def play_transfer(setup: TransferSetup) -> list[dict[str, Any]]:
    """Play a prepared condition to its episode quotas; its table rows."""
    learner = setup.player.learner
    if hasattr(learner, "generator"):  # sampled actions: seeded like the envs
        learner.generator.manual_seed(setup.seed)
    log = _EpisodeLog(setup.vec, setup.column, setup.experts, setup.quotas)
    rollout = MultiAgentRollout(
        setup.vec, [setup.player], setup.scripted, seed=setup.seed, observers=[log]
    )
    while not log.done:
        rollout.collect(16)
    return summary_rows(log.per_episode(), setup.labels)


def evaluate_transfer(
    run: SavedRun | str | Path,
    target_env_id: str,
    env_settings: Mapping[str, Any] | None = None,
    partners: Mapping[str, str] | None = None,
    episodes: int = 100,
    seed: int = 12345,
    greedy: bool = True,
    **kwargs: Any,
) -> list[dict[str, Any]]:
    """Table rows (see the module docstring) of ``episodes`` episodes of the saved agent in
    ``target_env_id`` (its registered settings updated with ``env_settings``; agent
    observation settings carried from the checkpoint) as ``role`` beside ``partners``.

    Keyword options: ``role`` (default ``agent_0``), ``source_agent`` (the training agent whose
    learner plays; default the run's first trained agent), ``num_envs`` (16), ``condition`` (the
    rows' label). Episodes run on fresh layouts seeded from ``seed``; ``greedy`` takes the
    likeliest action, else actions are sampled (seeded from ``seed`` too).
    """
    run = run if isinstance(run, SavedRun) else SavedRun(run)
    policies = run.policies(greedy=greedy)
    setup = prepare_transfer(
        policies, target_env_id, env_settings, partners, episodes, seed, **kwargs
    )
    return play_transfer(setup)


def summary_rows(
    per_episode: Mapping[str, np.ndarray], base: Mapping[str, Any]
) -> list[dict[str, Any]]:
    """One row per metric: ``base`` plus the metric's mean over the episodes with a value (NaN
    with none, as :func:`marlgrid.metrics.social.summarize`), Student-t 95% interval and their
    ``n``."""
    rows = []
    for name, values in per_episode.items():
        kept = np.asarray(values, dtype=np.float64)
        kept = kept[~np.isnan(kept)]
        low, high = t_interval(kept)
        mean = float(kept.mean()) if kept.size else float("nan")
        rows.append({**base, "metric": name, "mean": mean, "low": low, "high": high,
                     "n": int(kept.size)})  # fmt: skip
    return rows


def run_conditions(
    run: SavedRun | str | Path,
    conditions: Sequence[TransferCondition],
    episodes: int,
    seed: int,
    greedy: bool,
    env_settings: Mapping[str, Any] | None = None,
    **kwargs: Any,
) -> list[dict[str, Any]]:
    """:func:`evaluate_transfer` rows of every condition, all checked before any plays."""
    run = run if isinstance(run, SavedRun) else SavedRun(run)
    policies = run.policies(greedy=greedy)
    setups = []
    for c in conditions:
        settings = {**(env_settings or {}), **c.settings}
        setups.append(prepare_transfer(policies, c.target, settings, c.partners, episodes, seed,
                                       condition=c.name, **kwargs))  # fmt: skip
    bar = evaluation_bar("transfer conditions", len(setups), unit="condition")
    rows = []
    for setup in setups:
        rows += play_transfer(setup)
        if bar is not None:
            bar.update(1)
    if bar is not None:
        bar.close()
    return rows
