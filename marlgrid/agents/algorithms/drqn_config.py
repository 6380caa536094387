"""The hyperparameters of DRQN (:class:`DRQNConfig`), each checked by
:meth:`DRQNConfig.validate` before anything runs, and :func:`r2d2_config`, an R2D2-like preset;
the learner is :mod:`.drqn`."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from marlgrid.agents.devices import check_device
from marlgrid.agents.networks.config import (
    GRADIENT_STEPS_WHY,
    MAX_PASSES,
    NetworkConfig,
    check_learner_header,
)
from marlgrid.agents.optim import OPTIMIZERS
from marlgrid.config import ConfigError, check_bool, check_choice, check_float, check_int

__all__ = ["EXPLORATIONS", "STEPS_PER_ITERATION", "DRQNConfig", "r2d2_config"]

#: ``DRQNConfig.exploration``: epsilon-greedy or Boltzmann sampling
EXPLORATIONS = ("epsilon", "boltzmann")
#: env steps per env in one trainer iteration of a DRQN run (part of its checkpoints' identity)
STEPS_PER_ITERATION = 64


@dataclass
class DRQNConfig:
    """Hyperparameters of DRQN (one line of doc per field)."""

    algo: str = "drqn"  # the learner registry entry this config builds
    network: NetworkConfig = field(default_factory=NetworkConfig)  # torso (memory core) and head
    dueling: bool = False  # dueling head: Q = V + A - mean(A)
    double_q: bool = True  # bootstrap with the target net's value of the online net's argmax
    gamma: float = 0.99  # discount factor
    n_step: int = 3  # n-step returns (cut at episode ends)
    # sequences
    seq_len: int = 40  # steps per stored sequence, burn-in included
    burn_in: int = 20  # leading steps that only warm up the state (none for episode starts)
    overlap: int = 20  # steps shared by consecutive sequences (period = seq_len - overlap)
    buffer_size: int = 100_000  # replay capacity in steps, over all slots
    max_sequences: int = 0  # replay record capacity; 0: 2 * buffer_size // period
    # prioritized replay
    uniform: bool = False  # sample sequences uniformly (priorities still recorded)
    priority_alpha: float = 0.6  # priority exponent
    priority_eps: float = 1e-6  # added to |priority| before the exponent
    eta: float = 0.9  # sequence priority: eta * max|delta| + (1 - eta) * mean|delta|
    beta0: float = 0.4  # importance-sampling exponent at the start, annealed to 1 over training
    is_norm: str = "buffer"  # normalise IS weights by the max over the 'buffer' or the 'batch'
    # optimisation
    optimizer: str = "adam"  # 'adam' or 'rmsprop'
    lr: float = 5e-4  # learning rate
    optimizer_eps: float = 1e-5  # optimizer epsilon
    max_grad_norm: float = 10.0  # global gradient-norm clip
    huber_delta: float = 1.0  # Huber loss threshold; 0 gives the squared error
    batch_size: int = 32  # sequences per gradient step
    learning_starts: int = 2_000  # steps in the replay before the first update
    train_freq: int = 4  # env steps per slot between updates
    gradient_steps: int = 1  # gradient steps per update
    target_update_period: int = 500  # gradient steps between target updates
    tau: float = 1.0  # target update: 1 copies, < 1 is Polyak averaging with this weight
    value_rescale: bool = False  # R2D2's h(x) on targets, h^-1 on bootstrap values
    rescale_eps: float = 1e-3  # epsilon of h(x)
    # exploration
    exploration: str = "epsilon"  # 'epsilon' (greedy) or 'boltzmann' (soft-Q targets too)
    eps_start: float = 1.0  # epsilon at the start
    eps_end: float = 0.05  # epsilon after eps_fraction of training
    eps_fraction: float = 0.3  # fraction of training over which epsilon decays linearly
    apex_alpha: float = 0.0  # > 0: slot i of N uses eps^(1 + i / (N - 1) * apex_alpha) (Ape-X)
    alpha: float = 0.05  # Boltzmann temperature; soft-Q target V = alpha * logsumexp(Q / alpha)
    # stored states and checkpoints
    refresh_every: int = 0  # refresh every stored state every N updates; 0: off
    checkpoint_replay: bool = True  # save the replay in state_dict (off: refilled on resume)
    device: str = "cpu"  # torch device

    def validate(self, key: str = "agent", num_slots: int | None = None) -> None:
        """Raise :class:`~marlgrid.config.ConfigError` naming ``<key>.<field>`` for a bad value;
        with ``num_slots`` (env copies times the agents it drives), also check that the replay
        holds two sequence windows per slot (what
        :class:`~marlgrid.agents.storage.sequence_replay.SequenceReplay` needs). A batch larger
        than the sequences the replay holds, or ``max_sequences`` above ``buffer_size``, has no
        meaning and is refused too."""
        check_learner_header(self, key)
        if self.network.extra_heads:
            raise ConfigError(
                f"{key}.network.extra_heads must be empty for DRQN (its Q network builds no "
                f"extra heads; PPO's actor-critic does), got {dict(self.network.extra_heads)!r}"
            )
        for name in ("dueling", "double_q", "uniform", "value_rescale", "checkpoint_replay"):
            check_bool(f"{key}.{name}", getattr(self, name))
        for name in ("gamma", "eta", "beta0", "eps_start", "eps_end", "eps_fraction"):
            check_float(f"{key}.{name}", getattr(self, name), 0.0, 1.0)
        for name in ("lr", "optimizer_eps", "max_grad_norm", "priority_eps", "alpha"):
            check_float(f"{key}.{name}", getattr(self, name), low=0.0, low_open=True)
        check_float(f"{key}.priority_alpha", self.priority_alpha, 0.0, 1.0)  # 0 uniform, 1 full
        for name in ("huber_delta", "rescale_eps", "apex_alpha"):
            check_float(f"{key}.{name}", getattr(self, name), low=0.0)
        check_float(f"{key}.tau", self.tau, 0.0, 1.0, low_open=True)
        for name in ("n_step", "seq_len", "buffer_size", "batch_size", "train_freq",
                     "gradient_steps", "target_update_period"):  # fmt: skip
            check_int(f"{key}.{name}", getattr(self, name), low=1)
        for name in ("max_sequences", "learning_starts", "refresh_every"):
            check_int(f"{key}.{name}", getattr(self, name), low=0)
        held = f"{key}.buffer_size: a return cannot look past what the replay holds"
        check_int(f"{key}.n_step", self.n_step, high=self.buffer_size, why=held)
        for name in ("burn_in", "overlap"):
            check_int(f"{key}.{name}", getattr(self, name), 0, self.seq_len - 1,
                      why=f"{key}.seq_len - 1 with {key}.seq_len={self.seq_len}")  # fmt: skip
        check_int(f"{key}.gradient_steps", self.gradient_steps, high=MAX_PASSES,
                  why=GRADIENT_STEPS_WHY)  # fmt: skip
        check_choice(f"{key}.is_norm", self.is_norm, ("buffer", "batch"))
        check_choice(f"{key}.optimizer", self.optimizer, OPTIMIZERS)
        check_choice(f"{key}.exploration", self.exploration, EXPLORATIONS)
        check_device(f"{key}.device", self.device)
        if self.max_sequences > self.buffer_size:
            raise ConfigError(
                f"{key}.max_sequences must be <= {key}.buffer_size ({self.buffer_size}): each "
                f"sequence starts at a stored step, so no more are ever held; got "
                f"{self.max_sequences}"
            )
        held = self.max_sequences or max(2 * self.buffer_size // self.period, 1)
        if self.batch_size > held:
            where = (
                f"{key}.max_sequences" if self.max_sequences
                else f"2 * buffer_size // (seq_len - overlap) = 2 * {self.buffer_size} // "
                f"{self.period}"
            )  # fmt: skip
            raise ConfigError(
                f"{key}.batch_size must be <= the sequences the replay holds ({where} = "
                f"{held}): a larger batch only repeats them; got {self.batch_size}"
            )
        window = self.seq_len + self.n_step
        if num_slots is not None and self.buffer_size < num_slots * 2 * window:
            raise ConfigError(
                f"{key}.buffer_size must hold two sequence windows per slot, >= num_slots * 2 "
                f"* (seq_len + n_step) = {num_slots} * 2 * {window} = {num_slots * 2 * window}, "
                f"got {self.buffer_size}"
            )

    @property
    def period(self) -> int:
        """Steps between the starts of consecutive sequences, ``seq_len - overlap``."""
        return self.seq_len - self.overlap

    def steps_per_iteration(self) -> int:
        """Env steps per env in one trainer iteration (between logs and checkpoints):
        :data:`STEPS_PER_ITERATION`, as DRQN runs always had (updates follow ``train_freq``)."""
        return STEPS_PER_ITERATION


def r2d2_config(**overrides: Any) -> DRQNConfig:
    """An R2D2-like :class:`DRQNConfig` (see the module docstring); ``overrides`` replace fields."""
    preset: dict[str, Any] = dict(seq_len=80, overlap=40, burn_in=40, n_step=5, gamma=0.997)
    preset.update(dueling=True, double_q=True, value_rescale=True, priority_alpha=0.9, eta=0.9)
    preset.update(lr=1e-4, optimizer_eps=1e-3, target_update_period=2500, batch_size=64)
    preset.update(huber_delta=0.0, max_grad_norm=40.0)
    return DRQNConfig(**{**preset, **overrides})
