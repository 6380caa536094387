"""Stable-Baselines3 adapter: a native SB3 ``VecEnv`` where each (env, agent) pair is one slot.

>>> from stable_baselines3 import PPO
>>> from stable_baselines3.common.vec_env import VecMonitor
>>> from marlgrid.adapters.sb3 import MarlGridVecEnv, symbolic_policy_kwargs
>>> venv = VecMonitor(MarlGridVecEnv("MarlGrid-Empty-8x8-3Agents-v0", num_envs=8, respawn=True))
>>> model = PPO("MlpPolicy", venv, policy_kwargs=symbolic_policy_kwargs())

Importing this module imports stable_baselines3 and torch (``pip install 'marlgrid[sb3]'``).

**Slots.** ``N`` marlgrid envs of ``K`` agents give ``N * K`` SB3 envs; slot ``n * K + k`` is agent
``k`` of env ``n``. One SB3 model acting on every slot is parameter sharing. All agents must
have the same observation and action spaces.

**Observations.** The agents' observations stacked: symbolic ``(N*K, v, v, 3)`` uint8, one-hot
``(N*K, v, v, 38)`` uint8, RGB ``(N*K, v*ts, v*ts, 3)`` uint8, or a dict of such arrays for agents
with extras (use ``MultiInputPolicy``). Choosing a policy:

* RGB views of at least 36x36 pixels (e.g. ``agent={"observation": "rgb", "tile_size": 6}`` on a
  7-cell view) work with ``CnnPolicy`` as they are; SB3 wraps the env in ``VecTransposeImage``.
* Symbolic views are uint8 ``(v, v, 3)`` boxes that SB3 takes for small images (it would divide
  them by 255 and its NatureCNN needs 36x36). Use ``MlpPolicy`` or ``CnnPolicy`` with
  :func:`symbolic_policy_kwargs`: the :class:`SymbolicGridExtractor` embeds each cell's type,
  color and state and applies a small CNN, and ``normalize_images=False`` keeps the raw ids.
* One-hot views are not images for SB3; ``MlpPolicy`` flattens them.

**Episode ends.** ``dones[slot]`` is True on the step where that agent terminates or is truncated;
``infos[slot]`` then holds ``terminal_observation`` (the agent's last view) and
``TimeLimit.truncated`` (truncated and not terminated). A marlgrid env resets, in the same step,
once all its agents have finished; the slots' observations are then the new episode's first
ones. With ``respawn`` an agent that reaches a goal is placed again and its episode goes on (no
done).

**Agents that finish before their env resets** (terminated without respawn while others play
on, or not yet spawned because of ``spawn_delay``): their slot is *idle*. It is reported done
once, on the step it finished. Until the env resets, it receives the blank view (all "unseen"),
reward 0 and ``done`` False, its actions are ignored, and ``infos[slot]["idle"]`` is True (a
learner may mask these steps). When the env resets, the slot continues with the new episode's
first observation, with no second ``done``. So SB3 counts the idle steps into the slot's next
episode (its length, not its return: the rewards are 0). Use ``respawn=True`` to have no idle
steps at all.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import gymnasium as gym
import numpy as np
from gymnasium import spaces

try:
    import torch as th
    from stable_baselines3.common.torch_layers import BaseFeaturesExtractor
    from stable_baselines3.common.vec_env.base_vec_env import (
        VecEnv,
        VecEnvIndices,
        VecEnvObs,
        VecEnvStepReturn,
    )
    from torch import nn
except ModuleNotFoundError as err:
    if (err.name or "").split(".")[0] not in ("torch", "stable_baselines3"):
        raise
    raise ModuleNotFoundError(
        f"marlgrid.adapters.sb3 needs stable-baselines3 and torch ({err.name} is missing): "
        "pip install 'marlgrid[sb3]'",
        name=err.name,
    ) from err

import marlgrid
from marlgrid.base import ActionError
from marlgrid.constants import N_COLORS, N_STATES, N_TYPES
from marlgrid.vector import VectorEnv, stack_agents


class MarlGridVecEnv(VecEnv):
    """``N`` marlgrid envs x ``K`` agents as ``N * K`` SB3 envs (see the module docstring).

    Args:
        env: a registered id, or a :class:`marlgrid.vector.VectorEnv`.
        num_envs: number of marlgrid envs ``N`` (with an id).
        **settings: env settings for ``marlgrid.make_vec`` (with an id).
    """

    def __init__(self, env: str | VectorEnv, num_envs: int = 1, **settings: Any) -> None:
        if isinstance(env, str):
            vec = marlgrid.make_vec(env, num_envs, **settings)
        else:
            if settings:
                raise ValueError("settings only apply when env is an id")
            vec = env
        self.vec = vec
        self.engine = vec.engine
        self.n_marl_envs = vec.num_envs
        self.n_agents = vec.num_agents
        agents = vec.possible_agents
        obs_space = vec.single_observation_space(agents[0])
        act_space = vec.single_action_space(agents[0])
        for name in agents[1:]:
            if (
                vec.single_observation_space(name) != obs_space
                or vec.single_action_space(name) != act_space
            ):
                raise ValueError(
                    f"all agents need the same spaces for one SB3 VecEnv; {name} differs from "
                    f"{agents[0]}"
                )
        self._actions: np.ndarray | None = None
        self._active = np.ones(self.n_marl_envs * self.n_agents, dtype=bool)
        super().__init__(self.n_marl_envs * self.n_agents, obs_space, act_space)

    # -- observations ---------------------------------------------------------------------------

    def _stack(self, obs: dict[str, Any]) -> VecEnvObs:
        """The batched API's per-agent observations as fresh ``(N*K, ...)`` slot arrays."""
        return stack_agents(obs, self.vec.possible_agents)

    @staticmethod
    def _slot(obs: VecEnvObs, i: int) -> Any:
        if isinstance(obs, dict):
            return {key: value[i] for key, value in obs.items()}
        return obs[i]

    # -- VecEnv API -----------------------------------------------------------------------------

    def reset(self) -> VecEnvObs:
        obs, infos = self.vec.reset(seed=self._seeds[0])
        self._active = infos["active"].reshape(-1)
        self._reset_seeds()
        self._reset_options()
        return self._stack(obs)

    def step_async(self, actions: np.ndarray) -> None:
        self._actions = np.asarray(actions)

    def step_wait(self) -> VecEnvStepReturn:
        n, k = self.n_marl_envs, self.n_agents
        if self._actions is None:
            raise RuntimeError("step_wait() without step_async()")
        acts = self._actions.reshape(n, k) if self._actions.size == n * k else None
        self._actions = None
        if acts is None or acts.dtype.kind not in "iu":
            raise ActionError(f"actions must be {n * k} integers (one per slot)")
        limit = self.action_space.n
        if ((acts < 0) | (acts >= limit)).any():
            raise ActionError(f"actions must be in [0, {limit}), got {acts.reshape(-1)}")
        idle = ~self._active
        obs, rewards, term, trunc, step_infos = self.vec.step(acts)
        self._active = step_infos["active"].reshape(-1)
        stacked = self._stack(obs)
        term_flat, trunc_flat = term.reshape(-1), trunc.reshape(-1)
        dones = term_flat | trunc_flat
        infos: list[dict[str, Any]] = [{} for _ in range(n * k)]
        if dones.any():
            # An agent that finished keeps its last view in ``obs`` unless its env was reset in
            # this step; then the last view is in the batched API's ``final_obs``.
            reset_envs = step_infos.get("_final_obs", np.zeros(n, dtype=bool))
            final = self._stack(step_infos["final_obs"]) if reset_envs.any() else stacked
            for i in np.flatnonzero(dones):
                source = final if reset_envs[i // k] else stacked
                infos[i]["terminal_observation"] = self._slot(source, i)
                infos[i]["TimeLimit.truncated"] = bool(trunc_flat[i] and not term_flat[i])
        for i in np.flatnonzero(idle):
            infos[i]["idle"] = True
        return stacked, rewards.reshape(-1).astype(np.float32), dones, infos

    def close(self) -> None:
        """Close the underlying batched env."""
        self.vec.close()

    def get_attr(self, attr_name: str, indices: VecEnvIndices = None) -> list[Any]:
        """An attribute of the template env, once per slot (all slots share one config)."""
        value = getattr(self.vec.template, attr_name)
        return [value for _ in self._get_indices(indices)]

    def set_attr(self, attr_name: str, value: Any, indices: VecEnvIndices = None) -> None:
        """Set an attribute of the template env (shared by all slots)."""
        setattr(self.vec.template, attr_name, value)

    def env_method(
        self, method_name: str, *method_args: Any, indices: VecEnvIndices = None, **method_kwargs
    ) -> list[Any]:
        """Call a method of the template env once per slot."""
        method = getattr(self.vec.template, method_name)
        return [method(*method_args, **method_kwargs) for _ in self._get_indices(indices)]

    def env_is_wrapped(
        self, wrapper_class: type[gym.Wrapper], indices: VecEnvIndices = None
    ) -> list[bool]:
        """No slot is a wrapped gymnasium env."""
        return [False for _ in self._get_indices(indices)]

    def get_images(self) -> Sequence[np.ndarray | None]:
        """The frame of each slot's env (:func:`marlgrid.viewing.rendering.render_frame`)."""
        from marlgrid.viewing.rendering import render_frame

        frames = [render_frame(self.engine, index=i) for i in range(self.n_marl_envs)]
        return [frames[i // self.n_agents] for i in range(self.num_envs)]


class SymbolicGridExtractor(BaseFeaturesExtractor):
    """Features of symbolic marlgrid views: embedded (type, color, state) cells, then a small CNN.

    Accepts ``(v, v, 3)`` or, after SB3's ``VecTransposeImage``, ``(3, v, v)`` observations of raw
    ids (use ``normalize_images=False``; :func:`symbolic_policy_kwargs` sets it).

    Args:
        observation_space: the symbolic view's Box.
        features_dim: output size.
        embed_dim: embedding size per channel.
    """

    def __init__(
        self, observation_space: spaces.Box, features_dim: int = 128, embed_dim: int = 8
    ) -> None:
        super().__init__(observation_space, features_dim)
        shape = observation_space.shape
        if len(shape) != 3 or 3 not in (shape[0], shape[-1]):
            raise ValueError(f"expected a (v, v, 3) or (3, v, v) symbolic view, got {shape}")
        # SB3 transposes (v, v, 3) to (3, v, v) except when it cannot tell (v = 3).
        self.channels_first = shape[-1] != 3
        v = shape[1] if self.channels_first else shape[0]
        sizes = (N_TYPES, N_COLORS, N_STATES)
        self.register_buffer("offsets", th.tensor([0, sizes[0], sizes[0] + sizes[1]]))
        self.register_buffer("limits", th.tensor([s - 1 for s in sizes]))
        self.embed = nn.Embedding(sum(sizes), embed_dim)
        self.cnn = nn.Sequential(
            nn.Conv2d(3 * embed_dim, 32, 2),
            nn.ReLU(),
            nn.Conv2d(32, 64, 2),
            nn.ReLU(),
            nn.Flatten(),
        )
        flat = 64 * max(v - 2, 1) ** 2
        self.head = nn.Sequential(nn.Linear(flat, features_dim), nn.ReLU())

    def forward(self, observations: th.Tensor) -> th.Tensor:
        x = observations.long()
        if self.channels_first:
            x = x.permute(0, 2, 3, 1)  # (B, v, v, 3)
        x = th.minimum(x.clamp(min=0), self.limits) + self.offsets
        e = self.embed(x)  # (B, v, v, 3, E)
        e = e.flatten(3).permute(0, 3, 1, 2)  # (B, 3E, v, v)
        return self.head(self.cnn(e))


def symbolic_policy_kwargs(features_dim: int = 128, **extra: Any) -> dict[str, Any]:
    """``policy_kwargs`` for SB3 policies on symbolic views (see :class:`SymbolicGridExtractor`)."""
    return {
        "features_extractor_class": SymbolicGridExtractor,
        "features_extractor_kwargs": {"features_dim": features_dim},
        "normalize_images": False,
        **extra,
    }
