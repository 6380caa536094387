"""The batched front door: N envs x K agents stepped in one call.

Buffer reuse: arrays returned by :meth:`VectorEnv.reset` and :meth:`VectorEnv.step` are views of
buffers that the next call overwrites. Copy what you keep (``np.copy``); learners that write
observations into their own rollout storage need no copy.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
from gymnasium import spaces

from marlgrid.base import ActionError, MarlGridEnv
from marlgrid.config import ConfigError, check_int
from marlgrid.core import kernels as K
from marlgrid.core.engine import Engine
from marlgrid.core.rules import Rules


def stack_agents(obs: dict[str, Any], agents: list[str]) -> Any:
    """Per-agent batched observations stacked into ``(N * J, ...)`` slots, slot ``n * J + j``.

    ``obs`` maps agent ids to arrays ``(N, ...)`` (or dicts of them); the result is a fresh array
    (or dict of arrays) for ``agents`` in that order.
    """
    first = obs[agents[0]]
    if isinstance(first, dict):
        return {key: stack_agents({a: obs[a][key] for a in agents}, agents) for key in first}
    stacked = np.stack([obs[a] for a in agents], axis=1)
    return stacked.reshape(-1, *stacked.shape[2:])


class VectorEnv:
    """``num_envs`` copies of ``template``'s configuration with same-step autoreset.

    * ``reset(seed)`` seeds env ``i`` with ``seed + i``, so env ``i`` of the batch follows the same
      trajectory as a single env reset with ``seed + i`` and given the same actions.
    * ``step(actions)`` takes an int array ``(num_envs, num_agents)`` and returns
      ``(obs, rewards, terminations, truncations, infos)``: ``obs`` maps each agent id to an array
      ``(num_envs, ...)`` (or a dict of arrays for Dict observations); rewards are float32 and the
      flags bool, all ``(num_envs, num_agents)``. Actions of agents out of play are ignored.
    * An env whose agents have all finished is reset within the same call: ``obs`` holds the new
      episode's first observation and ``infos["final_obs"]`` the last one of the ended episode,
      valid where ``infos["_final_obs"]`` is True. ``infos["episode"]`` has the ended episodes'
      per-agent returns ``"r"`` and lengths ``"l"``, valid where ``infos["_episode"]``.
    * ``infos["active"]`` is ``(num_envs, num_agents)`` bool: agents in play after the step.
    * ``infos["respawned"]`` is ``(num_envs, num_agents)`` bool: agents whose life ended in the
      step under the respawn rule (their next view, once placed again, is of a new life).
    * Agents can be absent (:meth:`remove_agents` now, :meth:`set_absent_at_reset` for whole
      episodes): out of their env until its next reset, in no view, not ``active``, no reward
      and no done flag; an env whose agents are all finished or absent ends.
    * ``step`` before the first ``reset`` raises :class:`marlgrid.base.ActionError`.
    * Rules are per env: :meth:`set_rules` changes them for all envs or some, each taking the
      change at its next reset (same-step autoresets included); a running episode keeps its own.
    """

    def __init__(self, template: MarlGridEnv, num_envs: int) -> None:
        check_int("num_envs", num_envs, low=1)
        self.template = template
        self.num_envs = num_envs
        self.possible_agents = list(template.possible_agents)
        self.num_agents = len(self.possible_agents)
        self._engine = template.make_engine(num_envs)
        self.agent_configs = template.agent_configs
        self._n_actions = np.array(template._n_actions, dtype=np.int64)
        # the ``action`` extra: each agent's last action in play, n_actions before its first
        self._last_action = np.tile(self._n_actions, (num_envs, 1))
        self._tracks_actions = any("action" in a.extras for a in self.agent_configs)
        self._returns = np.zeros((num_envs, self.num_agents), dtype=np.float64)
        self._final_obs = self._alloc_obs()
        self._episode_r = np.zeros((num_envs, self.num_agents), dtype=np.float64)
        self._episode_l = np.zeros(num_envs, dtype=np.int64)
        self._ready = False  # set by reset(); a failed reset clears it

    @property
    def engine(self) -> Engine:
        """The batched :class:`marlgrid.core.engine.Engine` holding every env's state; read-only."""
        return self._engine

    # -- rules --------------------------------------------------------------------------------

    @property
    def episode_rules(self) -> list[Rules]:
        """The rules of each env's current episode (a new list)."""
        return list(self._engine.episode_rules)

    @property
    def next_rules(self) -> list[Rules]:
        """The rules each env's next episode starts with (a new list)."""
        return list(self._engine.next_rules)

    def set_rules(self, envs: int | Sequence[int] | None = None, **changes: Any) -> None:
        """Change rules of ``envs`` (all by default) from each one's next episode on.

        ``changes`` are :class:`Rules` fields, e.g. ``vec.set_rules(penalty=1.0)``, checked by
        ``Rules`` and the template's :meth:`~marlgrid.base.MarlGridEnv.check_rules` (a bad
        one raises :class:`ConfigError` and changes nothing). Changes add up until the reset.
        """
        rows = self._env_rows(envs)
        engine = self._engine
        new = [engine.next_rules[n].replace(**changes) for n in rows]
        for rules in dict.fromkeys(new):
            self.template.check_rules(rules)
        engine.set_next_rules(rows, new)

    def _env_rows(self, envs: int | Sequence[int] | None) -> list[int]:
        if envs is None:
            return list(range(self.num_envs))
        many = isinstance(envs, Sequence | np.ndarray) and not isinstance(envs, str)
        rows = list(envs) if many else [envs]
        try:
            return [check_int("envs entry", n, 0, self.num_envs - 1) for n in rows]
        except ConfigError:
            raise ConfigError(
                f"envs must be None (every env) or env indices in [0, {self.num_envs}), "
                f"got {envs!r}"
            ) from None

    # -- absent agents ------------------------------------------------------------------------

    def remove_agents(
        self, envs: int | Sequence[int] | None, agents: str | Sequence[str]
    ) -> tuple[dict[str, Any], np.ndarray]:
        """Take ``agents`` (ids) out of ``envs`` (indices, None: all) until each env's next
        reset; see :meth:`remove_where`."""
        return self.remove_where(self._agent_mask(envs, agents))

    def remove_where(self, mask: np.ndarray) -> tuple[dict[str, Any], np.ndarray]:
        """Take the agents where ``mask`` ``(num_envs, num_agents)`` is True out of their envs
        until each env's next reset (:meth:`marlgrid.core.engine.Engine.remove_agents`: what they
        carry is dropped on their cell when it is free, else gone).

        Returns the observations and ``active`` flags as they are now: the observation buffers
        of the last call are rebuilt in place, so those envs' views no longer show them.
        """
        if not self._ready:
            raise ActionError("remove_agents() before reset(): call reset() first")
        self._engine.remove_agents(mask)
        return self._obs(), self._engine.status == K.ACTIVE

    def set_absent_at_reset(
        self, envs: int | Sequence[int] | None, agents: str | Sequence[str], absent: bool = True
    ) -> None:
        """``agents`` start every later episode of ``envs`` absent (from each env's next reset,
        kept across resets); ``absent=False`` brings them back from the next reset on."""
        self._engine.set_absent_at_reset(self._agent_mask(envs, agents), absent)

    @property
    def absent(self) -> np.ndarray:
        """``(num_envs, num_agents)`` bool: agents out of their env until its next reset."""
        return self._engine.absent

    def _agent_mask(
        self, envs: int | Sequence[int] | None, agents: str | Sequence[str]
    ) -> np.ndarray:
        names = [agents] if isinstance(agents, str) else list(agents)
        unknown = [a for a in names if a not in self.possible_agents]
        if unknown:
            raise ConfigError(
                f"agents must be agent ids of this env {self.possible_agents}, got {unknown}"
            )
        mask = np.zeros((self.num_envs, self.num_agents), dtype=np.bool_)
        rows = np.array(self._env_rows(envs), dtype=np.int64)
        mask[np.ix_(rows, [self.possible_agents.index(a) for a in names])] = True
        return mask

    # -- spaces -------------------------------------------------------------------------------

    def single_observation_space(self, agent: str) -> spaces.Space:
        return self.template.observation_space(agent)

    def single_action_space(self, agent: str) -> spaces.Space:
        return self.template.action_space(agent)

    # -- observations -------------------------------------------------------------------------

    def _obs(self) -> dict[str, Any]:
        engine = self._engine
        views = engine.views()
        out: dict[str, Any] = {}
        for k, (name, cfg) in enumerate(zip(self.possible_agents, self.agent_configs, strict=True)):
            if not cfg.extras:
                out[name] = views[k]
                continue
            entry: dict[str, np.ndarray] = {"image": views[k]}
            for extra in cfg.extras:
                if extra == "reward":
                    entry[extra] = engine.last_reward[:, k : k + 1]
                elif extra == "position":
                    entry[extra] = engine.pos[:, k]
                elif extra == "action":
                    entry[extra] = self._last_action[:, k]
                else:
                    entry[extra] = engine.dirs[:, k]
            out[name] = entry
        return out

    def _alloc_obs(self) -> dict[str, Any]:
        def zeros(space: spaces.Space) -> Any:
            if isinstance(space, spaces.Dict):
                return {key: zeros(sub) for key, sub in space.spaces.items()}
            shape = () if isinstance(space, spaces.Discrete) else space.shape
            dtype = np.int64 if isinstance(space, spaces.Discrete) else space.dtype
            return np.zeros((self.num_envs, *shape), dtype=dtype)

        return {name: zeros(self.template.observation_space(name)) for name in self.possible_agents}

    @staticmethod
    def _copy_rows(dst: Any, src: Any, rows: np.ndarray) -> None:
        if isinstance(dst, dict):
            for key in dst:
                VectorEnv._copy_rows(dst[key], src[key], rows)
        else:
            dst[rows] = src[rows]

    # -- API ----------------------------------------------------------------------------------

    def reset(self, seed: int | None = None) -> tuple[dict[str, Any], dict[str, Any]]:
        """Reset every env; ``seed`` seeds env ``i`` with ``seed + i``."""
        seeds: list[int | None]
        if seed is None:
            seeds = [None] * self.num_envs
        else:
            check_int("seed", seed, low=0)
            seeds = [seed + i for i in range(self.num_envs)]
        engine = self._engine
        self._ready = False
        engine.reset(range(self.num_envs), seeds)
        engine.observe()
        self._last_action[:] = self._n_actions
        self._returns[:] = 0.0
        self._ready = True
        return self._obs(), {"active": engine.status == K.ACTIVE}

    def step(self, actions: np.ndarray):
        """Step every env with ``actions`` ``(num_envs, num_agents)``; see the class docstring."""
        if not self._ready:
            raise ActionError("step() before reset(): call reset() first")
        acts = np.asarray(actions)
        if acts.shape != (self.num_envs, self.num_agents):
            raise ActionError(
                f"actions must have shape (num_envs, num_agents) = "
                f"({self.num_envs}, {self.num_agents}), got {acts.shape}"
            )
        if acts.dtype.kind not in "iu":
            raise ActionError(f"actions must be integers, got dtype {acts.dtype}")
        if acts.dtype != np.int64:
            acts = acts.astype(np.int64)
        bad = (acts < 0) | (acts >= self._n_actions)
        if bad.any():
            n, k = np.argwhere(bad)[0]
            raise ActionError(
                f"action {int(acts[n, k])} for {self.possible_agents[k]} in env {n} is out of "
                f"range [0, {self._n_actions[k]})"
            )
        engine = self._engine
        in_play = engine.status == K.ACTIVE if self._tracks_actions else None
        engine.step(acts)
        if in_play is not None:  # actions of agents out of play are ignored: not taken
            np.copyto(self._last_action, acts, where=in_play)
        self._returns += engine.rewards
        done = (engine.status >= K.FINISHED).all(axis=1)  # finished or absent
        infos: dict[str, Any] = {}
        if done.any():
            rows = np.flatnonzero(done)
            obs_now = self._obs()
            for name in self.possible_agents:
                self._copy_rows(self._final_obs[name], obs_now[name], rows)
            self._episode_r[rows] = self._returns[rows]
            self._episode_l[rows] = engine.step_count[rows]
            self._returns[rows] = 0.0
            try:
                engine.reset(rows)
            except BaseException:
                self._ready = False  # those envs hold no world now: refuse to step them
                raise
            engine.observe(rows)
            self._last_action[rows] = self._n_actions
            infos["final_obs"] = self._final_obs
            infos["_final_obs"] = done
            infos["episode"] = {"r": self._episode_r, "l": self._episode_l}
            infos["_episode"] = done
        infos["active"] = engine.status == K.ACTIVE
        infos["respawned"] = engine.respawned.copy()
        return self._obs(), engine.rewards, engine.terminated, engine.truncated, infos

    def close(self) -> None:
        self.template.close()
