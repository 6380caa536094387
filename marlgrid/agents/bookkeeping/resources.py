"""Memory a training run needs, estimated from its config before anything is built, and the
check that refuses a run that cannot fit (:func:`check_memory`, called by the trainer right
after :meth:`TrainConfig.validate`, is in :mod:`.memory_budget`).

:func:`estimate_memory` lists the parts (:class:`Need`), each with the settings it grows with:

- **env batch**: the bytes of one env, measured (tracemalloc) as the difference between a
  1-env and a 5-env build of each stream's env, times ``num_envs``;
- **acting**: per slot (env copy times agent), :data:`STEP_COPIES` copies of a step's
  observation and state in flight, and the forward's activations;
- **storage**: PPO's rollout (``(num_steps + 1) x slots`` observations, per-step floats,
  chunk-start states), behaviour cloning's teacher sequences, DRQN's replay (the byte count of
  :mod:`~marlgrid.agents.storage.sequence_replay`'s docstring) and the replay's copy in each
  checkpoint (``checkpoint_replay``);
- **update activations**: the samples of one minibatch (PPO, BC: ``chunk_len`` steps per chunk)
  or of one DRQN batch (``batch_size x (seq_len + n_step)``, online and target networks, times
  :data:`DRQN_UPDATE_SLACK`) times
  the floats per sample times :data:`TRAIN_FACTOR` (saved activations, their gradients,
  temporaries); PPO's state refresh, one inference pass over the whole rollout; DRQN's, over
  4096 sequences at a time;
- **networks**: parameters counted by building the torso on torch's ``meta`` device (nothing is
  allocated; a network too large even to describe falls back to a count from its sizes), times
  :data:`TRAIN_COPIES` for trained learners (weights, gradients, flat gradients, Adam's two
  moments, DRQN's target) or :data:`FROZEN_COPIES` for frozen roles, whose sizes come from the
  config saved in their checkpoint (read before any network is built).

Floats per sample: the observation, every encoder and trunk layer's output (measured by the
meta forward), ``6 x hidden_size`` for the memory core (an LSTM's four gates, its output and
cell) and the heads' layers. Honesty, measured by the slow test
``test_the_memory_estimate_covers_a_run_and_is_within_3x_of_it`` (peak RSS growth over a run,
after a 2-env warm-up run has loaded the compiled kernels): PPO-LSTM on the 7x7 goal cycle (512
envs x 64 steps) estimate 603 MiB against 437 MiB measured (1.4x), on the 13x13 3-agent goal
cycle (256 envs x 128 steps) 3053 MiB against 1798 MiB (1.7x); DRQN-LSTM on Empty-8x8 (64 envs,
a 20k replay, batch 256) 1575 MiB against 1217 MiB (1.3x) with :data:`DRQN_UPDATE_SLACK`.
It errs on the side of refusing; a process's one-off cost (numba compiling kernels, torch
loading its libraries, a few hundred MiB) is left to :data:`.memory_budget.MARGIN`.

A new algorithm adds an entry to
:data:`ESTIMATORS`; without one only its networks and acting are counted.
"""

from __future__ import annotations

import gc
import tracemalloc
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from gymnasium import spaces

from marlgrid.agents.algorithms.losses import with_term_heads
from marlgrid.agents.bookkeeping.network_size import (
    NetSize,
    head_size,
    network_size,
    num_actions,
    observation_bytes,
)
from marlgrid.agents.networks.config import NetworkConfig
from marlgrid.agents.training.env_sources import make_env_source
from marlgrid.agents.training.roles import RoleConfig, frozen_learner_config, resolve_roles
from marlgrid.agents.training.train_config import (
    EnvConfig,
    TrainConfig,
    as_stream,
    learner_configs,
    validate_learners,
)
from marlgrid.config import ConfigError

__all__ = ["ESTIMATORS", "Growth", "Need", "estimate_memory"]

