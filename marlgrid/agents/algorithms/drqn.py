"""DRQN with prioritized sequence replay (R2D2-style): a :class:`~.learner.Learner`.

A recurrent Q-network (:class:`~marlgrid.agents.networks.QNetwork`: the shared encoders and memory
cores, optionally dueling) acts epsilon-greedily (one epsilon, or one per slot as Ape-X) or by
Boltzmann sampling over an entropy-regularised soft Q. Every step of every slot goes into a
:class:`~marlgrid.agents.storage.sequence_replay.SequenceReplay`; updates sample sequences by
priority, unroll both networks from the stored actor state (burn-in under ``no_grad``), regress
Q on n-step targets (double or soft, optionally value-rescaled) over the valid, non-burn-in steps,
and write back R2D2's mixed max/mean priority. Stored states can be refreshed with the current
network every few updates (staleness logged).

The hyperparameters, :class:`DRQNConfig`, live in :mod:`.drqn_config` with their checks.

Presets: the defaults suit gridworlds (episodes of tens of steps). An R2D2-like setting
(Kapturowski et al. 2019) is :func:`r2d2_config`: sequences of 80 with 40 overlap and 40 burn-in,
n = 5, gamma 0.997, double and dueling, value rescaling, priority exponent 0.9, eta 0.9, Adam
1e-4 (eps 1e-3), hard target copy every 2500 updates, 64 sequences per batch.
"""

from __future__ import annotations

import copy
import dataclasses
from collections.abc import Mapping
from typing import Any, ClassVar

import numpy as np
import torch
from gymnasium import spaces
from torch import Tensor

from marlgrid.agents.algorithms.drqn_config import DRQNConfig, r2d2_config
from marlgrid.agents.arrays import Obs, obs_index
from marlgrid.agents.learner import Action, Step, register_learner
from marlgrid.agents.networks.models import QNetwork
from marlgrid.agents.optim import FlatGrads, linear_schedule, make_optimizer
from marlgrid.agents.returns import (
    bootstrap_values,
    inverse_value_rescale,
    n_step_returns,
    value_rescale,
)
from marlgrid.agents.storage.sequence_replay import (
    SequenceReplay,
    SequenceSample,
    sequence_priority,
)
from marlgrid.agents.storage.state_refresh import refresh_states

__all__ = ["DRQN", "DRQNConfig", "r2d2_config", "td_targets"]


def td_targets(
    batch: SequenceSample, q_online: Tensor, q_target: Tensor, cfg: DRQNConfig
) -> Tensor:
    """n-step targets ``(W, N)``: the target at step ``t`` bootstraps from row ``t + k_t``.

    With Boltzmann exploration the bootstrap value is the soft one; the entropy of the ``k_t - 1``
    intermediate steps is left out (exact for ``n_step = 1``).
    """
    if cfg.value_rescale:
        q_online = inverse_value_rescale(q_online, cfg.rescale_eps)
        q_target = inverse_value_rescale(q_target, cfg.rescale_eps)
    soft = cfg.alpha if cfg.exploration == "boltzmann" else None
    v = bootstrap_values(q_target, q_online if cfg.double_q else None, soft)
    next_v = torch.cat([v[1:], torch.zeros_like(v[:1])])  # next_v[t] = V(row t + 1)
    g, _ = n_step_returns(
        batch.rewards, next_v, batch.terminations, batch.dones, cfg.gamma, cfg.n_step
    )
    return value_rescale(g, cfg.rescale_eps) if cfg.value_rescale else g


#: what update() logs for every gradient step (averaged), besides beta, epsilon or temperature
METRICS = ("losses/td_loss", "losses/mean_abs_td", "charts/q_mean", "charts/priority_mean",
           "charts/priority_max", "charts/is_weight_mean")  # fmt: skip


def _cols(obs: Obs, rows: slice, cols: Tensor) -> Obs:
    return obs_index(obs, (rows, cols))


