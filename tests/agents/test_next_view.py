"""The ``next_view`` loss term and its decoder head (marlgrid.agents.algorithms.next_view).

Targets and masks on a hand-made buffer, the three losses against hand computations, where the
gradient goes, coefficient 0 against plain PPO, every memory core, configs and the preset.
"""

from __future__ import annotations

import io
import math
from typing import Any

import numpy as np
import pytest
import torch
from gymnasium import spaces
from torch import Tensor

import marlgrid
from marlgrid.agents.algorithms.next_view import (
    NextViewLoss,
    dense_error,
    masked_mean,
    symbolic_accuracy,
    symbolic_error,
    view_targets,
)
from marlgrid.agents.algorithms.ppo import PPO, PPOConfig
from marlgrid.agents.learner import config_from_dict
from marlgrid.agents.memory import CORES
from marlgrid.agents.networks import NetworkConfig
from marlgrid.agents.networks.next_view_head import NextViewHead
from marlgrid.agents.training.rollout import MultiAgentRollout, PolicyGroup
from marlgrid.config import ConfigError
from tests.agents.conftest import (
    assert_term_trains_head_memory_encoder_only,
    collect,
    compose_learner,
    train_learner,
)
from tests.toy_envs import CueMemoryEnv

SMALL = {"hidden_size": 16, "trunk_sizes": (16,), "head_sizes": (8,), "conv_channels": (4,)}
TERM = {"name": "next_view", "coef": 3.0, "options": {"loss": "l1"}}


@pytest.fixture(autouse=True)
def _one_thread() -> None:
    torch.set_num_threads(1)


def _cfg(terms: list[dict[str, Any]] | None = None, **overrides: Any) -> PPOConfig:
    network = overrides.pop("network", {})
    net = NetworkConfig(**{**SMALL, **network})
    return PPOConfig(network=net, aux_losses=terms or [], **{"kl_target": None, **overrides})


def _grid_env(num_envs: int = 2, **agent: Any) -> Any:
    """A 5x5 empty room seen through 3x3 views (symbolic unless ``agent`` says otherwise)."""
    return marlgrid.make_vec("MarlGrid-Empty-5x5-v0", num_envs, agent={"view_size": 3, **agent})


def _grid_learner(cfg: PPOConfig, vec: Any, seed: int = 0) -> PPO:
    a = vec.possible_agents[0]
    return PPO(vec.single_observation_space(a), vec.single_action_space(a), cfg, seed=seed)


def _params(learner: PPO) -> dict[str, Tensor]:
    return {k: v.detach().clone() for k, v in learner.net.state_dict().items()}


# -- targets and masks on a hand-made buffer ------------------------------------------------------

IMAGE = spaces.Box(0, 255, (1, 1, 3), np.uint8)  # symbolic: classes 16 / 32 / 8 per channel
DICT_SPACE = spaces.Dict({"image": IMAGE, "reward": spaces.Box(-np.inf, np.inf, (1,), np.float32)})


def _image(code: int) -> Tensor:
    return torch.tensor([[[code, 0, 0]]], dtype=torch.uint8)


def _hand_buffer() -> tuple[PPO, Any]:
    """Two steps of five slots; type id ``5 t + b`` at step ``t`` of slot ``b`` (``10 + b``
    after the last step), ``15`` the stored final observation of slot 3's truncation.

    slot 0: nothing happens; slot 1: terminated at t = 0; slot 2: respawned during t = 0;
    slot 3: truncated at t = 1; slot 4: out of play at t = 1 (waiting to spawn).
    """
    learner = PPO(DICT_SPACE, spaces.Discrete(3), _cfg(num_steps=2, chunk_len=2))
    B = 5
    buf = learner.new_buffer(B)
    state = learner.initial_state(B)
    zeros, no = torch.zeros(B), torch.zeros(B, dtype=torch.bool)

    def obs(t: int) -> dict[str, Tensor]:
        images = torch.stack([_image(5 * t + b) for b in range(B)])
        return {"image": images, "reward": torch.zeros(B, 1)}

    actions = torch.zeros(B, dtype=torch.long)
    term0 = torch.tensor([False, True, False, False, False])
    respawn0 = torch.tensor([False, False, True, False, False])
    buf.add(obs(0), no, state, actions, zeros, zeros, zeros, term0, no, respawned=respawn0)
    trunc1 = torch.tensor([False, False, False, True, False])
    valid1 = torch.tensor([True, True, True, True, False])
    buf.add(obs(1), term0, state, actions, zeros, zeros, zeros, no, trunc1, valid1)
    final = {"image": _image(15)[None], "reward": torch.zeros(1, 1)}
    buf.add_final(torch.tensor([3]), final, torch.zeros(1))
    buf.finish(obs(2), state, trunc1, zeros)
    return learner, buf


