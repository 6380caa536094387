"""POPGym's cheap baseline cores against hand computations, and PPO with each of them.

The conformance suite (``test_memory_conformance.py``) covers these cores' interface; this file
checks what they compute: the scan, the window of a frame stack, the episode counter, the
linear recurrence and the linear attention against explicit formulas.
"""

from __future__ import annotations

import math

import pytest
import torch
from torch import Tensor
from torch.nn import functional as fn

from marlgrid.agents.algorithms.ppo import PPO, PPOConfig
from marlgrid.agents.memory import make_memory
from marlgrid.agents.memory.linear_attention import feature_map
from marlgrid.agents.memory.positional import sine_encoding
from marlgrid.agents.memory.scan import linear_scan, steps_since_reset
from marlgrid.agents.networks.models import NetworkConfig
from marlgrid.config import ConfigError
from tests.agents.conftest import collect
from tests.toy_envs import CueMemoryEnv

KINDS = ("elman", "framestack", "positional_mlp", "linear_recurrence", "linear_attention")


@pytest.fixture(autouse=True)
def _one_thread() -> None:
    torch.set_num_threads(1)


def _resets(T: int, B: int, steps: dict[int, list[int]]) -> Tensor:
    resets = torch.zeros(T, B, dtype=torch.bool)
    for b, ts in steps.items():
        resets[ts, b] = True
    return resets


def _step_loop(core, x: Tensor, state: Tensor, resets: Tensor) -> tuple[Tensor, Tensor]:
    outs, post = [], []
    for t in range(x.shape[0]):
        o, state = core(x[t : t + 1], state, resets[t : t + 1])
        outs.append(o[0])
        post.append(state)
    return torch.stack(outs), torch.stack(post)


# -- the scan and the reset positions ---------------------------------------------------------


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64, torch.complex64])
def test_linear_scan_equals_step_loop_with_resets(dtype: torch.dtype) -> None:
    T, B, D = 128, 3, 5
    gen = torch.Generator().manual_seed(0)
    real = torch.float64 if dtype == torch.float64 else torch.float32

    def draw(*shape: int) -> Tensor:
        z = torch.randn(*shape, generator=gen, dtype=real)
        return torch.complex(z, torch.randn(*shape, generator=gen)) if dtype.is_complex else z

    a = 0.99 * torch.rand(T, B, D, generator=gen, dtype=real) * draw(T, B, D).sgn()
    a[[5, 6, 60, 127], 1] = 0  # resets, two in a row and at the last step
    u, h0 = draw(T, B, D), draw(B, D)
    got = linear_scan(a, u, h0)
    h, ref = h0, []
    for t in range(T):
        h = a[t] * h + u[t]
        ref.append(h)
    torch.testing.assert_close(got, torch.stack(ref), atol=1e-5, rtol=1e-5)
    assert torch.equal(got[5, 1], u[5, 1])  # a reset drops the carry exactly
    # one factor per slot, broadcast over D (a running sum with resets, as linear attention's)
    keep = (torch.rand(T, B, 1, generator=gen) > 0.1).to(real)
    w = u.real if dtype.is_complex else u
    total, ref = torch.zeros(B, D, dtype=real), []
    for t in range(T):
        total = keep[t] * total + w[t]
        ref.append(total)
    got = linear_scan(keep, w, torch.zeros(B, D, dtype=real))
    torch.testing.assert_close(got, torch.stack(ref), atol=1e-5, rtol=1e-5)


def test_linear_scan_by_hand() -> None:
    """a = 0.5 everywhere, a reset (a = 0) at t = 2: h = 0.5 h + u from h0 = 4."""
    a = torch.tensor([0.5, 0.5, 0.0, 0.5, 0.5]).view(5, 1, 1)
    u = torch.tensor([1.0, 2.0, 3.0, 4.0, -2.0]).view(5, 1, 1)
    h = linear_scan(a, u, torch.tensor([[4.0]]))
    assert h.flatten().tolist() == [3.0, 3.5, 3.0, 5.5, 0.75]


def test_steps_since_reset_by_hand() -> None:
    resets = torch.tensor([[0, 1], [0, 0], [1, 0], [0, 0]], dtype=torch.bool)
    age, fresh = steps_since_reset(resets)
    assert age.tolist() == [[0, 0], [1, 1], [0, 2], [1, 3]]
    assert fresh.tolist() == [[False, True], [False, True], [True, True], [True, True]]


# -- linear recurrence ------------------------------------------------------------------------


