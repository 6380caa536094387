"""Rollout memory resets and hidden-state refreshing against a step-by-step recomputation."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from gymnasium import spaces

from marlgrid.agents.algorithms.ppo import PPO, PPOConfig
from marlgrid.agents.arrays import Obs, obs_index
from marlgrid.agents.networks.models import NetworkConfig
from marlgrid.agents.returns import compute_gae
from marlgrid.agents.staleness import state_staleness
from marlgrid.agents.storage.rollout_buffer import RolloutBuffer
from marlgrid.agents.training.rollout import MultiAgentRollout
from tests.agents.conftest import collect
from tests.toy_envs import RandomEpisodesEnv

OBS_SPACE = spaces.Dict(
    {
        "image": spaces.Box(0, 10, (3, 3, 3), np.uint8),
        "direction": spaces.Discrete(4),
        "reward": spaces.Box(-1, 1, (1,), np.float32),
    }
)
T, B = 24, 6


@pytest.fixture(autouse=True)
def _one_thread() -> None:
    torch.set_num_threads(1)


def _setup(
    memory: str, seed: int = 0, stride: int = 1
) -> tuple[PPO, RolloutBuffer, MultiAgentRollout]:
    net = NetworkConfig(
        memory=memory, hidden_size=16, trunk_sizes=(16,), head_sizes=(8,), conv_channels=(4,)
    )
    cfg = PPOConfig(network=net, num_steps=T)
    env = RandomEpisodesEnv(B, OBS_SPACE, p_term=0.08, p_trunc=0.08)
    learner = PPO(OBS_SPACE, env.single_action_space, cfg, seed=seed)
    buffer = RolloutBuffer(T, B, OBS_SPACE, learner.net.state_size, state_stride=stride)
    # two rollouts: the second one's first state is carried over, not zero
    rollout = collect(env, learner, 2 * T, seed=seed, buffer=buffer)
    assert learner.buffer is buffer and buffer.full
    return learner, buffer, rollout


@torch.no_grad()
def _recompute(learner: PPO, buf: RolloutBuffer) -> dict[str, torch.Tensor]:
    """Step-by-step reference with the current network: states at every step, values, bootstrap
    values, GAE."""
    net = learner.net
    states = torch.zeros(T, B, net.state_size)
    values = torch.zeros_like(buf.values)
    trunc_values = torch.zeros_like(buf.values)
    s = buf.states[0]
    pairs = zip(buf.final_t.tolist(), buf.final_b.tolist(), strict=True)
    finals = {(t, b): i for i, (t, b) in enumerate(pairs)}
    for t in range(T):
        s = s * (~buf.resets[t]).unsqueeze(-1)
        states[t] = s
        obs_t: Obs = obs_index(buf.obs, t)
        _, values[t], s = net.step(obs_t, s)
        for b in range(B):
            if (t, b) in finals:
                final = obs_index(buf.final_obs, slice(finals[t, b], finals[t, b] + 1))
                trunc_values[t, b] = net.step(final, s[b : b + 1])[1][0]
    last_value = net.step(buf.next_obs, s, buf.next_reset)[1]
    nxt = torch.cat([values[1:], last_value[None]])
    nxt = torch.where(buf.truncations & ~buf.terminations, trunc_values, nxt)
    cfg = learner.cfg
    adv, ret = compute_gae(
        buf.rewards, values, nxt, buf.terminations, buf.truncations, cfg.gamma, cfg.gae_lambda
    )
    return {"states": states, "values": values, "advantages": adv, "returns": ret}


@pytest.mark.parametrize("memory", ["lstm", "gru", "none"])
@pytest.mark.parametrize("stride", [1, 8])
def test_rollout_resets_memory_at_episode_boundaries(memory: str, stride: int) -> None:
    learner, buf, _ = _setup(memory, stride=stride)
    assert buf.terminations.any() and (buf.truncations & ~buf.terminations).any()
    assert buf.final_t.numel() == int((buf.truncations & ~buf.terminations).sum())
    # every episode start follows an episode end in the same slot
    ends = buf.terminations | buf.truncations
    torch.testing.assert_close(buf.resets[1:], ends[:-1])
    torch.testing.assert_close(buf.next_reset, ends[-1])
    # states are stored every `stride` steps; zero exactly at episode starts (for a recurrent
    # core, non-zero elsewhere)
    assert buf.states.shape[0] == -(-T // stride)
    norms = buf.states.norm(dim=-1)
    stored_resets = buf.resets[::stride]
    assert torch.all(norms[stored_resets] == 0)
    if memory != "none":
        assert torch.all(norms[~stored_resets] > 0)
    # and what was stored during the rollout is what the network computes step by step
    ref = _recompute(learner, buf)
    ref["states"] = ref["states"][::stride]
    for k in ("states", "values", "advantages", "returns"):
        torch.testing.assert_close(getattr(buf, k), ref[k], rtol=0, atol=1e-5, msg=k)


@pytest.mark.parametrize("memory", ["lstm", "gru"])
@pytest.mark.parametrize("stride", [1, 8, 5])
def test_refresh_equals_fresh_recomputation_after_parameter_change(
    memory: str, stride: int
) -> None:
    """Stored states (every step with stride 1; chunk starts with stride = chunk_len), values,
    bootstrap values, advantages and returns all equal a step-by-step recomputation."""
    learner, buf, _ = _setup(memory, stride=stride)
    buf.compute_advantages(learner.cfg.gamma, learner.cfg.gae_lambda)
    logp_before = buf.logp.clone()
    states_before = buf.states.clone()
    with torch.no_grad():
        gen = torch.Generator().manual_seed(3)
        for p in learner.net.parameters():
            p.add_(0.1 * torch.randn(p.shape, generator=gen))
    ref = _recompute(learner, buf)
    ref["states"] = ref["states"][::stride]
    # the parameter change made the stored states stale
    assert (ref["states"] - states_before).abs().max().item() > 1e-2

    staleness = learner.refresh(buf)

    for k in ("states", "values", "advantages", "returns"):
        diff = (getattr(buf, k) - ref[k]).abs().max().item()
        assert diff < 1e-5, (k, diff)
    assert torch.equal(buf.logp, logp_before)  # behaviour log-probs are left alone
    # staleness = stored vs refreshed states
    expected_mse = (ref["states"] - states_before).square().mean().item()
    assert staleness["mse"] == pytest.approx(expected_mse, rel=1e-4)
    assert 0.0 < staleness["cos"] < 1.0
    # a second refresh with unchanged parameters finds nothing stale
    again = learner.refresh(buf)
    assert again["mse"] < 1e-12 and again["cos"] == pytest.approx(1.0, abs=1e-6)


@pytest.mark.parametrize("stride", [1, 8])
def test_update_refreshes_every_interval_minibatches(stride: int) -> None:
    learner, buf, _ = _setup("lstm", stride=stride)
    learner.cfg.update_epochs, learner.cfg.num_minibatches, learner.cfg.refresh_interval = 2, 4, 2
    learner.cfg.kl_target = None
    metrics = learner.update(buffer=buf)
    # 8 minibatches, refresh after the 2nd, 4th and 6th (the one after the 8th would go unused)
    assert metrics["charts/minibatches"] == 8
    assert metrics["charts/refreshes"] == 3
    assert metrics["charts/staleness_mse"] > 0
    assert 0 < metrics["charts/staleness_cos"] <= 1
    learner.cfg.refresh_interval = 0
    metrics = learner.update(buffer=buf)
    assert metrics["charts/refreshes"] == 0 and np.isnan(metrics["charts/staleness_mse"])


@pytest.mark.parametrize("memory", ["lstm", "gru"])
def test_refresh_of_chunk_starts_only_in_a_full_buffer(memory: str) -> None:
    """refresh(buffer, state_stride=L) on a buffer holding every step's state (what update does
    with chunk_len=L): chunk-start states, values and GAE are fresh; other states are untouched."""
    learner, buf, _ = _setup(memory, stride=1)
    with torch.no_grad():
        gen = torch.Generator().manual_seed(3)
        for p in learner.net.parameters():
            p.add_(0.1 * torch.randn(p.shape, generator=gen))
    states_before = buf.states.clone()
    ref = _recompute(learner, buf)
    learner.refresh(buf, state_stride=8)
    for k in ("values", "advantages", "returns"):
        assert (getattr(buf, k) - ref[k]).abs().max().item() < 1e-5, k
    assert (buf.states[::8] - ref["states"][::8]).abs().max().item() < 1e-5
    others = torch.ones(T, dtype=torch.bool)
    others[::8] = False
    assert torch.equal(buf.states[others], states_before[others])
    learner8, buf8, _ = _setup(memory, stride=8)
    with pytest.raises(ValueError, match="multiple"):
        learner8.refresh(buf8, state_stride=4)


def test_update_is_the_same_with_states_stored_only_at_chunk_starts() -> None:
    """A buffer with state_stride=chunk_len holds all that the update reads: the same data in a
    full buffer and in a chunk-start buffer gives the same update, refreshes included (lr=0 and
    perturbed parameters, so the refreshes change the stale stored data but nothing drifts)."""
    learner, full, _ = _setup("lstm", stride=1)
    chunked = RolloutBuffer(T, B, OBS_SPACE, learner.net.state_size, state_stride=8)
    for name, value in vars(full).items():
        if isinstance(value, torch.Tensor) and name != "states":
            setattr(chunked, name, value.clone())
    for name in ("obs", "next_obs", "final_obs"):  # dict observations
        setattr(chunked, name, {k: v.clone() for k, v in getattr(full, name).items()})
    chunked.states.copy_(full.states[::8])
    chunked.pos = full.pos  # full: update reads only finished buffers
    with torch.no_grad():
        gen = torch.Generator().manual_seed(3)
        for p in learner.net.parameters():
            p.add_(0.1 * torch.randn(p.shape, generator=gen))
    learner.cfg.kl_target, learner.cfg.lr, learner.cfg.anneal_lr = None, 0.0, False
    gen_state = learner.generator.get_state()
    metrics_full = learner.update(buffer=full)
    learner.generator.set_state(gen_state)  # same minibatch order
    metrics_chunked = learner.update(buffer=chunked)
    assert metrics_full["charts/refreshes"] == 7 and metrics_full["charts/staleness_mse"] > 0
    for key in ("losses/policy_loss", "losses/value_loss", "charts/staleness_mse"):
        assert metrics_full[key] == pytest.approx(metrics_chunked[key], rel=1e-5, abs=1e-7), key
    torch.testing.assert_close(full.states[::8], chunked.states, atol=1e-6, rtol=0)
    for k in ("values", "advantages", "returns"):
        torch.testing.assert_close(getattr(full, k), getattr(chunked, k), atol=1e-6, rtol=0)


def test_state_staleness_hand_values() -> None:
    stored = torch.tensor([[[1.0, 0.0], [0.0, 0.0]], [[3.0, 4.0], [0.0, 0.0]]])  # (2, 2, S=2)
    fresh = torch.tensor([[[0.0, 1.0], [0.0, 0.0]], [[3.0, 4.0], [2.0, 0.0]]])
    # squared differences 1 + 1 + 4 over 8 entries; cosines: orthogonal 0, equal 1; the rows
    # where either state is zero (episode starts) are left out of the cosine
    assert state_staleness(stored, fresh) == {"mse": 0.75, "cos": 0.5}
    opposite = state_staleness(torch.tensor([[1.0, 1.0]]), torch.tensor([[-2.0, -2.0]]))
    assert opposite == {"mse": pytest.approx(9.0), "cos": pytest.approx(-1.0)}
    zeros = torch.zeros(3, 2)
    assert state_staleness(zeros, zeros.clone()) == {"mse": 0.0, "cos": 1.0}  # no row to compare
    assert state_staleness(torch.zeros(4, 0), torch.zeros(4, 0)) == {"mse": 0.0, "cos": 1.0}
