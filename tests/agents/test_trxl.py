"""The Transformer-XL cores (``trxl``, ``gtrxl``) beyond the conformance suite: the window, its
mask, positions and gates against hand computations, short memories and several option sets
on every path, and PPO with the core (refresh, updates, the cue-memory task)."""

from __future__ import annotations

import io
import math

import numpy as np
import pytest
import torch
from gymnasium import spaces
from torch import Tensor

from marlgrid.agents.algorithms.ppo import PPO, PPOConfig
from marlgrid.agents.memory import MemoryCore, make_memory
from marlgrid.agents.memory.trxl import GTrXLCore, TrXLCore
from marlgrid.agents.memory.trxl_blocks import GRUGate, Positions
from marlgrid.agents.networks.models import NetworkConfig
from marlgrid.agents.storage.rollout_buffer import RolloutBuffer
from marlgrid.config import ConfigError
from tests.agents.conftest import collect, train_learner
from tests.toy_envs import CueMemoryEnv, RandomEpisodesEnv

F, D = 4, 6
TOL = {"atol": 1e-5, "rtol": 1e-5}
#: option sets run on every path: short windows (sliding inside the test sequences), both layer
#: norms, all positional encodings (a learned table shorter than the episodes), gates
VARIANTS = {
    "pre_sinusoid_l3": {"memory_length": 3},
    "post_learned_gated_l4": {
        "memory_length": 4,
        "layer_norm": "post",
        "positional": "learned",
        "gating": True,
        "n_layers": 3,
        "max_position": 6,
    },
    "pre_none_gated_l1": {"memory_length": 1, "positional": "none", "gating": True, "n_heads": 3},
}


@pytest.fixture(autouse=True)
def _one_thread() -> None:
    torch.set_num_threads(1)


def _core(kind: str = "trxl", seed: int = 0, **kwargs) -> MemoryCore:
    torch.manual_seed(seed)
    core = make_memory(kind, F, D, **kwargs)
    with torch.no_grad():  # non-zero biases and layer-norm shifts
        for p in core.parameters():
            p.add_(0.3 * torch.randn_like(p))
    return core


def _inputs(core: MemoryCore, T: int, B: int, p: float, seed: int) -> tuple[Tensor, ...]:
    gen = torch.Generator().manual_seed(seed)
    x = torch.randn(T, B, F, generator=gen)
    state = torch.randn(B, core.state_size, generator=gen)  # any state: garbage cache included
    return x, state, torch.rand(T, B, generator=gen) < p


def _state(core: MemoryCore, B: int, step: float = 0.0) -> Tensor:
    """An empty window at episode step ``step``."""
    s = core.initial_state(B)
    s[:, -1] = step
    return s


def _acting(core: MemoryCore, x: Tensor, state: Tensor, resets: Tensor) -> tuple[Tensor, ...]:
    """T single-step calls: outputs, states after each step, states used at each step."""
    outs, post, used = [], [], []
    for t in range(x.shape[0]):
        used.append(core.reset_state(state, resets[t]))
        o, state = core(x[t : t + 1], state, resets[t : t + 1])
        outs.append(o[0])
        post.append(state)
    return torch.stack(outs), torch.stack(post), torch.stack(used)


def _no_resets(T: int, B: int = 1) -> Tensor:
    return torch.zeros(T, B, dtype=torch.bool)


# -- layout and options -----------------------------------------------------------------------