def _lru(N: int, complex_state: bool, lam: complex, dtype=torch.float32) -> torch.nn.Module:
    """A linear recurrence with ``u = x``, ``B = I``, ``gamma = 1``, ``C = I``, ``D = 0``."""
    core = make_memory("linear_recurrence", N, N, state_size=N, complex_state=complex_state)
    core = core.to(dtype)
    with torch.no_grad():
        core.proj.weight.copy_(torch.eye(N))
        core.proj.bias.zero_()
        core.nu_log.fill_(math.log(-math.log(abs(lam))))
        if complex_state:
            core.theta_log.fill_(math.log(math.atan2(lam.imag, lam.real)))
        core.gamma_log.zero_()
        core.B.zero_()
        core.B[0].copy_(torch.eye(N))
        core.C.zero_()
        core.C[0].copy_(torch.eye(N))
        core.D.zero_()
    return core


def test_real_linear_recurrence_by_hand() -> None:
    """a = 0.5, B = I: h_t = 0.5 h_{t-1} + x_t from h = (8, -4), a reset at t = 2."""
    core = _lru(2, False, 0.5)
    torch.testing.assert_close(core.decay(), torch.full((2,), 0.5))
    x = torch.tensor([[1.0, 0.0], [2.0, 1.0], [3.0, -1.0], [4.0, 2.0]]).unsqueeze(1)
    resets = _resets(4, 1, {0: [2]})
    with torch.no_grad():
        out, post = core.unroll(x, torch.tensor([[8.0, -4.0]]), resets)
    h = torch.tensor([[5.0, -2.0], [4.5, 0.0], [3.0, -1.0], [5.5, 1.5]]).unsqueeze(1)
    torch.testing.assert_close(post, h)
    with torch.no_grad():  # out = GLU(W gelu(C h + D u)) + u, with C = I and D = 0
        torch.testing.assert_close(out, fn.glu(core.glu(fn.gelu(h)), -1) + x)


def test_complex_linear_recurrence_by_hand() -> None:
    """lam = 0.5 i: from 0, inputs 1, 0, 0, 1 give h = 1, 0.5 i, -0.25, 1 - 0.125 i; the
    readout is Re(C h) = c_re Re(h) - c_im Im(h)."""
    core = _lru(1, True, 0.5j, torch.float64)
    x = torch.tensor([1.0, 0.0, 0.0, 1.0], dtype=torch.float64).view(4, 1, 1)
    with torch.no_grad():
        core.C[0].fill_(2.0)
        core.C[1].fill_(3.0)
        out, post = core.unroll(x, core.initial_state(1), _resets(4, 1, {}))
    re = torch.tensor([1.0, 0.0, -0.25, 1.0], dtype=torch.float64)
    im = torch.tensor([0.0, 0.5, 0.0, -0.125], dtype=torch.float64)
    torch.testing.assert_close(post.view(4, 2), torch.stack([re, im], -1), atol=1e-12, rtol=0)
    y = (2.0 * re - 3.0 * im).view(4, 1, 1)
    with torch.no_grad():
        torch.testing.assert_close(out, fn.glu(core.glu(fn.gelu(y)), -1) + x)


def test_linear_recurrence_is_stable_and_sized_like_popgym() -> None:
    torch.manual_seed(0)
    core = make_memory("linear_recurrence", 128, 256)
    assert core.state_layout == {"re": 256, "im": 256}
    radius = core.decay().detach().abs()
    assert float(radius.min()) >= 0.9 - 1e-6 and float(radius.max()) <= 0.999 + 1e-6
    with torch.no_grad():
        core.nu_log.normal_(0.0, 3.0)  # any parameters: |lam| < 1
    assert float(core.decay().detach().abs().max()) < 1.0
    real = make_memory("linear_recurrence", 4, 6, state_size=3, complex_state=False)
    assert real.state_layout == {"h": 3} and not hasattr(real, "theta_log")


# -- frame stack ------------------------------------------------------------------------------


def test_framestack_window_after_a_reset() -> None:
    """k = 3, frames = inputs (identity frame map): the state holds the last two frames, oldest
    first; a reset at t = 2 clears the frames before it."""
    core = make_memory("framestack", 2, 6, k=3)
    assert core.frame_size == 2 and core.state_layout == {"frames": 4}
    with torch.no_grad():
        core.frame.weight.copy_(torch.eye(2))
        core.frame.bias.zero_()
    x = torch.tensor([[t + 1.0, -(t + 1.0)] for t in range(5)]).unsqueeze(1)
    state = torch.tensor([[10.0, 11.0, 12.0, 13.0]])  # frames (10, 11), then (12, 13)
    with torch.no_grad():
        out, post = core.unroll(x, state, _resets(5, 1, {0: [2]}))
    expected = [[12, 13, 1, -1], [1, -1, 2, -2], [0, 0, 3, -3], [3, -3, 4, -4], [4, -4, 5, -5]]
    assert post[:, 0].tolist() == expected
    windows = [[10, 11, 12, 13, 1, -1], [0, 0, 0, 0, 3, -3], [0, 0, 3, -3, 4, -4]]
    with torch.no_grad():
        for t, w in zip([0, 2, 3], windows, strict=True):
            torch.testing.assert_close(out[t, 0], core.mlp(torch.tensor(w, dtype=torch.float32)))


