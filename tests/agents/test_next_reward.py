"""The ``next_reward`` loss term (marlgrid.agents.algorithms.next_reward): classes and the
balanced cross-entropy by hand, the term on a real goal-cycle buffer, where its gradient goes,
one update through the trainer's learner, configs and the preset."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
import torch
import torch.nn.functional as F

import marlgrid
from marlgrid.agents.algorithms.next_reward import (
    NextRewardLoss,
    balanced_cross_entropy,
    reward_classes,
)
from marlgrid.agents.algorithms.ppo import PPO, PPOConfig
from marlgrid.agents.networks import NetworkConfig
from marlgrid.agents.networks.next_view_head import NextViewHead
from marlgrid.agents.training.rollout import MultiAgentRollout, PolicyGroup
from marlgrid.config import ConfigError
from tests.agents.conftest import (
    assert_term_trains_head_memory_encoder_only,
    compose_learner,
    train_learner,
)

SMALL = {"hidden_size": 16, "trunk_sizes": (16,), "head_sizes": (8,), "conv_channels": (4,)}
TERM = {"name": "next_reward", "coef": 1.0, "options": {"balance": True}}


@pytest.fixture(autouse=True)
def _one_thread() -> None:
    torch.set_num_threads(1)


def _cfg(terms: list[dict[str, Any]] | None = None, **overrides: Any) -> PPOConfig:
    net = NetworkConfig(**{**SMALL, **overrides.pop("network", {})})
    return PPOConfig(network=net, aux_losses=terms or [], **{"kl_target": None, **overrides})


def _goal_cycle(num_envs: int = 8) -> Any:
    """A 5x5 goal cycle of 4 tiles in 9 free cells, one agent that sees its last reward:
    rewards of both signs come often under random actions."""
    return marlgrid.make_vec(
        "MarlGrid-GoalCycle-13x13-3Agents-v0", num_envs, size=5, n_goals=4, n_agents=1,
        max_steps=40, clutter_density=0.0, penalty=1.5, agent={"extras": ["reward"]},
    )  # fmt: skip


def _learner(cfg: PPOConfig, vec: Any) -> PPO:
    a = vec.possible_agents[0]
    return PPO(vec.single_observation_space(a), vec.single_action_space(a), cfg, seed=0)


def _collect(vec: Any, learner: PPO, num_steps: int) -> None:
    group = PolicyGroup("main", learner, list(vec.possible_agents))
    MultiAgentRollout(vec, [group], seed=0).collect(num_steps)


def test_reward_classes_are_the_signs():
    rewards = torch.tensor([[-1.5, 0.0, 1.0], [0.25, -0.0, -3.0]])
    assert reward_classes(rewards).tolist() == [[0, 1, 2], [2, 1, 0]]


def test_balanced_cross_entropy_by_hand():
    logits = torch.tensor([[2.0, 0.0, -1.0], [0.0, 1.0, 0.0], [0.5, 0.5, 3.0], [1.0, 1.0, 1.0]])
    classes = torch.tensor([0, 1, 1, 2])
    mask = torch.tensor([True, True, True, False])  # the positive step is out
    ce = [float(F.cross_entropy(logits[i : i + 1], classes[i : i + 1])) for i in range(4)]
    balanced = balanced_cross_entropy(logits, classes, mask, balance=True)
    assert float(balanced) == pytest.approx((ce[0] + (ce[1] + ce[2]) / 2) / 2)
    plain = balanced_cross_entropy(logits, classes, mask, balance=False)
    assert float(plain) == pytest.approx((ce[0] + ce[1] + ce[2]) / 3)
    nothing = balanced_cross_entropy(logits, classes, torch.zeros(4, dtype=torch.bool), True)
    assert float(nothing) == 0.0


def test_the_term_on_a_goal_cycle_buffer_reads_each_steps_reward():
    vec = _goal_cycle()
    learner = _learner(_cfg([TERM], num_steps=64, chunk_len=8), vec)
    _collect(vec, learner, 64)
    buf = learner.buffer
    assert buf is not None and (buf.rewards > 0).any() and (buf.rewards < 0).any()
    batch = learner.minibatch(buf, torch.arange(buf.num_envs * buf.num_steps // 8))
    out = learner.net.output(batch.obs, batch.start_state, batch.resets, batch.actions)
    loss, logs = learner.aux_losses[0].term(batch, out)
    classes = reward_classes(buf.rewards[batch.t, batch.b])
    want = balanced_cross_entropy(out.extras["next_reward"], classes, batch.mask, True)
    torch.testing.assert_close(loss, want)
    rewarded = ((buf.rewards != 0) & buf.valid).sum() / buf.valid.sum()
    assert float(logs["nonzero"]) == pytest.approx(float(rewarded))
    assert 0.0 <= float(logs["accuracy"]) <= 1.0
    # its gradient reaches the head, the memory and the encoder, not the policy or value heads
    assert_term_trains_head_memory_encoder_only(loss, learner.net, "next_reward")


def test_updates_train_the_head_toward_the_rewards():
    vec = _goal_cycle()
    cfg = _cfg([{**TERM, "coef": 5.0}], num_steps=64, chunk_len=8, num_minibatches=2,
               update_epochs=4, anneal_lr=False, lr=3e-3)  # fmt: skip
    learner = _learner(cfg, vec)
    before = {k: v.clone() for k, v in learner.net.state_dict().items()}
    history = train_learner(vec, learner, 8 * 64 * 8)  # 8 updates
    first, last = history[0]["losses/next_reward"], history[-1]["losses/next_reward"]
    assert np.isfinite(last) and last < 0.75 * first  # about 1.04 -> 0.35-0.47 on 3 seeds
    head = [k for k in before if k.startswith("extra_heads.next_reward.")]
    after = learner.net.state_dict()
    assert head and all(not torch.equal(before[k], after[k]) for k in head)


def test_one_entry_configures_the_head_and_export_drops_it():
    vec = _goal_cycle()
    cfg = _cfg([TERM])
    cfg.validate()
    learner = _learner(cfg, vec)
    head = learner.net.extra_heads["next_reward"]
    assert isinstance(head, NextViewHead) and head.shape == (3,) and head.view == "real"
    assert cfg.network.extra_heads == {}
    acting = PPO.acting_state(learner.state_dict())
    assert acting["config"]["aux_losses"] == []
    assert not any(k.startswith("extra_heads.") for k in acting["net"])
    assert (
        NextRewardLoss.heads({}, None, None, NetworkConfig(), "t")["next_reward"]["options"][
            "hidden"
        ]
        == 128
    )


@pytest.mark.parametrize(
    ("options", "match"),
    [
        ({"balance": "yes"}, r"aux_losses\[0\]\.options\.balance must be true or false"),
        ({"hidden": 0}, r"aux_losses\[0\]\.options\.hidden"),
        ({"loss": "l1"}, r"aux_losses\[0\]\.options has unknown keys \['loss'\]"),
    ],
)
def test_bad_options_are_refused_by_the_config_check(options: dict[str, Any], match: str):
    with pytest.raises(ConfigError, match=match):
        _cfg([{"name": "next_reward", "options": options}]).validate("agent")


def test_the_preset_is_the_expert_learner_plus_the_term():
    aux, plain = (
        compose_learner("agent=ppo_lstm_expert_next_reward"),
        compose_learner("agent=ppo_lstm_expert"),
    )
    assert aux.aux_losses == [TERM]
    aux.aux_losses = []
    assert aux == plain


def test_the_term_without_its_head_is_refused_naming_it():
    learner = _learner(_cfg(), _goal_cycle())  # no term: no head
    with pytest.raises(ConfigError, match=r"next_reward term needs the network's extra head "):
        NextRewardLoss(learner.net)
