"""Encoders chosen by observation space, and the actor-critic's sequence/step interfaces."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest
import torch
from gymnasium import spaces

from marlgrid.agents.arrays import alloc_obs
from marlgrid.agents.networks.encoders import (
    DictEncoder,
    FlatEncoder,
    OneHotDiscreteEncoder,
    OneHotImageEncoder,
    PixelEncoder,
    SymbolicEncoder,
    flatten_cells,
    make_encoder,
)
from marlgrid.agents.networks.models import ActorCritic, NetworkConfig, QNetwork

CFG = NetworkConfig(hidden_size=16, trunk_sizes=(32,), head_sizes=(16,), conv_channels=(8, 8))

SYMBOLIC = spaces.Box(0, 255, (7, 7, 3), np.uint8)
PIXELS = spaces.Box(0, 255, (7 * 8, 7 * 8, 3), np.uint8)
ONEHOT = spaces.Box(0, 1, (5, 5, 20), np.uint8)
DICT = spaces.Dict(
    {
        "image": SYMBOLIC,
        "reward": spaces.Box(-np.inf, np.inf, (1,), np.float32),
        "position": spaces.Box(0, 1, (2,), np.float32),
        "direction": spaces.Discrete(4),
    }
)


@pytest.fixture(autouse=True)
def _one_thread() -> None:
    torch.set_num_threads(1)


def _sample(space: spaces.Space, n: int, seed: int = 0):
    space.seed(seed)
    batch = [space.sample() for _ in range(n)]
    if isinstance(space, spaces.Dict):
        return {k: torch.as_tensor(np.stack([b[k] for b in batch])) for k in space.spaces}
    return torch.as_tensor(np.stack(batch))


@pytest.mark.parametrize(
    ("space", "cls", "size"),
    [
        (SYMBOLIC, SymbolicEncoder, 8 * 7 * 7),
        (PIXELS, PixelEncoder, 8 * 7 * 7),
        (ONEHOT, OneHotImageEncoder, 8 * 5 * 5),
        (spaces.Box(0, 1, (5, 5, 4), np.float32), OneHotImageEncoder, 8 * 5 * 5),
        (spaces.Box(-1, 1, (6,), np.float32), FlatEncoder, 6),
        (spaces.Discrete(4), OneHotDiscreteEncoder, 4),
        (spaces.MultiDiscrete([2, 3]), OneHotDiscreteEncoder, 5),
        (DICT, DictEncoder, 8 * 7 * 7 + 1 + 2 + 4),
    ],
)
def test_encoder_choice_and_shapes(space: spaces.Space, cls: type, size: int) -> None:
    enc = make_encoder(space, CFG)
    assert isinstance(enc, cls) and enc.output_size == size
    out = enc(_sample(space, 3))
    assert out.shape == (3, size) and out.dtype == torch.float32 and torch.isfinite(out).all()


def test_pixel_first_layer_sees_exactly_one_cell() -> None:
    cfg = NetworkConfig(conv_channels=(8,), tile_size=8)
    enc = make_encoder(PIXELS, cfg)
    assert enc.cell.kernel_size == (8, 8) and enc.cell.stride == (8, 8)
    # changing one pixel of cell (2, 3) changes only that cell's first-layer unit
    x = _sample(PIXELS, 1)
    y = x.clone()
    y[0, 2 * 8 + 5, 3 * 8 + 1] += 1
    with torch.no_grad():
        fx = enc.cell(x.permute(0, 3, 1, 2).float() / 255)
        fy = enc.cell(y.permute(0, 3, 1, 2).float() / 255)
    changed = (fx != fy).any(1)[0]
    assert changed[2, 3] and changed.sum() == 1


def test_pixel_size_not_multiple_of_tile_raises() -> None:
    with pytest.raises(ValueError, match="tile_size"):
        make_encoder(spaces.Box(0, 255, (30, 30, 3), np.uint8), NetworkConfig(tile_size=8))


def test_symbolic_embeddings_per_channel() -> None:
    enc = make_encoder(SYMBOLIC, CFG)
    # MiniGrid's symbolic space has high=255: each channel gets a full table, offsets separate them
    assert enc.offsets.tolist() == [0, 256, 512] and enc.embed.num_embeddings == 768
    high = np.broadcast_to(np.array([10, 40, 2], dtype=np.uint8), (3, 3, 3))
    small = spaces.Box(0, high, (3, 3, 3), np.uint8)
    enc = make_encoder(small, NetworkConfig(image_mode="symbolic"))
    # minimum sizes (16, 32, 8), grown where the space allows larger ids (color up to 40)
    assert enc.offsets.tolist() == [0, 16, 57] and enc.embed.num_embeddings == 65


def test_symbolic_lookup_gradient_equals_embedding_gradient() -> None:
    """The training-time lookup (one ``index_add_`` backward) gives nn.Embedding's gradient."""
    enc = make_encoder(SYMBOLIC, CFG)
    obs = _sample(SYMBOLIC, 6) % 20  # repeated ids, so rows of the table get summed gradients
    with torch.no_grad():
        inference_out = enc(obs)
    out = enc(obs)
    torch.testing.assert_close(out, inference_out)
    weights = torch.randn_like(out)
    (out * weights).sum().backward()
    ours = enc.embed.weight.grad.clone()
    enc.zero_grad()
    idx = obs.long() + enc.offsets
    x = enc.embed(idx).view(6, 7, 7, -1).permute(0, 3, 1, 2)
    (flatten_cells(enc.convs(x)) * weights).sum().backward()
    torch.testing.assert_close(ours, enc.embed.weight.grad, atol=1e-6, rtol=1e-5)
    assert ours.abs().sum() > 0