def test_framestack_sizes() -> None:
    big = make_memory("framestack", 128, 256)
    assert big.k == 4 and big.frame_size == 64 and big.state_size == 192
    assert big.mlp[0].in_features == 256
    single = make_memory("framestack", 3, 5, k=1)
    assert single.state_layout == {} and single.state_size == 0
    x = torch.randn(4, 2, 3)
    with torch.no_grad():
        out, final = single(x, single.initial_state(2), _resets(4, 2, {1: [2]}))
        torch.testing.assert_close(out, single.mlp(single.frame(x)))
    assert final.shape == (2, 0)


# -- positional MLP ---------------------------------------------------------------------------


def test_sine_encoding_by_hand() -> None:
    # size 4, max_len 100: frequencies 1, 1, 100^(-1/2), 100^(-1/2)
    enc = sine_encoding(torch.tensor([2.0]), 4, 100)
    ref = [math.sin(2), math.cos(2), math.sin(0.2), math.cos(0.2)]
    torch.testing.assert_close(enc[0], torch.tensor(ref))


def test_positional_counter_resets_and_blends() -> None:
    """From step 5 with a reset at t = 3: steps 5, 6, 7, 0, 1; blend strength 0.25."""
    core = make_memory("positional_mlp", 4, 3, max_len=100)
    assert core.state_layout == {"step": 1}
    assert float(torch.sigmoid(core.strength_logit.detach())) == 0.5
    with torch.no_grad():
        core.strength_logit.fill_(math.log(1 / 3))
    x = torch.randn(5, 1, 4)
    with torch.no_grad():
        out, post = core.unroll(x, torch.tensor([[5.0]]), _resets(5, 1, {0: [3]}))
    assert post.flatten().tolist() == [6.0, 7.0, 8.0, 1.0, 2.0]
    for t, step in enumerate([5, 6, 7, 0, 1]):
        enc = torch.tensor(
            [math.sin(step), math.cos(step), math.sin(0.1 * step), math.cos(0.1 * step)]
        )
        with torch.no_grad():
            ref = core.mlp(0.75 * x[t, 0] + 0.25 * enc)
        torch.testing.assert_close(out[t, 0], ref)


# -- linear attention -------------------------------------------------------------------------


def test_linear_attention_equals_explicit_causal_sum() -> None:
    """Every output against ``sum_s (q_t . k_s) v_s / max(sum_s q_t . k_s, 1)`` over the steps
    of the episode so far (plus the initial S, z before the first reset), O(T^2)."""
    T, B, F, H = 16, 3, 5, 9
    torch.manual_seed(0)
    core = make_memory("linear_attention", F, H).double()
    d = core.dim
    assert d == 2  # round(sqrt(9) - 1)
    with torch.no_grad():
        for p in core.parameters():
            p.add_(0.3 * torch.randn_like(p))
    gen = torch.Generator().manual_seed(1)
    x = torch.randn(T, B, F, generator=gen, dtype=torch.float64)
    k0 = feature_map(torch.randn(B, 4, d, generator=gen, dtype=torch.float64))
    v0 = torch.randn(B, 4, d, generator=gen, dtype=torch.float64)
    S0, z0 = torch.einsum("bsi,bsj->bij", k0, v0), k0.sum(1)  # an earlier episode part
    state = torch.cat([S0.flatten(1), z0], -1)
    resets = _resets(T, B, {1: [6], 2: [0, 3, 4, 15]})
    with torch.no_grad():
        out, post = core.unroll(x, state, resets)
        n = core.norm(x)
        q, k, v = core.qkv(n).split(d, -1)
        q, k = feature_map(q), feature_map(k)
        for b in range(B):
            start = 0
            for t in range(T):
                start = t if resets[t, b] else start
                num = sum((q[t, b] @ k[s, b]) * v[s, b] for s in range(start, t + 1))
                den = sum(q[t, b] @ k[s, b] for s in range(start, t + 1))
                if not resets[: t + 1, b].any():
                    num, den = num + q[t, b] @ S0[b], den + q[t, b] @ z0[b]
                att = num / max(float(den), 1.0)
                ref = core.unmap(core.ff(att) + core.shortcut(n[t, b]))
                torch.testing.assert_close(out[t, b], ref, atol=1e-12, rtol=1e-12)
                S_ref = sum(torch.outer(k[s, b], v[s, b]) for s in range(start, t + 1))
                if not resets[: t + 1, b].any():
                    S_ref = S_ref + S0[b]
                torch.testing.assert_close(core.split_state(post[t, b])["S"], S_ref.flatten())


