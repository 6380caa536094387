"""Networks: a torso (encoder + MLP trunk + memory core) and the heads that read its output.

The :class:`Torso` turns observation sequences ``(T, B, ...)`` into one feature per step
``(T, B, H)``; heads sit on it: :class:`ActorCritic` (policy logits and a value), :class:`QNetwork`
(action values, optionally dueling). An auxiliary prediction head would read the same output.
Sequences are time-major; observations may be a tensor or a dict of tensors. The memory state is
one tensor ``(B, state_size)`` that the core resets itself where ``resets`` says an episode starts
(:mod:`marlgrid.agents.memory`).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import torch
from gymnasium import spaces
from torch import Tensor, nn

from marlgrid.agents.arrays import Obs, obs_flatten_time, obs_unsqueeze
from marlgrid.agents.encoders import make_encoder, mlp
from marlgrid.agents.memory import ChunkPass, MemoryCore, make_memory

__all__ = ["ActorCritic", "NetworkConfig", "Obs", "QNetwork", "Torso", "log_prob_entropy"]


@dataclass
class NetworkConfig:
    """Architecture of a :class:`Torso` and its heads."""

    memory: str = "lstm"  # memory core (a name registered in marlgrid.agents.memory)
    memory_kwargs: dict[str, Any] = field(default_factory=dict)  # the core's own options
    hidden_size: int = 128  # memory core width (output size of 'none')
    trunk_sizes: tuple[int, ...] = (128,)  # MLP between encoder and memory core
    head_sizes: tuple[int, ...] = (64,)  # hidden layers of each head
    conv_channels: tuple[int, ...] = (32, 32)  # conv layers applied on the cell grid
    conv_kernel: int = 3  # kernel size of those conv layers
    conv_padding: int = 1  # zero padding of those conv layers (1 keeps a 3x3 conv's grid size)
    embed_dim: int = 8  # embedding width per symbolic channel (type, color, state)
    symbolic_vocab: tuple[int, int, int] = (16, 32, 8)  # minimum table sizes (type, color, state)
    tile_size: int = 8  # pixels per cell for pixel observations
    image_mode: str = "auto"  # 'auto', 'symbolic', 'pixels' or 'onehot'

    def validate(self, key: str = "network") -> None:
        """Raise :class:`~marlgrid.config.ConfigError` naming ``<key>.<field>`` for a bad value
        (:func:`~marlgrid.agents.config_checks.check_network_config`)."""
        from marlgrid.agents.config_checks import check_network_config

        check_network_config(self, key)


def _discrete_actions(action_space: spaces.Space) -> tuple[int, int]:
    if not isinstance(action_space, spaces.Discrete):
        raise NotImplementedError(f"only Discrete action spaces supported, got {action_space}")
    return int(action_space.n), int(action_space.start)


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


class ActorCritic(nn.Module):
    """A :class:`Torso` with separate policy and value heads (``Discrete`` actions)."""

    def __init__(
        self,
        observation_space: spaces.Space,
        action_space: spaces.Space,
        cfg: NetworkConfig | None = None,
    ) -> None:
        super().__init__()
        cfg = cfg or NetworkConfig()
        self.cfg = cfg
        self.num_actions, self.action_start = _discrete_actions(action_space)
        self.torso = Torso(observation_space, cfg)
        H = self.torso.output_size
        self.policy_head, _ = mlp(H, cfg.head_sizes, self.num_actions, out_gain=0.01)
        self.value_head, _ = mlp(H, cfg.head_sizes, 1, out_gain=1.0)

    @property
    def memory(self) -> MemoryCore:
        return self.torso.memory

    @property
    def state_size(self) -> int:
        return self.torso.state_size

    def initial_state(self, batch_size: int) -> Tensor:
        """Zero memory state ``(batch_size, state_size)``."""
        return self.torso.initial_state(batch_size)

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
        logp_all = logits.log_softmax(-1)
        if deterministic:
            idx = logits.argmax(-1)
        else:
            idx = torch.multinomial(logp_all.exp(), 1, generator=generator).squeeze(-1)
        logp = logp_all.gather(-1, idx.unsqueeze(-1)).squeeze(-1)
        return idx, logp, values, state


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

    def step(
        self, obs: Obs, state: Tensor, resets: Tensor | None = None
    ) -> tuple[Tensor, Tensor]:
        """One step for a batch ``(B, ...)`` -> ``(q (B, A), new_state)``."""
        out, state = self.torso.step(obs, state, resets)
        return self.head(out), state
