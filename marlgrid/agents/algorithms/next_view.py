"""The ``next_view`` loss term: predict the agent's next view from its memory and its action.

The model-based auxiliary loss of the social-learning study (Ndousse et al., ICML 2021): a
decoder on ``(memory output h_t, one-hot a_t)`` predicts the view of step ``t + 1``, and its
error is added to PPO's loss with a coefficient. The gradient reaches the decoder, the memory
core and the encoder (nothing is detached). Turning it on is one entry::

    agent.aux_losses=[{name: next_view, coef: 3.0, options: {loss: l1}}]

(3.0 is the original's coefficient as third parties report it; ``conf/agent/ppo_lstm_aux.yaml``
uses it. ``coef`` defaults to 1, as for every term.)

Where it plugs in. :class:`NextViewLoss` is registered as the loss term ``next_view``
(:mod:`marlgrid.agents.algorithms.losses`); its :meth:`~NextViewLoss.heads` hook declares the
decoder, the head ``next_view`` of kind ``next_view``
(:class:`~marlgrid.agents.networks.next_view_head.NextViewHead`), which PPO adds to the
network it builds (a head of that name in ``network.extra_heads`` is refused).

What is predicted: the view part of the observation, the observation itself for a ``Box`` and
its ``image`` key for a ``Dict`` (other keys, e.g. the last reward, are not predicted).

Options:

- ``loss``: ``l1`` (default; the original's mean absolute error), ``l2`` or ``ce``. Symbolic views
  (MiniGrid cells of type, colour, state ids): ``ce`` is the per-cell categorical cross-entropy
  of each channel; ``l1``/``l2`` compare the sigmoid of the logits with the one-hot encoding of
  the ids. Pixel views: ``l1``/``l2`` on pixels scaled to [0, 1], predicted through a sigmoid.
  Other views: ``l1``/``l2`` on the values (through a sigmoid when the space lies in [0, 1]).
  ``ce`` needs symbolic views. Each error is a mean over the view's entries (cells x channels for
  ``ce``), then over the steps that have a target.
- ``target``: ``next`` (default) or ``current``, the autoencoder control (predict ``o_t``).
- ``hidden``: width of the decoder's hidden layer (default 256).

Masking (:func:`view_targets`). ``target: next`` has no target where no view of the same life
follows: after a termination, after a truncation whose final observation was not stored (a
truncation's target is its stored final observation), on padding, where the agent is out of
play at ``t`` or at ``t + 1`` (``t + 1`` read inside the rollout; after its last step only
episode ends and respawns count) and where ``buffer.respawns[t]`` says the agent re-entered play
during step ``t``. ``target: current`` is masked only on padding and out-of-play steps.

Logs: ``losses/next_view`` (the error, before its coefficient), ``losses/next_view/targets`` (the
share of the minibatch's steps that have a target) and, for symbolic views,
``losses/next_view/cell_accuracy`` (the share of predicted cell ids, argmax per channel, that
are right).
"""

from __future__ import annotations

import itertools
from collections.abc import Mapping, Sequence
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
from marlgrid.agents.arrays import Obs
from marlgrid.agents.networks.next_view_head import NextViewHead, view_spec
from marlgrid.agents.networks.registry import NetOutput
from marlgrid.config import ConfigError, check_choice, check_int

__all__ = [
    "HEAD",
    "LOSSES",
    "TARGETS",
    "NextViewLoss",
    "dense_error",
    "masked_mean",
    "symbolic_accuracy",
    "symbolic_error",
    "view_of",
    "view_targets",
]

#: the name of the decoder head the term declares (and its kind)
HEAD = "next_view"
#: ``options.loss``
LOSSES = ("l1", "l2", "ce")
#: ``options.target``
TARGETS = ("next", "current")
_OPTIONS = {"loss": "l1", "target": "next", "hidden": 256}


def _options(options: Mapping[str, Any], key: str) -> dict[str, Any]:
    """``options`` with the defaults filled in, checked (errors name ``<key>.<option>``)."""
    out = term_options(options, _OPTIONS, key)
    check_choice(f"{key}.loss", out["loss"], LOSSES)
    check_choice(f"{key}.target", out["target"], TARGETS)
    check_int(f"{key}.hidden", out["hidden"], low=1)
    return out


