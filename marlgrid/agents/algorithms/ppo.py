"""Recurrent PPO (any memory core) with hidden-state refreshing.

:class:`PPO` is the learner (:class:`~marlgrid.agents.learner.Learner` protocol): ``act``,
``record`` into its :class:`~marlgrid.agents.storage.rollout_buffer.RolloutBuffer`, ``ready``
when the rollout is full, ``update`` (minibatches of trajectory chunks, hidden-state refreshing,
KL early stopping, optional hard KL limit with rollback) and checkpoints.

The hyperparameters, :class:`PPOConfig` (the network's are a nested
:class:`~marlgrid.agents.networks.NetworkConfig`), live in :mod:`.ppo_config` with their checks;
the clipped loss, :func:`ppo_loss`, pure math tested against hand computations, in
:mod:`.ppo_loss` (GAE is in :mod:`marlgrid.agents.returns`).

Extension points. The network is built by name (``PPOConfig.network_kind``, default
``"actor_critic"``; :mod:`marlgrid.agents.networks.registry`, also for extra heads), and the
loss of a minibatch (:meth:`PPO.minibatch_loss`) is :func:`ppo_loss` plus ``coef * term`` for
each of ``PPOConfig.aux_losses`` (:mod:`marlgrid.agents.algorithms.losses`). Without terms it is
exactly the PPO loss, with no extra forward pass. An auxiliary loss is then one class::

    class FeatureL2:  # an L2 penalty on the torso features
        def __init__(self, net):
            pass
        def __call__(self, batch, output):
            return output.features[batch.mask].square().mean(), {}

    register_loss_term("feature_l2", FeatureL2)
    PPOConfig(aux_losses=[{"name": "feature_l2", "coef": 1e-3}])  # logs losses/feature_l2

A term may declare extra heads, which PPO adds to its network (:func:`.losses.with_term_heads`),
as the built-in ``next_view`` term (:mod:`.next_view`) does.

Conventions. A batch slot ``b`` is one environment (or one (env, agent) pair). ``resets[t, b]``
marks that the observation at step ``t`` starts an episode; the memory core then resets that
slot's state before step ``t``. The state stored for step ``t`` is the one used at that step
(after that reset). Actions are indices ``0..n-1`` (a ``MultiDiscrete`` action is one index
of the joint action, see :mod:`marlgrid.agents.networks.models`).
"""

from __future__ import annotations

import copy
import time
from typing import Any

import numpy as np
import torch
from gymnasium import spaces
from torch import Tensor

from marlgrid.agents.algorithms import next_reward, next_view  # noqa: F401 (register their terms)
from marlgrid.agents.algorithms.losses import MiniBatch, build_aux_losses, with_term_heads
from marlgrid.agents.algorithms.net_state import NetworkLearnerState
from marlgrid.agents.algorithms.ppo_config import PPO_LOGS, PPOConfig
from marlgrid.agents.algorithms.ppo_loss import explained_variance, ppo_loss
from marlgrid.agents.algorithms.refresh import refresh_rollout
from marlgrid.agents.arrays import Obs, obs_index
from marlgrid.agents.learner import Action, Step, register_learner
from marlgrid.agents.networks.protocols import PolicyValueNet
from marlgrid.agents.networks.registry import make_network
from marlgrid.agents.optim import FlatGrads, linear_schedule, make_optimizer, set_lr
from marlgrid.agents.returns import compute_gae
from marlgrid.agents.storage.rollout_buffer import RolloutBuffer

__all__ = ["PPO", "PPOConfig", "RolloutBuffer", "compute_gae", "explained_variance", "ppo_loss"]


