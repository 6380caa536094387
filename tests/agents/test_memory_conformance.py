"""Conformance suite of the memory cores: every registered core, every exact path it declares.

The suite is parametrized over ``CORES`` when it is collected, so a newly registered core is
covered without editing this file; a test-only core (:class:`TinyEMACore`, registered only while
a test uses it) proves that. The reference everywhere is step-by-step acting: ``T`` calls of
one step each, the state carried between them.
"""

from __future__ import annotations

import io
import math

import pytest
import torch
from torch import Tensor, nn

import marlgrid.agents.memory as memory
from marlgrid.agents.memory import (
    CORES,
    MEMORY_KINDS,
    ChunkPass,
    GRUCore,
    LSTMCore,
    MemoryCore,
    NoMemory,
    make_memory,
    piece_layout,
    register_core,
    segment_layout,
    step_layout,
    unregister_core,
)

T, B, F, H = 11, 5, 4, 6
TOL = {"atol": 1e-5, "rtol": 1e-5}
TINY = "test_tiny_ema"


class TinyEMACore(MemoryCore):
    """Test-only core built on the interface alone: ``h_t = d * h_{t-1} + (1 - d) tanh(W x_t)``."""

    def __init__(self, input_size: int, hidden_size: int, *, decay: float = 0.5) -> None:
        super().__init__(input_size, hidden_size)
        self.decay = decay
        self.linear = nn.Linear(input_size, hidden_size)

    @property
    def state_layout(self) -> dict[str, int]:
        return {"h": self.hidden_size}

    def unroll(self, x: Tensor, state: Tensor, resets: Tensor) -> tuple[Tensor, Tensor]:
        drive, h, post = torch.tanh(self.linear(x)), state, []
        for t in range(x.shape[0]):
            h = self.decay * self.reset_state(h, resets[t]) + (1 - self.decay) * drive[t]
            post.append(h)
        return torch.stack(post), torch.stack(post)

    def forward(self, x: Tensor, state: Tensor, resets: Tensor) -> tuple[Tensor, Tensor]:
        out, post = self.unroll(x, state, resets)
        return out, post[-1]


@pytest.fixture(params=[*CORES, TINY])
def kind(request: pytest.FixtureRequest):
    """Each registered core's name, and the test-only core's (registered for that test only)."""
    torch.set_num_threads(1)
    if request.param != TINY:
        yield request.param
        return
    register_core(TINY)(TinyEMACore)
    try:
        yield TINY
    finally:
        unregister_core(TINY)


def _core(kind: str, **kwargs) -> MemoryCore:
    torch.manual_seed(0)
    core = make_memory(kind, F, H, **kwargs)
    with torch.no_grad():  # non-zero biases, so a zero state is no fixed point of anything
        for p in core.parameters():
            p.add_(0.3 * torch.randn_like(p))
    return core


def _inputs(core: MemoryCore, p: float, seed: int, steps: int = T) -> tuple[Tensor, ...]:
    gen = torch.Generator().manual_seed(seed)
    x = torch.randn(steps, B, F, generator=gen)
    state = torch.randn(B, core.state_size, generator=gen)
    return x, state, torch.rand(steps, B, generator=gen) < p


def _step_by_step(core: MemoryCore, x: Tensor, state: Tensor, resets: Tensor) -> tuple:
    """Acting reference: outputs, the state after each step, the state used at each step."""
    outs, post, used = [], [], []
    for t in range(x.shape[0]):
        used.append(core.reset_state(state, resets[t]))
        o, state = core(x[t : t + 1], state, resets[t : t + 1])
        outs.append(o[0])
        post.append(state)
    return torch.stack(outs), torch.stack(post), torch.stack(used)


def _paths(core: MemoryCore) -> tuple[str, ...]:
    return core.chunk_paths or (core.chunk_path,)


def _outputs_paths(core: MemoryCore):
    """Set each declared path of ``outputs`` in turn (the default once if none)."""
    for path in core.outputs_paths or (core.outputs_path,):
        core.outputs_path = path
        yield path
    core.outputs_path = "auto"