def test_next_and_current_targets_and_their_masks_by_hand():
    learner, buf = _hand_buffer()
    batch = learner.minibatch(buf, torch.arange(5))
    views, ok = view_targets(batch, "next")
    codes = views[..., 0, 0, 0].long()
    # step 0: the stored view of step 1; step 1: the view after the rollout (slot 3: its final)
    want_codes = torch.tensor([[5, 6, 7, 8, 9], [10, 11, 12, 15, 14]])
    assert torch.equal(codes[ok], want_codes[ok])
    want_ok = torch.tensor(
        [
            [True, False, False, True, False],  # slot 1 ended, slot 2 respawned, slot 4 leaves
            [True, True, True, True, False],  # slot 3's target is its final view; 4 is out
        ]
    )
    assert torch.equal(ok, want_ok)
    views, ok = view_targets(batch, "current")
    current = torch.tensor([[0, 1, 2, 3, 4], [5, 6, 7, 8, 9]])
    assert torch.equal(views[..., 0, 0, 0].long(), current)
    assert torch.equal(ok, torch.tensor([[True] * 5, [True, True, True, True, False]]))


def test_respawns_in_a_real_env_reach_the_buffer_and_the_mask():
    """Empty 5x5 with the respawn rule: an agent that reaches the goal is placed again at once
    (no episode end); the engine flags the step, the rollout carries it, the buffer stores it
    and the next-view target of exactly those steps is masked."""
    vec = marlgrid.make_vec("MarlGrid-Empty-5x5-v0", 8, respawn=True, max_steps=200)
    learner = _grid_learner(_cfg([TERM], num_steps=96, chunk_len=8), vec)
    group = PolicyGroup("main", learner, list(vec.possible_agents))
    MultiAgentRollout(vec, [group], seed=0).collect(96)
    buf = learner.buffer
    assert buf is not None and buf.full
    goals = (buf.rewards > 0) & ~buf.terminations  # reaching the goal is the only reward
    assert goals.sum() > 0, "the random policy never reached the goal: the test needs respawns"
    assert torch.equal(buf.respawns, goals)
    T, B, L = buf.num_steps, buf.num_envs, 8
    batch = learner.minibatch(buf, torch.arange(B * T // L))
    _, ok = view_targets(batch, "next")
    respawned = buf.respawns[batch.t, batch.b] & batch.mask
    assert not ok[respawned].any()
    assert ok[batch.mask & ~respawned & ~buf.terminations[batch.t, batch.b]].all()


def test_the_term_on_the_hand_made_buffer_is_the_masked_mean_of_its_errors():
    learner = PPO(
        DICT_SPACE, spaces.Discrete(3), _cfg([TERM], num_steps=2, chunk_len=2)
    )  # symbolic views: one cell, vocab (16, 32, 8) -> 56 one-hot entries
    _, buf = _hand_buffer()
    buf.states.zero_()
    batch = learner.minibatch(buf, torch.arange(5))
    out = learner.net.output(batch.obs, batch.start_state, batch.resets, batch.actions)
    loss, logs = learner.aux_losses[0].term(batch, out)
    pred = torch.sigmoid(out.extras["next_view"])  # (2, 5, 1, 1, 56)
    targets = {(0, 0): 5, (0, 3): 8, (1, 0): 10, (1, 1): 11, (1, 2): 12, (1, 3): 15}
    errors = []
    for (t, b), code in targets.items():  # type code, colour 0, state 0
        onehot = torch.zeros(56)
        onehot[[code, 16, 48]] = 1.0
        errors.append((pred[t, b, 0, 0] - onehot).abs().mean())
    torch.testing.assert_close(loss, torch.stack(errors).mean())
    assert float(logs["targets"]) == pytest.approx(6 / 9)  # 6 targets on 9 in-play steps


# -- the losses against hand computations --------------------------------------------------------


@pytest.mark.parametrize("loss", ["l1", "l2"])
def test_symbolic_l1_l2_equal_the_one_hot_comparison_in_value_and_gradient(loss):
    """symbolic_error's closed form (no one-hot built) against the error written out: the
    sigmoid of the logits compared entry by entry with the one-hot ids (ids at or above a
    channel's class count taken as its last class)."""
    vocab = (16, 32, 8)
    gen = torch.Generator().manual_seed(3)
    logits = (3 * torch.randn(4, 5, 7, 7, sum(vocab), generator=gen)).requires_grad_()
    view = torch.stack([torch.randint(0, high, (4, 5, 7, 7), generator=gen)
                        for high in (20, 32, 9)], -1).to(torch.uint8)  # fmt: skip
    codes = torch.minimum(view.long(), torch.tensor([15, 31, 7]))
    onehot = torch.cat([torch.nn.functional.one_hot(codes[..., c], v)
                        for c, v in enumerate(vocab)], -1).float()  # fmt: skip
    gap = torch.sigmoid(logits) - onehot
    expected = (gap.abs() if loss == "l1" else gap.square()).mean((-3, -2, -1))
    weights = torch.rand(4, 5, generator=gen)  # any downstream use of the per-step errors
    (expected_grad,) = torch.autograd.grad((expected * weights).sum(), logits)
    got = symbolic_error(logits, view, vocab, loss)
    (got_grad,) = torch.autograd.grad((got * weights).sum(), logits)
    assert got.shape == (4, 5)
    torch.testing.assert_close(got, expected, rtol=1e-5, atol=1e-6)
    torch.testing.assert_close(got_grad, expected_grad, rtol=1e-5, atol=1e-8)
    with pytest.raises(ValueError, match="'huber'"):
        symbolic_error(logits, view, vocab, "huber")


def test_ce_l1_l2_and_accuracy_by_hand():
    vocab = (2, 3, 1)
    view = torch.tensor([[[[1, 2, 0]]]], dtype=torch.uint8)  # one step, one cell
    logits = torch.tensor([0.0, math.log(3.0), 0.0, 0.0, 0.0, 5.0]).view(1, 1, 1, 6)
    # ce: channel 0 softmax [1/4, 3/4] at id 1; channel 1 uniform over 3; channel 2 one class
    ce = (math.log(4 / 3) + math.log(3) + 0.0) / 3
    torch.testing.assert_close(symbolic_error(logits, view, vocab, "ce"), torch.tensor([ce]))
    # l1/l2: sigmoid(logits) = [1/2, 3/4 | 1/2, 1/2, 1/2 | s5] against one-hot [0, 1 | 0, 0, 1 | 1]
    s5 = 1 / (1 + math.exp(-5))
    gaps = [0.5, 0.25, 0.5, 0.5, 0.5, 1 - s5]
    l1, l2 = sum(gaps) / 6, sum(g * g for g in gaps) / 6
    torch.testing.assert_close(symbolic_error(logits, view, vocab, "l1"), torch.tensor([l1]))
    torch.testing.assert_close(symbolic_error(logits, view, vocab, "l2"), torch.tensor([l2]))
    # argmax per channel: 1 (right), 0 (wrong: the id is 2), 0 (right)
    torch.testing.assert_close(symbolic_accuracy(logits, view, vocab), torch.tensor([2 / 3]))
    # pixels: sigmoid(0) = 1/2 against 255 / 255 and 0 / 255; raw values: |[1, -2] - [0, 0]|
    pix = torch.tensor([[255.0, 0.0]]) / 255.0
    torch.testing.assert_close(
        dense_error(torch.zeros(1, 2), pix, "l1", True, 1), torch.tensor([0.5])
    )
    raw = dense_error(torch.tensor([[1.0, -2.0]]), torch.zeros(1, 2), "l2", False, 1)
    torch.testing.assert_close(raw, torch.tensor([2.5]))
    # the mean over steps with a target; a NaN elsewhere changes nothing
    err = torch.tensor([1.0, float("nan"), 3.0], requires_grad=True)
    mean = masked_mean(err, torch.tensor([True, False, True]))
    mean.backward()
    assert mean.item() == 2.0 and torch.equal(err.grad, torch.tensor([0.5, 0.0, 0.5]))


def test_pixel_head_puts_each_cell_in_its_tile():
    head = NextViewHead(4, spaces.Discrete(2), "pixels", (4, 6, 3), hidden=5, tile_size=2)
    with torch.no_grad():  # each cell's outputs: its index everywhere (a bias per cell)
        head.cells.weight.zero_()
        head.cells.bias.copy_(torch.arange(6.0).repeat_interleave(head.cell_dim))
        head.out.weight.fill_(1.0 / head.cell_dim)
        head.out.bias.zero_()
    img = head(torch.zeros(1, 4), torch.zeros(1, 2))[0, ..., 0]  # (4, 6), cells of 2x2 pixels
    want = torch.arange(6.0).view(2, 3).repeat_interleave(2, 0).repeat_interleave(2, 1)
    torch.testing.assert_close(img, want)


# -- gradients -------------------------------------------------------------------------------------


@pytest.mark.parametrize("loss", ["l1", "ce"])
def test_the_term_alone_trains_the_decoder_memory_and_encoder(loss: str):
    vec = _grid_env()
    cfg = _cfg([{"name": "next_view", "options": {"loss": loss}}], num_steps=8, chunk_len=4)
    learner = _grid_learner(cfg, vec)
    collect_vec(vec, learner, 8)
    batch = learner.minibatch(learner.buffer, torch.arange(4))
    out = learner.net.output(batch.obs, batch.start_state, batch.resets, batch.actions)
    term_loss, _ = learner.aux_losses[0].term(batch, out)
    assert_term_trains_head_memory_encoder_only(term_loss, learner.net, "next_view")


def collect_vec(vec: Any, learner: PPO, num_steps: int) -> None:
    """Record ``num_steps`` steps of every agent of a marlgrid ``VectorEnv``."""
    group = PolicyGroup("main", learner, list(vec.possible_agents))
    MultiAgentRollout(vec, [group], seed=0).collect(num_steps)


# -- coefficient 0 ---------------------------------------------------------------------------------


def _one_update(cfg: PPOConfig, seed: int = 0) -> dict[str, Tensor]:
    env = CueMemoryEnv(4)
    learner = PPO(env.single_observation_space, env.single_action_space, cfg, seed=seed)
    collect(env, learner, cfg.num_steps, seed=0)
    learner.update()
    return _params(learner)


def test_coefficient_zero_is_bit_identical_to_plain_ppo():
    zero = [{**TERM, "coef": 0.0}]
    # the same network (the term's head configured by hand on the plain learner), clipping on
    env = CueMemoryEnv(1)
    declared = NextViewLoss.heads(
        {}, env.single_observation_space, env.single_action_space, NetworkConfig(**SMALL), "t"
    )
    plain = _one_update(_cfg(num_steps=20, network={"extra_heads": declared}))
    term = _one_update(_cfg(zero, num_steps=20))
    assert plain.keys() == term.keys() and any(k.startswith("extra_heads.") for k in term)
    assert all(torch.equal(plain[k], term[k]) for k in plain)
    # plain PPO without the head: every shared parameter equal. (Unclipped: the global norm of
    # the gradient then also counts the head's zero gradients, which may round it differently.)
    plain = _one_update(_cfg(num_steps=20, max_grad_norm=1e9))
    term = _one_update(_cfg(zero, num_steps=20, max_grad_norm=1e9))
    assert set(term) - set(plain) == {k for k in term if k.startswith("extra_heads.next_view.")}
    assert all(torch.equal(plain[k], term[k]) for k in plain)


# -- every memory core -----------------------------------------------------------------------------


@pytest.mark.parametrize("refresh", [0, 1])
@pytest.mark.parametrize("memory", sorted(CORES))
def test_every_memory_core_trains_one_update_with_the_term(memory: str, refresh: int):
    vec = _grid_env()
    cfg = _cfg(
        [TERM],
        network={"memory": memory},
        num_steps=8,
        chunk_len=4,
        num_minibatches=2,
        update_epochs=1,
        refresh_interval=refresh,
        anneal_lr=False,  # the one update comes at progress 1
    )
    learner = _grid_learner(cfg, vec)
    before = _params(learner)
    history = train_learner(vec, learner, 16)
    metrics = history[-1]
    assert np.isfinite(metrics["losses/next_view"]) and metrics["losses/next_view"] > 0
    assert metrics["charts/refreshes"] == (1 if refresh else 0)
    after = _params(learner)
    decoder = [k for k in after if k.startswith("extra_heads.next_view.")]
    assert decoder and all(not torch.equal(before[k], after[k]) for k in decoder)
    memory_params = [k for k, _ in learner.net.torso.memory.named_parameters()]
    changed = [
        not torch.equal(before[f"torso.memory.{k}"], after[f"torso.memory.{k}"])
        for k in memory_params
    ]
    assert not memory_params or any(changed)


# -- configs ---------------------------------------------------------------------------------------


def test_one_entry_configures_term_and_head_and_the_config_stays_as_written():
    vec = _grid_env()
    cfg = _cfg([TERM])
    cfg.validate()
    learner = _grid_learner(cfg, vec)
    head = learner.net.extra_heads["next_view"]
    assert isinstance(head, NextViewHead) and head.view == "symbolic"
    assert head.vocab == (16, 32, 8) and head.shape == (3, 3, 3)
    assert cfg.network.extra_heads == {}  # the saved config is the user's
    collect_vec(vec, learner, cfg.num_steps)
    learner.update()
    blob = io.BytesIO()
    torch.save(learner.state_dict(), blob)
    blob.seek(0)
    saved = torch.load(blob, weights_only=True)
    restored = _grid_learner(config_from_dict(saved["config"]), vec, seed=5)
    restored.load_state_dict(saved)
    a, b = _params(learner), _params(restored)
    assert a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)


def test_an_exported_policy_drops_the_decoder_and_acts_as_the_learner_did():
    vec = _grid_env()
    own = {"probe": {"kind": "mlp", "options": {"out_size": 2}}}  # a head the user configured stays
    learner = _grid_learner(_cfg([TERM], network={"extra_heads": own}), vec)
    collect_vec(vec, learner, learner.cfg.num_steps)
    learner.update()
    state = learner.state_dict()
    acting = PPO.acting_state(state)
    assert "optimizer" not in acting and acting["config"]["aux_losses"] == []
    assert state["config"]["aux_losses"] == [TERM]  # the learner's own state is untouched
    dropped = sorted(set(state["net"]) - set(acting["net"]))
    assert dropped and all(k.startswith("extra_heads.next_view.") for k in dropped)
    assert any(k.startswith("extra_heads.probe.") for k in acting["net"])
    player = _grid_learner(config_from_dict(acting["config"]), vec, seed=5)
    assert "next_view" not in player.net.extra_heads
    player.load_state_dict(acting)
    obs, _ = vec.reset(seed=3)
    seen = torch.as_tensor(obs[vec.possible_agents[0]])
    resets = torch.ones(vec.num_envs, dtype=torch.bool)
    mine = learner.act(seen, learner.initial_state(vec.num_envs), resets, explore=False)
    theirs = player.act(seen, player.initial_state(vec.num_envs), resets, explore=False)
    assert torch.equal(mine.actions, theirs.actions) and torch.equal(mine.state, theirs.state)
    assert torch.equal(mine.extras["values"], theirs.extras["values"])
    assert PPO.acting_state(PPO.acting_state(state)) == PPO.acting_state(state)
    plain = _grid_learner(_cfg(), vec).state_dict()
    assert PPO.acting_state(plain)["net"].keys() == plain["net"].keys()


def test_views_of_each_observation_kind():
    pixels = _grid_env(observation="rgb", tile_size=4)  # 12x12 RGB
    learner = _grid_learner(_cfg([TERM], network={"image_mode": "pixels", "tile_size": 4}), pixels)
    assert learner.net.extra_heads["next_view"].view == "pixels"
    onehot = _grid_learner(_cfg([TERM]), _grid_env(observation="onehot"))
    assert onehot.net.extra_heads["next_view"].view == "unit"
    dict_obs = _grid_learner(_cfg([TERM]), _grid_env(extras=["reward"]))
    assert dict_obs.net.extra_heads["next_view"].shape == (3, 3, 3)  # the image key
    env = CueMemoryEnv(1)  # a flat Box in [0, 1]
    flat = PPO(env.single_observation_space, env.single_action_space, _cfg([TERM]))
    assert flat.net.extra_heads["next_view"].view == "unit"


@pytest.mark.parametrize(
    ("options", "match"),
    [
        (
            {"loss": "l3"},
            r"agent\.aux_losses\[0\]\.options\.loss must be one of \['l1', 'l2', 'ce'\], got 'l3'",
        ),
        (
            {"target": "past"},
            r"aux_losses\[0\]\.options\.target must be one of \['next', 'current'\]",
        ),
        ({"hidden": 0}, r"aux_losses\[0\]\.options\.hidden"),
        ({"coef": 1}, r"aux_losses\[0\]\.options has unknown keys \['coef'\]"),
    ],
)
def test_bad_options_are_refused_by_the_config_check(options: dict[str, Any], match: str):
    with pytest.raises(ConfigError, match=match):
        _cfg([{"name": "next_view", "options": options}]).validate("agent")


def test_refused_setups():
    vec = _grid_env(observation="onehot")
    with pytest.raises(ConfigError, match=r"aux_losses\[0\]\.options\.loss 'ce' needs symbolic"):
        _grid_learner(_cfg([{"name": "next_view", "options": {"loss": "ce"}}]), vec)
    mine = {"next_view": {"kind": "mlp", "options": {"out_size": 3}}}
    with pytest.raises(ConfigError, match=r"network\.extra_heads configures \['next_view'\]"):
        _grid_learner(_cfg([TERM], network={"extra_heads": mine}), _grid_env())
    no_image = spaces.Dict({"view": IMAGE})
    with pytest.raises(ConfigError, match=r"'image' key of Dict observations"):
        PPO(no_image, spaces.Discrete(3), _cfg([TERM]))


def test_the_preset_is_ppo_lstm_fast_plus_the_term():
    aux, fast = compose_learner("agent=ppo_lstm_aux"), compose_learner("agent=ppo_lstm_fast")
    options = {"loss": "l1", "target": "next"}
    assert aux.aux_losses == [{"name": "next_view", "coef": 3.0, "options": options}]
    aux.aux_losses = []
    assert aux == fast
    control = compose_learner("agent=ppo_lstm_aux", "agent.aux_losses.0.options.target=current")
    assert control.aux_losses[0]["options"] == {"loss": "l1", "target": "current"}
