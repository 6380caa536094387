"""The one rollout loop: any mix of learners, frozen and scripted policies on a batched env.

Each agent id maps to a role: a **learner** group (a :class:`~marlgrid.agents.learner.Learner`
acting for one or several agent ids: parameter sharing), a **frozen** group (a learner that acts
but does not record or learn) or a **scripted** policy (``random``, ``oracle``, ``discoverer``).

A group's batch slots are its (env, agent) pairs, slot ``n * J + j`` for env ``n`` and its
``j``-th agent, so one forward per step serves all of them. The group passes ``resets`` (the
observation starts an episode: termination, truncation, or its env's reset) to the learner, whose
memory core resets those slots; nothing here touches a memory state.

An agent out of play (terminated without respawn while its env plays on, or waiting to spawn)
keeps its slot: the slot is stepped with blank views and zero reward, and its steps are recorded
as not valid, so losses leave them out.

Any gymnasium-style batched env (batch-first arrays, same-step autoreset with
``infos["final_obs"]``) runs through :class:`SingleAgentBatch`, which presents it as a one-agent
:class:`~marlgrid.vector.VectorEnv`.

Extension points:

- **Observers** (:class:`StepObserver`) see every step before and after the env steps it (the
  social metrics of :mod:`marlgrid.agents.training.social_observer` are one); the rollout
  knows nothing of what they measure.
- **Teacher signals**: a learner with a ``teachers`` attribute (agent ids) receives those
  agents' actions and observations in each :class:`~marlgrid.agents.learner.Step`
  (:attr:`~marlgrid.agents.learner.Step.teachers`); scripted, frozen or learning agents alike.
- **Recorders**: a group's steps go to its learner's ``record``, or to ``recorder`` when one
  is set (the trainer joins the groups of one learner in several env streams that way).
- **Step editors** (:class:`StepEditor`) change the env between steps, after the observers saw
  a step and before the groups record it, and return what the groups then see (expert dropout
  of :mod:`marlgrid.agents.training.mixing` removes agents that way).

An observer, in full::

    class CountRewards:
        def __init__(self) -> None:
            self.paid = 0

        def before_step(self, vec, actions) -> None:
            pass

        def after_step(self, vec, actions, rewards, infos) -> None:
            self.paid += int((rewards > 0).sum())

    rollout = MultiAgentRollout(vec, groups, scripted, seed=0, observers=[CountRewards()])
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

import numpy as np
import torch
from gymnasium import spaces
from torch import Tensor

from marlgrid.agents.arrays import Obs, final_obs_rows, obs_repeat, obs_to_tensor
from marlgrid.agents.learner import NO_TEACHERS, Learner, Step, Teacher
from marlgrid.agents.networks.models import env_actions
from marlgrid.vector import stack_agents as slot_obs

__all__ = [
    "BatchedEnv",
    "MultiAgentRollout",
    "PolicyGroup",
    "SingleAgentBatch",
    "StepEditor",
    "StepObserver",
    "slot_obs",
]


class BatchedEnv(Protocol):
    """A gymnasium-style batch of single-agent envs.

    ``reset(seed)`` returns observations, batch first (an array or a dict of arrays), or
    ``(obs, infos)``. ``step(actions (B,))`` returns ``obs, rewards, terminations, truncations,
    infos`` with same-step autoreset: where a slot's episode ended, ``obs`` already starts the next
    one and ``infos["final_obs"]`` holds the true last observation, valid where
    ``infos["_final_obs"]`` (only needed for truncations).
    """

    num_envs: int
    single_observation_space: spaces.Space
    single_action_space: spaces.Space

    def reset(self, seed: int | None = None) -> Any: ...

    def step(self, actions: np.ndarray) -> tuple[Any, Any, Any, Any, dict[str, Any]]: ...


class StepObserver(Protocol):
    """Sees every step of a :class:`MultiAgentRollout`: ``before_step`` once the actions are
    chosen (the env still shows the state they were chosen in), ``after_step`` once the env
    stepped (``rewards`` ``(N, K)``, ``infos`` as the env returned them)."""

    def before_step(self, vec: Any, actions: np.ndarray) -> None: ...

    def after_step(
        self, vec: Any, actions: np.ndarray, rewards: np.ndarray, infos: dict[str, Any]
    ) -> None: ...


class StepEditor(Protocol):
    """Changes a :class:`MultiAgentRollout`'s env once a step is made (and its observers saw
    it): ``after_step`` gets the step's observations and infos and returns those the groups
    record and act on next (e.g. with agents removed: new ``infos["active"]``)."""

    def after_step(
        self, vec: Any, obs: dict[str, Any], infos: dict[str, Any]
    ) -> tuple[dict[str, Any], dict[str, Any]]: ...


class SingleAgentBatch:
    """A :class:`BatchedEnv` seen as a one-agent :class:`~marlgrid.vector.VectorEnv`.

    ``MultiDiscrete`` actions arrive as one index per joint action and reach the env as rows of
    branch actions (:func:`~marlgrid.agents.networks.env_actions`).
    """

    agent = "agent_0"

    def __init__(self, envs: BatchedEnv) -> None:
        self.envs = envs
        self.num_envs = envs.num_envs
        self.possible_agents = [self.agent]
        self.num_agents = 1
        self._returns = np.zeros((self.num_envs, 1))
        self._lengths = np.zeros(self.num_envs, dtype=np.int64)

    def single_observation_space(self, agent: str) -> spaces.Space:
        return self.envs.single_observation_space

    def single_action_space(self, agent: str) -> spaces.Space:
        return self.envs.single_action_space

    def reset(self, seed: int | None = None) -> tuple[dict[str, Any], dict[str, Any]]:
        obs = self.envs.reset(seed=seed)
        if isinstance(obs, tuple) and len(obs) == 2 and isinstance(obs[1], dict):
            obs = obs[0]  # gymnasium-style (obs, infos)
        self._returns[:] = 0.0
        self._lengths[:] = 0
        return {self.agent: obs}, {"active": np.ones((self.num_envs, 1), dtype=bool)}

    def step(self, actions: np.ndarray):
        actions = env_actions(np.asarray(actions)[:, 0], self.envs.single_action_space)
        obs, rewards, terms, truncs, infos = self.envs.step(actions)
        col = lambda x, dtype: np.asarray(x, dtype=dtype).reshape(-1, 1)  # noqa: E731
        rewards, terms, truncs = col(rewards, np.float32), col(terms, bool), col(truncs, bool)
        self._returns += rewards
        self._lengths += 1
        done = (terms | truncs)[:, 0]
        out: dict[str, Any] = {"active": np.ones((self.num_envs, 1), dtype=bool)}
        if done.any():
            out["episode"] = {"r": self._returns.copy(), "l": self._lengths.copy()}
            out["_episode"] = done
            self._returns[done] = 0.0
            self._lengths[done] = 0
        boot = np.flatnonzero((truncs & ~terms)[:, 0])
        if len(boot):
            if "final_obs" not in infos or not np.all(np.asarray(infos["_final_obs"])[boot]):
                raise ValueError("truncations need infos['final_obs'] and infos['_final_obs']")
            out["final_rows"] = boot
            out["final_obs"] = {self.agent: final_obs_rows(infos["final_obs"], boot)}
        return {self.agent: obs}, rewards, terms, truncs, out


@dataclass
class PolicyGroup:
    """A learner acting for some agent ids, with its per-slot memory.

    ``train``: record steps and learn (a learner role); otherwise it only acts (frozen).
    ``explore``: sample / explore, else act greedily. ``recorder``: where recorded steps go
    (default: the learner's ``record``; the learner's storage is then made by :meth:`begin`).
    """

    name: str
    learner: Learner
    agents: list[str]
    train: bool = True
    explore: bool = True
    recorder: Callable[[Step], None] | None = None

    @property
    def teachers(self) -> tuple[str, ...]:
        """Agent ids whose steps this group's learner asks for (none unless it trains)."""
        return tuple(getattr(self.learner, "teachers", ())) if self.train else ()

    def begin(self, obs: dict[str, Any], num_envs: int, active: np.ndarray | None = None) -> None:
        """Start from fresh episodes with observations ``obs`` (``active``: ``(N, J)`` in play)."""
        device = self.learner.device
        slots = num_envs * len(self.agents)
        self.active = torch.ones(slots, dtype=torch.bool, device=device)
        if active is not None:
            self.active = torch.as_tensor(active.reshape(-1), device=device)
        self.obs: Obs = obs_to_tensor(slot_obs(obs, self.agents), device)
        self.state = self.learner.initial_state(slots)
        self.resets = torch.ones(slots, dtype=torch.bool, device=device)
        self._last: Any = None
        if self.train and self.recorder is None and getattr(self, "_begun", None) != slots:
            self.learner.begin(slots)
            self._begun = slots

    def restart(self, obs: dict[str, Any], resets: Any) -> None:
        """Act next on observations ``obs`` (per agent, batch first), the slots where ``resets``
        is set starting new episodes: for callers that step an env themselves."""
        device = self.learner.device
        self.resets = torch.as_tensor(np.asarray(resets, dtype=bool).reshape(-1), device=device)
        self.obs = obs_to_tensor(slot_obs(obs, self.agents), device)

    def act(self) -> np.ndarray:
        """Actions ``(N, J)`` for this group's agents."""
        out = self.learner.act(self.obs, self.state, self.resets, explore=self.explore)
        self._last = (self.learner.reset_state(self.state, self.resets), out)  # Step.state
        self.state = out.state
        env_actions = out.actions.cpu().numpy() + self.learner.action_start
        return env_actions.reshape(-1, len(self.agents))

    def record(
        self,
        next_obs: dict[str, Any],
        rewards: np.ndarray,
        terminations: np.ndarray,
        truncations: np.ndarray,
        infos: dict[str, Any],
        index: list[int],
        teachers: dict[str, Teacher] | None = None,
    ) -> None:
        """Take in the step just made (rewards etc. are ``(N, K)``; ``index`` picks columns;
        ``teachers``: the signals the learner asked for, per slot)."""
        device = self.learner.device
        J = len(index)
        rew = rewards[:, index].reshape(-1)
        term = terminations[:, index].reshape(-1)
        trunc = truncations[:, index].reshape(-1)
        # An env reset ends every slot of that env. Slots whose agent finished earlier (idle,
        # blank views, zero reward) close their idle stretch as a termination, so neither
        # memory nor advantages run into the new episode.
        env_reset = np.repeat(infos.get("_final_obs", np.zeros(len(rewards), bool)), J)
        term = term | (env_reset & ~trunc)
        obs = obs_to_tensor(slot_obs(next_obs, self.agents), device)
        resets = torch.as_tensor(term | trunc, device=device)
        if self.train:
            state, out = self._last
            ids, final = self._finals(infos, trunc & ~term)
            (self.recorder or self.learner.record)(
                Step(
                    obs=self.obs,
                    resets=self.resets,
                    state=state,
                    actions=out.actions,
                    extras=out.extras,
                    rewards=torch.as_tensor(rew, dtype=torch.float32, device=device),
                    terminations=torch.as_tensor(term, device=device),
                    truncations=torch.as_tensor(trunc, device=device),
                    valid=self.active,  # steps taken out of play are left out of the losses
                    next_obs=obs,
                    next_state=out.state,
                    final_ids=torch.as_tensor(ids, dtype=torch.long, device=device),
                    final_obs=final,
                    teachers=teachers or NO_TEACHERS,
                    respawned=_slot_flags(infos, "respawned", index, device),
                )
            )
        self.resets = resets
        self.active = torch.as_tensor(infos["active"][:, index].reshape(-1), device=device)
        self.obs = obs

    def _finals(self, infos: dict[str, Any], boot: np.ndarray) -> tuple[np.ndarray, Obs | None]:
        """Slots truncated (not terminated) this step and their true last observations."""
        ids = np.flatnonzero(boot)
        if not len(ids):
            return ids, None
        final = infos["final_obs"]
        if "final_rows" in infos:  # SingleAgentBatch: final_obs holds only the truncated rows
            rows = {int(r): i for i, r in enumerate(infos["final_rows"])}
            picked = final_obs_rows(final[self.agents[0]], np.array([rows[i] for i in ids]))
        else:
            picked = final_obs_rows(slot_obs(final, self.agents), ids)
        return ids, obs_to_tensor(picked, self.learner.device)


