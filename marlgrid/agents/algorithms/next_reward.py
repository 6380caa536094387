"""The ``next_reward`` loss term: predict the sign of the reward an action earns, from memory.

A reward-prediction auxiliary task (as in UNREAL, Jaderberg et al. 2017, there from stacked
frames; here from the memory core): a small head on ``(memory output h_t, one-hot a_t)``
classifies the reward ``r_t`` that step ``t``'s action earned as negative, zero or positive, and
its cross-entropy is added to the learner's loss with a coefficient. On the goal cycle the
answer for a step onto a tile is whether that tile is the next one of the hidden order, which
only the episode's history tells (tiles look alike): the term asks the memory to hold that
bookkeeping where the policy head reads it. Turning it on is one entry::

    agent.aux_losses=[{name: next_reward, coef: 1.0}]

The head is a :class:`~marlgrid.agents.networks.next_view_head.NextViewHead` of view ``real``
and shape ``[3]`` (one hidden layer, then three logits) that the term declares through its
:meth:`~NextRewardLoss.heads` hook, named ``next_reward``. The gradient reaches the head, the
memory core and the encoder.

Options:

- ``balance`` (default true): the mean over the classes present in the minibatch of each
  class's mean cross-entropy, so the rare rewarded steps weigh as much as the many zero ones
  (UNREAL balances by sampling instead); false: the plain mean over steps.
- ``hidden``: width of the head's hidden layer (default 128).

Targets: the reward stored for step ``t`` (the buffer's ``rewards``, what the env paid for
``a_t``); every step the loss uses (``batch.mask``) has one. Logs: ``losses/next_reward/
accuracy`` (share of steps whose class the argmax gets right) and ``losses/next_reward/
nonzero`` (share of steps with a nonzero reward).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import torch
import torch.nn.functional as F
from gymnasium import spaces
from torch import Tensor

from marlgrid.agents.algorithms.losses import (
    MiniBatch,
    TermBase,
    register_loss_term,
    term_options,
)
from marlgrid.agents.networks.next_view_head import NextViewHead
from marlgrid.agents.networks.registry import NetOutput
from marlgrid.config import ConfigError, check_int

__all__ = ["CLASSES", "HEAD", "NextRewardLoss", "balanced_cross_entropy", "reward_classes"]

#: the name of the head the term declares
HEAD = "next_reward"
#: the classes a reward falls in, in the order of the head's logits
CLASSES = ("negative", "zero", "positive")
_OPTIONS = {"balance": True, "hidden": 128}


def _options(options: Mapping[str, Any], key: str) -> dict[str, Any]:
    """``options`` with the defaults filled in, checked (errors name ``<key>.<option>``)."""
    out = term_options(options, _OPTIONS, key)
    if not isinstance(out["balance"], bool):
        raise ConfigError(f"{key}.balance must be true or false, got {out['balance']!r}")
    check_int(f"{key}.hidden", out["hidden"], low=1)
    return out


def reward_classes(rewards: Tensor) -> Tensor:
    """Class indices of ``rewards`` (any shape): 0 negative, 1 zero, 2 positive."""
    return (torch.sign(rewards) + 1).long()


def balanced_cross_entropy(logits: Tensor, classes: Tensor, mask: Tensor, balance: bool) -> Tensor:
    """Cross-entropy of ``logits (..., C)`` against ``classes (...)`` where ``mask`` is set:
    with ``balance`` the mean over the classes present of each one's mean, else the mean over
    the masked steps (0 when nothing is masked in)."""
    ce = F.cross_entropy(logits.flatten(0, -2), classes.flatten(), reduction="none")
    keep = mask.flatten()
    if not balance:
        return torch.where(keep, ce, ce.new_zeros(())).sum() / keep.sum().clamp(min=1)
    per_class = []
    for c in range(logits.shape[-1]):
        rows = keep & (classes.flatten() == c)
        if rows.any():
            per_class.append(torch.where(rows, ce, ce.new_zeros(())).sum() / rows.sum())
    return torch.stack(per_class).mean() if per_class else logits.sum() * 0.0


class NextRewardLoss(TermBase):
    """The ``next_reward`` loss term (see the module docstring); built as
    ``NextRewardLoss(net, **options)`` on a network that has the head :data:`HEAD`."""

    NAME = HEAD
    parse_options = staticmethod(_options)

    @classmethod
    def declare_heads(
        cls, opts: dict[str, Any], observation_space: spaces.Space, network: Any, key: str
    ) -> dict[str, dict[str, Any]]:
        """The classifier head this term needs, ``{"next_reward": {kind, options}}``."""
        head = {"view": "real", "shape": [len(CLASSES)], "hidden": opts["hidden"]}
        return {HEAD: {"kind": "next_view", "options": head}}

    def __init__(self, net: Any, **options: Any) -> None:
        self.balance = _options(options, "next_reward options")["balance"]
        self.declared_head(net, HEAD, NextViewHead)

    def __call__(self, batch: MiniBatch, output: NetOutput) -> tuple[Tensor, dict[str, Tensor]]:
        if batch.buffer is None:
            raise ValueError("next_reward targets need the minibatch's buffer")
        logits = output.extras[HEAD]
        classes = reward_classes(batch.buffer.rewards[batch.t, batch.b])
        mask = batch.mask
        loss = balanced_cross_entropy(logits, classes, mask, self.balance)
        with torch.no_grad():
            n = mask.sum().clamp(min=1)
            hits = (logits.argmax(-1) == classes) & mask
            logs = {"accuracy": hits.sum() / n, "nonzero": ((classes != 1) & mask).sum() / n}
        return loss, logs


register_loss_term(HEAD, NextRewardLoss)