def _all_paths(core: MemoryCore, x: Tensor, state: Tensor, resets: Tensor, L: int = 3):
    """``(name, outputs, final state)`` of every sequence path of the core."""
    out, final = core(x, state, resets)
    yield "forward", out, final
    for path in _outputs_paths(core):
        yield f"outputs[{path}]", core.outputs(x, state, resets), final
    u_out, post = core.unroll(x, state, resets)
    yield "unroll", u_out, post[-1]
    for path in _paths(core):
        core.chunk_path = path
        res = core.chunk_unroll(x, state, resets, L)
        yield f"chunk_unroll[{path}]", res.out, res.final
    core.chunk_path = "auto"


# -- state layout, shapes, initial state ------------------------------------------------------

BUILT_IN_LAYOUTS = {"lstm": {"h": H, "c": H}, "gru": {"h": H}, "none": {}}


def test_state_layout_shapes_and_zero_initial_state(kind: str) -> None:
    core = _core(kind)
    layout = core.state_layout
    assert all(isinstance(k, str) and v > 0 for k, v in layout.items())
    assert layout == BUILT_IN_LAYOUTS.get(kind, layout)
    assert core.state_size == sum(layout.values())
    state = core.initial_state(B)
    assert state.shape == (B, core.state_size) and not state.any()
    assert state.dtype == torch.float32
    parts = core.split_state(torch.randn(B, core.state_size))
    assert list(parts) == list(layout)
    assert all(parts[k].shape == (B, n) for k, n in layout.items())
    s = torch.randn(3, B, core.state_size)  # any leading shape
    if layout:
        torch.testing.assert_close(core.join_state(core.split_state(s)), s, rtol=0, atol=0)
    with pytest.raises(ValueError, match="state parts"):
        core.join_state({"nope": s})
    x, state, resets = _inputs(core, 0.3, 0)
    with torch.no_grad():
        out, final = core(x, state, resets)
        u_out, post = core.unroll(x, state, resets)
        res = core.chunk_unroll(x, state, resets, 4, torch.tensor([2, 10]), torch.tensor([0, 4]))
    assert out.shape == u_out.shape == (T, B, H) and final.shape == (B, core.state_size)
    assert post.shape == (T, B, core.state_size)
    assert isinstance(res, ChunkPass)
    assert res.starts.shape == (3, B, core.state_size) and res.post.shape == (2, core.state_size)


# -- resets ----------------------------------------------------------------------------------

#: column -> its reset steps: none, t = 0, inside, two in a row, several incl. t = 0
RESET_STEPS = {0: [], 1: [0], 2: [4], 3: [4, 5], 4: [0, 3, 8]}


def test_reset_equals_fresh_start_on_every_path(kind: str) -> None:
    """From a column's last reset on, outputs and final state equal a fresh run from that step;
    before its first reset, a run without resets."""
    core = _core(kind)
    x, state, _ = _inputs(core, 0.0, 1)
    resets = torch.zeros(T, B, dtype=torch.bool)
    for b, steps in RESET_STEPS.items():
        resets[steps, b] = True
    with torch.no_grad():
        plain, _ = core(x, state, torch.zeros_like(resets))
        for name, out, final in _all_paths(core, x, state, resets):
            for b, steps in RESET_STEPS.items():
                first, last = (steps[0], steps[-1]) if steps else (T, 0)
                torch.testing.assert_close(out[:first, b], plain[:first, b], **TOL, msg=name)
                if not steps:
                    continue
                no_resets = torch.zeros(T - last, 1, dtype=torch.bool)
                fresh, fresh_final = core(x[last:, b : b + 1], core.initial_state(1), no_resets)
                torch.testing.assert_close(out[last:, b], fresh[:, 0], **TOL, msg=name)
                torch.testing.assert_close(final[b], fresh_final[0], **TOL, msg=name)


# -- sequences against step-by-step acting ---------------------------------------------------


@pytest.mark.parametrize("p", [0.0, 0.3, 0.7])
def test_sequence_paths_equal_step_by_step(kind: str, p: float) -> None:
    """forward, outputs and unroll over a sequence == T single-step calls (< 1e-5)."""
    core = _core(kind)
    x, state, resets = _inputs(core, p, 2)
    with torch.no_grad():
        ref_out, ref_post, _ = _step_by_step(core, x, state, resets)
        out, final = core(x, state, resets)
        u_out, post = core.unroll(x, state, resets)
        for path in _outputs_paths(core):
            torch.testing.assert_close(core.outputs(x, state, resets), out, **TOL, msg=path)
    torch.testing.assert_close(out, ref_out, **TOL)
    torch.testing.assert_close(final, ref_post[-1], **TOL)
    torch.testing.assert_close(u_out, ref_out, **TOL)
    torch.testing.assert_close(post, ref_post, **TOL)