def test_state_layout_and_defaults() -> None:
    core = make_memory("trxl", F, D, memory_length=5, n_layers=3)
    assert isinstance(core, TrXLCore) and not core.gating
    assert core.state_layout == {"cache": 3 * 5 * D, "valid": 5, "step": 1}
    assert core.state_size == 90 + 5 + 1
    gated = make_memory("gtrxl", F, D)
    assert isinstance(gated, GTrXLCore) and gated.gating and gated.kind == "gtrxl"
    assert TrXLCore.options() == {**GTrXLCore.options(), "gating": False}
    assert set(TrXLCore.options()) == {
        "memory_length", "n_layers", "n_heads", "positional", "layer_norm", "gating",
        "gate_bias", "max_position",
    }  # fmt: skip


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        ({"memory_length": 0}, r"memory_kwargs.memory_length must be >= 1, got 0"),
        ({"memory_length": 2.0}, r"memory_length must be an integer, got 2.0"),
        ({"n_layers": 0}, r"n_layers must be >= 1"),
        ({"n_heads": 4}, r"n_heads must divide hidden_size=6, got 4"),
        ({"positional": "relative"}, r"positional must be one of \['sinusoid', 'learned', 'none'"),
        ({"layer_norm": "none"}, r"layer_norm must be one of \['pre', 'post'\], got 'none'"),
        ({"gating": "yes"}, r"gating must be True or False, got 'yes'"),
        ({"gate_bias": math.inf}, r"gate_bias must be a finite number"),
        ({"max_position": 0}, r"max_position must be >= 1"),
    ],
)
def test_bad_options_raise_naming_the_value(kwargs: dict, match: str) -> None:
    with pytest.raises(ConfigError, match=match):
        make_memory("trxl", F, D, **kwargs)


# -- hand computations ------------------------------------------------------------------------


def test_sinusoid_learned_and_no_positions_by_hand() -> None:
    like = torch.zeros(())
    pe = Positions("sinusoid", 5, 8)(torch.tensor([3]), like)[0]
    w1, w2 = 3 * 10000.0 ** (-2 / 5), 3 * 10000.0 ** (-4 / 5)
    expected = [math.sin(3), math.cos(3), math.sin(w1), math.cos(w1), math.sin(w2)]
    torch.testing.assert_close(pe, torch.tensor(expected))
    learned = Positions("learned", 5, 4)
    got = learned(torch.tensor([0, 3, 4, 100]), like)
    table = learned.table.weight.detach()
    torch.testing.assert_close(got, table[[0, 3, 3, 3]])  # past the table: its last row
    assert not Positions("none", 5, 8)(torch.tensor([[2, 7]]), like).any()


def test_gru_gate_by_hand() -> None:
    """With zero weights: r = 1/2, z = sigmoid(-b), h = tanh(0) = 0, so out = (1 - z) x."""
    gate = GRUGate(D, 2.0)
    with torch.no_grad():
        for lin in (gate.w, gate.u, gate.u_h):
            lin.weight.zero_()
    x, y = torch.randn(3, D), torch.randn(3, D)
    z = 1 / (1 + math.exp(2.0))
    torch.testing.assert_close(gate(x, y), (1 - z) * x)
    assert torch.equal(gate.bias.detach(), torch.full((D,), 2.0))


def test_first_step_reads_only_itself_by_hand() -> None:
    """At an episode's first step the one key is the step itself: the attention's softmax is 1
    on it, so the context is its own value, whatever the (masked) cache holds; no NaN."""
    core = _core("trxl", n_layers=1, memory_length=4)
    assert isinstance(core, TrXLCore)
    x = torch.randn(1, 3, F)
    garbage = torch.randn(3, core.state_size)
    garbage[:, -5:-1] = 0.0  # validity 0: every slot masked
    garbage[:, -1] = -0.7  # episode step max(0, round(-0.7)) = 0
    with torch.no_grad():
        out, _ = core(x, garbage, _no_resets(1, 3))
        fresh, _ = core(x, core.initial_state(3), _no_resets(1, 3))
        blk = core.blocks[0]
        h = core.embed(x[0]) + torch.tensor([0.0, 1.0] * 3)  # sin 0, cos 0
        v = blk.attn.kv(blk.norm1(h))[:, D:]
        y = h + blk.attn.out(v)
        expected = core.final_norm(y + blk.ffn(blk.norm2(y)))
    torch.testing.assert_close(out[0], expected, **TOL)
    torch.testing.assert_close(out, fresh, **TOL)
    for kind, kwargs in VARIANTS.items():
        c = _core("gtrxl" if "gated" in kind else "trxl", **kwargs)
        with torch.no_grad():
            first, _ = c(torch.randn(1, 3, F), c.initial_state(3), _no_resets(1, 3))
        assert torch.isfinite(first).all(), kind


# -- every path against acting, for short windows and several option sets ----------------------


