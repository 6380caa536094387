"""Memory cores: reset semantics, fast path == step loop, chunking from stored states."""

from __future__ import annotations

import pytest
import torch

from marlgrid.agents.memory import MEMORY_KINDS, MemoryCore, make_memory

T, B, F, H = 9, 4, 5, 6


@pytest.fixture(autouse=True)
def _one_thread() -> None:
    torch.set_num_threads(1)


def _core(kind: str) -> torch.nn.Module:
    torch.manual_seed(0)
    core = make_memory(kind, F, H)
    with torch.no_grad():  # non-zero biases so a zero state is not a fixed point of anything
        for p in core.parameters():
            p.add_(0.1 * torch.randn_like(p))
    return core


def _random_state(core, batch: int = B) -> torch.Tensor:
    return torch.randn(batch, core.state_size)


@pytest.mark.parametrize("kind", MEMORY_KINDS)
def test_shapes_and_initial_state(kind: str) -> None:
    core = _core(kind)
    state = core.initial_state(B)
    expected = {"lstm": 2 * H, "gru": H, "none": 0}[kind]
    assert state.shape == (B, expected) and not state.any()
    out, new_state = core(torch.randn(T, B, F), state, torch.zeros(T, B, dtype=torch.bool))
    assert out.shape == (T, B, H) and new_state.shape == (B, expected)


@pytest.mark.parametrize("kind", MEMORY_KINDS)
def test_reset_zeroes_state_before_the_step(kind: str) -> None:
    """With a reset at step k, outputs from k on equal running x[k:] from a zero state."""
    core = _core(kind)
    x, state = torch.randn(T, B, F), _random_state(core)
    resets = torch.zeros(T, B, dtype=torch.bool)
    k = 4
    resets[k, 1] = resets[k, 3] = True
    with torch.no_grad():
        out, final = core(x, state, resets)
        ref_full, ref_final = core(x, state, torch.zeros_like(resets))
        ref_tail, ref_tail_final = core(x[k:], core.initial_state(B), torch.zeros_like(resets[k:]))
    # before the reset nothing changes; rows without a reset are unaffected throughout
    torch.testing.assert_close(out[:k], ref_full[:k])
    torch.testing.assert_close(out[:, [0, 2]], ref_full[:, [0, 2]])
    torch.testing.assert_close(final[[0, 2]], ref_final[[0, 2]])
    # reset rows: from k on, exactly the run from a zero state
    torch.testing.assert_close(out[k:, [1, 3]], ref_tail[:, [1, 3]])
    torch.testing.assert_close(final[[1, 3]], ref_tail_final[[1, 3]])


@pytest.mark.parametrize("kind", MEMORY_KINDS)
def test_reset_at_first_step_ignores_given_state(kind: str) -> None:
    core = _core(kind)
    x = torch.randn(T, B, F)
    resets = torch.zeros(T, B, dtype=torch.bool)
    resets[0] = True
    with torch.no_grad():
        out, _ = core(x, _random_state(core), resets)
        ref, _ = core(x, core.initial_state(B), resets)
    torch.testing.assert_close(out, ref)


@pytest.mark.parametrize("kind", MEMORY_KINDS)
@pytest.mark.parametrize("reset_prob", [0.0, 0.3])
def test_sequence_equals_step_by_step(kind: str, reset_prob: float) -> None:
    """One call over the sequence (fast path or loop) == T single-step calls; unroll agrees."""
    core = _core(kind)
    gen = torch.Generator().manual_seed(1)
    x, state = torch.randn(T, B, F, generator=gen), _random_state(core)
    resets = torch.rand(T, B, generator=gen) < reset_prob
    with torch.no_grad():
        out, final = core(x, state, resets)
        s, outs, posts = state, [], []
        for t in range(T):
            o, s = core(x[t : t + 1], s, resets[t : t + 1])
            outs.append(o[0])
            posts.append(s)
        u_out, post = core.unroll(x, state, resets)
    torch.testing.assert_close(out, torch.stack(outs), atol=1e-6, rtol=1e-5)
    torch.testing.assert_close(final, s, atol=1e-6, rtol=1e-5)
    torch.testing.assert_close(u_out, out, atol=1e-6, rtol=1e-5)
    torch.testing.assert_close(post, torch.stack(posts), atol=1e-6, rtol=1e-5)


@pytest.mark.parametrize("kind", ["lstm", "gru"])
def test_fast_path_gradients_match_loop(kind: str) -> None:
    """nn.LSTM/nn.GRU on a reset-free sequence and the step loop give the same gradients.

    The loop is forced by an extra batch row that resets mid-sequence; only real rows are scored.
    """
    core = _core(kind)
    x, state = torch.randn(T, B + 1, F), _random_state(core, B + 1)
    resets = torch.zeros(T, B + 1, dtype=torch.bool)
    grads = []
    for force_loop in (False, True):
        resets[3, B] = force_loop
        core.zero_grad()
        out, final = core(x, state, resets)
        ((out[:, :B] ** 2).sum() + final[:B].sum()).backward()
        grads.append([p.grad.clone() for p in core.parameters()])
    for a, b in zip(*grads, strict=True):
        torch.testing.assert_close(a, b, atol=1e-5, rtol=1e-4)