@pytest.mark.parametrize("steps", [11, 16])
@pytest.mark.parametrize("chunk_len", [1, 3, 4, 11, 13])
def test_chunk_unroll_equals_recomputation(kind: str, steps: int, chunk_len: int) -> None:
    """Every chunk_unroll path == step-by-step recomputation: outputs, chunk-start states (after
    their resets), final state, and post-step states requested anywhere."""
    core = _core(kind)
    x, state, resets = _inputs(core, 0.2, 3 + steps + chunk_len, steps)
    resets[chunk_len::chunk_len, ::2] = True  # resets at chunk starts too
    gen = torch.Generator().manual_seed(chunk_len)
    post_t = torch.cat([torch.randint(0, steps, (6,), generator=gen), torch.tensor([steps - 1])])
    post_b = torch.randint(0, B, (7,), generator=gen)
    with torch.no_grad():
        ref_out, ref_post, ref_used = _step_by_step(core, x, state, resets)
        for path in _paths(core):
            core.chunk_path = path
            res = core.chunk_unroll(x, state, resets, chunk_len, post_t, post_b)
            generic = MemoryCore.chunk_unroll(core, x, state, resets, chunk_len, post_t, post_b)
            for got in (res, generic):
                torch.testing.assert_close(got.out, ref_out, **TOL, msg=path)
                torch.testing.assert_close(got.starts, ref_used[::chunk_len], **TOL, msg=path)
                torch.testing.assert_close(got.final, ref_post[-1], **TOL, msg=path)
                torch.testing.assert_close(got.post, ref_post[post_t, post_b], **TOL, msg=path)
            for k, t0 in enumerate(range(0, steps, chunk_len)):  # a chunk from its start state
                chunk = slice(t0, t0 + chunk_len)
                out, _ = core(x[chunk], res.starts[k], resets[chunk])
                torch.testing.assert_close(out, ref_out[chunk], **TOL, msg=path)
            empty = core.chunk_unroll(x, state, resets, chunk_len)
            assert empty.post.shape == (0, core.state_size)


def test_gradients_equal_step_loop(kind: str) -> None:
    """Gradients through outputs (and through unroll's states) == those of the step loop."""
    core = _core(kind)
    x, state, resets = _inputs(core, 0.3, 4)
    resets[0, 0] = True
    gen = torch.Generator().manual_seed(5)
    w_out = torch.randn(T, B, H, generator=gen)
    w_post = torch.randn(T, B, core.state_size, generator=gen)
    leaves = [x.requires_grad_(), state.requires_grad_(), *core.parameters()]

    def grads(loss: Tensor) -> list[Tensor]:
        got = torch.autograd.grad(loss, leaves, allow_unused=True)
        return [torch.zeros_like(v) if g is None else g for g, v in zip(got, leaves, strict=True)]

    ref_out, ref_post, _ = _step_by_step(core, x, state, resets)
    ref = grads((w_out * ref_out).sum() + (w_post * ref_post).sum())
    ref_o = grads((w_out * _step_by_step(core, x, state, resets)[0]).sum())
    u_out, post = core.unroll(x, state, resets)
    cases = {
        "forward": grads((w_out * core(x, state, resets)[0]).sum()),
        "unroll": grads((w_out * u_out).sum() + (w_post * post).sum()),
    }
    for path in _outputs_paths(core):
        cases[f"outputs[{path}]"] = grads((w_out * core.outputs(x, state, resets)).sum())
    for name, got in cases.items():
        for a, b in zip(got, ref if name == "unroll" else ref_o, strict=True):
            torch.testing.assert_close(a, b, atol=1e-5, rtol=1e-4, msg=name)


# -- state_dict, devices, dtypes -------------------------------------------------------------