@pytest.mark.parametrize("variant", list(VARIANTS))
def test_every_path_equals_acting(variant: str) -> None:
    core = _core(**VARIANTS[variant])
    T, B = 13, 4
    x, state, resets = _inputs(core, T, B, 0.25, 1)
    resets[0, 0] = resets[5, 1] = resets[6, 1] = True
    post_t, post_b = torch.tensor([0, 3, 6, 12, 9]), torch.tensor([2, 1, 1, 3, 0])
    with torch.no_grad():
        ref_out, ref_post, ref_used = _acting(core, x, state, resets)
        out, final = core(x, state, resets)
        u_out, post = core.unroll(x, state, resets)
        torch.testing.assert_close(core.outputs(x, state, resets), ref_out, **TOL)
        for got in (out, u_out):
            torch.testing.assert_close(got, ref_out, **TOL)
        torch.testing.assert_close(final, ref_post[-1], **TOL)
        torch.testing.assert_close(post, ref_post, **TOL)
        for chunk_len in (1, 4, 5, 13):
            res = core.chunk_unroll(x, state, resets, chunk_len, post_t, post_b)
            torch.testing.assert_close(res.out, ref_out, **TOL)
            torch.testing.assert_close(res.starts, ref_used[::chunk_len], **TOL)
            torch.testing.assert_close(res.final, ref_post[-1], **TOL)
            torch.testing.assert_close(res.post, ref_post[post_t, post_b], **TOL)
            for k, t0 in enumerate(range(0, T, chunk_len)):  # each chunk from its start state
                chunk = slice(t0, t0 + chunk_len)
                c_out, _ = core(x[chunk], res.starts[k], resets[chunk])
                torch.testing.assert_close(c_out, ref_out[chunk], **TOL)


@pytest.mark.parametrize("variant", list(VARIANTS))
def test_gradients_of_the_chunk_pass_equal_acting(variant: str) -> None:
    core = _core(**VARIANTS[variant])
    x, state, resets = _inputs(core, 9, 3, 0.2, 2)
    w = torch.randn(9, 3, D, generator=torch.Generator().manual_seed(0))
    leaves = [x.requires_grad_(), state.requires_grad_(), *core.parameters()]

    def grads(out: Tensor) -> list[Tensor]:
        got = torch.autograd.grad((w * out).sum(), leaves, allow_unused=True)
        return [torch.zeros_like(v) if g is None else g for g, v in zip(got, leaves, strict=True)]

    ref = grads(_acting(core, x, state, resets)[0])
    for got in (grads(core.outputs(x, state, resets)), grads(core(x, state, resets)[0])):
        for a, b in zip(got, ref, strict=True):
            torch.testing.assert_close(a, b, atol=1e-5, rtol=1e-4)


@pytest.mark.parametrize("variant", list(VARIANTS))
def test_reset_masks_the_window(variant: str) -> None:
    """After a reset, outputs and the final state are a fresh run's; a window that is only
    zeroed but still marked valid (no mask) is read and changes the outputs."""
    core = _core(**VARIANTS[variant])
    T, r = 11, 6
    x, state, _ = _inputs(core, T, 1, 0.0, 3)
    resets = _no_resets(T)
    resets[r] = True
    with torch.no_grad():
        out, final = core(x, state, resets)
        fresh, fresh_final = core(x[r:], core.initial_state(1), _no_resets(T - r))
        zeroed = core.initial_state(1)
        zeroed[:, -core.memory_length - 1 : -1] = 1.0  # zero cache, all slots valid
        unmasked, _ = core(x[r:], zeroed, _no_resets(T - r))
    torch.testing.assert_close(out[r:], fresh, **TOL)
    torch.testing.assert_close(final, fresh_final, **TOL)
    assert (unmasked[0] - fresh[0]).abs().max() > 1e-3


