"""Learner extension points: loss terms, extra heads and network classes chosen by config.

Everything here is registered from the test module (no file under ``marlgrid/`` is edited) and
unregistered afterwards.
"""

from __future__ import annotations

import io
from collections.abc import Iterator
from typing import Any

import pytest
import torch
from gymnasium import spaces
from torch import Tensor, nn

from marlgrid.agents.algorithms import losses
from marlgrid.agents.algorithms.losses import MiniBatch, register_loss_term, unregister_loss_term
from marlgrid.agents.algorithms.ppo import PPO, PPOConfig, _per_step, ppo_loss
from marlgrid.agents.arrays import obs_index
from marlgrid.agents.learner import config_from_dict
from marlgrid.agents.networks import NetworkConfig
from marlgrid.agents.networks.models import one_hot_actions
from marlgrid.agents.networks.registry import (
    NetOutput,
    one_hot_size,
    register_head,
    register_network,
    unregister_head,
    unregister_network,
)
from marlgrid.agents.storage.rollout_buffer import RolloutBuffer
from marlgrid.config import ConfigError
from tests.agents.conftest import collect
from tests.toy_envs import CueMemoryEnv, RandomEpisodesEnv

SMALL = {"hidden_size": 16, "trunk_sizes": (16,), "head_sizes": (8,), "conv_channels": (4,)}


@pytest.fixture(autouse=True)
def _one_thread() -> None:
    torch.set_num_threads(1)


# -- toy extensions, registered for this module only ---------------------------------------------


class ValueToZero:
    """Pushes the value toward 0: ``scale * mean(v^2)`` over the real steps."""

    def __init__(self, net: Any, scale: float = 1.0) -> None:
        self.scale = scale

    def __call__(self, batch: MiniBatch, output: NetOutput) -> tuple[Tensor, dict[str, Any]]:
        v = output.values[batch.mask]
        return self.scale * v.square().mean(), {"mean_value": v.mean().detach(), "const": 2.0}


class FeatureL2:
    """An L2 penalty on the torso features (real steps)."""

    def __init__(self, net: Any) -> None:
        pass

    def __call__(self, batch: MiniBatch, output: NetOutput) -> tuple[Tensor, dict[str, Any]]:
        return output.features[batch.mask].square().mean(), {}


class HeadReader:
    """Reads the extra head ``pred`` (mean square of its output) and keeps what it received."""

    def __init__(self, net: Any, head: str = "pred") -> None:
        self.head, self.seen = head, []

    def __call__(self, batch: MiniBatch, output: NetOutput) -> tuple[Tensor, dict[str, Any]]:
        self.seen.append((batch, output))
        return output.extras[self.head].square().mean(), {}


class ToyNextHead(nn.Module):
    """A linear map of ``(feature, one-hot action)``; keeps the last one-hot it read."""

    def __init__(self, input_size: int, action_space: spaces.Space, out_size: int = 3) -> None:
        super().__init__()
        self.input_size, self.onehot_size = input_size, one_hot_size(action_space)
        self.fc = nn.Linear(input_size + self.onehot_size, out_size)
        self.last_onehot: Tensor | None = None

    def forward(self, features: Tensor, onehot: Tensor | None) -> Tensor:
        assert onehot is not None
        self.last_onehot = onehot
        return self.fc(torch.cat([features, onehot], -1))


TERMS = {
    "test_value_to_zero": ValueToZero,
    "test_feature_l2": FeatureL2,
    "test_head_reader": HeadReader,
}


@pytest.fixture(autouse=True)
def _registered() -> Iterator[None]:
    for name, cls in TERMS.items():
        register_loss_term(name, cls)
    register_head("test_next", ToyNextHead)
    yield
    for name in TERMS:
        unregister_loss_term(name)
    unregister_head("test_next")


def _cfg(
    aux_losses: list[dict[str, Any]] | None = None,
    extra_heads: dict[str, Any] | None = None,
    **overrides: Any,
) -> PPOConfig:
    net = NetworkConfig(**SMALL, extra_heads=extra_heads or {})
    over = {"num_steps": 20, "kl_target": None, **overrides}  # T = 20: padded last chunks
    return PPOConfig(network=net, aux_losses=aux_losses or [], **over)


