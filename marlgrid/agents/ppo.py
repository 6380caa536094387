"""Recurrent PPO (LSTM / GRU / memoryless) with hidden-state refreshing.

Reads top to bottom:

1. :class:`PPOConfig`, the hyperparameters;
2. pure math: :func:`compute_gae` and :func:`ppo_loss`, tested against hand computations;
3. :class:`RolloutBuffer`, time-major ``(T, B, ...)`` tensors, with the memory states where the
   learner reads them (chunk starts);
4. :class:`PPO`, the learner: ``act``, ``update`` (minibatches of trajectory chunks, hidden-state
   refreshing, KL early stopping, optional hard KL limit with rollback) and checkpoints;
5. :func:`train_on_vector_env`, a rollout/update loop over any batched environment that follows
   :class:`BatchedEnv`.

Conventions. A batch slot ``b`` is one environment (or one (env, agent) pair). ``resets[t, b]``
marks that the observation at step ``t`` starts an episode; the memory core then zeroes that
slot's state before step ``t``. The state stored for step ``t`` is the one used at that step
(after that reset). Actions are indices ``0..n-1``.
"""

from __future__ import annotations

import copy
import time
from collections.abc import Callable, Mapping
from dataclasses import asdict, dataclass, field
from typing import Any, Protocol

import numba
import numpy as np
import torch
from gymnasium import spaces
from torch import Tensor

from marlgrid.agents.networks import ActorCritic, NetworkConfig, Obs, log_prob_entropy

# --------------------------------------------------------------------------------------------------
# 1. Configuration
# --------------------------------------------------------------------------------------------------


@dataclass
class PPOConfig:
    """Hyperparameters of recurrent PPO (one line of doc per field)."""

    # optimisation
    lr: float = 3e-4  # Adam learning rate at the start of training
    anneal_lr: bool = True  # decay the learning rate linearly from lr to lr_final over training
    lr_final: float = 0.0  # learning rate at the end of training when anneal_lr is set
    adam_eps: float = 1e-5  # Adam epsilon
    max_grad_norm: float = 0.5  # global gradient-norm clip
    # returns and advantages
    gamma: float = 0.99  # discount factor
    gae_lambda: float = 0.95  # GAE lambda
    norm_adv: bool = True  # normalise advantages per minibatch (over non-padding steps)
    # PPO loss
    clip_coef: float = 0.2  # surrogate clipping range (also the value clipping range)
    clip_vloss: bool = True  # clip the value loss around the stored (rollout/refreshed) values
    vf_coef: float = 0.5  # value-loss weight
    ent_coef: float = 0.01  # entropy-bonus weight at the start of training
    ent_coef_final: float | None = None  # entropy weight at the end (linear); None keeps ent_coef
    # rollout and minibatches
    num_steps: int = 128  # rollout length per environment (T)
    update_epochs: int = 4  # passes over the rollout per update
    chunk_len: int = 8  # length of the trajectory chunks minibatches are made of (BPTT length)
    num_minibatches: int = 4  # minibatches per epoch (chunks are split evenly between them)
    refresh_interval: int = 2  # refresh stored states/values/advantages every N minibatches; 0=off
    kl_target: float | None = 0.01  # end the epoch when a minibatch's approx KL > 1.5 * kl_target
    kl_hard_limit: float | None = None  # roll back the whole update if its batch KL exceeds this
    # network
    memory: str = "lstm"  # memory core: 'lstm', 'gru' or 'none'
    hidden_size: int = 128  # memory core width
    trunk_sizes: tuple[int, ...] = (128,)  # MLP between encoder and memory core
    head_sizes: tuple[int, ...] = (64,)  # hidden layers of each of the policy and value heads
    conv_channels: tuple[int, ...] = (32, 32)  # conv channels of image encoders
    conv_kernel: int = 3  # kernel size of those convs
    conv_padding: int = 1  # zero padding of those convs
    embed_dim: int = 8  # embedding width per symbolic channel
    tile_size: int = 8  # pixels per cell for pixel observations
    image_mode: str = "auto"  # image encoder: 'auto', 'symbolic', 'pixels' or 'onehot'
    # run
    total_timesteps: int = 1_000_000  # environment steps (summed over batch slots) to train for
    seed: int = 0  # seeds network init, action sampling, minibatch order and env reset
    device: str = "cpu"  # torch device

    def network_config(self) -> NetworkConfig:
        """The :class:`NetworkConfig` part of this config."""
        return NetworkConfig(
            memory=self.memory,
            hidden_size=self.hidden_size,
            trunk_sizes=tuple(self.trunk_sizes),
            head_sizes=tuple(self.head_sizes),
            conv_channels=tuple(self.conv_channels),
            conv_kernel=self.conv_kernel,
            conv_padding=self.conv_padding,
            embed_dim=self.embed_dim,
            tile_size=self.tile_size,
            image_mode=self.image_mode,
        )


def linear_schedule(start: float, end: float, progress: float) -> float:
    """``start`` at progress 0, ``end`` at progress 1 (clipped to [0, 1])."""
    return start + (end - start) * min(max(progress, 0.0), 1.0)


