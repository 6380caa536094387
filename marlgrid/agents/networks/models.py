"""Networks: a torso (encoder + MLP trunk + memory core) and the heads that read its output.

The :class:`Torso` turns observation sequences ``(T, B, ...)`` into one feature per step
``(T, B, H)``; heads sit on it: :class:`ActorCritic` (policy logits and a value), :class:`QNetwork`
(action values, optionally dueling). Extra heads (e.g. an auxiliary prediction reading
``(feature, one-hot action)``) are named in ``NetworkConfig.extra_heads`` and built from a registry,
and the network class a learner builds is chosen by name (``register_network``): both extension
points, with an example, are in :mod:`marlgrid.agents.networks.registry`.
Sequences are time-major; observations may be a tensor or a dict of tensors. The memory state is
one tensor ``(B, state_size)`` that the core resets itself where ``resets`` says an episode starts
(:mod:`marlgrid.agents.memory`).

Actions. ``Discrete(n)`` actions are indices ``0..n-1`` (plus ``action_start`` for the env).
The actor-critic also takes ``MultiDiscrete(nvec)`` actions: one independent categorical per
branch (log-probabilities and entropies summed over branches). Such an action still travels as
one index, ``0..prod(nvec)-1``, the row-major (:func:`numpy.ravel_multi_index`) index of
``action - start``, so storage and rollouts stay the same; :func:`env_actions` turns indices back
into the env's actions (the same order as POPGym's ``DiscreteAction`` wrapper).
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np
import torch
from gymnasium import spaces
from torch import Tensor, nn

from marlgrid.agents.arrays import Obs, obs_flatten_time, obs_unsqueeze
from marlgrid.agents.memory import ChunkPass, MemoryCore, make_memory
from marlgrid.agents.networks.config import NetworkConfig
from marlgrid.agents.networks.encoders import make_encoder, mlp
from marlgrid.agents.networks.heads import build_heads
from marlgrid.agents.networks.registry import NetOutput, register_network

__all__ = [
    "ActorCritic",
    "NetworkConfig",
    "Obs",
    "QNetwork",
    "Torso",
    "action_branches",
    "env_actions",
    "log_prob_entropy",
    "multi_log_prob_entropy",
    "one_hot_actions",
    "ravel_actions",
    "unravel_actions",
]


def _discrete_actions(action_space: spaces.Space) -> tuple[int, int]:
    if not isinstance(action_space, spaces.Discrete):
        raise NotImplementedError(
            f"only Discrete action spaces supported, got {action_space} "
            "(a MultiDiscrete space can be flattened into one Discrete, e.g. by POPGym's "
            "DiscreteAction wrapper)"
        )
    return int(action_space.n), int(action_space.start)


def action_branches(action_space: spaces.Space) -> tuple[int, ...] | None:
    """``nvec`` of a flat ``MultiDiscrete`` action space, ``None`` for ``Discrete``; any other
    space raises ``NotImplementedError`` naming it."""
    if isinstance(action_space, spaces.Discrete):
        return None
    if isinstance(action_space, spaces.MultiDiscrete):
        if np.ndim(action_space.nvec) != 1:
            raise NotImplementedError(
                f"MultiDiscrete actions need a flat nvec, got shape {np.shape(action_space.nvec)}"
            )
        nvec = tuple(int(n) for n in action_space.nvec)
        if math.prod(nvec) >= 2**62:
            raise NotImplementedError(f"MultiDiscrete{list(nvec)} has too many joint actions")
        return nvec
    raise NotImplementedError(
        f"only Discrete and MultiDiscrete action spaces supported, got {action_space}"
    )


def _strides(nvec: Sequence[int]) -> list[int]:
    """Row-major strides: ``index = sum(branch[i] * stride[i])``."""
    return [math.prod(nvec[i + 1 :]) for i in range(len(nvec))]


def unravel_actions(index: Tensor, nvec: Sequence[int]) -> Tensor:
    """Action indices ``(...,)`` -> branch actions ``(..., K)`` (row-major, as
    :func:`numpy.unravel_index`)."""
    strides = torch.tensor(_strides(nvec), device=index.device)
    sizes = torch.tensor(list(nvec), device=index.device)
    return torch.div(index.long().unsqueeze(-1), strides, rounding_mode="floor") % sizes


def ravel_actions(branches: Tensor, nvec: Sequence[int]) -> Tensor:
    """Branch actions ``(..., K)`` -> action indices ``(...,)`` (inverse of
    :func:`unravel_actions`)."""
    strides = torch.tensor(_strides(nvec), device=branches.device)
    return (branches.long() * strides).sum(-1)


def one_hot_actions(actions: Tensor, action_space: spaces.Space) -> Tensor:
    """Action indices ``(...,)`` -> float one-hots ``(..., one_hot_size(action_space))``: one
    block of ``n`` for ``Discrete(n)``, one block per branch for ``MultiDiscrete(nvec)`` (what an
    extra head reads, see :mod:`marlgrid.agents.networks.registry`)."""
    nvec = action_branches(action_space)
    if nvec is None:
        return nn.functional.one_hot(actions.long(), int(action_space.n)).float()  # type: ignore[attr-defined]
    branches = unravel_actions(actions, nvec)
    parts = [nn.functional.one_hot(branches[..., i], n) for i, n in enumerate(nvec)]
    return torch.cat(parts, -1).float()


def env_actions(index: np.ndarray, action_space: spaces.Space) -> np.ndarray:
    """Action indices ``(B,)`` as the env takes them: rows of ``(B, K)`` branch actions plus
    ``start`` for ``MultiDiscrete``; unchanged for any other space (``Discrete`` indices already
    include ``start``)."""
    if not isinstance(action_space, spaces.MultiDiscrete):
        return index
    nvec = action_branches(action_space)
    assert nvec is not None
    branches = np.stack(np.unravel_index(np.asarray(index, dtype=np.int64), nvec), -1)
    start = np.asarray(getattr(action_space, "start", 0))
    return (branches + start).astype(action_space.dtype)


class Torso(nn.Module):
    """Encoder -> MLP trunk -> memory core: one feature ``(T, B, hidden_size)`` per step."""

    def __init__(self, observation_space: spaces.Space, cfg: NetworkConfig) -> None:
        super().__init__()
        self.cfg = cfg
        self.encoder = make_encoder(observation_space, cfg)
        self.trunk, trunk_out = mlp(self.encoder.output_size, cfg.trunk_sizes)
        self.memory: MemoryCore = make_memory(
            cfg.memory, trunk_out, cfg.hidden_size, **dict(cfg.memory_kwargs)
        )
        self.output_size = cfg.hidden_size

    @property
    def state_size(self) -> int:
        return self.memory.state_size

    def initial_state(self, batch_size: int) -> Tensor:
        """Zero memory state ``(batch_size, state_size)``."""
        return self.memory.initial_state(batch_size)

    def features(self, obs: Obs, T: int, B: int) -> Tensor:
        """Encoder and trunk over ``(T, B, ...)`` observations -> ``(T, B, F)``."""
        return self.trunk(self.encoder(obs_flatten_time(obs))).view(T, B, -1)

    def forward(self, obs: Obs, state: Tensor, resets: Tensor) -> tuple[Tensor, Tensor]:
        """Sequences ``(T, B, ...)`` -> ``(out (T, B, H), final_state)``."""
        T, B = resets.shape
        return self.memory(self.features(obs, T, B), state, resets)

    def outputs(self, obs: Obs, state: Tensor, resets: Tensor) -> Tensor:
        """The outputs of :meth:`forward` by the core's fastest path (training)."""
        T, B = resets.shape
        return self.memory.outputs(self.features(obs, T, B), state, resets)

    def unroll(self, obs: Obs, state: Tensor, resets: Tensor) -> tuple[Tensor, Tensor]:
        """Outputs and every post-step state ``(T, B, S)``."""
        T, B = resets.shape
        return self.memory.unroll(self.features(obs, T, B), state, resets)

    def chunk_unroll(
        self,
        obs: Obs,
        state: Tensor,
        resets: Tensor,
        chunk_len: int,
        post_t: Tensor | None = None,
        post_b: Tensor | None = None,
    ) -> ChunkPass:
        """Outputs everywhere, states at chunk starts (see :meth:`MemoryCore.chunk_unroll`)."""
        T, B = resets.shape
        return self.memory.chunk_unroll(
            self.features(obs, T, B), state, resets, chunk_len, post_t, post_b
        )

    def step(self, obs: Obs, state: Tensor, resets: Tensor | None = None) -> tuple[Tensor, Tensor]:
        """One step for a batch ``(B, ...)`` -> ``(out (B, H), new_state)``; ``resets (B,)``."""
        B = state.shape[0]
        if resets is None:
            resets = torch.zeros(B, dtype=torch.bool, device=state.device)
        out, state = self.forward(obs_unsqueeze(obs), state, resets.view(1, B))
        return out[0], state