class DRQN:
    """The DRQN learner (see the module docstring); built as ``DRQN(obs_space, act_space, cfg)``.

    ``cfg`` is used as given: :meth:`DRQNConfig.validate` checks it (the trainer does, once,
    before it builds anything; call it when building a learner yourself).
    """

    WEIGHTS: ClassVar[tuple[str, ...]] = ("q", "target")  # what init_from takes (warm_start.py)

    def __init__(
        self,
        observation_space: spaces.Space,
        action_space: spaces.Space,
        cfg: DRQNConfig | None = None,
        seed: int = 0,
    ) -> None:
        self.cfg = cfg = cfg or DRQNConfig()
        self.observation_space, self.action_space = observation_space, action_space
        self.device = torch.device(cfg.device)
        with torch.random.fork_rng(devices=[]):
            torch.manual_seed(seed)
            self.q = QNetwork(observation_space, action_space, cfg.network, cfg.dueling)
        self.q.to(self.device)
        self.target = copy.deepcopy(self.q).requires_grad_(False)
        self.action_start, self.num_actions = self.q.action_start, self.q.num_actions
        self.optimizer = make_optimizer(
            self.q.parameters(), cfg.optimizer, cfg.lr, cfg.optimizer_eps
        )
        self.grads = FlatGrads(self.q)
        self.generator = torch.Generator(device=self.device).manual_seed(seed + 1)
        self.np_rng = np.random.default_rng(seed + 2)
        self.replay: SequenceReplay | None = None
        self.progress = 0.0  # training progress of the last update: the schedules' position
        self.num_updates = self.num_grad_steps = self.steps_since_update = 0
        self.replay_refilled = False  # set by load_state_dict when the replay was not saved

    # -- acting -------------------------------------------------------------------------------

    def initial_state(self, num_slots: int) -> Tensor:
        """Zero memory state for ``num_slots`` slots."""
        return self.q.initial_state(num_slots)

    def reset_state(self, state: Tensor, resets: Tensor) -> Tensor:
        """``state`` with the slots where ``resets`` is set reset by the memory core."""
        return self.q.torso.memory.reset_state(state, resets)

    def epsilon(self) -> float:
        """The scheduled epsilon at the current training progress."""
        c = self.cfg
        return linear_schedule(c.eps_start, c.eps_end, self.progress / max(c.eps_fraction, 1e-8))

    def epsilons(self, n: int) -> Tensor:
        """Per-slot epsilons ``(n,)``: all equal, or Ape-X's ``eps^(1 + i / (n - 1) * alpha)``."""
        eps = torch.full((n,), self.epsilon(), device=self.device)
        if self.cfg.apex_alpha > 0 and n > 1:
            eps = eps ** (1.0 + torch.arange(n, device=self.device) / (n - 1) * self.cfg.apex_alpha)
        return eps

    @torch.inference_mode()
    def act(self, obs: Obs, state: Tensor, resets: Tensor, explore: bool = True) -> Action:
        """Greedy, epsilon-greedy or Boltzmann actions for a batch of slots (no extras)."""
        q, state = self.q.step(obs, state, resets)
        actions = q.argmax(-1)
        if explore and self.cfg.exploration == "boltzmann":
            if self.cfg.value_rescale:
                q = inverse_value_rescale(q, self.cfg.rescale_eps)
            probs = torch.softmax(q / self.cfg.alpha, -1)
            actions = torch.multinomial(probs, 1, generator=self.generator).squeeze(-1)
        elif explore:
            B, g = q.shape[0], self.generator
            explore_mask = torch.rand(B, generator=g, device=self.device) < self.epsilons(B)
            random = torch.randint(self.num_actions, (B,), generator=g, device=self.device)
            actions = torch.where(explore_mask, random, actions)
        return Action(actions, state, {})

    # -- storage ------------------------------------------------------------------------------

    def new_replay(self, num_slots: int) -> SequenceReplay:
        """An empty replay for ``num_slots`` slots, shaped by the config."""
        c = self.cfg
        dims = (c.buffer_size, num_slots, self.observation_space, self.q.state_size)
        seq = (self.num_actions, c.seq_len, c.burn_in, c.overlap, c.n_step, c.max_sequences)
        return SequenceReplay(*dims, *seq, c.priority_alpha, c.priority_eps, c.is_norm, c.uniform)

    def begin(self, num_slots: int) -> None:
        """Create the replay (a replay restored from a checkpoint for as many slots is kept)."""
        if self.replay is not None and self.replay.num_slots == num_slots:
            return  # open episodes are cut by the resets of the restarted envs
        self.replay_refilled = self.replay_refilled or self.replay is not None
        self.replay = self.new_replay(num_slots)

    def record(self, step: Step) -> None:
        """Store one step of every slot."""
        assert self.replay is not None, "call begin(num_slots) before record"
        self.replay.add(step)
        self.steps_since_update += 1

    def ready(self) -> bool:
        """Enough steps stored, a sequence to sample, and ``train_freq`` steps since the last
        update."""
        r = self.replay
        return (
            r is not None
            and r.steps_added >= self.cfg.learning_starts
            and r.num_sequences > 0
            and self.steps_since_update >= self.cfg.train_freq
        )

    # -- learning -----------------------------------------------------------------------------

    def online_q(self, batch: SequenceSample) -> Tensor:
        """Online ``Q (W, N, A)``; the burn-in of sequences that do not start an episode runs under
        ``no_grad`` (their burn-in rows are zeros: they never enter a loss or a target)."""
        b, q = self.cfg.burn_in, self.q
        if b == 0 or bool(batch.fresh.all()):
            return q.q_values(batch.obs, batch.state, batch.resets)
        obs, resets = batch.obs, batch.resets
        stale, fresh = (~batch.fresh).nonzero().squeeze(1), batch.fresh.nonzero().squeeze(1)
        s = batch.state[stale]
        if q.state_size:  # a memoryless core has no state to warm up: its burn-in is skipped
            with torch.no_grad():
                _, s = q.torso(_cols(obs, slice(0, b), stale), s, resets[:b, stale])
        rest = q.q_values(_cols(obs, slice(b, None), stale), s, resets[b:, stale])
        parts = [torch.cat([rest.new_zeros(b, len(stale), rest.shape[-1]), rest])]
        if len(fresh):
            every = slice(None)
            parts.append(q.q_values(_cols(obs, every, fresh), batch.state[fresh], resets[:, fresh]))
        order = torch.cat([stale, fresh]).argsort()
        return torch.cat(parts, 1)[:, order]

    def loss(self, batch: SequenceSample) -> tuple[Tensor, Tensor, Tensor]:
        """IS-weighted Huber (or squared) TD loss over the masked steps; returns
        ``(loss, td (W, N), q_taken (W, N))``."""
        q_online = self.online_q(batch)
        with torch.no_grad():
            q_target = self.target.q_values(batch.obs, batch.state, batch.resets)
            target = td_targets(batch, q_online.detach(), q_target, self.cfg)
        q_taken = q_online.gather(-1, batch.actions.unsqueeze(-1)).squeeze(-1)
        td = torch.where(batch.mask, target - q_taken, 0.0)
        d = self.cfg.huber_delta
        per_step = (
            torch.nn.functional.huber_loss(td, torch.zeros_like(td), reduction="none", delta=d)
            if d > 0
            else 0.5 * td * td
        )
        m = batch.mask.to(td.dtype)
        loss = (per_step * m * batch.weights.unsqueeze(0)).sum() / m.sum().clamp(min=1.0)
        return loss, td.detach(), q_taken.detach()

    def beta(self, progress: float) -> float:
        """Importance-sampling exponent: ``beta0`` annealed linearly to 1 over training."""
        return linear_schedule(self.cfg.beta0, 1.0, progress)

    def update(self, progress: float) -> dict[str, float]:
        """``gradient_steps`` gradient steps on prioritized batches; returns metrics."""
        assert self.replay is not None
        c, replay = self.cfg, self.replay
        self.progress, self.steps_since_update = float(progress), 0
        beta, stats = self.beta(progress), []
        for _ in range(c.gradient_steps):
            batch = replay.sample(c.batch_size, beta, self.np_rng, self.device)
            loss, td, q_taken = self.loss(batch)
            self.grads.zero()
            loss.backward()
            self.grads.clip_(c.max_grad_norm)
            self.optimizer.step()
            prio = sequence_priority(td.abs(), batch.mask, c.eta)
            if bool(torch.isfinite(prio).all()):  # else diverged: the trainer's check says so
                replay.update_priorities(batch.indices, prio)
            self.num_grad_steps += 1
            if self.num_grad_steps % c.target_update_period == 0:
                self.update_target()
            m, w = batch.mask, batch.weights
            row = (loss.detach(), td.abs()[m].mean(), q_taken[m].mean(), prio.mean(), prio.max())
            stats.append((*row, w.mean()))
        self.num_updates += 1
        means = np.mean([[float(x) for x in row] for row in stats], 0).tolist()
        out = dict(zip(METRICS, means, strict=True))
        out["charts/beta"] = beta
        if c.exploration == "boltzmann":
            out["charts/temperature"] = c.alpha
        else:
            out["charts/epsilon"] = self.epsilon()
        if c.refresh_every and self.num_updates % c.refresh_every == 0:
            out.update(self.refresh())
        return out

    @torch.no_grad()
    def update_target(self) -> None:
        """Copy the online net into the target net (``tau >= 1``) or move it by ``tau``."""
        on, tg = list(self.q.parameters()), list(self.target.parameters())
        if self.cfg.tau >= 1.0:
            torch._foreach_copy_(tg, on)
        else:
            torch._foreach_lerp_(tg, on, self.cfg.tau)

    def refresh(self) -> dict[str, float]:
        """Recompute every stored state with the current network; returns staleness metrics
        (none when no state was replaced)."""
        if self.replay is None or self.q.state_size == 0:
            return {}
        period = self.replay.period
        torso = self.q.torso

        def unroll(obs: Obs, state: Tensor, resets: Tensor) -> Tensor:
            return torso.chunk_unroll(obs, state, resets, period).final

        s = refresh_states(self.replay, unroll, self.device)
        if not s["count"]:  # no stored state follows another one yet
            return {}
        return {"charts/staleness_cos": s["cos"], "charts/staleness_mse": s["mse"]}

    # -- checkpoints --------------------------------------------------------------------------

    def state_dict(self) -> dict[str, Any]:
        """Networks, optimizer, counters, RNGs, schedule position, config and (by default) the
        replay; tensors and plain values only (``torch.load(weights_only=True)`` loads it)."""
        save_replay = self.cfg.checkpoint_replay and self.replay is not None
        return {
            "config": dataclasses.asdict(self.cfg),
            "q": self.q.state_dict(),
            "target": self.target.state_dict(),
            "optimizer": self.optimizer.state_dict(),
            "generator": self.generator.get_state(),
            "np_rng": _rng_state(self.np_rng),
            "progress": self.progress,
            "counters": {
                "num_updates": self.num_updates,
                "num_grad_steps": self.num_grad_steps,
                "steps_since_update": self.steps_since_update,
            },
            "num_slots": self.replay.num_slots if self.replay is not None else 0,
            "replay": self.replay.state_dict() if save_replay else None,
        }

    @staticmethod
    def acting_state(state: Mapping[str, Any]) -> dict[str, Any]:
        """``state`` without what only training needs (optimizer; the replay is emptied)."""
        out = {k: v for k, v in state.items() if k != "optimizer"}
        out["replay"] = None
        return out

    def resume_note(self) -> str | None:
        """What the trainer says after a resume: that the replay starts empty, if it does."""
        if not self.replay_refilled:
            return None
        return (
            "the checkpoint holds no replay (checkpoint_replay=false); it starts empty and "
            "refills (learning_starts steps) first"
        )

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        """Restore what :meth:`state_dict` saved; without a saved replay the replay starts empty
        and ``replay_refilled`` is set (:meth:`resume_note`)."""
        self.q.load_state_dict(state["q"])
        self.target.load_state_dict(state["target"])
        if "optimizer" in state:  # absent from an exported policy (acting only)
            self.optimizer.load_state_dict(state["optimizer"])
        self.generator.set_state(state["generator"])
        self.np_rng = _rng_from_state(state["np_rng"])
        self.progress = float(state["progress"])
        for k, v in state["counters"].items():
            setattr(self, k, int(v))
        self.replay, self.replay_refilled = None, state["replay"] is None
        if state["replay"] is not None:
            self.replay = self.new_replay(int(state["num_slots"]))
            self.replay.load_state_dict(state["replay"])


def _rng_state(rng: np.random.Generator) -> dict[str, Any]:
    """A numpy PCG64 generator's state as tensors (its two 128-bit words as 32 bytes)."""
    st = rng.bit_generator.state
    words = st["state"]["state"].to_bytes(16, "little") + st["state"]["inc"].to_bytes(16, "little")
    extra = {k: int(st[k]) for k in ("has_uint32", "uinteger")}
    return {"words": torch.tensor(list(words), dtype=torch.uint8), **extra}


def _rng_from_state(saved: Mapping[str, Any]) -> np.random.Generator:
    """The generator :func:`_rng_state` saved."""
    words = bytes(saved["words"].tolist())
    state, inc = int.from_bytes(words[:16], "little"), int.from_bytes(words[16:], "little")
    bits = np.random.PCG64()
    extra = {k: int(saved[k]) for k in ("has_uint32", "uinteger")}
    bits.state = {"bit_generator": "PCG64", "state": {"state": state, "inc": inc}, **extra}
    return np.random.Generator(bits)


register_learner("drqn", DRQNConfig, DRQN)