class PPO(NetworkLearnerState):
    """Recurrent PPO learner around a network built by name (``cfg.network_kind``: by default
    an :class:`~marlgrid.agents.networks.models.ActorCritic`; any
    :class:`~marlgrid.agents.networks.protocols.PolicyValueNet`).

    Minibatches are trajectory chunks: the T axis is cut into ``ceil(T / chunk_len)`` chunks per
    batch slot (the last one padded and masked), and each epoch deals the shuffled chunks into
    ``num_minibatches`` minibatches. A chunk starts from its stored memory state; episode starts
    inside a chunk are handled by the reset flags. Every ``refresh_interval`` minibatches,
    :meth:`refresh` recomputes, with the current network, the stored states that chunks start
    from, and the values, advantages and returns of every step (behaviour log-probs are kept;
    value clipping is then around the refreshed values). Only chunk-start states are ever read,
    so the buffer stores no others; a refresh is one batched pass over the buffer
    (:meth:`Torso.chunk_unroll <marlgrid.agents.networks.Torso.chunk_unroll>`).

    Speed (CPU): acting runs in ``torch.inference_mode``; an update gathers each minibatch with
    a few index ops, zeroes and clips all gradients as one flat tensor and steps a fused Adam.

    ``cfg`` is used as given: :meth:`PPOConfig.validate` checks it (the trainer does, once,
    before it builds anything; call it when building a learner yourself).
    """

    COUNTERS = ("num_updates", "num_refreshes")  # saved in checkpoints (NetworkLearnerState)

    def __init__(
        self,
        observation_space: spaces.Space,
        action_space: spaces.Space,
        cfg: PPOConfig | None = None,
        seed: int = 0,
    ) -> None:
        self.cfg = cfg = cfg or PPOConfig()
        self.observation_space, self.action_space = observation_space, action_space
        self.device = torch.device(cfg.device)
        net_cfg = with_term_heads(  # plus the heads the loss terms declare (cfg is unchanged)
            cfg.network, cfg.aux_losses, observation_space, action_space, "aux_losses", "network"
        )
        with torch.random.fork_rng(devices=[]):
            torch.manual_seed(seed)
            self.net: PolicyValueNet = make_network(
                cfg.network_kind, observation_space, action_space, net_cfg, "network_kind"
            )
        self.net.to(self.device)
        #: the configured loss terms (name, coef, term), added to the PPO loss in order
        self.aux_losses = build_aux_losses(cfg.aux_losses, self.net, "aux_losses", PPO_LOGS)
        self.action_start = self.net.action_start
        self.optimizer = make_optimizer(self.net.parameters(), "adam", cfg.lr, cfg.adam_eps)
        self.grads = FlatGrads(self.net)
        self.generator = torch.Generator(device=self.device).manual_seed(seed + 1)
        self.num_updates = 0
        self.num_refreshes = 0
        self.buffer: RolloutBuffer | None = None

    def new_buffer(self, num_slots: int) -> RolloutBuffer:
        """A :class:`RolloutBuffer` for ``cfg.num_steps`` steps of ``num_slots`` slots that stores
        states only at chunk starts (``state_stride = cfg.chunk_len``), on the learner's device."""
        cfg = self.cfg
        return RolloutBuffer(
            cfg.num_steps,
            num_slots,
            self.observation_space,
            self.net.state_size,
            self.device,
            state_stride=cfg.chunk_len,
            teachers=self.teachers,
        )

    @property
    def teachers(self) -> tuple[str, ...]:
        """The agent ids whose steps the configured loss terms read (each term's ``teachers``,
        e.g. the ``imitation`` term's teacher), in order: the rollout passes them to
        :meth:`record`, which stores their actions; empty without such terms."""
        names = (n for _, _, term in self.aux_losses for n in getattr(term, "teachers", ()))
        return tuple(dict.fromkeys(names))

    # -- acting and recording --------------------------------------------------------------------

    @torch.inference_mode()
    def act(self, obs: Obs, state: Tensor, resets: Tensor, explore: bool = True) -> Action:
        """One forward for the whole batch; extras ``logp`` and ``values`` (inference tensors)."""
        actions, logp, values, state = self.net.act(obs, state, resets, not explore, self.generator)
        return Action(actions, state, {"logp": logp, "values": values})

    @torch.inference_mode()
    def value(self, obs: Obs, state: Tensor, resets: Tensor | None = None) -> Tensor:
        """Values ``(B,)`` of one batch of observations."""
        return self.net.step(obs, state, resets)[1]

    def begin(self, num_slots: int) -> None:
        self.buffer = self.new_buffer(num_slots)

    def record(self, step: Step) -> None:
        """Store one step; when the rollout is full, close it with its bootstrap values."""
        buf = self.buffer
        assert buf is not None, "call begin(num_slots) before record"
        if buf.full:
            buf.clear()
        buf.add(
            step.obs,
            step.resets,
            step.state,
            step.actions,
            step.extras["logp"],
            step.extras["values"],
            step.rewards,
            step.terminations,
            step.truncations,
            step.valid,
            # respawns within an episode, where the step reports them (next_view masks them)
            step.respawned,
        )
        if buf.teacher_actions:  # teachers the loss terms read: their action indices per step
            taught = {name: step.teachers[name] for name in buf.teacher_actions}
            buf.add_teachers(
                {n: t.actions.long() - self.action_start for n, t in taught.items()},
                {n: t.valid for n, t in taught.items()},
            )
        if step.final_ids.numel():  # truncated episodes: value of the true last observation
            ids = step.final_ids
            buf.add_final(ids, step.final_obs, self.value(step.final_obs, step.next_state[ids]))
        if buf.full:
            done = step.terminations | step.truncations
            last = self.value(step.next_obs, step.next_state, done)
            buf.finish(step.next_obs, step.next_state, done, last)
            buf.compute_advantages(self.cfg.gamma, self.cfg.gae_lambda)

    def ready(self) -> bool:
        return self.buffer is not None and self.buffer.full

    # -- hidden-state refreshing -----------------------------------------------------------------

    def refresh(self, buffer: RolloutBuffer, state_stride: int | None = None) -> dict[str, float]:
        """Recompute the buffer's stored states, values and advantages with the current network
        (:func:`~marlgrid.agents.algorithms.refresh.refresh_rollout`); returns staleness."""
        self.num_refreshes += 1
        return refresh_rollout(self.net, buffer, self.cfg.gamma, self.cfg.gae_lambda, state_stride)

    # -- update ----------------------------------------------------------------------------------

    @torch.no_grad()
    def batch_kl(self, buffer: RolloutBuffer) -> float:
        """Approximate KL between behaviour and current policy over the whole buffer."""
        logits, _ = self.net.evaluate(buffer.obs, buffer.states[0], buffer.resets)
        new_logp, _ = self.net.log_prob_entropy(logits, buffer.actions)
        logratio = new_logp - buffer.logp
        return float(((logratio.exp() - 1.0) - logratio).mean())

    def minibatch(
        self, buffer: RolloutBuffer, ids: Tensor, per_step: Tensor | None = None
    ) -> MiniBatch:
        """The trajectory chunks ``ids`` (``chunk * B + slot``) of ``buffer`` as a minibatch:
        ``chunk_len`` steps each from their stored start state, the last chunk of a slot padded
        (masked) past ``T``; advantages normalised over the mask with ``cfg.norm_adv``.
        ``per_step`` is :func:`_per_step` of ``buffer`` (built here when not given)."""
        T, B, L = buffer.num_steps, buffer.num_envs, self.cfg.chunk_len
        per_step = _per_step(buffer) if per_step is None else per_step
        c, b = ids // B, ids % B
        t = c * L + torch.arange(L, device=ids.device).unsqueeze(1)  # (L, N) time index
        mask = (t < T) & buffer.valid[t.clamp(max=T - 1), b]
        t = t.clamp(max=T - 1)
        old_logp, old_values, returns, adv = per_step[t, b].unbind(-1)
        if self.cfg.norm_adv:
            a = adv[mask]
            if a.numel() > 1:
                adv = (adv - a.mean()) / (a.std() + 1e-8)
        start = buffer.states[c * (L // buffer.state_stride), b]
        obs, actions = obs_index(buffer.obs, (t, b)), buffer.actions[t, b]
        return MiniBatch(
            obs=obs, actions=actions, resets=buffer.resets[t, b], mask=mask, start_state=start,
            old_logp=old_logp, old_values=old_values, returns=returns, advantages=adv, t=t, b=b,
            buffer=buffer,
        )  # fmt: skip

    def minibatch_loss(
        self, batch: MiniBatch, ent_coef: float | None = None
    ) -> tuple[Tensor, dict[str, Tensor | float]]:
        """The loss of one minibatch and its logs: :func:`ppo_loss` (``ent_coef`` defaults to
        ``cfg.ent_coef``) plus ``coef * loss`` of each configured loss term, in order, all from
        one forward pass (:meth:`output <PolicyValueNet.output>`). Logs: ``ppo_loss``'s terms,
        each loss term's loss (before its coefficient) under its name and its logs under
        ``<name>/<key>``."""
        cfg, net = self.cfg, self.net
        out = net.output(batch.obs, batch.start_state, batch.resets, batch.actions)
        new_logp, entropy = net.log_prob_entropy(out.logits, batch.actions)
        loss, ppo_logs = ppo_loss(
            new_logp=new_logp, old_logp=batch.old_logp, adv=batch.advantages,
            new_values=out.values, old_values=batch.old_values, returns=batch.returns,
            entropy=entropy, mask=batch.mask, clip=cfg.clip_coef, clip_vloss=cfg.clip_vloss,
            vf_coef=cfg.vf_coef, ent_coef=cfg.ent_coef if ent_coef is None else ent_coef,
        )  # fmt: skip
        logs: dict[str, Tensor | float] = dict(ppo_logs)
        for name, coef, term in self.aux_losses:
            term_loss, term_logs = term(batch, out)
            loss = loss + coef * term_loss
            logs[name] = term_loss.detach()
            for k, v in term_logs.items():
                logs[f"{name}/{k}"] = v.detach() if isinstance(v, Tensor) else float(v)
        return loss, logs

    def update(
        self, progress: float = 0.0, buffer: RolloutBuffer | None = None
    ) -> dict[str, float]:
        """Run PPO epochs on a finished buffer (default: the learner's own); ``progress`` in [0, 1]
        drives the schedules.

        Each minibatch (:meth:`minibatch`) is stepped on :meth:`minibatch_loss`. Returns
        ``losses/*`` (means over the minibatches evaluated; a loss term's as
        ``losses/<name>`` and ``losses/<name>/<key>``) and ``charts/*`` metrics:
        learning rate, entropy coefficient, minibatches stepped, early stops, rollback flag,
        refreshes, staleness (means over this update's refreshes; NaN without refresh) and times.
        """
        buffer = self.buffer if buffer is None else buffer
        assert buffer is not None and buffer.full, "update needs a full rollout buffer"
        cfg, net = self.cfg, self.net
        t_start = time.perf_counter()
        lr = linear_schedule(cfg.lr, cfg.lr_final, progress) if cfg.anneal_lr else cfg.lr
        set_lr(self.optimizer, lr)
        ent_final = cfg.ent_coef if cfg.ent_coef_final is None else cfg.ent_coef_final
        ent_coef = linear_schedule(cfg.ent_coef, ent_final, progress)
        snapshot = None
        if cfg.kl_hard_limit is not None:
            snapshot = copy.deepcopy((net.state_dict(), self.optimizer.state_dict()))

        buffer.compute_advantages(cfg.gamma, cfg.gae_lambda)
        T, B, L = buffer.num_steps, buffer.num_envs, cfg.chunk_len
        if L % buffer.state_stride:
            raise ValueError(
                f"chunk_len={L} must be a multiple of the buffer's state_stride="
                f"{buffer.state_stride} (chunks start from stored states)"
            )
        n_chunks, n_mb = -(-T // L), min(cfg.num_minibatches, -(-T // L) * B)
        total_mb = cfg.update_epochs * n_mb
        per_step = _per_step(buffer)  # floats every minibatch reads (rebuilt on refresh)
        terms_log: list[dict[str, Tensor | float]] = []
        staleness: list[dict[str, float]] = []
        grad_norms: list[Tensor] = []
        refresh_time = 0.0
        mb_done = early_stops = 0
        for _epoch in range(cfg.update_epochs):
            perm = torch.randperm(n_chunks * B, generator=self.generator, device=self.device)
            for ids in perm.tensor_split(n_mb):
                loss, terms = self.minibatch_loss(self.minibatch(buffer, ids, per_step), ent_coef)
                terms_log.append(terms)
                if cfg.kl_target is not None and float(terms["approx_kl"]) > 1.5 * cfg.kl_target:
                    early_stops += 1
                    break  # this minibatch's step is skipped; the epoch ends
                self.grads.zero()
                loss.backward()
                grad_norms.append(self.grads.clip_(cfg.max_grad_norm))
                self.optimizer.step()
                mb_done += 1
                refresh_due = cfg.refresh_interval > 0 and mb_done % cfg.refresh_interval == 0
                if refresh_due and mb_done < total_mb:  # a refresh after the last would go unused
                    t0 = time.perf_counter()
                    staleness.append(self.refresh(buffer, state_stride=L))
                    per_step = _per_step(buffer)
                    refresh_time += time.perf_counter() - t0

        metrics: dict[str, float] = {}
        rolled_back = 0.0
        if (snapshot is not None or cfg.log_batch_kl) and mb_done > 0:
            kl = self.batch_kl(buffer)
            metrics["losses/approx_kl_batch"] = kl
            if snapshot is not None and kl > cfg.kl_hard_limit:  # type: ignore[operator]
                net.load_state_dict(snapshot[0])
                self.optimizer.load_state_dict(snapshot[1])
                rolled_back = 1.0
        self.num_updates += 1
        metrics.update({f"losses/{k}": _mean([x[k] for x in terms_log]) for k in terms_log[0]})
        metrics.update(
            {
                "losses/explained_variance": explained_variance(buffer.values, buffer.returns),
                "losses/grad_norm": _mean(grad_norms),
                "charts/learning_rate": lr,
                "charts/ent_coef": ent_coef,
                "charts/minibatches": float(mb_done),
                "charts/early_stops": float(early_stops),
                "charts/rolled_back": rolled_back,
                "charts/refreshes": float(len(staleness)),
                "charts/staleness_mse": _mean([s["mse"] for s in staleness]),
                "charts/staleness_cos": _mean([s["cos"] for s in staleness]),
                "charts/refresh_time": refresh_time,
                "charts/update_time": time.perf_counter() - t_start,
            }
        )
        return metrics


def _per_step(buffer: RolloutBuffer) -> Tensor:
    """Per-step floats read by every minibatch, stacked so one index gathers them all."""
    return torch.stack([buffer.logp, buffer.values, buffer.returns, buffer.advantages], -1)


def _mean(values: list[Any]) -> float:
    """Mean of floats or scalar tensors; NaN when empty."""
    if not values:
        return float("nan")
    return float(np.mean([float(v) for v in values]))


register_learner("ppo", PPOConfig, PPO)