def _slot_flags(infos: dict[str, Any], key: str, index: list[int], device: Any) -> Tensor | None:
    """``infos[key]`` ``(N, K)`` as per-slot flags of the columns ``index``, None without it."""
    flags = infos.get(key)
    return None if flags is None else torch.as_tensor(flags[:, index].reshape(-1), device=device)


class MultiAgentRollout:
    """Steps a :class:`~marlgrid.vector.VectorEnv` (or :class:`SingleAgentBatch`) for every group
    and scripted policy at once; learner groups record each step.

    ``observers`` (:class:`StepObserver`) see every step; ``editors`` (:class:`StepEditor`)
    change the env after it; learners that ask for ``teachers`` get those agents' steps in
    their records.
    """

    def __init__(
        self,
        vec: Any,
        groups: list[PolicyGroup],
        scripted: dict[str, Any] | None = None,
        seed: int | None = None,
        observers: Sequence[StepObserver] = (),
        editors: Sequence[StepEditor] = (),
    ) -> None:
        self.vec, self.groups, self.scripted = vec, groups, dict(scripted or {})
        self.observers, self.editors = list(observers), list(editors)
        agents = vec.possible_agents
        self._index = {g.name: [agents.index(a) for a in g.agents] for g in groups}
        self._scripted_index = {agents.index(a): p for a, p in self.scripted.items()}
        covered = {a for g in groups for a in g.agents} | set(self.scripted)
        missing = sorted(set(agents) - covered)
        if missing:
            raise ValueError(f"agents {missing} have no role; give each agent id a role")
        self._teachers = {g.name: g.teachers for g in groups if g.teachers}
        for name, wanted in self._teachers.items():
            unknown = sorted(set(wanted) - set(agents))
            if unknown:
                raise ValueError(
                    f"learner {name!r} asks for teachers {unknown}, which are not agents of the "
                    f"env; its agents are {agents}"
                )
        self.actions = np.zeros((vec.num_envs, vec.num_agents), dtype=np.int64)
        obs, infos = vec.reset(seed=seed)
        self._obs, self._active = obs, infos["active"]
        for g in groups:
            g.begin(obs, vec.num_envs, infos["active"][:, self._index[g.name]])
        self.episode_returns: list[np.ndarray] = []  # per ended episode: returns of every agent
        self.episode_lengths: list[int] = []
        self.episode_envs: list[int] = []  # the env of each ended episode
        self.env_steps = 0

    def _teacher_signals(self, group: PolicyGroup) -> dict[str, Teacher]:
        """The steps of the agents ``group``'s learner asks for, per slot of the group."""
        agents, J = self.vec.possible_agents, len(group.agents)
        device = group.learner.device
        out = {}
        for agent in self._teachers[group.name]:
            k = agents.index(agent)
            obs = obs_to_tensor(slot_obs(self._obs, [agent]), device)
            out[agent] = Teacher(
                actions=torch.as_tensor(np.repeat(self.actions[:, k], J), device=device),
                obs=obs_repeat(obs, J),
                valid=torch.as_tensor(np.repeat(self._active[:, k], J), device=device),
            )
        return out

    def step(self) -> None:
        """One step of every env; learner groups record it."""
        vec, actions = self.vec, self.actions
        for g in self.groups:
            actions[:, self._index[g.name]] = g.act()
        for k, policy in self._scripted_index.items():
            actions[:, k] = policy.scripted_actions(vec.engine, k)
        teachers = {name: self._teacher_signals(g) for g in self.groups
                    if (name := g.name) in self._teachers}  # fmt: skip
        for observer in self.observers:
            observer.before_step(vec, actions)
        obs, rewards, terms, truncs, infos = vec.step(actions)
        for observer in self.observers:
            observer.after_step(vec, actions, rewards, infos)
        for editor in self.editors:
            obs, infos = editor.after_step(vec, obs, infos)
        for g in self.groups:
            g.record(obs, rewards, terms, truncs, infos, self._index[g.name], teachers.get(g.name))
        if self._teachers:
            self._obs, self._active = obs, infos["active"]
        if "_episode" in infos:
            done = infos["_episode"]
            self.episode_returns += list(np.asarray(infos["episode"]["r"])[done].copy())
            self.episode_lengths += np.asarray(infos["episode"]["l"])[done].tolist()
            self.episode_envs += np.flatnonzero(done).tolist()
        self.env_steps += vec.num_envs

    def collect(self, num_steps: int) -> None:
        """``num_steps`` steps of every env."""
        for _ in range(num_steps):
            self.step()

    def pop_returns(self) -> np.ndarray:
        """Returns ``(episodes, K)`` of the episodes ended since the last call."""
        out = np.array(self.episode_returns).reshape(-1, self.vec.num_agents)
        self.episode_returns = []
        return out

    def pop_lengths(self) -> np.ndarray:
        """Lengths of the episodes ended since the last call."""
        out = np.array(self.episode_lengths, dtype=np.int64)
        self.episode_lengths = []
        return out

    def pop_envs(self) -> np.ndarray:
        """The env index of each episode ended since the last call (order of ``pop_returns``)."""
        out = np.array(self.episode_envs, dtype=np.int64)
        self.episode_envs = []
        return out


def episode_metrics(
    returns: np.ndarray, lengths: np.ndarray, columns: list[int] | None = None
) -> dict[str, float]:
    """Mean return (over ``columns``' agents, default all) and length of ended episodes (as
    :meth:`MultiAgentRollout.pop_returns` and ``pop_lengths`` give them); NaN when none ended."""
    n = len(returns)
    if columns is not None and n:
        returns = returns[:, columns]
    nan = float("nan")
    return {
        "charts/episodic_return": float(returns.mean()) if n else nan,
        "charts/episodic_length": float(lengths.mean()) if len(lengths) else nan,
        "charts/episodes": float(n),
    }
