"""Rollouts over marlgrid's batched API for any mix of agents.

Each agent id maps to a role: a **learner** (a :class:`~marlgrid.agents.ppo.PPO` of its own, or
one shared by several agent ids: parameter sharing), a **frozen** policy (a loaded checkpoint that
acts but does not learn) or a **scripted** policy (``random``, ``oracle``, ``discoverer``).

A learner's batch slots are its (env, agent) pairs, slot ``n * J + j`` for env ``n`` and its
``j``-th agent, so one forward per step serves all of them. Memory states are zeroed per slot when
that agent's episode ends (termination, truncation, or its env's reset).

An agent out of play (terminated without respawn while its env plays on, or waiting to spawn)
keeps its slot: the slot is stepped with blank views and zero reward, and those steps are stored
as not valid, so the loss leaves them out.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np
import torch
from torch import Tensor

from marlgrid.agents.ppo import PPO, RolloutBuffer, obs_to_tensor
from marlgrid.vector import VectorEnv
from marlgrid.vector import stack_agents as slot_obs


@dataclass
class PolicyGroup:
    """A network acting for some agent ids, with its per-slot memory."""

    name: str
    learner: PPO
    agents: list[str]
    train: bool = True
    deterministic: bool = False
    buffer: RolloutBuffer | None = None
    obs: Any = None
    state: Tensor | None = None
    starts: Tensor | None = None
    active: Tensor | None = None
    _step: dict[str, Tensor] = field(default_factory=dict)

    def begin(self, obs: dict[str, Any], num_envs: int, active: np.ndarray | None = None) -> None:
        """Start from fresh episodes with observations ``obs`` (``active``: ``(N, J)`` in play)."""
        slots = num_envs * len(self.agents)
        self.active = torch.ones(slots, dtype=torch.bool, device=self.learner.device)
        if active is not None:
            self.active = torch.as_tensor(active.reshape(-1), device=self.learner.device)
        self.obs = obs_to_tensor(slot_obs(obs, self.agents), self.learner.device)
        self.state = self.learner.initial_state(slots)
        self.starts = torch.ones(slots, dtype=torch.bool, device=self.learner.device)

    def act(self) -> np.ndarray:
        """Actions ``(N, J)`` for this group's agents (memory reset where episodes start)."""
        state = self.state * (~self.starts).unsqueeze(-1).to(self.state.dtype)
        actions, logp, values, new_state = self.learner.act(
            self.obs, state, deterministic=self.deterministic
        )
        self._step = {"state": state, "actions": actions, "logp": logp, "values": values}
        self.state = new_state
        env_actions = actions.cpu().numpy() + self.learner.net.action_start
        return env_actions.reshape(-1, len(self.agents))

    def record(
        self,
        next_obs: dict[str, Any],
        rewards: np.ndarray,
        terminations: np.ndarray,
        truncations: np.ndarray,
        infos: dict[str, Any],
        index: list[int],
    ) -> None:
        """Store the step just taken (rewards etc. are ``(N, K)``; ``index`` picks columns)."""
        device = self.learner.device
        rew = rewards[:, index].reshape(-1)
        term = terminations[:, index].reshape(-1)
        trunc = truncations[:, index].reshape(-1)
        # An env reset ends every slot of that env. Slots whose agent finished earlier (idle,
        # blank views, zero reward) close their idle stretch as a termination, so neither
        # memory nor advantages run into the new episode.
        env_reset = np.repeat(infos.get("_final_obs", np.zeros(len(rewards), bool)), len(index))
        term = term | (env_reset & ~trunc)
        if self.train:
            s = self._step
            self.buffer.add(
                self.obs,
                self.starts,
                s["state"],
                s["actions"],
                s["logp"],
                s["values"],
                torch.as_tensor(rew, dtype=torch.float32, device=device),
                torch.as_tensor(term, device=device),
                torch.as_tensor(trunc, device=device),
                valid=self.active,  # steps taken out of play are left out of the loss
            )
            boot = trunc & ~term
            if boot.any():
                ids = np.flatnonzero(boot)
                final = slot_obs(infos["final_obs"], self.agents)
                final = obs_to_tensor(_rows(final, ids), device)
                ids_t = torch.as_tensor(ids, device=device)
                self.buffer.add_final(ids_t, final, self.learner.value(final, self.state[ids_t]))
        self.starts = torch.as_tensor(term | trunc, device=device)
        self.active = torch.as_tensor(infos["active"][:, index].reshape(-1), device=device)
        self.obs = obs_to_tensor(slot_obs(next_obs, self.agents), device)

    def finish(self) -> None:
        """Close the rollout: bootstrap values after its last step, then advantages."""
        value = self.learner.value(self.obs, self.state * (~self.starts).unsqueeze(-1))
        self.buffer.finish(self.obs, self.state, self.starts, value)
        cfg = self.learner.cfg
        self.buffer.compute_advantages(cfg.gamma, cfg.gae_lambda)


def _rows(obs: Any, ids: np.ndarray) -> Any:
    if isinstance(obs, dict):
        return {key: value[ids] for key, value in obs.items()}
    return obs[ids]


class MultiAgentRollout:
    """Collects rollouts from a :class:`VectorEnv` for every learner group at once."""

    def __init__(
        self,
        vec: VectorEnv,
        groups: list[PolicyGroup],
        scripted: dict[str, Any],
        seed: int | None = None,
    ) -> None:
        self.vec = vec
        self.groups = groups
        self.scripted = scripted
        agents = vec.possible_agents
        self._index = {g.name: [agents.index(a) for a in g.agents] for g in groups}
        self._scripted_index = {agents.index(a): p for a, p in scripted.items()}
        covered = {a for g in groups for a in g.agents} | set(scripted)
        missing = sorted(set(agents) - covered)
        if missing:
            raise ValueError(f"agents {missing} have no role; give each agent id a role")
        self.actions = np.zeros((vec.num_envs, vec.num_agents), dtype=np.int64)
        obs, infos = vec.reset(seed=seed)
        for g in groups:
            g.begin(obs, vec.num_envs, infos["active"][:, self._index[g.name]])
            if g.train and g.buffer is None:
                raise ValueError(f"learner {g.name!r} needs a rollout buffer")
        self.episode_returns: list[np.ndarray] = []  # per ended episode: returns of every agent
        self.env_steps = 0

    def collect(self, num_steps: int) -> None:
        """Step all envs ``num_steps`` times, filling every training group's buffer."""
        vec, actions = self.vec, self.actions
        for g in self.groups:
            if g.train:
                g.buffer.clear()
        for _ in range(num_steps):
            for g in self.groups:
                actions[:, self._index[g.name]] = g.act()
            for k, policy in self._scripted_index.items():
                actions[:, k] = policy.act(vec.engine, k)
            obs, rewards, terms, truncs, infos = vec.step(actions)
            for g in self.groups:
                g.record(obs, rewards, terms, truncs, infos, self._index[g.name])
            if "_episode" in infos:
                done = infos["_episode"]
                self.episode_returns += list(infos["episode"]["r"][done].copy())
            self.env_steps += vec.num_envs
        for g in self.groups:
            if g.train:
                g.finish()

    def pop_returns(self) -> np.ndarray:
        """Returns ``(episodes, K)`` of the episodes ended since the last call."""
        out = np.array(self.episode_returns).reshape(-1, self.vec.num_agents)
        self.episode_returns = []
        return out
