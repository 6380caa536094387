"""Imitation of a teacher's actions: the masked negative log-likelihood (:func:`teacher_nll`) and
the PPO loss term ``imitation`` built on it.

:func:`teacher_nll` is the one home of the imitation math: the behaviour-cloning learner
(:mod:`.bc`) minimises it on the teacher's own observations, and :class:`ImitationTerm` adds it
to PPO's loss on the learner's own view and memory. The term plugs into the loss-term registry
(:mod:`marlgrid.agents.algorithms.losses`)::

    PPOConfig(aux_losses=[{"name": "imitation", "coef": 0.5, "options": {"teacher": "agent_1"}}])

A term that reads teachers says so with a ``teachers`` attribute (agent ids); PPO asks the
rollout for those agents' steps (:attr:`PPO.teachers <marlgrid.agents.algorithms.ppo.PPO>`) and
stores their actions and in-play flags per step in its rollout buffer
(``RolloutBuffer.teacher_actions`` / ``teacher_valid``), where the term reads them by
``batch.t, batch.b``. It logs ``losses/imitation`` (the NLL, before its coefficient),
``losses/imitation/accuracy`` (greedy policy action == teacher action) and
``losses/imitation/teacher_share`` (the share of the minibatch's steps the term counts).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

import torch
from torch import Tensor

from marlgrid.agents.algorithms.losses import MiniBatch, register_loss_term
from marlgrid.agents.networks.models import ravel_actions
from marlgrid.config import ConfigError

if TYPE_CHECKING:
    from marlgrid.agents.networks.registry import NetOutput

__all__ = ["ImitationTerm", "check_teacher_id", "greedy_actions", "teacher_nll"]


def check_teacher_id(key: str, value: Any) -> str:
    """``value`` if it can name a teacher (a non-empty agent id string); else
    :class:`~marlgrid.config.ConfigError` naming ``key``. Whether the env has that agent, and
    that it is not the learner's own, is checked once the roles are built
    (:mod:`marlgrid.agents.training.roles`, :mod:`marlgrid.agents.training.streams`)."""
    if not isinstance(value, str) or not value:
        raise ConfigError(f"{key} must be an agent id of the env such as 'agent_1', got {value!r}")
    return value


def greedy_actions(net: Any, logits: Tensor) -> Tensor:
    """The most likely action index under ``logits`` (per branch for a ``MultiDiscrete``
    network, raveled as the network's actions are: ``net.action_nvec``)."""
    nvec = getattr(net, "action_nvec", None)
    if nvec is None:
        return logits.argmax(-1)
    picks = [part.argmax(-1) for part in logits.split(list(nvec), -1)]
    return ravel_actions(torch.stack(picks, -1), nvec)


def teacher_nll(net: Any, logits: Tensor, actions: Tensor, mask: Tensor) -> tuple[Tensor, Tensor]:
    """``(nll, accuracy)`` of the teacher's action indices ``actions`` under the policy
    ``logits``, both means over the steps where ``mask`` is true (0 when none is):
    ``nll = -mean(log pi(a_teacher))`` (with gradients), ``accuracy = mean(argmax pi ==
    a_teacher)`` (detached). Masked steps may hold any action index in range."""
    logp, _ = net.log_prob_entropy(logits, actions)
    mask = mask.bool()
    n = mask.sum().clamp(min=1)
    nll = -torch.where(mask, logp, logp.new_zeros(())).sum() / n
    with torch.no_grad():
        hits = (greedy_actions(net, logits) == actions) & mask
        accuracy = hits.sum().to(logp.dtype) / n
    return nll, accuracy


@register_loss_term("imitation")
class ImitationTerm:
    """Cross-entropy of the PPO policy (on the learner's own view and memory) against the action
    ``teacher`` took at the same step, over the minibatch's steps where the learner's step
    counts (``batch.mask``) and the teacher was in play. Option: ``teacher``, an agent id of the
    env other than the learner's own."""

    def __init__(self, net: Any, teacher: str) -> None:
        self.net = net
        self.teacher = check_teacher_id("imitation options.teacher", teacher)
        #: the agents whose steps the learner must record for this term
        self.teachers: tuple[str, ...] = (teacher,)

    def __call__(self, batch: MiniBatch, output: NetOutput) -> tuple[Tensor, Mapping[str, Tensor]]:
        buf = batch.buffer
        if buf is None or self.teacher not in getattr(buf, "teacher_actions", {}):
            raise ValueError(
                f"the imitation term needs teacher {self.teacher!r}'s actions in the minibatch's "
                "buffer (RolloutBuffer(teachers=...), recorded by PPO.record)"
            )
        actions = buf.teacher_actions[self.teacher][batch.t, batch.b]
        mask = batch.mask & buf.teacher_valid[self.teacher][batch.t, batch.b]
        nll, accuracy = teacher_nll(self.net, output.logits, actions, mask)
        share = mask.sum() / batch.mask.sum().clamp(min=1)
        return nll, {"accuracy": accuracy, "teacher_share": share.detach().float()}