def log_prob_entropy(logits: Tensor, actions: Tensor) -> tuple[Tensor, Tensor]:
    """Log-probability of ``actions`` and entropy of the categorical given by ``logits``."""
    logp_all = logits.log_softmax(-1)
    logp = logp_all.gather(-1, actions.long().unsqueeze(-1)).squeeze(-1)
    entropy = -(logp_all.exp() * logp_all).sum(-1)
    return logp, entropy


def multi_log_prob_entropy(
    logits: Tensor, branches: Tensor, nvec: Sequence[int]
) -> tuple[Tensor, Tensor]:
    """Log-probability of branch actions ``(..., K)`` and entropy under independent categoricals,
    branch ``i`` given by its ``nvec[i]`` columns of ``logits (..., sum(nvec))``: both are sums
    over the branches."""
    logp = entropy = None
    for i, part in enumerate(logits.split(list(nvec), -1)):
        lp, ent = log_prob_entropy(part, branches[..., i])
        logp, entropy = (lp, ent) if logp is None else (logp + lp, entropy + ent)
    assert logp is not None and entropy is not None
    return logp, entropy


class ActorCritic(nn.Module):
    """A :class:`Torso` with separate policy and value heads (``Discrete`` or ``MultiDiscrete``
    actions; see the module docstring)."""

    def __init__(
        self,
        observation_space: spaces.Space,
        action_space: spaces.Space,
        cfg: NetworkConfig | None = None,
    ) -> None:
        super().__init__()
        cfg = cfg or NetworkConfig()
        self.cfg = cfg
        #: branch sizes of MultiDiscrete actions; None for Discrete
        self.action_nvec = action_branches(action_space)
        if self.action_nvec is None:
            self.num_actions, self.action_start = _discrete_actions(action_space)
            num_logits = self.num_actions
        else:  # one index per joint action; the env's start is added by env_actions
            self.num_actions, self.action_start = math.prod(self.action_nvec), 0
            num_logits = sum(self.action_nvec)
        self.torso = Torso(observation_space, cfg)
        H = self.torso.output_size
        self.policy_head, _ = mlp(H, cfg.head_sizes, num_logits, out_gain=0.01)
        self.value_head, _ = mlp(H, cfg.head_sizes, 1, out_gain=1.0)
        self.action_space = action_space
        #: the extra heads of ``cfg.extra_heads`` by name (built after the others, so a network
        #: without any initialises as before)
        self.extra_heads = build_heads(getattr(cfg, "extra_heads", {}), H, action_space)

    @property
    def memory(self) -> MemoryCore:
        return self.torso.memory

    @property
    def state_size(self) -> int:
        return self.torso.state_size

    def initial_state(self, batch_size: int) -> Tensor:
        """Zero memory state ``(batch_size, state_size)``."""
        return self.torso.initial_state(batch_size)

    def log_prob_entropy(self, logits: Tensor, actions: Tensor) -> tuple[Tensor, Tensor]:
        """Log-probability of action indices and the policy's entropy, for this action space."""
        if self.action_nvec is None:
            return log_prob_entropy(logits, actions)
        nvec = self.action_nvec
        return multi_log_prob_entropy(logits, unravel_actions(actions, nvec), nvec)

    def heads(self, core_out: Tensor, policy: bool = True) -> tuple[Tensor | None, Tensor]:
        """Policy logits (or ``None``) and values from torso outputs."""
        logits = self.policy_head(core_out) if policy else None
        return logits, self.value_head(core_out).squeeze(-1)

    def forward(self, obs: Obs, state: Tensor, resets: Tensor) -> tuple[Tensor, Tensor, Tensor]:
        """Sequences ``(T, B, ...)`` -> ``(logits (T, B, A), values (T, B), final_state)``."""
        out, state = self.torso(obs, state, resets)
        logits, values = self.heads(out)
        assert logits is not None
        return logits, values, state

    def evaluate(self, obs: Obs, state: Tensor, resets: Tensor) -> tuple[Tensor, Tensor]:
        """Like :meth:`forward` without the final state, by the core's fastest path (training)."""
        logits, values = self.heads(self.torso.outputs(obs, state, resets))
        assert logits is not None
        return logits, values

    def output(
        self, obs: Obs, state: Tensor, resets: Tensor, actions: Tensor | None = None
    ) -> NetOutput:
        """Torso features, logits, values and the extra heads' outputs of sequences, by the
        core's fastest path (training); the extra heads read ``(features, one-hot actions)``
        (the one-hot is ``None`` without ``actions``; nothing more is computed without heads)."""
        features = self.torso.outputs(obs, state, resets)
        logits, values = self.heads(features)
        assert logits is not None
        extras: dict[str, Tensor] = {}
        if len(self.extra_heads):
            onehot = None if actions is None else one_hot_actions(actions, self.action_space)
            extras = {name: head(features, onehot) for name, head in self.extra_heads.items()}
        return NetOutput(features, logits, values, extras)

    def step(
        self, obs: Obs, state: Tensor, resets: Tensor | None = None
    ) -> tuple[Tensor, Tensor, Tensor]:
        """One step for a batch: obs ``(B, ...)`` -> ``(logits (B, A), values (B,), new_state)``."""
        out, state = self.torso.step(obs, state, resets)
        logits, values = self.heads(out)
        assert logits is not None
        return logits, values, state

    def act(
        self,
        obs: Obs,
        state: Tensor,
        resets: Tensor | None = None,
        deterministic: bool = False,
        generator: torch.Generator | None = None,
    ) -> tuple[Tensor, Tensor, Tensor, Tensor]:
        """Sample (or argmax) actions for a batch: ``(actions, logp, values, new_state)``."""
        logits, values, state = self.step(obs, state, resets)
        if self.action_nvec is not None:
            idx, logp = self._pick_multi(logits, deterministic, generator)
            return idx, logp, values, state
        logp_all = logits.log_softmax(-1)
        if deterministic:
            idx = logits.argmax(-1)
        else:
            idx = torch.multinomial(logp_all.exp(), 1, generator=generator).squeeze(-1)
        logp = logp_all.gather(-1, idx.unsqueeze(-1)).squeeze(-1)
        return idx, logp, values, state

    def _pick_multi(
        self, logits: Tensor, deterministic: bool, generator: torch.Generator | None
    ) -> tuple[Tensor, Tensor]:
        """MultiDiscrete: each branch sampled (or argmax) on its own -> ``(indices, logp)``."""
        assert self.action_nvec is not None
        picks, logp = [], logits.new_zeros(logits.shape[:-1])
        for part in logits.split(list(self.action_nvec), -1):
            logp_all = part.log_softmax(-1)
            if deterministic:
                a = part.argmax(-1)
            else:
                a = torch.multinomial(logp_all.exp(), 1, generator=generator).squeeze(-1)
            picks.append(a)
            logp = logp + logp_all.gather(-1, a.unsqueeze(-1)).squeeze(-1)
        return ravel_actions(torch.stack(picks, -1), self.action_nvec), logp