#: copies of the activations of a training forward (saved for backward, gradients, temporaries)
TRAIN_FACTOR = 3
#: parameter-sized tensors of a trained learner (weights, gradients, flat gradients, Adam's two
#: moments, a target network)
TRAIN_COPIES = 6
#: parameter-sized tensors of a frozen learner (its weights and the loaded checkpoint's)
FROZEN_COPIES = 2
#: copies of a step's observations and states in flight while acting (env, torch, the step's
#: observation and next observation)
STEP_COPIES = 4
#: what a DRQN update takes beyond the count of its activations (measured: peak RSS growth of
#: 1.3 times the count on Empty-8x8, batch 32 and 256; the gathered batch's copies and the
#: target and online passes' temporaries that the count leaves out)
DRQN_UPDATE_SLACK = 1.6
#: sequences per state-refresh batch of DRQN (``storage.state_refresh.refresh_states``)
REFRESH_SEQUENCES = 4096
#: envs of the second build that measures an env's bytes
MEASURED_ENVS = 5


@dataclass(frozen=True)
class Growth:
    """A setting a :class:`Need` grows with, as ``value ** power``; ``default`` is its usual
    value (which of several settings to name: the one furthest above its default)."""

    setting: str
    value: int
    default: int
    power: float = 1.0


@dataclass(frozen=True)
class Need:
    """One part of a run's memory: ``what`` it is, its ``nbytes`` and what it grows with."""

    what: str
    nbytes: float
    grows: tuple[Growth, ...]


@dataclass
class _Stream:
    """One env stream as the estimate sees it: a 1-env build, its roles, its env's bytes."""

    key: str  # the env config's key: env, streams.<name>.env
    env: EnvConfig
    vec: Any
    roles: dict[str, RoleConfig]
    env_bytes: float  # bytes per env


@dataclass(frozen=True)
class _Use:
    """Where a network plays: the slots it drives and the settings they grow with."""

    slots: int
    grows: tuple[Growth, ...]  # the num_envs of each stream it plays in
    observation_space: spaces.Space
    action_space: spaces.Space
    hidden: Growth  # its widest width (see _widest), as its parameters grow with it

    @property
    def per_sample(self) -> tuple[Growth, ...]:
        """What activations grow with: the slots' settings and the hidden size (linearly)."""
        return (*self.grows, replace(self.hidden, power=1.0))

    @property
    def obs_bytes(self) -> int:
        return observation_bytes(self.observation_space)


# -- the parts of a run -----------------------------------------------------------------------


def _defaults(cfg: Any) -> Any:
    return type(cfg)()


#: the widths a network's parameters grow with, and how (the memory core's squared)
_WIDTHS = (("hidden_size", 2.0), ("bag_dim", 1.0), ("embed_dim", 1.0))


def _widest(key: str, network: NetworkConfig) -> Growth:
    """The width of ``network`` furthest above its default, as its parameters grow with it."""
    d = NetworkConfig()
    grows = [Growth(f"{key}.{n}", getattr(network, n), getattr(d, n), p) for n, p in _WIDTHS]
    return max(grows, key=lambda g: g.value / g.default)


def _network_needs(what: str, use: _Use, net: NetSize, copies: int) -> list[Need]:
    """The parameter-sized tensors of a network and its acting (see the module docstring)."""
    per_slot = STEP_COPIES * (use.obs_bytes + net.state_size * 4) + net.peak * 4
    return [
        Need(f"the {what}", net.params * 4 * copies, (use.hidden,)),
        Need(f"acting for the {what}", use.slots * per_slot, use.per_sample),
    ]


