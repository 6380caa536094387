"""The on-policy rollout buffer: time-major ``(T, B, ...)`` tensors of one rollout."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import torch
from gymnasium import spaces
from torch import Tensor

from marlgrid.agents.arrays import Obs, alloc_obs, obs_cat, obs_copy_, obs_index, tree_map
from marlgrid.agents.returns import compute_gae


class RolloutBuffer:
    """One rollout of ``num_steps`` steps for ``num_envs`` batch slots, time-major tensors.

    Per step ``t`` it stores ``obs``, ``resets`` (``obs[t]`` starts an episode), ``actions``,
    ``logp`` (behaviour log-probs), ``values``, ``rewards``, ``terminations``, ``truncations``,
    ``valid`` (in play) and ``respawns`` (a new life of the same episode follows).
    Memory states are stored every ``state_stride`` steps: ``states[k]`` is the state used at step
    ``k * state_stride`` (the default, 1, keeps every step). A learner whose minibatches are chunks
    of ``chunk_len`` steps only reads states at chunk starts, so ``state_stride = chunk_len`` stores
    just those, and makes the PPO refresh much cheaper. For
    bootstrapping it keeps the observation, post-step state and reset flag after the last step
    (``next_*``, ``last_value``) and, for every truncation that is not also a termination, the true
    final observation (``final_obs`` with indices ``final_t``, ``final_b``) and its value
    (``trunc_values``). With ``teachers`` (agent ids, for a loss term that reads them), it also
    stores per step each teacher's action index and in-play flag (``teacher_actions[name]``,
    ``teacher_valid[name]``, ``(T, B)``; :meth:`add_teachers`).
    """

    def __init__(
        self,
        num_steps: int,
        num_envs: int,
        observation_space: spaces.Space,
        state_size: int,
        device: torch.device | str = "cpu",
        state_stride: int = 1,
        teachers: Sequence[str] = (),
    ) -> None:
        T, B = num_steps, num_envs
        if state_stride < 1:
            raise ValueError(f"state_stride must be >= 1, got {state_stride}")
        self.num_steps, self.num_envs, self.device = T, B, torch.device(device)
        self.state_stride = state_stride

        def zeros(*shape: int, dtype: torch.dtype = torch.float32) -> Tensor:
            return torch.zeros(*shape, dtype=dtype, device=device)

        # obs and next_obs are views of one (T + 1, B) storage, so the observations a refresh
        # encodes (every step's and the next one) are contiguous (see all_obs)
        self._obs_store = alloc_obs(observation_space, (T + 1, B), device)
        self.obs = obs_index(self._obs_store, slice(0, T))
        self.resets = zeros(T, B, dtype=torch.bool)
        self.states = zeros(-(-T // state_stride), B, state_size)
        self.actions = zeros(T, B, dtype=torch.long)
        self.logp = zeros(T, B)
        self.values = zeros(T, B)
        self.rewards = zeros(T, B)
        self.terminations = zeros(T, B, dtype=torch.bool)
        self.truncations = zeros(T, B, dtype=torch.bool)
        self.valid = torch.ones(T, B, dtype=torch.bool, device=device)  # steps the loss uses
        # the agent re-entered play during step t (respawn rule): obs[t + 1] starts a new life
        # of the same episode (no reset: the memory carries on); read by the next_view term
        self.respawns = zeros(T, B, dtype=torch.bool)
        self.trunc_values = zeros(T, B)
        self.advantages = zeros(T, B)
        self.returns = zeros(T, B)
        self.next_obs = obs_index(self._obs_store, T)
        self.next_state = zeros(B, state_size)
        self.next_reset = zeros(B, dtype=torch.bool)
        self.last_value = zeros(B)
        self.final_t = zeros(0, dtype=torch.long)
        self.final_b = zeros(0, dtype=torch.long)
        self.final_obs: Obs | None = None
        self._finals: list[tuple[int, Tensor, Obs]] = []
        self.teacher_actions = {name: zeros(T, B, dtype=torch.long) for name in teachers}
        self.teacher_valid = {name: zeros(T, B, dtype=torch.bool) for name in teachers}
        self.pos = 0

    def clear(self) -> None:
        """Start a new rollout (storage is reused)."""
        self.pos = 0
        self._finals = []
        self.trunc_values.zero_()

    def add(
        self,
        obs: Obs,
        resets: Tensor,
        states: Tensor,
        actions: Tensor,
        logp: Tensor,
        values: Tensor,
        rewards: Any,
        terminations: Any,
        truncations: Any,
        valid: Tensor | None = None,
        respawned: Tensor | None = None,
    ) -> None:
        """Store one step for all batch slots (``states`` only at multiples of ``state_stride``).

        ``valid`` (default all true) marks the slots whose step the loss may use; a slot whose
        agent is out of play (waiting to spawn, or finished while its env plays on) is not.
        ``respawned`` (default none) marks the slots whose agent finished a life and was placed
        again (or left waiting to be) during this step, without an episode end.
        """
        t = self.pos
        obs_copy_(self.obs, t, obs)
        self.resets[t] = resets
        if t % self.state_stride == 0:
            self.states[t // self.state_stride] = states
        self.actions[t] = actions
        self.logp[t] = logp
        self.values[t] = values
        self.rewards[t] = torch.as_tensor(rewards)
        self.terminations[t] = torch.as_tensor(terminations)
        self.truncations[t] = torch.as_tensor(truncations)
        self.valid[t] = True if valid is None else valid
        self.respawns[t] = False if respawned is None else respawned
        self.pos += 1

    def add_teachers(self, actions: Mapping[str, Tensor], valid: Mapping[str, Tensor]) -> None:
        """For the last added step: each teacher's action index and in-play flag ``(B,)``."""
        t = self.pos - 1
        for name, store in self.teacher_actions.items():
            store[t] = actions[name]
            self.teacher_valid[name][t] = valid[name]

    @property
    def full(self) -> bool:
        """True once ``num_steps`` steps are stored."""
        return self.pos == self.num_steps

    def add_final(self, env_ids: Tensor, final_obs: Obs, values: Tensor) -> None:
        """For the last added step: true final observations of truncated slots and their values."""
        t = self.pos - 1
        env_ids = torch.as_tensor(env_ids, dtype=torch.long, device=self.device)
        self.trunc_values[t, env_ids] = values
        self._finals.append((t, env_ids, final_obs))

    def finish(
        self, next_obs: Obs, next_state: Tensor, next_reset: Tensor, last_value: Tensor
    ) -> None:
        """Close the rollout with what follows its last step (then call compute_advantages)."""
        assert self.pos == self.num_steps, f"buffer holds {self.pos}/{self.num_steps} steps"
        obs_copy_(self.next_obs, slice(None), next_obs)
        self.next_state.copy_(next_state)
        self.next_reset.copy_(next_reset)
        self.last_value.copy_(last_value)
        if self._finals:
            self.final_t = torch.cat([torch.full_like(b, t) for t, b, _ in self._finals])
            self.final_b = torch.cat([b for _, b, _ in self._finals])
            self.final_obs = obs_cat([o for _, _, o in self._finals])
        else:
            self.final_t = self.final_b = torch.zeros(0, dtype=torch.long, device=self.device)
            self.final_obs = None

    def all_obs(self) -> Obs:
        """Every stored observation, then ``next_obs``, then ``final_obs``: ``((T + 1) * B + n,
        ...)``, time-major rows (a refresh encodes them in one call). A view without final
        observations (unless ``obs`` or ``next_obs`` were replaced), a new tensor with them."""
        store = self._obs_store
        if isinstance(store, dict):
            views = isinstance(self.obs, dict) and isinstance(self.next_obs, dict)
            views = views and all(
                self.obs.get(k) is not None and _spans(v, self.obs[k], self.next_obs.get(k))
                for k, v in store.items()
            )
        else:
            views = _spans(store, self.obs, self.next_obs)
        if views:
            head = tree_map(lambda v: v.flatten(0, 1), store)
        else:
            head = obs_cat([tree_map(lambda v: v.flatten(0, 1), self.obs), self.next_obs])
        if not self.final_t.numel():
            return head
        assert self.final_obs is not None
        return obs_cat([head, self.final_obs])

    def next_values(self) -> Tensor:
        """``V`` of the observation truly following each step (see :func:`compute_gae`)."""
        nxt = torch.cat([self.values[1:], self.last_value[None]])
        boot = self.truncations & ~self.terminations
        return torch.where(boot, self.trunc_values, nxt)

    def compute_advantages(self, gamma: float, lam: float) -> None:
        """Fill ``advantages`` and ``returns`` from the stored values."""
        adv, ret = compute_gae(
            self.rewards,
            self.values,
            self.next_values(),
            self.terminations,
            self.truncations,
            gamma,
            lam,
        )
        self.advantages.copy_(adv)
        self.returns.copy_(ret)


def _spans(store: Tensor, obs: Any, next_obs: Any) -> bool:
    """Whether ``obs`` and ``next_obs`` are still the views of ``store``'s rows ``:T`` and ``T``."""
    if not (isinstance(obs, Tensor) and isinstance(next_obs, Tensor)):
        return False
    T = store.shape[0] - 1
    return (
        obs.shape == store[:T].shape
        and next_obs.shape == store[T].shape
        and obs.is_contiguous()
        and next_obs.is_contiguous()
        and obs.data_ptr() == store.data_ptr()
        and next_obs.data_ptr() == store[T].data_ptr()
    )
