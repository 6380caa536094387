"""Hidden-state refreshing of an on-policy rollout: stored states, values and advantages
recomputed with the current network in one batched pass."""

from __future__ import annotations

import torch

from marlgrid.agents.arrays import obs_unsqueeze
from marlgrid.agents.networks.protocols import ValueNet
from marlgrid.agents.staleness import state_staleness
from marlgrid.agents.storage.rollout_buffer import RolloutBuffer


@torch.inference_mode()
def refresh_rollout(
    net: ValueNet,
    buffer: RolloutBuffer,
    gamma: float,
    lam: float,
    state_stride: int | None = None,
) -> dict[str, float]:
    """Recompute stored states, values, bootstrap values, advantages and returns in place.

    One batched pass over the whole buffer, from the state stored at its first step, with
    resets, by :meth:`MemoryCore.chunk_unroll`: outputs (hence values) at every step, states
    every ``state_stride`` steps (default: every stored one, ``buffer.state_stride``), and the
    post-step states that bootstrap values need. A larger ``state_stride`` (a multiple of the
    buffer's) refreshes only the stored states at multiples of it and leaves the others as
    they are: PPO's update passes ``chunk_len``, since its chunks start only there.
    Behaviour log-probs are left alone. Returns staleness: mean squared difference and mean
    per-row cosine similarity between the stored and refreshed states (rows where either is
    zero are skipped).
    """
    B = buffer.num_envs
    stride = buffer.state_stride if state_stride is None else state_stride
    if stride % buffer.state_stride:
        raise ValueError(
            f"state_stride={stride} must be a multiple of the buffer's {buffer.state_stride}"
        )
    T, torso = buffer.num_steps, net.torso
    n_final = buffer.final_t.numel()
    # features of every stored observation, of the observation after the last step and of the
    # final observations of truncated episodes in one encoder/trunk call (a call over a few rows
    # costs nearly as much as one over the rollout)
    x = torso.features(obs_unsqueeze(buffer.all_obs()), 1, (T + 1) * B + n_final)[0]
    res = torso.memory.chunk_unroll(
        x[: T * B].view(T, B, -1),
        buffer.states[0],
        buffer.resets,
        stride,
        buffer.final_t,
        buffer.final_b,
    )
    rows = buffer.states[:: stride // buffer.state_stride]  # a view: written in place below
    staleness = state_staleness(rows, res.starts)
    rows.copy_(res.starts)
    buffer.values.copy_(net.heads(res.out, policy=False)[1])
    # bootstrap values: one memory step from the state after the last step (with its reset) and
    # from the post-step states of truncated steps (same episode as their step, so no reset)
    state = torch.cat([res.final, res.post]) if n_final else res.final
    resets = torch.cat([buffer.next_reset, buffer.next_reset.new_zeros(n_final)])
    out, _ = torso.memory(x[None, T * B :], state, resets.view(1, -1))
    v = net.heads(out[0], policy=False)[1]
    buffer.last_value.copy_(v[:B])
    if n_final:
        buffer.trunc_values[buffer.final_t, buffer.final_b] = v[B:]
    buffer.compute_advantages(gamma, lam)
    return staleness