def _extra_head_needs(key: str, cfg: Any, use: _Use) -> list[Need]:
    """The extra heads of a learner (its network's and those its loss terms declare): their
    parameter-sized tensors and one minibatch's activations, each growing with the head's
    largest size option (e.g. the next-view decoder's ``hidden``)."""
    terms = getattr(cfg, "aux_losses", None) or []
    network = with_term_heads(cfg.network, terms, use.observation_space, use.action_space,
                              f"{key}.aux_losses", f"{key}.network")  # fmt: skip
    own = set(cfg.network.extra_heads)
    samples = use.slots * getattr(cfg, "num_steps", 1) / max(getattr(cfg, "num_minibatches", 1), 1)
    needs = []
    for name, spec in network.extra_heads.items():
        params, width = head_size(spec, cfg.network.hidden_size, use.action_space)
        nbytes = params * 4 * TRAIN_COPIES + samples * width * 4 * TRAIN_FACTOR
        sizes = {k: v for k, v in dict(spec.get("options", {})).items()
                 if isinstance(v, int) and not isinstance(v, bool)}  # fmt: skip
        where = (f"{key}.network.extra_heads.{name}.options" if name in own
                 else f"{key}.aux_losses (head {name}).options")  # fmt: skip
        if sizes:
            option = max(sizes, key=lambda k: sizes[k])
            grows = (Growth(f"{where}.{option}", sizes[option], _head_default(spec, option)),)
        else:
            grows = (use.hidden,)
        needs.append(Need(f"the extra head {name!r} of {key}", nbytes, grows))
    return needs


def _head_default(spec: Mapping[str, Any], option: str) -> int:
    """The default of a head kind's size option (1 where it has none)."""
    import inspect

    from marlgrid.agents.networks.registry import HEADS

    try:
        default = inspect.signature(HEADS[spec["kind"]]).parameters[option].default
    except (KeyError, TypeError, ValueError):
        return 1
    return default if isinstance(default, int) and default > 0 else 1


