"""Behaviour cloning of other agents (the social-learning study's imitation baseline): a
:class:`~marlgrid.agents.learner.Learner` registered as ``bc`` (``agent=bc``).

:class:`BC` trains a network of PPO's family (built by name with ``make_network``, default the
actor-critic of :mod:`marlgrid.agents.networks.models`, any memory core) to minimise the negative
log-likelihood of its teachers' actions *on the teachers' own observations*
(:func:`~marlgrid.agents.algorithms.imitation.teacher_nll`). The teachers are agent ids of the
env (``BCConfig.teachers``, default ``[agent_1]``); the rollout hands their steps to
:meth:`BC.record` (:attr:`Step.teachers <marlgrid.agents.learner.Step.teachers>`), which stores
them in a :class:`~marlgrid.agents.storage.teacher_buffer.TeacherBuffer`: one sequence per
teacher and env, with the episode starts of the learner's slot (the env's resets: all agents of
an env start an episode together; a learner agent that ends early without its env also cuts
the teachers' sequences there) and the teacher's in-play flag. Every ``num_steps`` steps,
:meth:`BC.update` unrolls the memory core once over the stored sequences (no gradients) from the
state they carried in, to get the state at every chunk start, then runs ``epochs`` passes of
shuffled chunks of ``chunk_len`` steps in ``num_minibatches`` minibatches, each chunk from its
start state, steps where the teacher was out of play (and the padding of the last chunk)
masked. The learner acts with its own network on its own observations (sampled when exploring,
greedy otherwise), so it is evaluated alone like any policy; its own rewards are not used.

Logs ``losses/bc_nll``, ``losses/bc_accuracy`` (greedy action == teacher action, over the
counted steps), ``losses/grad_norm``, ``charts/teacher_in_play`` (share of stored teacher steps
in play), ``charts/learning_rate``, ``charts/minibatches`` and ``charts/update_time``.
Checkpoints hold the network, optimizer, RNG, counter and config, as PPO's; ``acting_state``
drops the optimizer. The hyperparameters, :class:`BCConfig`, are in :mod:`.bc_config`.
"""

from __future__ import annotations

import dataclasses
import time

import numpy as np
import torch
from gymnasium import spaces
from torch import Tensor

from marlgrid.agents.algorithms.bc_config import BCConfig
from marlgrid.agents.algorithms.imitation import teacher_nll
from marlgrid.agents.algorithms.net_state import NetworkLearnerState
from marlgrid.agents.arrays import Obs, obs_cat, obs_index
from marlgrid.agents.learner import Action, Step, register_learner
from marlgrid.agents.networks.protocols import PolicyValueNet
from marlgrid.agents.networks.registry import make_network
from marlgrid.agents.optim import FlatGrads, make_optimizer
from marlgrid.agents.storage.teacher_buffer import TeacherBuffer

__all__ = ["BC", "BCConfig", "BCChunks"]


@dataclasses.dataclass
class BCChunks:
    """A minibatch of ``N`` teacher-sequence chunks of ``L`` steps, time-major."""

    obs: Obs  # (L, N, ...) the teachers' observations
    resets: Tensor  # (L, N) the observation starts an episode
    actions: Tensor  # (L, N) the teachers' action indices
    mask: Tensor  # (L, N) steps the loss counts: the teacher in play, not padding
    start_state: Tensor  # (N, S) memory state each chunk starts from