def test_state_dict_round_trip(kind: str) -> None:
    core = _core(kind)
    buf = io.BytesIO()
    torch.save(core.state_dict(), buf)
    buf.seek(0)
    torch.manual_seed(1)
    other = make_memory(kind, F, H)
    other.load_state_dict(torch.load(buf, weights_only=True))
    x, state, resets = _inputs(core, 0.3, 6)
    with torch.no_grad():
        for (name, a, fa), (_, b, fb) in zip(
            _all_paths(core, x, state, resets), _all_paths(other, x, state, resets), strict=True
        ):
            assert torch.equal(a, b) and torch.equal(fa, fb), name


def test_dtype_and_device_moves(kind: str) -> None:
    core = _core(kind)
    x, state, resets = _inputs(core, 0.3, 7)
    with torch.no_grad():
        out32, final32 = core(x, state, resets)
        assert core.to("cpu") is core
        core64 = core.to(torch.float64)
        assert core64.initial_state(B).dtype == torch.float64
        x64, s64 = x.double(), state.double()
        ref_out, ref_post, ref_used = _step_by_step(core64, x64, s64, resets)
        for name, out, final in _all_paths(core64, x64, s64, resets, L=4):
            assert out.dtype == torch.float64, name
            torch.testing.assert_close(out, ref_out, atol=1e-12, rtol=1e-12, msg=name)
            torch.testing.assert_close(final, ref_post[-1], atol=1e-12, rtol=1e-12, msg=name)
            torch.testing.assert_close(out.float(), out32, **TOL, msg=name)
        res = core64.chunk_unroll(x64, s64, resets, 4)
        torch.testing.assert_close(res.starts, ref_used[::4], atol=1e-12, rtol=1e-12)
        torch.testing.assert_close(final.float(), final32, **TOL)


@pytest.mark.skipif(not torch.cuda.is_available(), reason="no CUDA device")
def test_cuda_matches_cpu(kind: str) -> None:
    core = _core(kind)
    x, state, resets = _inputs(core, 0.3, 8)
    with torch.no_grad():
        cpu = list(_all_paths(core, x, state, resets))
        core.cuda()
        assert core.initial_state(B).device.type == "cuda"
        gpu = list(_all_paths(core, x.cuda(), state.cuda(), resets.cuda()))
    for (name, a, fa), (_, b, fb) in zip(cpu, gpu, strict=True):
        torch.testing.assert_close(b.cpu(), a, atol=1e-4, rtol=1e-4, msg=name)
        torch.testing.assert_close(fb.cpu(), fa, atol=1e-4, rtol=1e-4, msg=name)


# -- options and registry --------------------------------------------------------------------


def test_options_defaults_and_unknown_keys(kind: str) -> None:
    cls = CORES[kind]
    options = cls.options()
    torch.manual_seed(0)
    plain = make_memory(kind, F, H)
    torch.manual_seed(0)
    explicit = make_memory(kind, F, H, **options)
    for a, b in zip(plain.parameters(), explicit.parameters(), strict=True):
        assert torch.equal(a, b)
    with pytest.raises(ValueError) as err:
        make_memory(kind, F, H, num_layerz=2)
    msg = str(err.value)
    assert repr(kind) in msg and cls.__name__ in msg and "'num_layerz'" in msg
    assert all(repr(name) in msg for name in options) if options else "no options" in msg


def test_registry_is_live_and_the_test_core_is_covered(kind: str) -> None:
    kinds = memory.MEMORY_KINDS  # read now: includes a core registered since
    assert kinds == tuple(CORES) and kind in kinds
    assert set(MEMORY_KINDS) <= set(CORES)  # the names there when this module was imported
    assert make_memory(kind, F, H).kind == kind


def test_registry_errors_and_cleanup() -> None:
    assert TINY not in CORES  # the fixture's registration did not leak
    with pytest.raises(ValueError, match="unknown memory kind 'transformer'.*registered kinds"):
        make_memory("transformer", F, H)
    with pytest.raises(ValueError, match="already registered"):
        register_core("lstm")(TinyEMACore)
    assert CORES["lstm"] is LSTMCore


# -- the built-in cores' options, against hand-computed values --------------------------------