def _rollout_needs(key: str, cfg: Any, use: _Use, net: NetSize, columns: int,
                   refresh: bool) -> list[Need]:  # fmt: skip
    """PPO's and BC's storage of ``num_steps`` steps of ``columns`` sequences, and the peak of
    their update: one minibatch's training pass, or a state refresh over the whole rollout."""
    T, L = cfg.num_steps, cfg.chunk_len
    steps = (*use.grows, Growth(f"{key}.num_steps", T, _defaults(cfg).num_steps))
    stored = (T + 1) * columns * use.obs_bytes + T * columns * 64  # per-step floats, flags
    stored += -(-T // L) * columns * net.state_size * 4
    samples = -(-(-(-T // L) * columns) // cfg.num_minibatches) * L
    update = (samples * net.width * 4 * TRAIN_FACTOR, f"the update of {key} (one minibatch)")
    if refresh:
        update = max(update, ((T + 1) * columns * net.peak * 4, f"the state refresh of {key}"))
    grows = (*use.per_sample, steps[-1])
    return [Need(f"the rollout storage of {key}", stored, steps), Need(update[1], update[0], grows)]


def _ppo_needs(key: str, cfg: Any, use: _Use, net: NetSize) -> list[Need]:
    return _rollout_needs(key, cfg, use, net, use.slots, cfg.refresh_interval > 0)


def _bc_needs(key: str, cfg: Any, use: _Use, net: NetSize) -> list[Need]:
    return _rollout_needs(key, cfg, use, net, use.slots * len(cfg.teachers), False)


def _drqn_needs(key: str, cfg: Any, use: _Use, net: NetSize) -> list[Need]:
    d = _defaults(cfg)
    window = cfg.seq_len + cfg.n_step
    records = cfg.max_sequences or max(2 * cfg.buffer_size // cfg.period, 1)
    row = use.obs_bytes + (1 if num_actions(use.action_space) <= 256 else 8) + 10
    replay = cfg.buffer_size * row + records * (4 * net.state_size + 86)
    size = (Growth(f"{key}.buffer_size", cfg.buffer_size, d.buffer_size),)
    batch = (
        Growth(f"{key}.batch_size", cfg.batch_size, d.batch_size),
        Growth(f"{key}.seq_len", cfg.seq_len, d.seq_len),
        replace(use.hidden, power=1.0),
    )
    # rows gathered, through the target network, and with gradients: a sequence that starts an
    # episode trains its whole window (only the others' burn-in runs without gradients)
    rows = cfg.batch_size * window
    update = rows * (net.width * 4 * TRAIN_FACTOR + net.peak * 4 + 2 * use.obs_bytes)
    update *= DRQN_UPDATE_SLACK
    out = [
        Need(f"the replay of {key}", replay, size),
        Need(f"the update of {key} (one batch)", update, batch),
    ]
    if cfg.checkpoint_replay:
        out.append(Need(f"the replay's copy in each checkpoint of {key}", replay, size))
    if cfg.refresh_every:
        chunk = min(records, REFRESH_SEQUENCES) * cfg.period
        refresh = (*size, replace(use.hidden, power=1.0))
        out.append(Need(f"the state refresh of {key}", chunk * net.peak * 4, refresh))
    return out


#: algorithm -> the storage and update needs of one of its learners (``key``, its config, where
#: it plays, its network's size)
ESTIMATORS: dict[str, Callable[[str, Any, _Use, NetSize], list[Need]]] = {
    "ppo": _ppo_needs,
    "bc": _bc_needs,
    "drqn": _drqn_needs,
}
#: heads of each algorithm's network (PPO and BC: actor and critic; DRQN: Q, or two if dueling)
_HEADS: dict[str, Callable[[Any], int]] = {"drqn": lambda c: 2 if c.dueling else 1}


# -- the run ----------------------------------------------------------------------------------


#: bytes per env measured so far, by env id and settings (one process measures each once, so
#: its estimates agree with each other)
_ENV_BYTES: dict[tuple[str, str], float] = {}


def _env_bytes(env: EnvConfig) -> float:
    """Bytes one more env of ``env`` takes, built and reset (see the module docstring)."""
    key = (env.id, repr(env.settings))
    if key not in _ENV_BYTES:
        _ENV_BYTES[key] = _measure_env_bytes(env)
    return _ENV_BYTES[key]


def _measure_env_bytes(env: EnvConfig) -> float:

    def built(n: int) -> int:
        gc.collect()  # an earlier build's cycles, freed mid-build, would be counted against it
        start = tracemalloc.get_traced_memory()[0]
        vec = make_env_source(env.id, n, env.settings)
        obs = vec.reset(seed=0)
        size = tracemalloc.get_traced_memory()[0] - start
        del vec, obs
        return size

    tracing = tracemalloc.is_tracing()
    if not tracing:
        tracemalloc.start()
    try:
        built(1)  # the first build also allocates what every later one shares (caches)
        one, more = built(1), built(MEASURED_ENVS)
    finally:
        if not tracing:
            tracemalloc.stop()
    return max(more - one, 0) / (MEASURED_ENVS - 1)


def _streams(cfg: TrainConfig, learners: Iterable[str]) -> list[_Stream]:
    """Every env stream built with one env, its roles resolved (bad ids, settings and roles
    raise the :class:`ConfigError` the full build would)."""
    specs = [("env", "", cfg.env, cfg.roles)]
    for name, value in cfg.streams.items():
        stream = as_stream(value)
        specs.append((f"streams.{name}.env", f"streams.{name}: ", stream.env, stream.roles))
    out = []
    for key, where, env, roles in specs:
        try:
            vec = make_env_source(env.id, 1, env.settings)
            vec.reset(seed=0)  # compiles what a first reset compiles, before measuring
            resolved = resolve_roles(roles, vec.possible_agents, sorted(learners))
            env_bytes = _env_bytes(env)
        except (ConfigError, TypeError) as exc:
            raise ConfigError(f"{where}{exc}") from None
        out.append(_Stream(key, env, vec, resolved, env_bytes))
    return out


def _num_envs(stream: _Stream) -> Growth:
    return Growth(f"{stream.key}.num_envs", stream.env.num_envs, EnvConfig().num_envs)


def estimate_memory(cfg: TrainConfig, configs: Mapping[str, Any] | None = None) -> list[Need]:
    """The parts of the memory ``cfg`` needs (see the module docstring); ``configs``: its
    learner configs (default :func:`learner_configs`). Builds one env per stream, no network;
    a bad learner config, env or role raises :class:`ConfigError` as the full build would."""
    configs = learner_configs(cfg) if configs is None else configs
    validate_learners(configs)
    streams = _streams(cfg, configs)
    needs = [Need(f"the {s.env.num_envs} envs of {s.key}", s.env_bytes * s.env.num_envs,
                  (_num_envs(s),)) for s in streams]  # fmt: skip
    plays: dict[str, list[tuple[_Stream, list[str]]]] = {}
    for s in streams:
        for agent, role in s.roles.items():
            if role.kind == "learner":
                parts = plays.setdefault(role.learner, [])
                if parts and parts[-1][0] is s:
                    parts[-1][1].append(agent)
                else:
                    parts.append((s, [agent]))
    for name, parts in plays.items():
        c, (first, agents) = configs[name], parts[0]
        if not isinstance(getattr(c, "network", None), NetworkConfig):
            continue  # an architecture of its own (a custom algorithm): not sized here
        key = "agent" if name == "main" else f"learners.{name}"
        use = _Use(
            slots=sum(s.env.num_envs * len(a) for s, a in parts),
            grows=tuple(_num_envs(s) for s, _ in parts),
            observation_space=first.vec.single_observation_space(agents[0]),
            action_space=first.vec.single_action_space(agents[0]),
            hidden=_widest(f"{key}.network", c.network),
        )  # fmt: skip
        heads = _HEADS.get(c.algo, lambda _: 2)(c)
        net = network_size(c.network, use.observation_space, use.action_space, heads)
        needs += _network_needs(f"networks of {key}", use, net, TRAIN_COPIES)
        needs += ESTIMATORS.get(c.algo, lambda *_: [])(key, c, use, net)
        needs += _extra_head_needs(key, c, use)
    loaded: dict[tuple[str, str], Growth] = {}  # saved learner -> its size, counted once
    for s in streams:
        for agent, role in s.roles.items():
            if role.kind == "frozen":
                needs += _frozen_needs(s, agent, role, loaded)
    return needs


def _frozen_needs(
    stream: _Stream, agent: str, role: RoleConfig, loaded: dict[tuple[str, str], Growth]
) -> list[Need]:
    """The network of a frozen role, sized by its checkpoint's saved config (nothing built),
    once per saved learner, and its acting."""
    try:
        saved = frozen_learner_config(role)
        saved.validate("saved")
    except (ValueError, TypeError, KeyError, AttributeError):  # ConfigError is a ValueError
        return []  # a config that does not rebuild or pass its checks: loading it reports it
    if not isinstance(getattr(saved, "network", None), NetworkConfig):
        return []  # an architecture of its own: not sized here
    path = Path(str(role.checkpoint)).resolve()
    key = (str(path), role.learner)
    first = key not in loaded  # agents playing one saved learner share its network
    if first:
        setting = f"roles.{agent}.checkpoint's network.hidden_size"
        loaded[key] = Growth(setting, saved.network.hidden_size, NetworkConfig().hidden_size, 2.0)
    use = _Use(
        slots=stream.env.num_envs,
        grows=(_num_envs(stream),),
        observation_space=stream.vec.single_observation_space(agent),
        action_space=stream.vec.single_action_space(agent),
        hidden=loaded[key],
    )
    heads = _HEADS.get(saved.algo, lambda _: 2)(saved)
    net = network_size(saved.network, use.observation_space, use.action_space, heads)
    needs = _network_needs(f"frozen network of {agent} ({path.name})", use, net, FROZEN_COPIES)
    return needs if first else needs[1:]
