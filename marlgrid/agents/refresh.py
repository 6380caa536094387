"""Hidden-state refreshing of an on-policy rollout: stored states, values and advantages
recomputed with the current network in one batched pass."""

from __future__ import annotations

import torch

from marlgrid.agents.arrays import Obs, obs_cat
from marlgrid.agents.networks import ActorCritic
from marlgrid.agents.staleness import state_staleness
from marlgrid.agents.storage.rollout_buffer import RolloutBuffer


@torch.inference_mode()
def refresh_rollout(
    net: ActorCritic,
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
    res = net.torso.chunk_unroll(
        buffer.obs, buffer.states[0], buffer.resets, stride, buffer.final_t, buffer.final_b
    )
    rows = buffer.states[:: stride // buffer.state_stride]  # a view: written in place below
    staleness = state_staleness(rows, res.starts)
    rows.copy_(res.starts)
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
    v = net.step(obs_cat(obs_parts), torch.cat(state_parts), resets)[1]
    buffer.last_value.copy_(v[:B])
    if n_final:
        buffer.trunc_values[buffer.final_t, buffer.final_b] = v[B:]
    buffer.compute_advantages(gamma, lam)
    return staleness