def test_lstm_forget_bias() -> None:
    core = make_memory("lstm", F, H, forget_bias=1.0)
    bias = core.rnn.bias_ih_l0.detach()
    assert torch.equal(bias[H : 2 * H], torch.ones(H)) and not bias[:H].any()
    # x = 0, h = 0, c = 1: gates are the biases, i = o = 1/2, f = sigmoid(1), g = 0
    state = torch.cat([torch.zeros(1, H), torch.ones(1, H)], -1)
    with torch.no_grad():
        out, final = core(torch.zeros(1, 1, F), state, torch.zeros(1, 1, dtype=torch.bool))
    c = 1 / (1 + math.exp(-1.0))
    torch.testing.assert_close(core.split_state(final)["c"], torch.full((1, H), c))
    torch.testing.assert_close(out[0], torch.full((1, H), 0.5 * math.tanh(c)))


def test_gru_update_bias() -> None:
    core = make_memory("gru", F, H, update_bias=2.0)
    with torch.no_grad():
        core.rnn.weight_hh_l0.zero_()  # then with x = 0: r = 1/2, n = 0, z = sigmoid(2)
        out, final = core(torch.zeros(1, 1, F), torch.full((1, H), 0.8), torch.zeros(1, 1) > 0)
    torch.testing.assert_close(final, torch.full((1, H), 0.8 / (1 + math.exp(-2.0))))
    assert isinstance(core, GRUCore) and torch.equal(out[0], final)


def test_none_activation() -> None:
    x = torch.randn(T, B, F)
    state, resets = torch.zeros(B, 0), torch.zeros(T, B, dtype=torch.bool)
    for name, fn in [("relu", torch.relu), ("tanh", torch.tanh), ("identity", lambda v: v)]:
        core = make_memory("none", F, H, activation=name)
        assert isinstance(core, NoMemory)
        with torch.no_grad():
            torch.testing.assert_close(core(x, state, resets)[0], fn(core.linear(x)))
    with pytest.raises(ValueError, match="activation must be one of"):
        make_memory("none", F, H, activation="gelu")


# -- layouts ---------------------------------------------------------------------------------


def test_step_layout_by_hand() -> None:
    """T 4, B 2: column 0 resets at t = 2 (one reset step before it), column 1 ends on a hold."""
    resets = torch.zeros(4, 2, dtype=torch.bool)
    resets[[0, 2], 0] = True  # the reset at t = 0 needs no reset step
    lay = step_layout(resets)
    R, Hd = 8, 9  # reset row, hold row
    assert lay.length == 5
    assert lay.src.tolist() == [0, 1, 2, 3, R, 5, 4, 7, 6, Hd]
    assert lay.dst.tolist() == [0, 1, 2, 3, 6, 5, 8, 7]


def test_piece_layout_by_hand() -> None:
    """T 5, B 2, blocks of 3: column 0 resets at t = 1 (inside block 0) and t = 3 (opens block
    1); column 1 at t = 4 (inside block 1)."""
    resets = torch.zeros(5, 2, dtype=torch.bool)
    resets[[1, 3], 0] = True
    resets[4, 1] = True
    lay = piece_layout(resets, 3)
    Hd = 10  # the hold row
    # block 0: 3 steps x 3 lanes (col 0 [t0], col 1 [t0..t2], col 0 [t1, t2]); block 1: 2 x 3
    assert lay.blocks == [(0, 3, 3, 0), (9, 2, 3, 3)]
    assert lay.src.tolist() == [0, 1, 2, Hd, 3, 4, Hd, 5, Hd] + [6, 7, 9, 8, Hd, Hd]
    assert lay.dst.tolist() == [[0, 1], [2, 4], [5, 7], [0, 1], [3, 2]]
    assert lay.lane.tolist() == [[0, 1], [2, 1], [2, 1], [3, 4], [3, 5]]
    assert lay.ends_piece.tolist() == [[1, 0], [0, 0], [1, 1], [0, 1], [1, 1]]
    assert lay.last.tolist() == [0, 7, 5, 3, 1, 2]
    assert lay.end_lane.tolist() == [[2, 1], [0, 2]]


def test_segment_layout_by_hand() -> None:
    resets = torch.tensor([[1, 0], [0, 0], [1, 0], [0, 1]], dtype=torch.bool)
    tau, row, first_row, R = segment_layout(resets)
    assert R == 4 and first_row.tolist() == [0, 2]
    assert tau.tolist() == [[0, 0], [1, 1], [0, 2], [1, 0]]
    assert row.tolist() == [[0, 2], [0, 2], [1, 2], [1, 3]]