class QNetwork(nn.Module):
    """A :class:`Torso` with an action-value head ``Q (…, A)``.

    ``dueling``: ``Q = V + A - mean(A)`` from separate value and advantage streams.
    """

    def __init__(
        self,
        observation_space: spaces.Space,
        action_space: spaces.Space,
        cfg: NetworkConfig | None = None,
        dueling: bool = False,
    ) -> None:
        super().__init__()
        cfg = cfg or NetworkConfig()
        self.cfg, self.dueling = cfg, dueling
        self.num_actions, self.action_start = _discrete_actions(action_space)
        self.torso = Torso(observation_space, cfg)
        H = self.torso.output_size
        self.q_head, _ = mlp(H, cfg.head_sizes, self.num_actions, out_gain=1.0)
        if dueling:
            self.value_head, _ = mlp(H, cfg.head_sizes, 1, out_gain=1.0)

    @property
    def state_size(self) -> int:
        return self.torso.state_size

    def initial_state(self, batch_size: int) -> Tensor:
        """Zero memory state ``(batch_size, state_size)``."""
        return self.torso.initial_state(batch_size)

    def head(self, core_out: Tensor) -> Tensor:
        """Action values from torso outputs."""
        q = self.q_head(core_out)
        if self.dueling:
            q = self.value_head(core_out) + q - q.mean(-1, keepdim=True)
        return q

    def forward(self, obs: Obs, state: Tensor, resets: Tensor) -> tuple[Tensor, Tensor]:
        """Sequences ``(T, B, ...)`` -> ``(q (T, B, A), final_state)``."""
        out, state = self.torso(obs, state, resets)
        return self.head(out), state

    def q_values(self, obs: Obs, state: Tensor, resets: Tensor) -> Tensor:
        """``Q (T, B, A)`` by the core's fastest path (training; no final state)."""
        return self.head(self.torso.outputs(obs, state, resets))

    def step(self, obs: Obs, state: Tensor, resets: Tensor | None = None) -> tuple[Tensor, Tensor]:
        """One step for a batch ``(B, ...)`` -> ``(q (B, A), new_state)``."""
        out, state = self.torso.step(obs, state, resets)
        return self.head(out), state


register_network("actor_critic", ActorCritic)
