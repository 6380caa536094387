"""Loss terms: losses a learner adds to its own, each with a coefficient, chosen by config.

An algorithm computes its own loss on a minibatch of sequences (:class:`MiniBatch`) from the
network's output on it (:class:`~marlgrid.agents.networks.registry.NetOutput`: torso features,
logits, values, extra heads' outputs), then adds ``coef * loss`` of every configured term, in
order. A term (:class:`LossTerm`) is built once per learner as ``cls(net, **options)`` (``net``
is the learner's network, for a term that needs its encoder or a head) and called as
``term(batch, output) -> (loss, logs)``: a scalar tensor and a dict of scalar tensors or floats.
It owns no parameters: a learnable part is an extra head (:mod:`marlgrid.agents.networks.registry`),
so that the optimizer and checkpoints see it. Steps where ``batch.mask`` is false (padding, agents
out of play) must not count. The update reports the term's loss (before its coefficient) as
``losses/<name>`` and each log as ``losses/<name>/<key>``, means over the minibatches. Config:
``PPOConfig.aux_losses = [{"name": <registered>, "coef": 1.0, "options": {...}}, ...]`` (``coef``
defaults to 1, ``options`` to none; empty by default, so a run without terms is unchanged).

Two optional classmethods of a term class extend the contract:

- ``check_options(options, key)``: raise :class:`~marlgrid.config.ConfigError` naming
  ``<key>.<option>`` for a bad option; :func:`check_aux_losses` calls it (config checks, before
  any space is known);
- ``heads(options, observation_space, action_space, network, key) -> {head name: {kind,
  options}}``: the extra heads the term needs (``network`` is the learner's
  :class:`~marlgrid.agents.networks.NetworkConfig`); the learner adds them to the network it
  builds (:func:`with_term_heads`), so configuring the term is the whole setup (the built-in
  ``next_view`` term, :mod:`marlgrid.agents.algorithms.next_view`, declares its decoder so).
  The run's saved config keeps ``network.extra_heads`` as the user wrote it.

A term without a head::

    class ValueToZero:  # pushes the value toward 0
        def __init__(self, net, scale=1.0):
            self.scale = scale
        def __call__(self, batch, output):
            v = output.values[batch.mask]
            return self.scale * v.square().mean(), {"mean_value": v.mean().detach()}

    register_loss_term("value_to_zero", ValueToZero)
    PPOConfig(aux_losses=[{"name": "value_to_zero", "coef": 0.1, "options": {"scale": 2.0}}])
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Mapping, Sequence
from typing import TYPE_CHECKING, Any, NamedTuple, Protocol

import torch
from gymnasium import spaces
from torch import Tensor

from marlgrid.agents.arrays import Obs, obs_index
from marlgrid.config import ConfigError, check_float, check_registered_entry

if TYPE_CHECKING:
    from marlgrid.agents.networks.registry import NetOutput
    from marlgrid.agents.storage.rollout_buffer import RolloutBuffer

__all__ = [
    "LOSS_TERMS",
    "ConfiguredTerm",
    "LossTerm",
    "MiniBatch",
    "TermBase",
    "build_aux_losses",
    "check_aux_losses",
    "register_loss_term",
    "term_heads",
    "term_options",
    "unregister_loss_term",
    "with_term_heads",
]


@dataclasses.dataclass(frozen=True, kw_only=True)
class MiniBatch:
    """``N`` trajectory chunks of ``L`` steps, time-major: what the loss and its terms read
    (built by name only: most fields are tensors of one shape)."""

    obs: Obs  # (L, N, ...) observations
    actions: Tensor  # (L, N) action indices taken
    resets: Tensor  # (L, N) the observation starts an episode
    mask: Tensor  # (L, N) bool: steps the loss uses (false on padding and out-of-play steps)
    start_state: Tensor  # (N, S) memory state each chunk starts from
    old_logp: Tensor  # (L, N) behaviour log-probs
    old_values: Tensor  # (L, N) stored values (from the rollout or the last refresh)
    returns: Tensor  # (L, N) returns
    advantages: Tensor  # (L, N) advantages as the loss reads them (normalised with norm_adv)
    t: Tensor  # (L, N) each step's time index in the buffer (T - 1 on padding)
    b: Tensor  # (N,) each chunk's batch slot: buffer.<field>[t, b] reads any per-step field
    buffer: RolloutBuffer | None = None  # the buffer the chunks come from

    def next_observations(self) -> tuple[Obs, Tensor]:
        """The observation that follows each step in its episode ``(L, N, ...)`` and where it
        exists ``(L, N)``: the next stored one (after the last step the buffer's ``next_obs``)
        or, after a truncation, the true final observation. None after a termination, on padding
        or after a truncation whose final observation was not stored (those rows hold some
        other observation). Computed when called (nothing is gathered otherwise)."""
        buf = self.buffer
        if buf is None:
            raise ValueError("next_observations needs the minibatch's buffer")
        T, B = buf.num_steps, buf.num_envs
        rows = (self.t + 1) * B + self.b  # rows of buf.all_obs(): step t + 1 of slot b
        truncated = buf.truncations[self.t, self.b] & ~buf.terminations[self.t, self.b]
        ok = self.mask & ~buf.terminations[self.t, self.b]
        n = buf.final_t.numel()
        if n:  # truncated steps: their final observations follow the (T + 1) * B stored rows
            final = torch.full((T, B), -1, dtype=torch.long, device=buf.device)
            final[buf.final_t, buf.final_b] = torch.arange(n, device=buf.device) + (T + 1) * B
            f = final[self.t, self.b]
            rows = torch.where(truncated & (f >= 0), f, rows)
            ok = ok & (~truncated | (f >= 0))
        else:
            ok = ok & ~truncated
        return obs_index(buf.all_obs(), rows), ok


class LossTerm(Protocol):
    """A loss term: ``term(batch, output) -> (scalar loss, logs)`` (see the module docstring)."""

    def __call__(
        self, batch: MiniBatch, output: NetOutput
    ) -> tuple[Tensor, Mapping[str, Tensor | float]]: ...


#: the largest coefficient a term may have (the built-in terms use 0.1 to 10)
MAX_COEF = 1e4

#: term name -> class (or factory) ``(net, **options) -> LossTerm``
LOSS_TERMS: dict[str, Callable[..., LossTerm]] = {}


def register_loss_term(name: str, cls: Callable[..., LossTerm] | None = None) -> Any:
    """Register a loss term under ``name`` (also a decorator: ``@register_loss_term("name")``).
    Registering another class under a taken name raises; the same class again (a module
    reload) replaces it."""

    def add(c: Callable[..., LossTerm]) -> Callable[..., LossTerm]:
        if not isinstance(name, str) or not name or "/" in name:
            raise ValueError(f"a loss term name must be a non-empty string without '/': {name!r}")
        old = LOSS_TERMS.get(name)
        if old is not None and getattr(old, "__qualname__", old) != getattr(c, "__qualname__", c):
            raise ValueError(f"loss term {name!r} is already registered ({old!r})")
        LOSS_TERMS[name] = c
        return c

    return add if cls is None else add(cls)


def unregister_loss_term(name: str) -> None:
    """Remove a registered loss term (for tests and plugins)."""
    del LOSS_TERMS[name]


class ConfiguredTerm(NamedTuple):
    """A built loss term with its name and coefficient."""

    name: str
    coef: float
    term: LossTerm


def term_options(options: Any, defaults: Mapping[str, Any], key: str) -> dict[str, Any]:
    """A term's ``options`` with its ``defaults`` filled in; :class:`~marlgrid.config.ConfigError`
    names ``key`` when they are not a mapping or hold a key ``defaults`` does not."""
    if not isinstance(options, Mapping):
        raise ConfigError(f"{key} must be a mapping, got {options!r}")
    unknown = sorted(set(options) - set(defaults))
    if unknown:
        raise ConfigError(f"{key} has unknown keys {unknown}; allowed: {sorted(defaults)}")
    return {**defaults, **options}


class TermBase:
    """Base of a term class whose options one classmethod, :meth:`parse_options`, checks and
    completes: it provides the ``check_options`` and ``heads`` hooks from it (a term that needs
    heads overrides :meth:`declare_heads`) and :meth:`declared_head` for its constructor."""

    #: the term's registered name (in error messages)
    NAME = "term"

    @classmethod
    def parse_options(cls, options: Mapping[str, Any], key: str) -> dict[str, Any]:
        """The options with defaults filled in, checked (errors name ``<key>.<option>``)."""
        raise NotImplementedError

    @classmethod
    def check_options(cls, options: Mapping[str, Any], key: str) -> None:
        """Raise :class:`~marlgrid.config.ConfigError` naming ``<key>.<option>`` for a bad
        option (read by the config checks, before any space is known)."""
        cls.parse_options(options, key)

    @classmethod
    def declare_heads(
        cls, opts: dict[str, Any], observation_space: spaces.Space, network: Any, key: str
    ) -> dict[str, dict[str, Any]]:
        """The extra heads the term needs for its parsed options ``opts`` (none here)."""
        return {}

    @classmethod
    def heads(
        cls,
        options: Mapping[str, Any],
        observation_space: spaces.Space,
        action_space: spaces.Space,
        network: Any,
        key: str,
    ) -> dict[str, dict[str, Any]]:
        """The ``heads`` hook: :meth:`declare_heads` of the parsed options."""
        return cls.declare_heads(cls.parse_options(options, key), observation_space, network, key)

    @classmethod
    def declared_head(cls, net: Any, name: str, kind: type) -> Any:
        """``net``'s extra head ``name`` (an instance of ``kind``) that the term declared;
        :class:`~marlgrid.config.ConfigError` when the network lacks it."""
        heads = getattr(net, "extra_heads", {})
        if name not in heads or not isinstance(heads[name], kind):
            raise ConfigError(
                f"the {cls.NAME} term needs the network's extra head {name!r} (a "
                f"{kind.__name__}, which PPO adds from the term's heads hook); this network has "
                f"{sorted(heads) if heads else 'none'}"
            )
        return heads[name]


def check_aux_losses(
    entries: Any, key: str = "agent.aux_losses", reserved: Sequence[str] = ()
) -> None:
    """Raise :class:`~marlgrid.config.ConfigError` naming ``<key>[i]...`` for a bad entry: not a
    ``{name, coef, options}`` mapping, an unregistered name, a name used twice or one of
    ``reserved`` (the algorithm's own log names), a coefficient outside ``[0, MAX_COEF]``, options
    that are not a mapping."""
    if isinstance(entries, str | Mapping) or not isinstance(entries, Sequence):
        raise ConfigError(f"{key} must be a list of {{name, coef, options}}, got {entries!r}")
    seen: set[str] = set()
    for i, entry in enumerate(entries):
        at = f"{key}[{i}]"
        fields = ("name", "coef", "options")
        name = check_registered_entry(at, entry, fields, "name", LOSS_TERMS, "loss term")
        if name in reserved:
            raise ConfigError(
                f"{at}.name {name!r} is taken by the algorithm's own logs {sorted(reserved)}"
            )
        if name in seen:
            raise ConfigError(f"{at}.name {name!r} is configured twice")
        seen.add(name)
        coef = check_float(f"{at}.coef", entry.get("coef", 1.0))
        if not 0.0 <= coef <= MAX_COEF:
            raise ConfigError(
                f"{at}.coef must be in [0, {MAX_COEF:g}] (a negative one maximises the term's "
                f"loss; a huge one swamps the algorithm's own and diverges), got {coef!r}"
            )
        check_options = getattr(LOSS_TERMS[name], "check_options", None)
        if check_options is not None:
            check_options(dict(entry.get("options", {})), f"{at}.options")


def term_heads(
    entries: Sequence[Mapping[str, Any]],
    observation_space: spaces.Space,
    action_space: spaces.Space,
    network: Any,
    key: str = "agent.aux_losses",
) -> dict[str, dict[str, Any]]:
    """The extra heads the configured terms declare (each term class's optional ``heads``
    hook, see the module docstring), in config order; two terms declaring one head name raise
    :class:`~marlgrid.config.ConfigError`."""
    check_aux_losses(entries, key)
    heads: dict[str, dict[str, Any]] = {}
    for i, entry in enumerate(entries):
        hook = getattr(LOSS_TERMS[entry["name"]], "heads", None)
        if hook is None:
            continue
        at = f"{key}[{i}]"
        options = dict(entry.get("options", {}))
        for head, spec in hook(
            options, observation_space, action_space, network, f"{at}.options"
        ).items():
            if head in heads:
                raise ConfigError(
                    f"{at} ({entry['name']!r}) declares the extra head {head!r}, "
                    "which an earlier term declares too"
                )
            heads[head] = spec
    return heads


def with_term_heads(
    network: Any,
    entries: Sequence[Mapping[str, Any]],
    observation_space: spaces.Space,
    action_space: spaces.Space,
    key: str = "agent.aux_losses",
    network_key: str = "agent.network",
) -> Any:
    """The network config to build: ``network`` (a dataclass with ``extra_heads``) itself when
    no configured term declares heads, else a copy whose ``extra_heads`` adds them after the
    configured ones. A declared head whose name ``network.extra_heads`` already uses raises
    :class:`~marlgrid.config.ConfigError`."""
    declared = term_heads(entries, observation_space, action_space, network, key)
    if not declared:
        return network
    own = dict(network.extra_heads)
    taken = sorted(set(declared) & set(own))
    if taken:
        raise ConfigError(
            f"{network_key}.extra_heads configures {taken}, a head name that the loss terms of "
            f"{key} add themselves; remove or rename that head"
        )
    return dataclasses.replace(network, extra_heads={**own, **declared})


def build_aux_losses(
    entries: Sequence[Mapping[str, Any]],
    net: Any,
    key: str = "agent.aux_losses",
    reserved: Sequence[str] = (),
) -> list[ConfiguredTerm]:
    """The configured terms (checked by :func:`check_aux_losses`), each built as
    ``cls(net, **options)``, in config order."""
    check_aux_losses(entries, key, reserved)
    terms = []
    for i, entry in enumerate(entries):
        name, options = entry["name"], dict(entry.get("options", {}))
        try:
            term = LOSS_TERMS[name](net, **options)
        except TypeError as exc:
            raise ConfigError(f"{key}[{i}].options {options!r} do not fit {name!r}: {exc}") from exc
        terms.append(ConfiguredTerm(name, float(entry.get("coef", 1.0)), term))
    return terms