@pytest.mark.parametrize("kind", MEMORY_KINDS)
def test_chunks_from_stored_states_match_full_run(kind: str) -> None:
    """Cutting a sequence into chunks that start from the stored (reset-masked) states is exact."""
    core = _core(kind)
    gen = torch.Generator().manual_seed(2)
    x, state = torch.randn(T, B, F, generator=gen), _random_state(core)
    resets = torch.rand(T, B, generator=gen) < 0.25
    with torch.no_grad():
        out, post = core.unroll(x, state, resets)
        starts = torch.cat([state[None], post[:-1]]) * (~resets).unsqueeze(-1)
        L = 4
        for c in range(0, T, L):
            chunk_out, _ = core(x[c : c + L], starts[c], resets[c : c + L])
            torch.testing.assert_close(chunk_out, out[c : c + L], atol=1e-6, rtol=1e-5)


def test_unknown_kind_raises() -> None:
    with pytest.raises(ValueError, match="unknown memory kind"):
        make_memory("transformer", 3, 4)


@pytest.mark.parametrize("kind", ["lstm", "gru"])
@pytest.mark.parametrize("reset_prob", [0.0, 0.1, 0.5])
def test_outputs_split_path_matches_forward(kind: str, reset_prob: float) -> None:
    """Training path (segments padded into rows, one nn call) == the loop, gradients too."""
    core = _core(kind)
    core.split_ratio = 100.0  # always split at inner resets
    gen = torch.Generator().manual_seed(4)
    x = torch.randn(T, B, F, generator=gen, requires_grad=True)
    state = _random_state(core).requires_grad_()
    resets = torch.rand(T, B, generator=gen) < reset_prob
    resets[0, 0] = True
    out_a = core.outputs(x, state, resets)
    out_b, _ = core(x, state, resets)
    torch.testing.assert_close(out_a, out_b, atol=1e-6, rtol=1e-5)
    grads_a = torch.autograd.grad((out_a**2).sum(), [x, state, *core.parameters()])
    grads_b = torch.autograd.grad((out_b**2).sum(), [x, state, *core.parameters()])
    for a, b in zip(grads_a, grads_b, strict=True):
        torch.testing.assert_close(a, b, atol=1e-5, rtol=1e-4)


@pytest.mark.parametrize("kind", MEMORY_KINDS)
@pytest.mark.parametrize("reset_prob", [0.0, 0.15, 0.6])
@pytest.mark.parametrize("T_", [16, 19])
def test_chunk_unroll_matches_step_loop(kind: str, reset_prob: float, T_: int) -> None:
    """Refresh path (chained nn calls + one packed call) == the step loop, at every piece end."""
    core = _core(kind)
    L, N = 4, 7
    gen = torch.Generator().manual_seed(5)
    x, state = torch.randn(T_, N, F, generator=gen), _random_state(core, N)
    resets = torch.rand(T_, N, generator=gen) < reset_prob
    # request the state after every step that ends a piece (next step resets or starts a chunk)
    ends = torch.zeros(T_, N, dtype=torch.bool)
    ends[:-1] = resets[1:]
    ends[L - 1 :: L] = True
    ends[-1] = True
    post_t, post_b = ends.nonzero(as_tuple=True)
    with torch.no_grad():
        ref_out, ref_post = core.unroll(x, state, resets)
        ref_starts = torch.cat([state[None], ref_post[:-1]]) * (~resets).unsqueeze(-1)
        got = core.chunk_unroll(x, state, resets, L, post_t, post_b)
        generic = MemoryCore.chunk_unroll(core, x, state, resets, L, post_t, post_b)
    for res in (got, generic):
        torch.testing.assert_close(res.out, ref_out, atol=1e-6, rtol=1e-5)
        torch.testing.assert_close(res.starts, ref_starts[::L], atol=1e-6, rtol=1e-5)
        torch.testing.assert_close(res.final, ref_post[-1], atol=1e-6, rtol=1e-5)
        torch.testing.assert_close(res.post, ref_post[post_t, post_b], atol=1e-6, rtol=1e-5)
    # a requested state that does not end a piece falls back to the step loop, still exact
    if kind != "none":
        mid_t, mid_b = torch.tensor([1]), torch.tensor([0])
        if not bool(resets[2, 0]):
            with torch.no_grad():
                res = core.chunk_unroll(x, state, resets, L, mid_t, mid_b)
            torch.testing.assert_close(res.post, ref_post[mid_t, mid_b], atol=1e-6, rtol=1e-5)