# --------------------------------------------------------------------------------------------------
# 2. Pure math
# --------------------------------------------------------------------------------------------------


def compute_gae(
    rewards: Tensor,
    values: Tensor,
    next_values: Tensor,
    terminations: Tensor,
    truncations: Tensor,
    gamma: float,
    lam: float,
) -> tuple[Tensor, Tensor]:
    """Generalised advantage estimation over time-major ``(T, B)`` tensors.

    ``next_values[t]`` is the value of the observation that truly follows step ``t``: ``V(s_{t+1})``
    inside an episode, the value of the final observation when step ``t`` ended the episode by
    truncation (ignored on termination).

    ``delta_t = r_t + gamma * next_values_t * (1 - terminated_t) - values_t`` and
    ``A_t = delta_t + gamma * lam * (1 - done_t) * A_{t+1}`` with ``done = terminated | truncated``,
    so the recursion is cut at every episode end. Returns ``(advantages, returns)``,
    ``returns = advantages + values``.
    """
    terminated = terminations.bool()
    done = terminated | truncations.bool()
    deltas = rewards + gamma * next_values * (~terminated).to(values.dtype) - values
    carry = gamma * lam * (~done).to(values.dtype)
    adv = torch.empty_like(deltas)
    if deltas.device.type == "cpu" and not deltas.requires_grad:
        _reverse_scan(deltas.numpy(), carry.numpy(), adv.numpy())  # compiled, in place
        return adv, adv + values
    last = torch.zeros_like(deltas[0])
    for t in range(deltas.shape[0] - 1, -1, -1):
        last = torch.addcmul(deltas[t], carry[t], last)
        adv[t] = last
    return adv, adv + values


@numba.njit(cache=True)
def _reverse_scan(deltas: np.ndarray, carry: np.ndarray, out: np.ndarray) -> None:
    """``out[t] = deltas[t] + carry[t] * out[t + 1]`` backwards from ``out[T - 1] = deltas[T - 1]``
    (the recursion of :func:`compute_gae`; a Python loop over T costs far more on CPU)."""
    last = np.zeros_like(deltas[0])
    for t in range(deltas.shape[0] - 1, -1, -1):
        for b in range(deltas.shape[1]):
            last[b] = deltas[t, b] + carry[t, b] * last[b]
            out[t, b] = last[b]


def ppo_loss(
    new_logp: Tensor,
    old_logp: Tensor,
    adv: Tensor,
    new_values: Tensor,
    old_values: Tensor,
    returns: Tensor,
    entropy: Tensor,
    mask: Tensor,
    clip: float,
    clip_vloss: bool,
    vf_coef: float,
    ent_coef: float,
) -> tuple[Tensor, dict[str, Tensor]]:
    """Clipped PPO loss; every term is averaged over the steps where ``mask`` is true.

    Padding steps (``mask`` false) are replaced by zeros with ``torch.where`` before any arithmetic
    and excluded from every mean, so whatever they hold (even NaN) changes neither the terms nor
    the gradients. ``loss = pg_loss - ent_coef * entropy + vf_coef * v_loss`` with

    - ``pg_loss = mean(max(-adv * ratio, -adv * clamp(ratio, 1 - clip, 1 + clip)))``;
    - ``v_loss = 0.5 * mean(max((v - R)^2, (v_old + clamp(v - v_old, -clip, clip) - R)^2))``
      (``0.5 * mean((v - R)^2)`` without ``clip_vloss``);
    - ``approx_kl = mean((ratio - 1) - log ratio)``; ``clipfrac = mean(|ratio - 1| > clip)``.

    Returns ``(loss, terms)`` with terms ``policy_loss, value_loss, entropy, approx_kl, clipfrac``.
    """
    mask = mask.bool()
    mean: Callable[[Tensor], Tensor]
    if bool(mask.all()):  # no padding (the usual case): plain means, fewer autograd nodes
        mean = torch.mean
    else:
        n = mask.sum().clamp(min=1)
        zero = new_logp.new_zeros(())

        def clean(x: Tensor) -> Tensor:
            return torch.where(mask, x, zero)

        def mean(x: Tensor) -> Tensor:
            return clean(x).sum() / n

        new_logp, old_logp, adv, entropy = map(clean, (new_logp, old_logp, adv, entropy))
        new_values, old_values, returns = map(clean, (new_values, old_values, returns))
    logratio = new_logp - old_logp
    ratio = logratio.exp()
    pg_loss = mean(torch.max(-adv * ratio, -adv * ratio.clamp(1.0 - clip, 1.0 + clip)))
    v_err = (new_values - returns).square()
    if clip_vloss:
        v_clipped = old_values + (new_values - old_values).clamp(-clip, clip)
        v_err = torch.max(v_err, (v_clipped - returns).square())
    v_loss = 0.5 * mean(v_err)
    ent = mean(entropy)
    loss = pg_loss - ent_coef * ent + vf_coef * v_loss
    with torch.no_grad():
        approx_kl = mean((ratio - 1.0) - logratio)
        clipfrac = mean(((ratio - 1.0).abs() > clip).to(ratio.dtype))
    terms = {
        "policy_loss": pg_loss.detach(),
        "value_loss": v_loss.detach(),
        "entropy": ent.detach(),
        "approx_kl": approx_kl,
        "clipfrac": clipfrac,
    }
    return loss, terms