@pytest.mark.parametrize(
    ("kernel", "padding", "channels", "size"),
    [(3, 1, (8, 8), 8 * 7 * 7), (2, 0, (8, 16), 16 * 5 * 5), (3, 0, (4,), 4 * 5 * 5)],
)
def test_conv_kernel_and_padding(
    kernel: int, padding: int, channels: tuple[int, ...], size: int
) -> None:
    cfg = NetworkConfig(conv_channels=channels, conv_kernel=kernel, conv_padding=padding)
    enc = make_encoder(SYMBOLIC, cfg)
    assert enc.output_size == size
    assert enc(_sample(SYMBOLIC, 2)).shape == (2, size)


def test_image_features_are_flattened_cell_by_cell() -> None:
    """Features come cell by cell, each cell's channels together (a free view of the
    channels-last conv output)."""
    x = torch.arange(2 * 3 * 4 * 5, dtype=torch.float32).view(2, 3, 4, 5)  # (N, C, H, W)
    flat = flatten_cells(x)
    assert flat.shape == (2, 60)
    assert flat[1, (2 * 5 + 3) * 3 + 1].item() == x[1, 1, 2, 3].item()
    last = x.contiguous(memory_format=torch.channels_last)
    assert flatten_cells(last).data_ptr() == last.data_ptr()  # no copy


def test_conv_stack_that_shrinks_the_grid_to_nothing_raises() -> None:
    cfg = NetworkConfig(conv_channels=(8, 8, 8, 8), conv_kernel=3, conv_padding=0)
    with pytest.raises(ValueError, match="shrink the 7x7 grid"):
        make_encoder(SYMBOLIC, cfg)


def test_dict_with_direction_is_one_hot() -> None:
    enc = make_encoder(DICT, CFG)
    obs = _sample(DICT, 4)
    feats = enc(obs)
    # sorted keys: direction (4), image, position (2), reward (1)
    one_hot = torch.nn.functional.one_hot(obs["direction"], 4).float()
    torch.testing.assert_close(feats[:, :4], one_hot)
    torch.testing.assert_close(feats[:, -1:], obs["reward"])