def _view_space(space: spaces.Space, key: str) -> spaces.Box:
    """The part of ``space`` the term predicts: the space itself or its ``image`` key."""
    if isinstance(space, spaces.Dict):
        if "image" not in space.spaces:
            raise ConfigError(
                f"{key}: next_view predicts the 'image' key of Dict observations; this "
                f"observation space has keys {sorted(space.spaces)}"
            )
        space = space["image"]
    if not isinstance(space, spaces.Box):
        raise ConfigError(
            f"{key}: next_view predicts Box views (or a Dict's 'image'), got observation "
            f"space {space}"
        )
    return space


def view_of(obs: Obs) -> Tensor:
    """The view part of observations: the tensor itself, or a dict's ``image``."""
    return obs["image"] if isinstance(obs, Mapping) else obs


# -- targets and their mask ---------------------------------------------------------------------


def view_targets(batch: MiniBatch, target: str = "next") -> tuple[Tensor, Tensor]:
    """The view each step of ``batch`` is trained to predict ``(L, N, ...)`` and where it has
    one ``(L, N)`` (see the module docstring for the masking)."""
    if target == "current":
        return view_of(batch.obs), batch.mask
    buf = batch.buffer
    if buf is None:
        raise ValueError("next-view targets need the minibatch's buffer")
    nxt, ok = batch.next_observations()  # no termination, no missing final obs, no padding
    t, b, T = batch.t, batch.b, buf.num_steps
    in_play_next = buf.valid[(t + 1).clamp(max=T - 1), b] | (t + 1 >= T)
    in_play_next = in_play_next | buf.truncations[t, b]  # the target is the final observation
    return view_of(nxt), ok & in_play_next & ~buf.respawns[t, b]


# -- errors per step (pure tensor math) ---------------------------------------------------------


def _pointwise(pred: Tensor, target: Tensor, loss: str) -> Tensor:
    diff = pred - target
    if loss == "l1":
        return diff.abs()
    if loss == "l2":
        return diff.square()
    raise ValueError(f"loss must be 'l1' or 'l2' here, got {loss!r}")


def _codes(view: Tensor, vocab: Sequence[int]) -> Tensor:
    """Symbolic ids ``(..., h, w, 3)`` as long, each below its channel's class count."""
    top = torch.tensor([v - 1 for v in vocab], device=view.device)
    return torch.minimum(view.long(), top)


def symbolic_error(logits: Tensor, view: Tensor, vocab: Sequence[int], loss: str) -> Tensor:
    """Per-step error of symbolic logits ``(..., h, w, sum(vocab))`` against ids ``(..., h, w,
    3)``: ``ce``, the cross-entropy of each channel's block, mean over cells and channels;
    ``l1``/``l2``, ``|sigmoid(logits) - onehot|`` (or squared), mean over cells and one-hot
    entries. Returns ``(...)``."""
    codes = _codes(view, vocab)
    if loss == "ce":
        ce = [
            F.cross_entropy(p.flatten(0, -2), codes[..., c].flatten(), reduction="none")
            for c, p in enumerate(logits.split(list(vocab), -1))
        ]
        return torch.stack(ce, -1).view(*codes.shape).mean((-3, -2, -1))
    # Against a one-hot y, |s - y| is s off the target and 1 - s on it, (s - y)^2 is s^2 off it
    # and s^2 - 2s + 1 on it: so the sum over a cell's entries is the sum of s (or s^2) over
    # all of them, minus 2 s at each channel's target, plus 1 per channel. The same numbers as
    # building the one-hot, without the one-hot (the costliest part of the term's elementwise
    # work: a view's cells x sum(vocab) entries per step).
    if loss not in ("l1", "l2"):
        raise ValueError(f"loss must be 'ce', 'l1' or 'l2', got {loss!r}")
    probs = torch.sigmoid(logits)
    offsets = torch.tensor([0, *itertools.accumulate(vocab)][:-1], device=codes.device)
    at_target = probs.gather(-1, codes + offsets)  # (..., h, w, 3)
    total = (probs if loss == "l1" else probs.square()).sum(-1)
    per_cell = total - 2 * at_target.sum(-1) + len(vocab)  # (..., h, w)
    return per_cell.mean((-2, -1)) / sum(vocab)