def _learner(cfg: PPOConfig, seed: int = 0) -> tuple[PPO, RolloutBuffer]:
    env = CueMemoryEnv(4)
    learner = PPO(env.single_observation_space, env.single_action_space, cfg, seed=seed)
    collect(env, learner, cfg.num_steps, seed=0)
    assert learner.buffer is not None and learner.buffer.full
    return learner, learner.buffer


def _params(learner: PPO) -> dict[str, Tensor]:
    return {k: v.detach().clone() for k, v in learner.net.state_dict().items()}


def _all_ids(learner: PPO, buffer: RolloutBuffer) -> Tensor:
    return torch.arange(-(-buffer.num_steps // learner.cfg.chunk_len) * buffer.num_envs)


def _grads(learner: PPO, loss: Tensor) -> dict[str, Tensor]:
    params = dict(learner.net.named_parameters())
    grads = torch.autograd.grad(loss, list(params.values()), allow_unused=True)
    return {
        k: torch.zeros_like(p) if g is None else g
        for (k, p), g in zip(params.items(), grads, strict=True)
    }


# -- loss terms ------------------------------------------------------------------------------------


def test_term_adds_coef_times_its_loss_and_its_gradient() -> None:
    coef, scale = 0.3, 2.0
    term = {"name": "test_value_to_zero", "coef": coef, "options": {"scale": scale}}
    plain, buf_p = _learner(_cfg())
    with_term, buf_t = _learner(_cfg([term]))
    ids = _all_ids(plain, buf_p)
    batch = with_term.minibatch(buf_t, ids)
    loss_p, logs_p = plain.minibatch_loss(plain.minibatch(buf_p, ids))
    loss_t, logs_t = with_term.minibatch_loss(batch)
    # by hand: the value of every real step, mean of its square
    _, values = with_term.net.evaluate(batch.obs, batch.start_state, batch.resets)
    hand = scale * values[batch.mask].square().mean()
    assert not bool(batch.mask.all())  # padding present, and excluded
    torch.testing.assert_close(loss_t, loss_p + coef * hand)
    torch.testing.assert_close(logs_t["test_value_to_zero"], hand.detach())
    torch.testing.assert_close(logs_t["test_value_to_zero/mean_value"], values[batch.mask].mean())
    assert logs_t["test_value_to_zero/const"] == 2.0
    assert all(torch.equal(logs_p[k], logs_t[k]) for k in logs_p)  # PPO's own logs unchanged
    g_p, g_t, g_hand = _grads(plain, loss_p), _grads(with_term, loss_t), _grads(with_term, hand)
    for k in g_p:
        torch.testing.assert_close(g_t[k], g_p[k] + coef * g_hand[k], msg=k)
    assert any(g_hand[k].abs().sum() > 0 for k in g_hand if k.startswith("torso."))
    assert all(g_hand[k].abs().sum() == 0 for k in g_hand if k.startswith("policy_head."))


def test_term_gradient_reaches_the_torso_and_not_the_heads() -> None:
    plain, buf_p = _learner(_cfg())
    with_term, buf_t = _learner(_cfg([{"name": "test_feature_l2", "coef": 5.0}]))
    ids = _all_ids(plain, buf_p)
    g_p = _grads(plain, plain.minibatch_loss(plain.minibatch(buf_p, ids))[0])
    g_t = _grads(with_term, with_term.minibatch_loss(with_term.minibatch(buf_t, ids))[0])
    for k in g_p:
        if k.startswith(("policy_head.", "value_head.")):
            assert torch.equal(g_t[k], g_p[k]), k  # the features' penalty does not reach them
    torso = [k for k in g_p if k.startswith("torso.")]
    assert torso and all(not torch.equal(g_t[k], g_p[k]) for k in torso if "memory" in k)


def test_term_logs_appear_in_update_metrics_as_computed_by_hand() -> None:
    # one epoch, one minibatch, no refresh: the term is evaluated once, before the step
    cfg = _cfg(
        [{"name": "test_value_to_zero", "options": {"scale": 1.0}}],
        update_epochs=1,
        num_minibatches=1,
        refresh_interval=0,
    )
    learner, buffer = _learner(cfg)
    with torch.no_grad():  # by hand: values of the whole rollout from its first state
        _, values = learner.net.evaluate(buffer.obs, buffer.states[0], buffer.resets)
    before = _params(learner)
    metrics = learner.update()
    assert metrics["losses/test_value_to_zero"] == pytest.approx(
        float(values.square().mean()), rel=1e-5
    )
    assert metrics["losses/test_value_to_zero/mean_value"] == pytest.approx(
        float(values.mean()), rel=1e-5, abs=1e-6
    )
    assert metrics["losses/test_value_to_zero/const"] == 2.0
    assert metrics["charts/minibatches"] == 1
    after = _params(learner)
    assert any(not torch.equal(before[k], after[k]) for k in before)


def test_a_term_changes_the_update() -> None:
    term = {"name": "test_value_to_zero", "coef": 1.0}
    a, _ = _learner(_cfg())
    b, _ = _learner(_cfg([term]))
    a.update()
    b.update()
    pa, pb = _params(a), _params(b)
    assert pa.keys() == pb.keys()
    assert any(not torch.equal(pa[k], pb[k]) for k in pa if k.startswith("value_head."))


# -- no terms: the update is unchanged -------------------------------------------------------------


class _InlinePPO(PPO):
    """PPO whose minibatch step is the pre-extension inline code (gather, evaluate, loss)."""

    def minibatch(self, buffer: RolloutBuffer, ids: Tensor, per_step: Tensor | None = None) -> Any:
        return buffer, ids, per_step

    def minibatch_loss(self, batch: Any, ent_coef: float | None = None) -> Any:
        buffer, ids, per_step = batch
        cfg, net = self.cfg, self.net
        T, B, L = buffer.num_steps, buffer.num_envs, cfg.chunk_len
        chunk_state = L // buffer.state_stride
        steps = torch.arange(L).unsqueeze(1)
        c, b = ids // B, ids % B
        t = c * L + steps
        mask = (t < T) & buffer.valid[t.clamp(max=T - 1), b]
        t = t.clamp(max=T - 1)
        obs, start = obs_index(buffer.obs, (t, b)), buffer.states[c * chunk_state, b]
        logits, new_values = net.evaluate(obs, start, buffer.resets[t, b])
        new_logp, entropy = net.log_prob_entropy(logits, buffer.actions[t, b])
        old_logp, old_values, returns, adv = per_step[t, b].unbind(-1)
        if cfg.norm_adv:
            a = adv[mask]
            if a.numel() > 1:
                adv = (adv - a.mean()) / (a.std() + 1e-8)
        return ppo_loss(
            new_logp=new_logp, old_logp=old_logp, adv=adv, new_values=new_values,
            old_values=old_values, returns=returns, entropy=entropy, mask=mask,
            clip=cfg.clip_coef, clip_vloss=cfg.clip_vloss, vf_coef=cfg.vf_coef, ent_coef=ent_coef,
        )  # fmt: skip


@pytest.mark.parametrize("overrides", [{}, {"kl_target": 0.01, "lr": 1e-2, "norm_adv": False}])
def test_no_terms_and_zero_coef_terms_are_bit_identical_to_the_inline_update(
    overrides: dict[str, Any],
) -> None:
    zero = [{"name": "test_value_to_zero", "coef": 0.0}, {"name": "test_feature_l2", "coef": 0.0}]
    results = {}
    for name, cls, terms in (("inline", _InlinePPO, []), ("none", PPO, []), ("zero", PPO, zero)):
        cfg = _cfg(terms, **overrides)
        env = CueMemoryEnv(4)
        learner = cls(env.single_observation_space, env.single_action_space, cfg, seed=0)
        for it in range(2):
            collect(env, learner, cfg.num_steps, seed=it)
            metrics = learner.update(progress=0.5 * it)
        results[name] = (_params(learner), metrics)
    ref, ref_metrics = results["inline"]
    for name in ("none", "zero"):
        params, metrics = results[name]
        assert params.keys() == ref.keys()
        assert all(torch.equal(params[k], ref[k]) for k in ref), name
        for k in ("losses/policy_loss", "losses/value_loss", "charts/minibatches"):
            assert metrics[k] == ref_metrics[k], (name, k)
    assert "losses/test_value_to_zero" in results["zero"][1]
    assert "losses/test_value_to_zero" not in results["none"][1]


# -- minibatch contents ----------------------------------------------------------------------------


def test_next_observations_against_a_loop_over_the_buffer() -> None:
    space = spaces.Box(-1.0, 1.0, (3,))
    env = RandomEpisodesEnv(5, space, p_term=0.15, p_trunc=0.2)
    cfg = _cfg(num_steps=12, chunk_len=4)
    learner = PPO(env.single_observation_space, env.single_action_space, cfg, seed=0)
    collect(env, learner, cfg.num_steps, seed=0)
    buf = learner.buffer
    assert buf is not None and buf.final_t.numel() > 0
    ids = torch.randperm(_all_ids(learner, buf).numel())[:7]
    batch = learner.minibatch(buf, ids)
    nxt, ok = batch.next_observations()
    L, N = batch.mask.shape
    pairs = zip(buf.final_t.tolist(), buf.final_b.tolist(), strict=True)
    finals = {tb: k for k, tb in enumerate(pairs)}
    for i in range(L):
        for j in range(N):
            t, b = int(batch.t[i, j]), int(batch.b[j])
            if not batch.mask[i, j] or buf.terminations[t, b]:
                assert not ok[i, j]
                continue
            assert ok[i, j]
            if buf.truncations[t, b]:
                want = buf.final_obs[finals[(t, b)]]
            else:
                want = buf.obs[t + 1, b] if t + 1 < buf.num_steps else buf.next_obs[b]
            assert torch.equal(nxt[i, j], want), (i, j)
    assert torch.equal(batch.obs, buf.obs[batch.t, batch.b])
    assert batch.buffer is buf


# -- extra heads -----------------------------------------------------------------------------------


def test_extra_head_is_built_reaches_the_term_and_learns() -> None:
    heads = {"pred": {"kind": "test_next", "options": {"out_size": 5}}}
    learner, buffer = _learner(_cfg([{"name": "test_head_reader", "coef": 1.0}], heads))
    head = learner.net.extra_heads["pred"]
    assert isinstance(head, ToyNextHead)
    assert head.input_size == SMALL["hidden_size"] and head.onehot_size == 2
    before = {k: v.clone() for k, v in head.state_dict().items()}
    learner.update()
    reader = learner.aux_losses[0].term
    assert isinstance(reader, HeadReader) and reader.seen
    batch, out = reader.seen[0]
    L, N = batch.actions.shape
    assert out.extras["pred"].shape == (L, N, 5) and out.features.shape == (L, N, 16)
    onehot = one_hot_actions(batch.actions, learner.action_space)
    # the head read (feature, one-hot action) of each step; its output is what the term got
    with torch.no_grad():
        want = nn.functional.linear(torch.cat([out.features, onehot], -1), *before.values())
    torch.testing.assert_close(out.extras["pred"], want)
    assert torch.equal(onehot.argmax(-1), batch.actions) and onehot.sum(-1).eq(1).all()
    assert any(not torch.equal(before[k], v) for k, v in head.state_dict().items())  # it learned


def test_extra_head_is_saved_and_loaded_with_the_checkpoint() -> None:
    heads = {"pred": {"kind": "test_next", "options": {"out_size": 4}}}
    learner, _ = _learner(_cfg([{"name": "test_head_reader", "coef": 0.5}], heads))
    learner.update()
    blob = io.BytesIO()
    torch.save(learner.state_dict(), blob)
    blob.seek(0)
    saved = torch.load(blob, weights_only=True)
    assert any(k.startswith("extra_heads.pred.") for k in saved["net"])
    cfg = config_from_dict(saved["config"])
    assert cfg == learner.cfg and cfg.network.extra_heads == heads
    env = CueMemoryEnv(1)
    restored = PPO(env.single_observation_space, env.single_action_space, cfg, seed=99)
    assert not torch.equal(
        restored.net.extra_heads["pred"].fc.weight, learner.net.extra_heads["pred"].fc.weight
    )
    restored.load_state_dict(saved)
    a, b = _params(learner), _params(restored)
    assert a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)
    # a network without the head refuses those weights
    plain = PPO(env.single_observation_space, env.single_action_space, _cfg(), seed=0)
    with pytest.raises(RuntimeError, match="extra_heads.pred"):
        plain.load_state_dict(saved)


def test_no_extra_heads_build_the_same_network() -> None:
    env = CueMemoryEnv(1)
    plain = PPO(env.single_observation_space, env.single_action_space, _cfg(), seed=0)
    heads = {"pred": {"kind": "test_next"}}
    headed = PPO(env.single_observation_space, env.single_action_space, _cfg(None, heads), seed=0)
    a, b = _params(plain), _params(headed)
    assert set(b) - set(a) == {"extra_heads.pred.fc.weight", "extra_heads.pred.fc.bias"}
    assert all(torch.equal(a[k], b[k]) for k in a)  # the other parameters initialise as before
    assert len(plain.net.extra_heads) == 0


def test_builtin_mlp_head_and_multidiscrete_one_hot() -> None:
    space = spaces.MultiDiscrete([2, 3])
    actions = torch.tensor([[0, 5], [4, 1]])  # row-major joint indices of (branch0, branch1)
    onehot = one_hot_actions(actions, space)
    assert onehot.shape == (2, 2, 5) and one_hot_size(space) == 5
    assert torch.equal(onehot[0, 1], torch.tensor([0.0, 1, 0, 0, 1]))  # 5 = (1, 2)
    assert torch.equal(onehot[1, 0], torch.tensor([0.0, 1, 0, 1, 0]))  # 4 = (1, 1)
    heads = {"aux": {"kind": "mlp", "options": {"out_size": 7, "with_action": True}}}
    env = CueMemoryEnv(3)
    learner = PPO(env.single_observation_space, env.single_action_space, _cfg(None, heads))
    obs, state = torch.rand(4, 3, 3), learner.initial_state(3)
    resets, acts = torch.zeros(4, 3, dtype=torch.bool), torch.randint(0, 2, (4, 3))
    out = learner.net.output(obs, state, resets, acts)
    assert out.extras["aux"].shape == (4, 3, 7)
    logits, values = learner.net.evaluate(obs, state, resets)
    assert torch.equal(out.logits, logits) and torch.equal(out.values, values)


# -- network classes -------------------------------------------------------------------------------


def test_network_chosen_by_config() -> None:
    from marlgrid.agents.networks.models import ActorCritic

    class Wider(ActorCritic):
        pass

    register_network("test_wider", Wider)
    try:
        env = CueMemoryEnv(1)
        cfg = _cfg(network_kind="test_wider")
        cfg.validate()
        learner = PPO(env.single_observation_space, env.single_action_space, cfg)
        assert type(learner.net) is Wider
    finally:
        unregister_network("test_wider")
    default = PPO(env.single_observation_space, env.single_action_space, _cfg())
    assert type(default.net) is ActorCritic


# -- refused configs -------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("overrides", "match"),
    [
        (
            {"aux_losses": [{"name": "nope"}]},
            r"agent\.aux_losses\[0\]\.name must be a registered loss term, one of \[.*"
            r"'test_value_to_zero'.*\], got 'nope'",
        ),
        ({"aux_losses": [{"name": "test_feature_l2", "weight": 1}]}, r"unknown keys \['weight'\]"),
        ({"aux_losses": [{"name": "test_feature_l2", "coef": "x"}]}, r"aux_losses\[0\]\.coef"),
        (
            {"aux_losses": [{"name": "test_feature_l2", "coef": -0.5}]},
            r"aux_losses\[0\]\.coef must be in \[0, 10000\] \(a negative one maximises",
        ),
        ({"aux_losses": [{"name": "test_feature_l2", "coef": 1e300}]}, r"\[0\]\.coef must be in"),
        ({"aux_losses": [{"name": "test_feature_l2", "options": 3}]}, r"\[0\]\.options"),
        ({"aux_losses": {"name": "test_feature_l2"}}, r"agent\.aux_losses must be a list"),
        (
            {"aux_losses": [{"name": "test_feature_l2"}, {"name": "test_feature_l2"}]},
            r"aux_losses\[1\]\.name 'test_feature_l2' is configured twice",
        ),
        ({"network_kind": "nope"}, r"agent\.network_kind must be a registered network, .*'nope'"),
        (
            {"extra_heads": {"x": {"kind": "nope"}}},
            r"agent\.network\.extra_heads\.x\.kind must be a registered head, one of \[.*'mlp'.*"
            r"'test_next'.*\], got 'nope'",
        ),
        ({"extra_heads": {"x": {"kind": "mlp", "size": 3}}}, r"extra_heads\.x has unknown keys"),
        ({"extra_heads": {"a.b": {"kind": "mlp"}}}, r"extra_heads names must be"),
    ],
)
def test_bad_extension_configs_are_refused(overrides: dict[str, Any], match: str) -> None:
    heads = overrides.pop("extra_heads", None)
    terms = overrides.pop("aux_losses", None)
    cfg = _cfg(None, heads, **overrides)
    if terms is not None:
        cfg.aux_losses = terms
    with pytest.raises(ConfigError, match=match):
        cfg.validate("agent")
    env = CueMemoryEnv(1)
    with pytest.raises(ConfigError):  # building the learner refuses it too
        PPO(env.single_observation_space, env.single_action_space, cfg)