@pytest.mark.parametrize("memory", ["lstm", "gru", "none"])
@pytest.mark.parametrize("space", [SYMBOLIC, DICT, spaces.Box(-1, 1, (3,), np.float32)])
def test_actor_critic_sequence_and_step(memory: str, space: spaces.Space) -> None:
    torch.manual_seed(0)
    cfg = dataclasses.replace(CFG, memory=memory)
    net = ActorCritic(space, spaces.Discrete(3), cfg)
    T, B = 4, 2
    obs = alloc_obs(space, (T, B), "cpu")
    sample = _sample(space, T * B)
    if isinstance(obs, dict):
        obs = {k: v.view(T, B, *v.shape[1:]) for k, v in sample.items()}
    else:
        obs = sample.view(T, B, *sample.shape[1:])
    resets = torch.zeros(T, B, dtype=torch.bool)
    resets[2, 1] = True
    state = net.initial_state(B)
    with torch.no_grad():
        logits, values, final = net(obs, state, resets)
        assert logits.shape == (T, B, 3) and values.shape == (T, B)
        assert final.shape == (B, net.state_size)
        s = state
        for t in range(T):
            o = {k: v[t] for k, v in obs.items()} if isinstance(obs, dict) else obs[t]
            step_logits, step_values, s = net.step(o, s, resets[t])
            torch.testing.assert_close(step_logits, logits[t], atol=1e-5, rtol=1e-4)
            torch.testing.assert_close(step_values, values[t], atol=1e-5, rtol=1e-4)
        torch.testing.assert_close(s, final, atol=1e-5, rtol=1e-4)
        actions, logp, v, _ = net.act(o, state)
        assert v.shape == (B,)
        assert actions.shape == (B,) and ((actions >= 0) & (actions < 3)).all()
        assert torch.all(logp <= 0)


def test_non_discrete_action_space_rejected() -> None:
    with pytest.raises(NotImplementedError):
        ActorCritic(SYMBOLIC, spaces.Box(-1, 1, (2,)), CFG)
    with pytest.raises(NotImplementedError):
        QNetwork(SYMBOLIC, spaces.Box(-1, 1, (2,)), CFG)


def _sequence(space: spaces.Space, T: int, B: int):
    sample = _sample(space, T * B)
    if isinstance(sample, dict):
        return {k: v.view(T, B, *v.shape[1:]) for k, v in sample.items()}
    return sample.view(T, B, *sample.shape[1:])


@pytest.mark.parametrize("memory", ["lstm", "gru", "none"])
def test_evaluate_and_torso_give_the_forward_outputs(memory: str) -> None:
    """``evaluate`` (the core's training path) and ``heads(torso(...))`` equal ``forward``, from a
    non-zero state with resets at the start and inside the sequence."""
    torch.manual_seed(0)
    net = ActorCritic(DICT, spaces.Discrete(3), dataclasses.replace(CFG, memory=memory))
    assert net.memory is net.torso.memory and net.state_size == net.torso.state_size
    T, B = 5, 3
    obs = _sequence(DICT, T, B)
    resets = torch.zeros(T, B, dtype=torch.bool)
    resets[0, 0] = resets[2, 1] = resets[4, 1] = True
    state = torch.randn(B, net.state_size)
    with torch.no_grad():
        logits, values, _ = net(obs, state, resets)
        ev_logits, ev_values = net.evaluate(obs, state, resets)
        out, _ = net.torso(obs, state, resets)
        head_logits, head_values = net.heads(out)
        assert net.heads(out, policy=False)[0] is None
    assert out.shape == (T, B, CFG.hidden_size)
    for a, b in ((ev_logits, logits), (ev_values, values), (head_logits, logits)):
        torch.testing.assert_close(a, b, atol=1e-5, rtol=1e-4)
    torch.testing.assert_close(head_values, values)


@pytest.mark.parametrize("dueling", [False, True])
def test_q_network_sequence_step_and_dueling(dueling: bool) -> None:
    torch.manual_seed(0)
    net = QNetwork(SYMBOLIC, spaces.Discrete(4), CFG, dueling=dueling)
    T, B = 4, 2
    obs = _sequence(SYMBOLIC, T, B)
    resets = torch.zeros(T, B, dtype=torch.bool)
    resets[2, 1] = True
    state = torch.randn(B, net.state_size)
    with torch.no_grad():
        q, final = net(obs, state, resets)
        assert q.shape == (T, B, 4) and final.shape == (B, net.state_size)
        torch.testing.assert_close(net.q_values(obs, state, resets), q, atol=1e-5, rtol=1e-4)
        s = state
        for t in range(T):
            step_q, s = net.step(obs[t], s, resets[t])
            torch.testing.assert_close(step_q, q[t], atol=1e-5, rtol=1e-4)
        torch.testing.assert_close(s, final, atol=1e-5, rtol=1e-4)
        if dueling:  # Q = V + A - mean(A): the mean over actions is the value stream
            out, _ = net.torso(obs, state, resets)
            v = net.value_head(out).squeeze(-1)
            torch.testing.assert_close(q.mean(-1), v, atol=1e-5, rtol=1e-4)