def symbolic_accuracy(logits: Tensor, view: Tensor, vocab: Sequence[int]) -> Tensor:
    """Per-step share of the ids ``(..., h, w, 3)`` that the argmax of each channel's logits
    gets right. Returns ``(...)``."""
    codes = _codes(view, vocab)
    hits = [p.argmax(-1) == codes[..., c] for c, p in enumerate(logits.split(list(vocab), -1))]
    return torch.stack(hits, -1).to(logits.dtype).mean((-3, -2, -1))


def dense_error(pred: Tensor, target: Tensor, loss: str, squash: bool, ndim: int) -> Tensor:
    """Per-step ``l1``/``l2`` error of ``pred`` (``sigmoid(pred)`` with ``squash``) against
    ``target``, both ``(..., *view)``, mean over the last ``ndim`` (view) dims."""
    pred = torch.sigmoid(pred) if squash else pred
    return _pointwise(pred, target.to(pred.dtype), loss).mean(tuple(range(-ndim, 0)))


def masked_mean(values: Tensor, mask: Tensor) -> Tensor:
    """Mean of ``values`` where ``mask`` is set (0 where it is nowhere set); what the other
    steps hold (even NaN) changes neither the value nor the gradient."""
    kept = torch.where(mask, values, values.new_zeros(()))
    return kept.sum() / mask.sum().clamp(min=1)


# -- the term -----------------------------------------------------------------------------------


class NextViewLoss(TermBase):
    """The ``next_view`` loss term (see the module docstring); built as
    ``NextViewLoss(net, **options)`` on a network that has the head :data:`HEAD`."""

    NAME = HEAD
    parse_options = staticmethod(_options)

    @classmethod
    def declare_heads(
        cls, opts: dict[str, Any], observation_space: spaces.Space, network: Any, key: str
    ) -> dict[str, dict[str, Any]]:
        """The decoder head this term needs, ``{"next_view": {kind, options}}``, for views of
        ``observation_space`` read as ``network`` (a :class:`NetworkConfig`) reads them."""
        spec = view_spec(_view_space(observation_space, key), network)
        if opts["loss"] == "ce" and spec["view"] != "symbolic":
            raise ConfigError(
                f"{key}.loss 'ce' needs symbolic views (MiniGrid cell ids); these views are "
                f"{spec['view']!r}: use 'l1' or 'l2'"
            )
        return {HEAD: {"kind": HEAD, "options": {**spec, "hidden": opts["hidden"]}}}

    def __init__(self, net: Any, **options: Any) -> None:
        opts = _options(options, "next_view options")
        self.loss, self.target = opts["loss"], opts["target"]
        self.head: NextViewHead = self.declared_head(net, HEAD, NextViewHead)
        if self.loss == "ce" and self.head.view != "symbolic":
            raise ConfigError(
                f"next_view options.loss 'ce' needs symbolic views, got {self.head.view!r}"
            )

    def __call__(self, batch: MiniBatch, output: NetOutput) -> tuple[Tensor, dict[str, Tensor]]:
        pred = output.extras[HEAD]
        views, ok = view_targets(batch, self.target)
        head = self.head
        logs: dict[str, Tensor] = {}
        if head.view == "symbolic":
            assert head.vocab is not None
            err = symbolic_error(pred, views, head.vocab, self.loss)
            with torch.no_grad():
                logs["cell_accuracy"] = masked_mean(symbolic_accuracy(pred, views, head.vocab), ok)
        else:
            target = views.float() / 255.0 if head.view == "pixels" else views
            squash = head.view in ("pixels", "unit")
            err = dense_error(pred, target, self.loss, squash, len(head.shape))
        logs["targets"] = ok.sum() / batch.mask.sum().clamp(min=1)
        return masked_mean(err, ok), logs


register_loss_term(HEAD, NextViewLoss)