def test_reserved_names_and_bad_options_are_refused() -> None:
    register_loss_term("entropy", FeatureL2)
    try:
        with pytest.raises(ConfigError, match=r"'entropy' is taken by the algorithm's own logs"):
            _cfg([{"name": "entropy"}]).validate()
    finally:
        unregister_loss_term("entropy")
    env = CueMemoryEnv(1)
    bad = _cfg([{"name": "test_value_to_zero", "options": {"sclae": 1.0}}])
    with pytest.raises(ConfigError, match=r"aux_losses\[0\]\.options .*'sclae'"):
        PPO(env.single_observation_space, env.single_action_space, bad)
    bad_head = _cfg(None, {"p": {"kind": "test_next", "options": {"width": 3}}})
    with pytest.raises(ConfigError, match=r"extra_heads\.p\.options .*'width'"):
        PPO(env.single_observation_space, env.single_action_space, bad_head)
    with pytest.raises(ValueError, match="already registered"):
        register_loss_term("test_feature_l2", ValueToZero)
    assert losses.LOSS_TERMS["test_feature_l2"] is FeatureL2


def test_per_step_matches_the_minibatch_fields() -> None:
    learner, buffer = _learner(_cfg(norm_adv=False))
    ids = _all_ids(learner, buffer)
    batch = learner.minibatch(buffer, ids)
    want = _per_step(buffer)[batch.t, batch.b].unbind(-1)
    for got, w in zip(
        (batch.old_logp, batch.old_values, batch.returns, batch.advantages), want, strict=True
    ):
        assert torch.equal(got, w)
    assert torch.equal(batch.actions, buffer.actions[batch.t, batch.b])
    assert torch.equal(batch.resets, buffer.resets[batch.t, batch.b])


def test_drqn_refuses_extra_heads_it_would_not_build():
    from marlgrid.agents.algorithms.drqn import DRQNConfig
    from marlgrid.agents.networks import NetworkConfig

    cfg = DRQNConfig(network=NetworkConfig(extra_heads={"pred": {"kind": "mlp"}}))
    with pytest.raises(ConfigError, match=r"agent\.network\.extra_heads must be empty for DRQN"):
        cfg.validate("agent")
