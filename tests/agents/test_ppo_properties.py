"""Property-based checks: GAE against a scalar reference; memory-core paths against forward."""

from __future__ import annotations

import numpy as np
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from marlgrid.agents.algorithms.ppo import compute_gae
from marlgrid.agents.memory import make_memory


def _gae_reference(r, v, nv, term, trunc, gamma, lam):
    """Per-environment scalar recursion, written independently of compute_gae."""
    T, B = r.shape
    adv = np.zeros((T, B))
    for b in range(B):
        running = 0.0
        for t in reversed(range(T)):
            bootstrap = 0.0 if term[t, b] else gamma * nv[t, b]
            delta = r[t, b] + bootstrap - v[t, b]
            ended = term[t, b] or trunc[t, b]
            running = delta + (0.0 if ended else gamma * lam * running)
            adv[t, b] = running
    return adv


@settings(max_examples=40, deadline=None)
@given(
    T=st.integers(1, 12),
    B=st.integers(1, 4),
    seed=st.integers(0, 2**31 - 1),
    gamma=st.floats(0.0, 1.0),
    lam=st.floats(0.0, 1.0),
)
def test_gae_matches_scalar_reference(T: int, B: int, seed: int, gamma: float, lam: float) -> None:
    rng = np.random.default_rng(seed)
    r, v, nv = (rng.normal(size=(T, B)) for _ in range(3))
    term, trunc = rng.random((T, B)) < 0.2, rng.random((T, B)) < 0.2
    adv, ret = compute_gae(
        *(torch.as_tensor(x) for x in (r, v, nv, term, trunc)), gamma=gamma, lam=lam
    )
    expected = _gae_reference(r, v, nv, term, trunc, gamma, lam)
    np.testing.assert_allclose(adv.numpy(), expected, atol=1e-9)
    np.testing.assert_allclose(ret.numpy(), expected + v, atol=1e-9)


@settings(max_examples=25, deadline=None)
@given(
    kind=st.sampled_from(["lstm", "gru"]),
    T=st.integers(1, 10),
    N=st.integers(1, 6),
    p=st.floats(0.0, 1.0),
    seed=st.integers(0, 2**31 - 1),
)
def test_training_and_unroll_paths_match_forward(
    kind: str, T: int, N: int, p: float, seed: int
) -> None:
    torch.set_num_threads(1)
    gen = torch.Generator().manual_seed(seed)
    torch.manual_seed(seed)
    core = make_memory(kind, 3, 5)
    x = torch.randn(T, N, 3, generator=gen)
    state = torch.randn(N, core.state_size, generator=gen)
    resets = torch.rand(T, N, generator=gen) < p
    with torch.no_grad():
        out, final = core(x, state, resets)
        torch.testing.assert_close(core.outputs(x, state, resets), out, atol=1e-6, rtol=1e-5)
        u_out, post = core.unroll(x, state, resets)
        torch.testing.assert_close(u_out, out, atol=1e-6, rtol=1e-5)
        torch.testing.assert_close(post[-1], final, atol=1e-6, rtol=1e-5)
        # every post-step state, restarted from, reproduces the rest of the sequence
        for t in range(T - 1):
            tail, _ = core(x[t + 1 :], post[t], resets[t + 1 :])
            torch.testing.assert_close(tail, out[t + 1 :], atol=1e-5, rtol=1e-4)