def test_linear_attention_sized_like_popgym() -> None:
    core = make_memory("linear_attention", 128, 256)
    assert core.dim == 15 and core.state_layout == {"S": 225, "z": 15}
    assert make_memory("linear_attention", 4, 6, dim=3).state_size == 12


# -- Elman -----------------------------------------------------------------------------------


def test_elman_equals_tanh_formula_with_resets() -> None:
    T, B, F, H = 12, 4, 3, 5
    torch.manual_seed(0)
    core = make_memory("elman", F, H)
    with torch.no_grad():
        for p in core.parameters():
            p.add_(0.3 * torch.randn_like(p))
    r = core.rnn
    x, h = torch.randn(T, B, F), torch.randn(B, H)
    resets = _resets(T, B, {1: [0], 2: [5, 6], 3: [2, 7, 11]})
    with torch.no_grad():
        out, post = core.unroll(x, h, resets)
        for t in range(T):
            h = h.masked_fill(resets[t].unsqueeze(-1), 0.0)
            h = torch.tanh(
                x[t] @ r.weight_ih_l0.t() + r.bias_ih_l0 + h @ r.weight_hh_l0.t() + r.bias_hh_l0
            )
            torch.testing.assert_close(out[t], h)
    assert torch.equal(post, out) and core.state_layout == {"h": H}


# -- all five: long chunks, options, PPO ------------------------------------------------------


@pytest.mark.parametrize("kind", KINDS)
def test_128_step_pass_equals_step_loop(kind: str) -> None:
    """A 128-step chunk (resets inside) in one pass == 128 acting steps, < 1e-5."""
    T, B, F, H = 128, 4, 6, 8
    torch.manual_seed(0)
    core = make_memory(kind, F, H)
    gen = torch.Generator().manual_seed(2)
    x = torch.randn(T, B, F, generator=gen)
    resets = _resets(T, B, {0: [0], 1: [40, 41, 100], 2: [127], 3: list(range(0, T, 9))})
    state = core.initial_state(B)
    with torch.no_grad():
        ref_out, ref_post = _step_loop(core, x, state, resets)
        out, post = core.unroll(x, state, resets)
        res = core.chunk_unroll(x, state, resets, 32)
    torch.testing.assert_close(out, ref_out, atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(post, ref_post, atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(res.out, ref_out, atol=1e-5, rtol=1e-5)


@pytest.mark.parametrize(
    ("kind", "kwargs", "match"),
    [
        ("framestack", {"k": 0}, "framestack k must be >= 1, got 0"),
        ("framestack", {"k": 2.0}, "framestack k must be an integer"),
        ("positional_mlp", {"max_len": 0}, "max_len must be >= 1"),
        ("linear_attention", {"dim": 0}, "linear_attention dim must be >= 1"),
        ("linear_recurrence", {"state_size": 0}, "state_size must be >= 1"),
        ("linear_recurrence", {"r_min": 0.999}, r"r_min must be < r_max=0.999"),
        ("linear_recurrence", {"r_max": 1.0}, r"r_max must be in \(0, 1\)"),
        ("linear_recurrence", {"complex_state": "yes"}, "complex_state must be True or False"),
        ("linear_recurrence", {"max_phase": 0.0}, "max_phase must be > 0"),
    ],
)
def test_bad_options_raise(kind: str, kwargs: dict, match: str) -> None:
    with pytest.raises(ConfigError, match=match):
        make_memory(kind, 4, 6, **kwargs)


@pytest.mark.parametrize("kind", KINDS)
def test_ppo_updates_with_each_core(kind: str) -> None:
    """Two rollouts and updates of PPO on the cue task: finite losses, parameters move, and the
    stored chunk-start states are the core's (its state size)."""
    net = NetworkConfig(
        memory=kind, hidden_size=16, trunk_sizes=(16,), head_sizes=(8,), conv_channels=(4,)
    )
    cfg = PPOConfig(network=net, num_steps=20, kl_target=None)
    env = CueMemoryEnv(8)
    learner = PPO(env.single_observation_space, env.single_action_space, cfg, seed=0)
    assert learner.net.memory.kind == kind
    assert learner.initial_state(8).shape == (8, learner.net.memory.state_size)
    for i in range(2):
        collect(env, learner, cfg.num_steps, seed=i)
        before = [p.detach().clone() for p in learner.net.parameters()]
        metrics = learner.update()
        for key in ("losses/policy_loss", "losses/value_loss", "losses/entropy"):
            assert math.isfinite(metrics[key]), key
        assert metrics["charts/minibatches"] == 16
        after = learner.net.parameters()
        assert any(not torch.equal(a, p) for a, p in zip(before, after, strict=True))