def _clip_flat_(grads: Tensor, max_norm: float) -> Tensor:
    """Scale a flat gradient in place to 2-norm at most ``max_norm`` (as
    ``nn.utils.clip_grad_norm_``); returns the norm before clipping."""
    norm = torch.linalg.vector_norm(grads)
    grads.mul_((max_norm / (norm + 1e-6)).clamp(max=1.0))
    return norm


def explained_variance(pred: Tensor, target: Tensor) -> float:
    """``1 - Var(target - pred) / Var(target)``; NaN when the target is constant."""
    var = target.var()
    return float("nan") if var.item() == 0 else float(1.0 - (target - pred).var() / var)


# --------------------------------------------------------------------------------------------------
# 3. Rollout buffer
# --------------------------------------------------------------------------------------------------


def _space_dtype(space: spaces.Space) -> torch.dtype:
    if isinstance(space, spaces.Discrete | spaces.MultiDiscrete):
        return torch.long
    return torch.from_numpy(np.zeros(0, dtype=space.dtype)).dtype


def alloc_obs(space: spaces.Space, lead: tuple[int, ...], device: torch.device | str) -> Obs:
    """Zero observation storage of shape ``lead + space.shape`` (a dict for ``Dict`` spaces)."""
    if isinstance(space, spaces.Dict):
        return {k: alloc_obs(s, lead, device) for k, s in space.spaces.items()}  # type: ignore[misc]
    return torch.zeros(*lead, *space.shape, dtype=_space_dtype(space), device=device)


def obs_to_tensor(obs: Any, device: torch.device | str = "cpu") -> Obs:
    """numpy observations (array or dict of arrays, batch first) -> tensors (no copy on CPU)."""
    if isinstance(obs, Mapping):
        return {k: torch.as_tensor(np.asarray(v), device=device) for k, v in obs.items()}
    return torch.as_tensor(np.asarray(obs), device=device)


def final_obs_rows(final_obs: Any, ids: np.ndarray) -> Any:
    """Rows ``ids`` of ``infos["final_obs"]``: a batched array (or dict of arrays), or a numpy
    object array holding one observation per slot (gymnasium's vector envs)."""
    if isinstance(final_obs, np.ndarray) and final_obs.dtype == object:
        rows = [final_obs[i] for i in ids]
        if isinstance(rows[0], Mapping):
            return {k: np.stack([r[k] for r in rows]) for k in rows[0]}
        return np.stack(rows)
    if isinstance(final_obs, Mapping):
        return {k: np.asarray(v)[ids] for k, v in final_obs.items()}
    return np.asarray(final_obs)[ids]


def obs_index(obs: Obs, index: Any) -> Obs:
    """Index every tensor of an observation with the same index."""
    if isinstance(obs, dict):
        return {k: v[index] for k, v in obs.items()}
    return obs[index]


def _obs_copy_(dst: Obs, index: Any, src: Obs) -> None:
    if isinstance(dst, dict):
        for k, v in dst.items():
            v[index] = src[k]  # type: ignore[index]
    else:
        dst[index] = src


def _obs_cat(parts: list[Obs]) -> Obs:
    if isinstance(parts[0], dict):
        return {k: torch.cat([p[k] for p in parts]) for k in parts[0]}  # type: ignore[index]
    return torch.cat(parts)  # type: ignore[arg-type]


