"""One agent of a marlgrid env as a ``gymnasium.Env``; the other agents follow given policies.

>>> from marlgrid.wrappers import SingleAgentEnv
>>> env = SingleAgentEnv("MarlGrid-GoalCycle-13x13-3Agents-v0", "agent_0", others="oracle")
>>> obs, info = env.reset(seed=0)

Every registered marlgrid id is also a gymnasium id under the ``marlgrid/`` namespace once this
module is imported: ``gymnasium.make("marlgrid/MarlGrid-Empty-8x8-v0")`` (keyword arguments go to
:class:`SingleAgentEnv`; env settings to ``marlgrid.make``). Call :func:`register_gymnasium_envs`
again after registering more marlgrid ids.

Semantics:

* Observations, rewards and spaces are the chosen agent's, exactly as in the PettingZoo env; every
  call returns fresh arrays.
* The episode ends for gymnasium when the chosen agent terminates or is truncated; the other
  agents may still be playing then. Agents that finish before it simply stop acting.
* ``info`` holds ``rewards`` (every agent's reward this step) and ``prestige`` (every agent's).
* Seeding: ``reset(seed=s)`` seeds the marlgrid env with ``s`` and rebuilds named scripted policies
  of the other agents with seeds derived from ``s``, so episodes are reproducible. Policy objects
  you pass are used as they are (seed them yourself).
"""

from __future__ import annotations

from typing import Any

import gymnasium
import numpy as np

import marlgrid
from marlgrid.base import MarlGridEnv
from marlgrid.episode import policy_actions, reset_joint

NAMESPACE = "marlgrid"


class SingleAgentEnv(gymnasium.Env):
    """A gymnasium view of one agent of a PettingZoo marlgrid env.

    Args:
        env: a registered marlgrid id or a :class:`marlgrid.base.MarlGridEnv`.
        agent_id: the agent this env controls (``agent`` / ``agents`` are env settings).
        others: the other agents' policies: one for all or a dict agent -> policy, where a
            policy is a scripted policy name (``random``, ``oracle``, ``discoverer``), an object
            with ``scripted_actions(engine, k)``, a joint policy (``reset()`` and
            ``actions(env, obs)``), or a callable from that agent's observation to an action (see
            :mod:`marlgrid.episode`).
        render_mode: ``rgb_array``, ``human`` or None (only with an env id).
        **settings: env settings passed to ``marlgrid.make`` (only with an env id).
    """

    metadata: dict[str, Any] = {
        "render_modes": list(MarlGridEnv.metadata["render_modes"]),
        "render_fps": MarlGridEnv.metadata["render_fps"],
    }

    def __init__(
        self,
        env: str | MarlGridEnv,
        agent_id: str = "agent_0",
        others: Any = "random",
        render_mode: str | None = None,
        **settings: Any,
    ) -> None:
        if isinstance(env, str):
            env = marlgrid.make(env, render_mode=render_mode, **settings)
        elif settings or render_mode is not None:
            raise ValueError("settings and render_mode only apply when env is an id")
        if agent_id not in env.possible_agents:
            raise ValueError(f"unknown agent {agent_id!r}; agents are {env.possible_agents}")
        self.env = env
        self.agent = agent_id
        self.render_mode = env.render_mode
        self.metadata = {
            "render_modes": list(env.metadata["render_modes"]),
            "render_fps": env.metadata["render_fps"],
        }
        self.observation_space = env.observation_space(agent_id)
        self.action_space = env.action_space(agent_id)
        self._others_spec = others
        self._others = self._build_others(None)

    def _build_others(self, seed: int | None) -> dict[str, Any]:
        from marlgrid.episode import resolve_policies

        names = [a for a in self.env.possible_agents if a != self.agent]
        return resolve_policies(
            self.env, self._others_spec, names, None if seed is None else seed * 7919 + 1
        )

    def reset(
        self, *, seed: int | None = None, options: dict[str, Any] | None = None
    ) -> tuple[Any, dict[str, Any]]:
        super().reset(seed=seed)
        if seed is not None:
            self._others = self._build_others(seed)
        obs, infos = self.env.reset(seed=seed, options=options)
        self._last_obs = obs
        reset_joint(self._others)
        info = dict(infos.get(self.agent, {}))
        info["prestige"] = self.env.prestige
        return obs[self.agent], info

    def step(self, action: Any) -> tuple[Any, float, bool, bool, dict[str, Any]]:
        env = self.env
        if self.agent not in env.agents:
            raise RuntimeError(f"{self.agent}'s episode is over; call reset()")
        others = [name for name in env.agents if name != self.agent]
        actions = policy_actions(env, self._others, self._last_obs, others)
        actions[self.agent] = action
        obs, rewards, terms, truncs, infos = env.step(actions)
        self._last_obs = obs
        info = dict(infos.get(self.agent, {}))
        info["rewards"] = {a: float(r) for a, r in rewards.items()}
        info["prestige"] = env.prestige
        return (
            obs[self.agent],
            float(rewards[self.agent]),
            bool(terms[self.agent]),
            bool(truncs[self.agent]),
            info,
        )

    def render(self) -> np.ndarray | None:
        return self.env.render()

    def close(self) -> None:
        self.env.close()


def register_gymnasium_envs() -> list[str]:
    """Register ``marlgrid/<id>`` in gymnasium for every marlgrid id; returns the new ids."""
    added = []
    for env_id in marlgrid.REGISTRY:
        gym_id = f"{NAMESPACE}/{env_id}"
        if gym_id not in gymnasium.registry:
            gymnasium.register(
                id=gym_id, entry_point="marlgrid.wrappers:SingleAgentEnv", kwargs={"env": env_id}
            )
            added.append(gym_id)
    return added


register_gymnasium_envs()