class BC(NetworkLearnerState):
    """The behaviour-cloning learner (see the module docstring); built as
    ``BC(obs_space, act_space, cfg, seed)``.

    ``cfg`` is used as given: :meth:`BCConfig.validate` checks it (the trainer does, once, before
    it builds anything; call it when building a learner yourself).
    """

    # checkpoints: NetworkLearnerState; the teacher buffer is not saved (a resume refills it)

    def __init__(
        self,
        observation_space: spaces.Space,
        action_space: spaces.Space,
        cfg: BCConfig | None = None,
        seed: int = 0,
    ) -> None:
        self.cfg = cfg = cfg or BCConfig()
        self.observation_space, self.action_space = observation_space, action_space
        self.device = torch.device(cfg.device)
        with torch.random.fork_rng(devices=[]):
            torch.manual_seed(seed)
            self.net: PolicyValueNet = make_network(
                cfg.network_kind, observation_space, action_space, cfg.network, "network_kind"
            )
        self.net.to(self.device)
        self.action_start = self.net.action_start
        #: the agent ids whose steps the rollout passes to :meth:`record`
        self.teachers: tuple[str, ...] = tuple(cfg.teachers)
        self.optimizer = make_optimizer(self.net.parameters(), "adam", cfg.lr, cfg.adam_eps)
        self.grads = FlatGrads(self.net)
        self.generator = torch.Generator(device=self.device).manual_seed(seed + 1)
        self.num_updates = 0
        self.buffer: TeacherBuffer | None = None

    # -- acting and recording --------------------------------------------------------------------

    @torch.inference_mode()
    def act(self, obs: Obs, state: Tensor, resets: Tensor, explore: bool = True) -> Action:
        """Its own policy on its own observations: sampled, or greedy without ``explore``."""
        actions, _, _, state = self.net.act(obs, state, resets, not explore, self.generator)
        return Action(actions, state, {})

    def begin(self, num_slots: int) -> None:
        """A :class:`TeacherBuffer` of ``num_slots * len(teachers)`` sequences."""
        self.buffer = TeacherBuffer(
            self.cfg.num_steps,
            num_slots * len(self.teachers),
            self.observation_space,
            self.net.state_size,
            self.device,
        )
        self.buffer.start_state.copy_(self.initial_state(self.buffer.num_columns))

    def record(self, step: Step) -> None:
        """Store the teachers' step (the learner's own step only lends its episode starts)."""
        buf = self.buffer
        assert buf is not None, "call begin(num_slots) before record"
        missing = [name for name in self.teachers if name not in step.teachers]
        if missing:
            raise ValueError(
                f"the BC learner imitates {list(self.teachers)} but the step holds no teacher "
                f"signal of {missing} (got {sorted(step.teachers)}); the rollout passes those "
                "of a training group's learner.teachers"
            )
        if buf.full:
            buf.clear()
        taught = [step.teachers[name] for name in self.teachers]
        buf.add(
            obs_cat([t.obs for t in taught]),
            step.resets.repeat(len(taught)),
            torch.cat([t.actions for t in taught]).long() - self.action_start,
            torch.cat([t.valid for t in taught]),
        )

    def ready(self) -> bool:
        return self.buffer is not None and self.buffer.full

    # -- update ----------------------------------------------------------------------------------

    @torch.no_grad()
    def chunk_starts(self, buffer: TeacherBuffer) -> tuple[Tensor, Tensor]:
        """One pass of the current network over the stored sequences from their
        ``start_state``: the state used at every chunk start ``(ceil(T / L), N, S)`` and the
        state after the last step ``(N, S)``."""
        res = self.net.torso.chunk_unroll(
            buffer.obs, buffer.start_state, buffer.resets, self.cfg.chunk_len
        )
        return res.starts, res.final

    def chunks(self, buffer: TeacherBuffer, ids: Tensor, starts: Tensor) -> BCChunks:
        """The chunks ``ids`` (``chunk * N + column``) of ``buffer``, each ``chunk_len`` steps
        from its start state in ``starts``; the last chunk of a column padded (masked)."""
        T, N, L = buffer.num_steps, buffer.num_columns, self.cfg.chunk_len
        c, b = ids // N, ids % N
        t = c * L + torch.arange(L, device=ids.device).unsqueeze(1)  # (L, n) time index
        inside = t < T
        t = t.clamp(max=T - 1)
        mask = inside & buffer.valid[t, b]
        return BCChunks(
            obs_index(buffer.obs, (t, b)), buffer.resets[t, b], buffer.actions[t, b], mask,
            starts[c, b],
        )  # fmt: skip

    def loss(self, batch: BCChunks) -> tuple[Tensor, Tensor]:
        """``(nll, accuracy)`` of the teachers' actions on one minibatch (masked means)."""
        logits, _ = self.net.evaluate(batch.obs, batch.start_state, batch.resets)
        return teacher_nll(self.net, logits, batch.actions, batch.mask)

    def update(
        self, progress: float = 0.0, buffer: TeacherBuffer | None = None
    ) -> dict[str, float]:
        """``epochs`` passes of minibatches over a full buffer (default: the learner's own);
        the sequences then continue from the state after their last step. ``progress`` is
        unused (no schedules). Returns the metrics of the module docstring."""
        buffer = self.buffer if buffer is None else buffer
        assert buffer is not None and buffer.full, "update needs a full teacher buffer"
        cfg = self.cfg
        t0 = time.perf_counter()
        starts, final = self.chunk_starts(buffer)
        n_chunks = -(-buffer.num_steps // cfg.chunk_len)
        n_mb = min(cfg.num_minibatches, n_chunks * buffer.num_columns)
        nll_log: list[Tensor] = []
        acc_log: list[Tensor] = []
        norms: list[Tensor] = []
        for _epoch in range(cfg.epochs):
            perm = torch.randperm(
                n_chunks * buffer.num_columns, generator=self.generator, device=self.device
            )
            for ids in perm.tensor_split(n_mb):
                nll, accuracy = self.loss(self.chunks(buffer, ids, starts))
                self.grads.zero()
                nll.backward()
                norms.append(self.grads.clip_(cfg.max_grad_norm))
                self.optimizer.step()
                nll_log.append(nll.detach())
                acc_log.append(accuracy)
        buffer.start_state.copy_(final)  # the next rollout goes on from here
        self.num_updates += 1
        return {
            "losses/bc_nll": _mean(nll_log),
            "losses/bc_accuracy": _mean(acc_log),
            "losses/grad_norm": _mean(norms),
            "charts/teacher_in_play": float(buffer.valid.float().mean()),
            "charts/learning_rate": cfg.lr,
            "charts/minibatches": float(len(nll_log)),
            "charts/update_time": time.perf_counter() - t0,
        }


def _mean(values: list[Tensor]) -> float:
    """Mean of scalar tensors; NaN when empty."""
    return float(np.mean([float(v) for v in values])) if values else float("nan")


register_learner("bc", BCConfig, BC)