@pytest.mark.parametrize("positional", ["none", "sinusoid"])
def test_sliding_window_forgets_steps_older_than_memory_length(positional: str) -> None:
    """One layer, L = 2: the output at step t >= 2 is that of a fresh window over steps t-2..t
    (at episode step t-2), so what came before t-2 no longer matters; the final state holds 2
    valid slots and episode step T."""
    core = _core(memory_length=2, n_layers=1, positional=positional)
    T = 9
    x = torch.randn(T, 1, F)
    with torch.no_grad():
        out, final = core(x, core.initial_state(1), _no_resets(T))
        for t in range(2, T):
            win, _ = core(x[t - 2 : t + 1], _state(core, 1, t - 2), _no_resets(3))
            torch.testing.assert_close(out[t], win[-1], **TOL)
    parts = core.split_state(final)
    assert parts["valid"].tolist() == [[1.0, 1.0]] and parts["step"].item() == T


@pytest.mark.parametrize("n_layers", [1, 2, 3])
def test_reach_is_memory_length_times_layers(n_layers: int) -> None:
    """Each layer caches its inputs, which at layer i > 0 already mix the L steps before them:
    a step reaches n_layers * L steps back (Transformer-XL's reach), no further."""
    L, T = 2, 10
    core = _core(memory_length=L, n_layers=n_layers)
    x = torch.randn(T, 1, F)
    x2 = x.clone()
    x2[0] += 1.0
    with torch.no_grad():
        out, _ = core(x, core.initial_state(1), _no_resets(T))
        out2, _ = core(x2, core.initial_state(1), _no_resets(T))
    reach = n_layers * L
    assert (out2[: reach + 1] - out[: reach + 1]).abs().amax(-1).min() > 1e-5
    assert torch.equal(out2[reach + 1 :], out[reach + 1 :])


def test_window_longer_than_the_episode_so_far() -> None:
    """An episode shorter than the window reads all of it: a core with L = 20 and one with L = 5
    (same weights) agree on its first 6 steps, then part; the window's validity grows by one
    slot a step, and the step counts the episode."""
    long_core = _core(memory_length=20)
    short = _core(memory_length=5)
    short.load_state_dict(long_core.state_dict())
    T, r = 15, 3
    x, state, _ = _inputs(long_core, T, 1, 0.0, 4)
    resets = _no_resets(T)
    resets[r] = True
    with torch.no_grad():
        out_long, post = long_core.unroll(x, state, resets)
        out_short, _ = short(x, short.initial_state(1), resets)
    torch.testing.assert_close(out_long[r : r + 6], out_short[r : r + 6], **TOL)
    assert (out_long[r + 6 :] - out_short[r + 6 :]).abs().amax(-1).min() > 1e-5
    parts = long_core.split_state(post[r:, 0])
    k = torch.arange(T - r, dtype=torch.float32)
    torch.testing.assert_close(parts["valid"].sum(-1), k + 1)  # min(k + 1, 20) = k + 1
    torch.testing.assert_close(parts["step"][:, 0], k + 1)
    assert not parts["valid"][:, : 20 - (T - r)].any()  # the oldest slots stay empty


def test_state_dict_round_trip_continues_an_episode() -> None:
    core = _core("gtrxl", memory_length=4, positional="learned")
    buf = io.BytesIO()
    torch.save(core.state_dict(), buf)
    buf.seek(0)
    other = make_memory("gtrxl", F, D, memory_length=4, positional="learned")
    other.load_state_dict(torch.load(buf, weights_only=True))
    x, state, resets = _inputs(core, 10, 2, 0.2, 5)
    with torch.no_grad():
        _, mid = core(x[:5], state, resets[:5])
        a, fa = core(x[5:], mid, resets[5:])
        b, fb = other(x[5:], mid, resets[5:])
    assert torch.equal(a, b) and torch.equal(fa, fb)
    assert "positions.freqs" not in core.state_dict()  # a constant, not a weight


def test_bootstrap_step_equals_the_next_step_of_the_pass() -> None:
    """The value bootstrap (one step from the final state of a chunk pass) reads the same window
    as step T of one pass over T + 1 steps: the most recent steps included, none dropped."""
    core = _core(memory_length=3)
    x, state, resets = _inputs(core, 13, 3, 0.15, 6)
    with torch.no_grad():
        whole, _ = core(x, state, resets)
        res = core.chunk_unroll(x[:12], state, resets[:12], 4)
        boot, _ = core(x[12:], res.final, resets[12:])
    torch.testing.assert_close(boot[0], whole[12], **TOL)
    torch.testing.assert_close(res.out, whole[:12], **TOL)


