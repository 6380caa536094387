"""The 'bag' symbolic encoder (a sum of per-cell embeddings) and the fast PPO-LSTM preset."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import numpy as np
import pytest
import torch
from gymnasium import spaces

from marlgrid.agents.networks.encoders import BagEncoder, SymbolicEncoder, bag_sum, make_encoder
from marlgrid.agents.networks.models import ActorCritic, NetworkConfig
from marlgrid.config import ConfigError

ROOT = Path(__file__).resolve().parents[2]
VIEW = spaces.Box(0, 255, (2, 2, 3), np.uint8)
VOCAB = (3, 2, 2)  # rows per cell: 3 types + 2 colors + 2 states = 7


@pytest.fixture(autouse=True)
def _one_thread() -> None:
    torch.set_num_threads(1)


def _bag(dim: int = 1) -> BagEncoder:
    return BagEncoder(
        VIEW, NetworkConfig(symbolic_encoder="bag", bag_dim=dim, symbolic_vocab=VOCAB)
    )


def test_rows_are_laid_out_cell_by_cell_then_channel_then_id():
    enc = _bag()
    obs = torch.tensor([[[[2, 1, 0], [0, 0, 1]], [[1, 1, 1], [2, 0, 0]]]], dtype=torch.uint8)
    # cell (x, y) starts at row 7 * (2 x + y); type ids from +0, colors from +3, states from +5
    expected = [[2, 4, 5, 7, 10, 13, 15, 18, 20, 23, 24, 26]]
    assert enc.ids(obs).tolist() == expected


def test_output_is_relu_of_bias_plus_the_picked_rows():
    enc = _bag()
    with torch.no_grad():
        enc.weight.copy_(torch.arange(28, dtype=torch.float32).view(28, 1))
        enc.bias.fill_(-150.0)
    obs = torch.tensor([[[[2, 1, 0], [0, 0, 1]], [[1, 1, 1], [2, 0, 0]]]], dtype=torch.uint8)
    zeros = torch.zeros_like(obs)  # rows 0, 3, 5, 7, 10, 12, 14, 17, 19, 21, 24, 26: sum 158
    # the first view's rows sum to 2+4+5+7+10+13+15+18+20+23+24+26 = 167
    out = enc(torch.cat([obs, zeros]))
    assert out[:, 0].tolist() == [17.0, 8.0]
    with torch.no_grad():
        enc.bias.fill_(-170.0)
    assert enc(obs).tolist() == [[0.0]]  # 167 - 170 < 0


def test_equals_a_linear_layer_on_the_one_hot_view():
    enc = _bag(dim=5)
    gen = torch.Generator().manual_seed(0)
    obs = torch.stack([torch.randint(0, v, (6, 2, 2), generator=gen) for v in VOCAB], -1).to(
        torch.uint8
    )
    onehot = (
        torch.cat(
            [torch.nn.functional.one_hot(obs[..., c].long(), v) for c, v in enumerate(VOCAB)], -1
        )
        .reshape(6, -1)
        .float()
    )  # (x, y) cells in order, each [type | color | state] one-hots
    with torch.no_grad():
        assert torch.allclose(enc(obs), torch.relu(onehot @ enc.weight + enc.bias), atol=1e-6)


def test_ids_beyond_a_table_share_its_last_row():
    enc = _bag(dim=4)
    obs = torch.zeros(1, 2, 2, 3, dtype=torch.uint8)
    high = obs.clone()
    high[0, 1, 0] = torch.tensor([200, 9, 255], dtype=torch.uint8)
    last = obs.clone()
    last[0, 1, 0] = torch.tensor([2, 1, 1], dtype=torch.uint8)
    assert torch.equal(enc.ids(high), enc.ids(last))


def test_backward_adds_each_rows_output_gradient_once_per_use():
    weight = torch.zeros(4, 2, requires_grad=True)
    idx = torch.tensor([[0, 2], [2, 3], [2, 1]])
    grad = torch.tensor([[1.0, 10.0], [2.0, 20.0], [4.0, 40.0]])
    bag_sum(weight, idx).backward(grad)
    # row 0: sample 0; row 1: sample 2; row 2: samples 0, 1, 2; row 3: sample 1
    expected = [[1.0, 10.0], [4.0, 40.0], [7.0, 70.0], [2.0, 20.0]]
    assert weight.grad is not None and weight.grad.tolist() == expected


def test_grad_and_inference_paths_agree():
    enc = _bag(dim=8)
    obs = torch.randint(0, 3, (5, 2, 2, 3), dtype=torch.uint8)
    train = enc(obs)
    with torch.inference_mode():
        infer = enc(obs)
    assert torch.allclose(train, infer)


def test_make_encoder_keeps_conv_by_default_and_builds_bag_on_request():
    view = spaces.Box(0, 255, (7, 7, 3), np.uint8)
    assert NetworkConfig().symbolic_encoder == "conv"
    assert isinstance(make_encoder(view, NetworkConfig()), SymbolicEncoder)
    bag = make_encoder(view, NetworkConfig(symbolic_encoder="bag", bag_dim=32))
    assert isinstance(bag, BagEncoder) and bag.output_size == 32
    assert bag.weight.shape == (49 * (16 + 32 + 8), 32)


def test_bad_symbolic_encoder_is_refused_with_the_choices():
    with pytest.raises(ConfigError, match=r"network\.symbolic_encoder.*'conv'.*'bag'"):
        NetworkConfig(symbolic_encoder="mlp").validate()
    with pytest.raises(ConfigError, match=r"network\.bag_dim"):
        NetworkConfig(bag_dim=0).validate()
    view = spaces.Box(0, 255, (7, 7, 3), np.uint8)
    with pytest.raises(ValueError, match=r"unknown symbolic_encoder 'mlp'.*conv.*bag"):
        make_encoder(view, NetworkConfig(symbolic_encoder="mlp"))


def test_bag_learns_a_cell_rule_a_conv_free_torso_must_locate():
    """Supervised: 'a goal (type 8) sits in the cell ahead of the agent' from 5x5 views."""
    torch.manual_seed(0)
    view = spaces.Box(0, 255, (5, 5, 3), np.uint8)
    enc = BagEncoder(view, NetworkConfig(symbolic_encoder="bag", bag_dim=16))
    head = torch.nn.Linear(16, 1)
    gen = torch.Generator().manual_seed(1)
    types = torch.tensor([1, 2, 8])[torch.randint(0, 3, (512, 5, 5), generator=gen)]
    obs = torch.stack([types, torch.zeros_like(types), torch.zeros_like(types)], -1).to(torch.uint8)
    target = (obs[:, 2, 3, 0] == 8).float()  # the cell ahead of the agent at (2, 4)
    opt = torch.optim.Adam([*enc.parameters(), *head.parameters()], lr=0.05)
    for _ in range(60):
        loss = torch.nn.functional.binary_cross_entropy_with_logits(
            head(enc(obs)).squeeze(-1), target
        )
        opt.zero_grad()
        loss.backward()
        opt.step()
    accuracy = ((head(enc(obs)).squeeze(-1) > 0).float() == target).float().mean()
    assert float(accuracy) == 1.0


def test_actor_critic_with_bag_torso_runs_sequences_and_steps_alike():
    view = spaces.Box(0, 255, (7, 7, 3), np.uint8)
    cfg = NetworkConfig(symbolic_encoder="bag", hidden_size=16, trunk_sizes=(16,), bag_dim=16)
    torch.manual_seed(0)
    net = ActorCritic(view, spaces.Discrete(3), cfg)
    obs = torch.randint(0, 11, (4, 2, 7, 7, 3), dtype=torch.uint8)
    resets = torch.zeros(4, 2, dtype=torch.bool)
    with torch.no_grad():
        logits, values, _ = net(obs, net.initial_state(2), resets)
        state = net.initial_state(2)
        for t in range(4):
            step_logits, step_values, state = net.step(obs[t], state)
            assert torch.allclose(step_logits, logits[t], atol=1e-5)
            assert torch.allclose(step_values, values[t], atol=1e-5)


def _compose(preset: str):
    hydra = pytest.importorskip("hydra")
    from omegaconf import OmegaConf

    import experiments.train  # noqa: F401  (registers the schemas)
    from marlgrid.agents.training.train_config import learner_configs

    with hydra.initialize_config_dir(str(ROOT / "conf"), version_base="1.3"):
        cfg = hydra.compose("train", overrides=["env=goal_cycle_13x13_3agents", f"agent={preset}"])
    return learner_configs(OmegaConf.to_object(cfg))["main"]


def test_fast_preset_differs_from_the_default_in_torso_and_refresh_only():
    fast, default = _compose("ppo_lstm_fast"), _compose("ppo_lstm")
    fast.validate(num_slots=24)
    diff = {
        f"network.{k}": v
        for k, v in dataclasses.asdict(fast.network).items()
        if v != getattr(default.network, k)
    }
    diff.update(
        {
            k: v
            for k, v in dataclasses.asdict(fast).items()
            if k != "network" and v != getattr(default, k)
        }
    )
    assert diff == {"network.symbolic_encoder": "bag", "refresh_interval": 4}