class RolloutBuffer:
    """One rollout of ``num_steps`` steps for ``num_envs`` batch slots, time-major tensors.

    Per step ``t`` it stores ``obs``, ``resets`` (``obs[t]`` starts an episode), ``actions``,
    ``logp`` (behaviour log-probs), ``values``, ``rewards``, ``terminations`` and ``truncations``.
    Memory states are stored every ``state_stride`` steps: ``states[k]`` is the state used at step
    ``k * state_stride`` (the default, 1, keeps every step). A learner whose minibatches are chunks
    of ``chunk_len`` steps only reads states at chunk starts, so ``state_stride = chunk_len`` stores
    just those, and makes :meth:`PPO.refresh` much cheaper (see :meth:`PPO.new_buffer`). For
    bootstrapping it keeps the observation, post-step state and reset flag after the last step
    (``next_*``, ``last_value``) and, for every truncation that is not also a termination, the true
    final observation (``final_obs`` with indices ``final_t``, ``final_b``) and its value
    (``trunc_values``).
    """

    def __init__(
        self,
        num_steps: int,
        num_envs: int,
        observation_space: spaces.Space,
        state_size: int,
        device: torch.device | str = "cpu",
        state_stride: int = 1,
    ) -> None:
        T, B = num_steps, num_envs
        if state_stride < 1:
            raise ValueError(f"state_stride must be >= 1, got {state_stride}")
        self.num_steps, self.num_envs, self.device = T, B, torch.device(device)
        self.state_stride = state_stride

        def zeros(*shape: int, dtype: torch.dtype = torch.float32) -> Tensor:
            return torch.zeros(*shape, dtype=dtype, device=device)

        self.obs = alloc_obs(observation_space, (T, B), device)
        self.resets = zeros(T, B, dtype=torch.bool)
        self.states = zeros(-(-T // state_stride), B, state_size)
        self.actions = zeros(T, B, dtype=torch.long)
        self.logp = zeros(T, B)
        self.values = zeros(T, B)
        self.rewards = zeros(T, B)
        self.terminations = zeros(T, B, dtype=torch.bool)
        self.truncations = zeros(T, B, dtype=torch.bool)
        self.valid = torch.ones(T, B, dtype=torch.bool, device=device)  # steps the loss uses
        self.trunc_values = zeros(T, B)
        self.advantages = zeros(T, B)
        self.returns = zeros(T, B)
        self.next_obs = alloc_obs(observation_space, (B,), device)
        self.next_state = zeros(B, state_size)
        self.next_reset = zeros(B, dtype=torch.bool)
        self.last_value = zeros(B)
        self.final_t = zeros(0, dtype=torch.long)
        self.final_b = zeros(0, dtype=torch.long)
        self.final_obs: Obs | None = None
        self._finals: list[tuple[int, Tensor, Obs]] = []
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
        rewards: Tensor,
        terminations: Tensor,
        truncations: Tensor,
        valid: Tensor | None = None,
    ) -> None:
        """Store one step for all batch slots (``states`` only at multiples of ``state_stride``).

        ``valid`` (default all true) marks the slots whose step the loss may use; a slot whose
        agent is out of play (waiting to spawn, or finished while its env plays on) is not.
        """
        self.add_action(obs, resets, states, actions, logp, values)
        self.valid[self.pos] = True if valid is None else valid
        self.add_outcome(rewards, terminations, truncations)

    def add_action(
        self,
        obs: Obs,
        resets: Tensor,
        states: Tensor,
        actions: Tensor,
        logp: Tensor,
        values: Tensor,
    ) -> None:
        """First half of :meth:`add`, before the env step (so envs may reuse their obs arrays)."""
        t = self.pos
        _obs_copy_(self.obs, t, obs)
        self.resets[t] = resets
        if t % self.state_stride == 0:
            self.states[t // self.state_stride] = states
        self.actions[t] = actions
        self.logp[t] = logp
        self.values[t] = values

    def add_outcome(self, rewards: Any, terminations: Any, truncations: Any) -> None:
        """Second half of :meth:`add` (tensors or numpy arrays); completes the step."""
        t = self.pos
        self.rewards[t] = torch.as_tensor(rewards)
        self.terminations[t] = torch.as_tensor(terminations)
        self.truncations[t] = torch.as_tensor(truncations)
        self.pos += 1

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
        _obs_copy_(self.next_obs, slice(None), next_obs)
        self.next_state.copy_(next_state)
        self.next_reset.copy_(next_reset)
        self.last_value.copy_(last_value)
        if self._finals:
            self.final_t = torch.cat([torch.full_like(b, t) for t, b, _ in self._finals])
            self.final_b = torch.cat([b for _, b, _ in self._finals])
            self.final_obs = _obs_cat([o for _, _, o in self._finals])
        else:
            self.final_t = self.final_b = torch.zeros(0, dtype=torch.long, device=self.device)
            self.final_obs = None

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


# --------------------------------------------------------------------------------------------------
# 4. Learner
# --------------------------------------------------------------------------------------------------


def _adam(params: Any, lr: float, eps: float) -> torch.optim.Adam:
    """Adam with the fused kernel where torch supports it (several times faster on small nets)."""
    params = list(params)
    try:
        return torch.optim.Adam(params, lr=lr, eps=eps, fused=True)
    except (RuntimeError, ValueError):
        return torch.optim.Adam(params, lr=lr, eps=eps, foreach=True)


class PPO:
    """Recurrent PPO learner around an :class:`ActorCritic`.

    Minibatches are trajectory chunks: the T axis is cut into ``ceil(T / chunk_len)`` chunks per
    batch slot (the last one padded and masked), and each epoch deals the shuffled chunks into
    ``num_minibatches`` minibatches. A chunk starts from its stored memory state; episode starts
    inside a chunk are handled by the reset flags. Every ``refresh_interval`` minibatches,
    :meth:`refresh` recomputes, with the current network, the stored states that chunks start
    from, and the values, advantages and returns of every step (behaviour log-probs are kept;
    value clipping is then around the refreshed values). Only chunk-start states are ever read,
    so a buffer needs no others (:meth:`new_buffer`); a refresh is one batched pass over the
    buffer (:meth:`MemoryCore.chunk_unroll`).

    Speed (CPU): acting runs in ``torch.inference_mode``; an update gathers each minibatch with
    a few index ops, zeroes and clips all gradients as one flat tensor and steps a fused Adam.
    A refresh is a full forward pass over the buffer, so refreshing every 2 of 8 minibatches per
    epoch costs about as much as the minibatches' own forward and backward passes (see
    ``experiments/benchmarks/README.md``, "Recurrent PPO speed").
    """

    def __init__(
        self,
        observation_space: spaces.Space,
        action_space: spaces.Space,
        cfg: PPOConfig | None = None,
    ) -> None:
        self.cfg = cfg = cfg or PPOConfig()
        self.observation_space, self.action_space = observation_space, action_space
        self.device = torch.device(cfg.device)
        with torch.random.fork_rng(devices=[]):
            torch.manual_seed(cfg.seed)
            self.net = ActorCritic(observation_space, action_space, cfg.network_config())
        self.net.to(self.device)
        self.optimizer = _adam(self.net.parameters(), cfg.lr, cfg.adam_eps)
        self.generator = torch.Generator(device=self.device).manual_seed(cfg.seed + 1)
        self.num_updates = 0
        self.num_refreshes = 0
        self._params = list(self.net.parameters())
        self._grad_views: list[Tensor] | None = None
        self._grad_flat = torch.zeros(0)

    def new_buffer(self, num_envs: int) -> RolloutBuffer:
        """A :class:`RolloutBuffer` for ``cfg.num_steps`` steps of ``num_envs`` slots that stores
        states only at chunk starts (``state_stride = cfg.chunk_len``), on the learner's device."""
        cfg = self.cfg
        return RolloutBuffer(
            cfg.num_steps,
            num_envs,
            self.observation_space,
            self.net.state_size,
            self.device,
            state_stride=cfg.chunk_len,
        )

    # -- acting ----------------------------------------------------------------------------------

    def initial_state(self, batch_size: int) -> Tensor:
        """Zero memory state for ``batch_size`` slots."""
        return self.net.initial_state(batch_size)

    @torch.inference_mode()
    def act(
        self,
        obs: Obs,
        state: Tensor,
        resets: Tensor | None = None,
        deterministic: bool = False,
    ) -> tuple[Tensor, Tensor, Tensor, Tensor]:
        """One forward for the whole batch: ``(actions, logp, values, new_state)``.

        Runs in ``torch.inference_mode``: the results are inference tensors, fine to act with and
        to copy into buffers; ``.clone()`` one before using it in a computation with gradients.
        """
        return self.net.act(obs, state, resets, deterministic, self.generator)

    @torch.inference_mode()
    def value(self, obs: Obs, state: Tensor, resets: Tensor | None = None) -> Tensor:
        """Values ``(B,)`` of one batch of observations (inference tensors, as :meth:`act`)."""
        return self.net.step(obs, state, resets)[1]

    # -- hidden-state refreshing -----------------------------------------------------------------

    @torch.inference_mode()
    def refresh(self, buffer: RolloutBuffer, state_stride: int | None = None) -> dict[str, float]:
        """Recompute stored states, values, bootstrap values, advantages and returns in place.

        One batched pass over the whole buffer, from the state stored at its first step, with
        resets, by :meth:`MemoryCore.chunk_unroll`: outputs (hence values) at every step, states
        every ``state_stride`` steps (default: every stored one, ``buffer.state_stride``), and the
        post-step states that bootstrap values need. A larger ``state_stride`` (a multiple of the
        buffer's) refreshes only the stored states at multiples of it and leaves the others as
        they are: :meth:`update` passes ``chunk_len``, since its chunks start only there.
        Behaviour log-probs are left alone. Returns staleness: mean squared difference and mean
        per-row cosine similarity between the stored and refreshed states (rows where either is
        zero are skipped).
        """
        cfg, net = self.cfg, self.net
        T, B = buffer.num_steps, buffer.num_envs
        stride = buffer.state_stride if state_stride is None else state_stride
        if stride % buffer.state_stride:
            raise ValueError(
                f"state_stride={stride} must be a multiple of the buffer's {buffer.state_stride}"
            )
        feats = net.features(buffer.obs, T, B)
        res = net.memory.chunk_unroll(
            feats, buffer.states[0], buffer.resets, stride, buffer.final_t, buffer.final_b
        )
        rows = buffer.states[:: stride // buffer.state_stride]  # a view: written in place below
        new_states, old = res.starts, rows
        if old.shape[-1] > 0:
            mse = float((new_states - old).square().mean())
            dot = (new_states * old).sum(-1)
            norms = new_states.norm(dim=-1) * old.norm(dim=-1)
            valid = norms > 0
            cos = float((dot[valid] / norms[valid]).mean()) if bool(valid.any()) else 1.0
        else:
            mse, cos = 0.0, 1.0
        rows.copy_(new_states)
        buffer.values.copy_(net.heads(res.out, policy=False)[1])
        # bootstrap values: the observation after the last step, and final observations of
        # truncated episodes (same episode as their step, so no reset)
        n_final = buffer.final_t.numel()
        obs_parts: list[Obs] = [buffer.next_obs]
        state_parts = [res.final]
        if n_final:
            assert buffer.final_obs is not None
            obs_parts.append(buffer.final_obs)
            state_parts.append(res.post)
        resets = torch.cat([buffer.next_reset, buffer.next_reset.new_zeros(n_final)])
        v = net.step(_obs_cat(obs_parts), torch.cat(state_parts), resets)[1]
        buffer.last_value.copy_(v[:B])
        if n_final:
            buffer.trunc_values[buffer.final_t, buffer.final_b] = v[B:]
        buffer.compute_advantages(cfg.gamma, cfg.gae_lambda)
        self.num_refreshes += 1
        return {"mse": mse, "cos": cos}

    # -- update ----------------------------------------------------------------------------------

    def _flat_grads(self) -> Tensor:
        """All gradients as views of one flat tensor (zeroed and clipped with one op each).

        The views are installed as the parameters' ``.grad`` (backward accumulates into them in
        place); they are installed again if something replaced them (e.g. ``zero_grad()``).
        """
        params, views = self._params, self._grad_views
        if views is None or any(p.grad is not g for p, g in zip(params, views, strict=True)):
            flat = torch.zeros(sum(p.numel() for p in params), device=self.device)
            parts = flat.split([p.numel() for p in params])
            views = [g.view_as(p) for p, g in zip(params, parts, strict=True)]
            for p, g in zip(params, views, strict=True):
                p.grad = g
            self._grad_views, self._grad_flat = views, flat
        return self._grad_flat

    @torch.no_grad()
    def batch_kl(self, buffer: RolloutBuffer) -> float:
        """Approximate KL between behaviour and current policy over the whole buffer."""
        logits, _ = self.net.evaluate(buffer.obs, buffer.states[0], buffer.resets)
        new_logp, _ = log_prob_entropy(logits, buffer.actions)
        logratio = new_logp - buffer.logp
        return float(((logratio.exp() - 1.0) - logratio).mean())

    def update(self, buffer: RolloutBuffer, progress: float = 0.0) -> dict[str, float]:
        """Run PPO epochs on a finished buffer; ``progress`` in [0, 1] drives the schedules.

        Returns ``losses/*`` (means over the minibatches evaluated) and ``charts/*`` metrics:
        learning rate, entropy coefficient, minibatches stepped, early stops, rollback flag,
        refreshes, staleness (means over this update's refreshes; NaN without refresh) and times.
        """
        cfg, net = self.cfg, self.net
        t_start = time.perf_counter()
        lr = linear_schedule(cfg.lr, cfg.lr_final, progress) if cfg.anneal_lr else cfg.lr
        for group in self.optimizer.param_groups:
            group["lr"] = lr
        ent_final = cfg.ent_coef if cfg.ent_coef_final is None else cfg.ent_coef_final
        ent_coef = linear_schedule(cfg.ent_coef, ent_final, progress)
        snapshot = None
        if cfg.kl_hard_limit is not None:
            snapshot = copy.deepcopy((net.state_dict(), self.optimizer.state_dict()))

        buffer.compute_advantages(cfg.gamma, cfg.gae_lambda)
        T, B, L = buffer.num_steps, buffer.num_envs, cfg.chunk_len
        if L % buffer.state_stride:
            raise ValueError(
                f"chunk_len={L} must be a multiple of the buffer's state_stride="
                f"{buffer.state_stride} (chunks start from stored states)"
            )
        n_chunks = -(-T // L)
        chunk_state = L // buffer.state_stride  # stored states per chunk
        steps = torch.arange(L, device=self.device).unsqueeze(1)  # (L, 1)
        total_mb = cfg.update_epochs * min(cfg.num_minibatches, n_chunks * B)
        # per-step floats read by every minibatch, gathered with one index (rebuilt on refresh)
        per_step = torch.stack([buffer.logp, buffer.values, buffer.returns, buffer.advantages], -1)

        terms_log: list[dict[str, Tensor]] = []
        staleness: list[dict[str, float]] = []
        refresh_time = 0.0
        mb_done = early_stops = 0
        grad_norms: list[Tensor] = []
        for _epoch in range(cfg.update_epochs):
            perm = torch.randperm(n_chunks * B, generator=self.generator, device=self.device)
            for ids in perm.tensor_split(min(cfg.num_minibatches, n_chunks * B)):
                c, b = ids // B, ids % B
                t = c * L + steps  # (L, N) time index of each chunk step
                pad = t < T
                t = t.clamp(max=T - 1)
                mask = pad & buffer.valid[t, b]
                obs = obs_index(buffer.obs, (t, b))
                logits, new_values = net.evaluate(
                    obs, buffer.states[c * chunk_state, b], buffer.resets[t, b]
                )
                new_logp, entropy = log_prob_entropy(logits, buffer.actions[t, b])
                old_logp, old_values, returns, adv = per_step[t, b].unbind(-1)
                if cfg.norm_adv:
                    a = adv[mask]
                    if a.numel() > 1:
                        adv = (adv - a.mean()) / (a.std() + 1e-8)
                loss, terms = ppo_loss(
                    new_logp,
                    old_logp,
                    adv,
                    new_values,
                    old_values,
                    returns,
                    entropy,
                    mask,
                    cfg.clip_coef,
                    cfg.clip_vloss,
                    cfg.vf_coef,
                    ent_coef,
                )
                terms_log.append(terms)
                if cfg.kl_target is not None and float(terms["approx_kl"]) > 1.5 * cfg.kl_target:
                    early_stops += 1
                    break  # this minibatch's step is skipped; the epoch ends
                grads = self._flat_grads()
                grads.zero_()
                loss.backward()
                grad_norms.append(_clip_flat_(grads, cfg.max_grad_norm))
                self.optimizer.step()
                mb_done += 1
                refresh_due = cfg.refresh_interval > 0 and mb_done % cfg.refresh_interval == 0
                if refresh_due and mb_done < total_mb:  # a refresh after the last would go unused
                    t0 = time.perf_counter()
                    staleness.append(self.refresh(buffer, state_stride=L))
                    per_step = torch.stack(
                        [buffer.logp, buffer.values, buffer.returns, buffer.advantages], -1
                    )
                    refresh_time += time.perf_counter() - t0

        rolled_back = 0.0
        metrics: dict[str, float] = {}
        if snapshot is not None and mb_done > 0:
            kl = self.batch_kl(buffer)
            metrics["losses/approx_kl_batch"] = kl
            if kl > cfg.kl_hard_limit:  # type: ignore[operator]
                net.load_state_dict(snapshot[0])
                self.optimizer.load_state_dict(snapshot[1])
                rolled_back = 1.0
        self.num_updates += 1

        def avg(key: str) -> float:
            return float(torch.stack([x[key] for x in terms_log]).mean())

        nan = float("nan")
        metrics.update(
            {
                "losses/policy_loss": avg("policy_loss"),
                "losses/value_loss": avg("value_loss"),
                "losses/entropy": avg("entropy"),
                "losses/approx_kl": avg("approx_kl"),
                "losses/clipfrac": avg("clipfrac"),
                "losses/explained_variance": explained_variance(buffer.values, buffer.returns),
                "losses/grad_norm": float(torch.stack(grad_norms).mean()) if grad_norms else nan,
                "charts/learning_rate": lr,
                "charts/ent_coef": ent_coef,
                "charts/minibatches": float(mb_done),
                "charts/early_stops": float(early_stops),
                "charts/rolled_back": rolled_back,
                "charts/refreshes": float(len(staleness)),
                "charts/staleness_mse": float(np.mean([s["mse"] for s in staleness]))
                if staleness
                else nan,
                "charts/staleness_cos": float(np.mean([s["cos"] for s in staleness]))
                if staleness
                else nan,
                "charts/refresh_time": refresh_time,
                "charts/update_time": time.perf_counter() - t_start,
            }
        )
        return metrics

    # -- checkpoints -----------------------------------------------------------------------------

    def state_dict(self) -> dict[str, Any]:
        """Network, optimizer and counters (loadable with ``torch.load(weights_only=True)``)."""
        return {
            "net": self.net.state_dict(),
            "optimizer": self.optimizer.state_dict(),
            "generator": self.generator.get_state(),
            "num_updates": self.num_updates,
            "num_refreshes": self.num_refreshes,
            "config": asdict(self.cfg),
        }

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        """Restore what :meth:`state_dict` saved (the config entry is informational)."""
        self.net.load_state_dict(state["net"])
        self.optimizer.load_state_dict(state["optimizer"])
        self.generator.set_state(state["generator"])
        self.num_updates = int(state["num_updates"])
        self.num_refreshes = int(state["num_refreshes"])


# --------------------------------------------------------------------------------------------------
# 5. Training loop over a batched environment
# --------------------------------------------------------------------------------------------------


class BatchedEnv(Protocol):
    """What :func:`train_on_vector_env` needs from an environment batch.

    ``reset(seed)`` returns observations, batch first (an array, or a dict of arrays).
    ``step(actions (B,))`` returns ``obs, rewards (B,), terminations (B,), truncations (B,), infos``
    with same-step autoreset: where a slot's episode ended, ``obs`` already starts the next episode
    and ``infos["final_obs"]`` (same structure as ``obs``, batched) holds the true last observation,
    valid where ``infos["_final_obs"]`` is true (only needed for truncations).
    """

    num_envs: int
    single_observation_space: spaces.Space
    single_action_space: spaces.Space

    def reset(self, seed: int | None = None) -> Any: ...

    def step(self, actions: np.ndarray) -> tuple[Any, Any, Any, Any, dict[str, Any]]: ...


@dataclass
class _EpisodeStats:
    """Running per-slot returns and lengths; finished episodes collected per rollout."""

    num_envs: int
    returns: np.ndarray = field(init=False)
    lengths: np.ndarray = field(init=False)
    done_returns: list[float] = field(default_factory=list)
    done_lengths: list[int] = field(default_factory=list)

    def __post_init__(self) -> None:
        self.returns = np.zeros(self.num_envs)
        self.lengths = np.zeros(self.num_envs, dtype=np.int64)

    def step(self, rewards: np.ndarray, done: np.ndarray) -> None:
        self.returns += rewards
        self.lengths += 1
        if done.any():
            self.done_returns += self.returns[done].tolist()
            self.done_lengths += self.lengths[done].tolist()
            self.returns[done] = 0.0
            self.lengths[done] = 0

    def pop(self) -> dict[str, float]:
        n = len(self.done_returns)
        out = {
            "charts/episodic_return": float(np.mean(self.done_returns)) if n else float("nan"),
            "charts/episodic_length": float(np.mean(self.done_lengths)) if n else float("nan"),
            "charts/episodes": float(n),
        }
        self.done_returns, self.done_lengths = [], []
        return out


class VectorRollout:
    """Collects rollouts from a :class:`BatchedEnv` into a :class:`RolloutBuffer`.

    Carries the current observation, memory state and episode-start flags between rollouts, and
    keeps episode statistics. A slot's memory state is zeroed when its episode ends. Each step's
    observation is stored before the env steps, so an env may return views of arrays that its
    next step overwrites (as ``marlgrid.make_vec`` does).
    """

    def __init__(self, envs: BatchedEnv, learner: PPO, seed: int | None = None) -> None:
        self.envs, self.learner = envs, learner
        self.device = learner.device
        first = envs.reset(seed=seed)
        if isinstance(first, tuple) and len(first) == 2 and isinstance(first[1], dict):
            first = first[0]  # gymnasium-style (obs, infos)
        self.obs = obs_to_tensor(first, self.device)
        self.state = learner.initial_state(envs.num_envs)
        self.starts = torch.ones(envs.num_envs, dtype=torch.bool, device=self.device)
        self.stats = _EpisodeStats(envs.num_envs)

    @torch.inference_mode()
    def collect(self, buffer: RolloutBuffer, deterministic: bool = False) -> None:
        """Fill ``buffer`` with ``buffer.num_steps`` steps of every slot, finish it, compute GAE.

        Per step: one forward for the whole batch, one env step, a few copies into the buffer
        (the observation is stored before the env step, so envs may reuse their arrays).
        """
        envs, learner, device = self.envs, self.learner, self.device
        obs, state, starts = self.obs, self.state, self.starts
        action_start = learner.net.action_start
        buffer.clear()
        for _ in range(buffer.num_steps):
            if bool(starts.any()):
                state = state.masked_fill(starts.unsqueeze(-1), 0.0)  # episode starts: zero memory
            actions, logp, values, new_state = learner.act(obs, state, deterministic=deterministic)
            buffer.add_action(obs, starts, state, actions, logp, values)
            env_actions = actions.numpy() if device.type == "cpu" else actions.cpu().numpy()
            if action_start:
                env_actions = env_actions + action_start
            next_obs, rewards, terms, truncs, infos = envs.step(env_actions)
            rewards = np.asarray(rewards, dtype=np.float32)
            terms, truncs = np.asarray(terms, dtype=bool), np.asarray(truncs, dtype=bool)
            buffer.add_outcome(rewards, terms, truncs)
            boot = truncs & ~terms
            if boot.any():
                ids = np.flatnonzero(boot)
                if "final_obs" not in infos or not np.all(np.asarray(infos["_final_obs"])[ids]):
                    raise ValueError("truncations need infos['final_obs'] and infos['_final_obs']")
                final = obs_to_tensor(final_obs_rows(infos["final_obs"], ids), device)
                ids_t = torch.as_tensor(ids, device=device)
                buffer.add_final(ids_t, final, learner.value(final, new_state[ids_t]))
            done = terms | truncs
            self.stats.step(rewards, done)
            starts = torch.as_tensor(done, device=device)
            state = new_state
            obs = obs_to_tensor(next_obs, device)
        buffer.finish(obs, state, starts, learner.value(obs, state, starts))
        buffer.compute_advantages(learner.cfg.gamma, learner.cfg.gae_lambda)
        self.obs, self.state, self.starts = obs, state, starts


def train_on_vector_env(
    envs: BatchedEnv,
    cfg: PPOConfig,
    total_timesteps: int | None = None,
    learner: PPO | None = None,
    log_fn: Callable[[dict[str, float], int], None] | None = None,
) -> tuple[PPO, list[dict[str, float]]]:
    """Train ``learner`` (new :class:`PPO` if None) on ``envs``; returns it and metrics per update.

    Each update collects ``cfg.num_steps`` steps from every batch slot with one forward per step for
    the whole batch (:class:`VectorRollout`) into a buffer that stores memory states at chunk
    starts only (:meth:`PPO.new_buffer`), then calls :meth:`PPO.update`.
    ``log_fn(metrics, global_step)`` is called after every update.
    """
    total = cfg.total_timesteps if total_timesteps is None else total_timesteps
    B, T = envs.num_envs, cfg.num_steps
    if learner is None:
        learner = PPO(envs.single_observation_space, envs.single_action_space, cfg)
    obs_space, state_size = envs.single_observation_space, learner.net.state_size
    stride = learner.cfg.chunk_len  # the update's chunks start every chunk_len steps
    buffer = RolloutBuffer(T, B, obs_space, state_size, learner.device, state_stride=stride)
    rollout = VectorRollout(envs, learner, seed=cfg.seed)
    num_updates = max(1, total // (T * B))
    history: list[dict[str, float]] = []
    global_step = 0
    t_begin = time.perf_counter()
    for update in range(num_updates):
        t_rollout = time.perf_counter()
        rollout.collect(buffer)
        global_step += T * B
        rollout_time = time.perf_counter() - t_rollout
        metrics = learner.update(buffer, progress=update / num_updates)
        metrics.update(rollout.stats.pop())
        metrics["charts/rollout_time"] = rollout_time
        metrics["charts/SPS"] = global_step / (time.perf_counter() - t_begin)
        metrics["global_step"] = float(global_step)
        history.append(metrics)
        if log_fn is not None:
            log_fn(metrics, global_step)
    return learner, history