# -- with PPO ---------------------------------------------------------------------------------

SMALL = {"hidden_size": 16, "trunk_sizes": (16,), "head_sizes": (8,)}


def test_ppo_refresh_with_unchanged_weights_keeps_states_and_values() -> None:
    """States stored while acting (every step) and the values then computed equal one exact
    refresh pass; states are zero exactly at episode starts."""
    space = spaces.Box(-1.0, 1.0, (5,), np.float32)
    net = NetworkConfig(memory="trxl", memory_kwargs={"memory_length": 4}, **SMALL)
    cfg = PPOConfig(network=net, num_steps=24)
    env = RandomEpisodesEnv(4, space, p_term=0.1, p_trunc=0.1)
    learner = PPO(space, env.single_action_space, cfg, seed=0)
    every_step = RolloutBuffer(24, 4, space, learner.net.state_size, state_stride=1)
    collect(env, learner, 48, seed=0, buffer=every_step)  # the second rollout starts mid-episode
    buf = learner.buffer
    assert buf is not None and buf.full and buf.final_t.numel() > 0
    norms = buf.states.norm(dim=-1)
    assert torch.all(norms[buf.resets] == 0) and torch.all(norms[~buf.resets] > 0)
    before = {k: getattr(buf, k).clone() for k in ("states", "values", "last_value")}
    trunc_before = buf.trunc_values.clone()
    staleness = learner.refresh(buf)
    for k, v in before.items():
        torch.testing.assert_close(getattr(buf, k), v, atol=1e-5, rtol=0, msg=k)
    torch.testing.assert_close(buf.trunc_values, trunc_before, atol=1e-5, rtol=0)
    assert staleness["mse"] < 1e-10 and staleness["cos"] == pytest.approx(1.0, abs=1e-6)


@pytest.mark.parametrize("memory", ["trxl", "gtrxl"])
def test_ppo_updates_with_trxl(memory: str) -> None:
    net = NetworkConfig(memory=memory, memory_kwargs={"memory_length": 6}, **SMALL)
    cfg = PPOConfig(network=net, num_steps=20, chunk_len=8, refresh_interval=1, kl_target=None)
    env = CueMemoryEnv(8)
    learner = PPO(env.single_observation_space, env.single_action_space, cfg, seed=0)
    before = [p.detach().clone() for p in learner.net.parameters()]
    history = train_learner(env, learner, total_timesteps=2 * 20 * 8, seed=0)
    assert learner.num_updates == len(history) == 2
    for m in history:
        assert m["charts/minibatches"] == 16 and m["charts/refreshes"] == 15
        assert all(math.isfinite(m[k]) for k in ("losses/policy_loss", "losses/value_loss"))
    after = list(learner.net.parameters())
    assert all(not torch.equal(a, b) for a, b in zip(before, after, strict=True))


def test_ppo_trxl_learns_cue_memory() -> None:
    """The cue-memory task of ``test_memory_learning`` (episodes of 5-8 steps across 8-step
    chunks) with a one-layer TrXL whose window covers an episode; about 7 s of CPU, one core."""
    kwargs = {"memory_length": 8, "n_layers": 1}
    net = NetworkConfig(
        memory="trxl", memory_kwargs=kwargs, hidden_size=32, trunk_sizes=(32,), head_sizes=()
    )
    cfg = PPOConfig(network=net, num_steps=32, lr=3e-3)
    env = CueMemoryEnv(16, min_delay=3, max_delay=6)
    learner = PPO(env.single_observation_space, env.single_action_space, cfg, seed=0)
    history = train_learner(env, learner, total_timesteps=14_000, seed=0)
    final = float(np.mean([h["charts/episodic_return"] for h in history[-5:]]))
    assert final > 0.9, final
    greedy_env = CueMemoryEnv(32, min_delay=3, max_delay=6)
    rollout = collect(greedy_env, learner, 64, seed=1000, train=False, explore=False)
    assert float(rollout.pop_returns().mean()) > 0.9
