"""Memory a training run needs, estimated from its config before anything is built, and the
check that refuses a run that cannot fit (:func:`check_memory`, called by the trainer right
after :meth:`TrainConfig.validate`).

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
  or of one DRQN batch (``batch_size x (seq_len + n_step)``, online and target networks) times
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
cell) and the heads' layers. Honesty: on a PPO-LSTM run (7x7 goal cycle, 512 envs, 64 steps,
one update) the estimate is about 1.3 times the peak RSS growth measured; on a DRQN-LSTM run
(256 envs, a 200k replay, batch 256) about 1.6 times: it errs on the side of refusing.

The limit is :data:`MARGIN` of the memory available now (``MemAvailable`` of
``/proc/meminfo``, or the cgroup's limit when lower; ``sysconf`` elsewhere). The environment
variable :data:`MEMORY_LIMIT_ENV` replaces it: a size such as ``8G``, ``512M`` or a byte count
(taken as is, no margin), or ``off`` to skip the check. A new algorithm adds an entry to
:data:`ESTIMATORS`; without one only its networks and acting are counted.
"""

from __future__ import annotations

import contextlib
import os
import re
import tracemalloc
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import torch
from gymnasium import spaces

from marlgrid.agents.arrays import alloc_obs
from marlgrid.agents.networks.config import NetworkConfig
from marlgrid.agents.networks.models import Torso
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

__all__ = ["ESTIMATORS", "MEMORY_LIMIT_ENV", "Growth", "Need", "check_memory", "estimate_memory"]

#: environment variable replacing the memory limit: a size (``8G``, ``512M``, bytes) or ``off``
MEMORY_LIMIT_ENV = "MARLGRID_MEMORY_LIMIT"
#: share of the available memory a run may plan to use
MARGIN = 0.85
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
#: floats of the memory core's activations per sample, per unit of ``hidden_size``
MEMORY_WIDTH = 6
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


@dataclass(frozen=True)
class NetSize:
    """What the memory of one network depends on (counted without allocating it)."""

    params: float  # parameters of the torso and heads
    state_size: int  # floats of memory state per slot
    width: float  # floats of activations per sample in a training forward
    peak: float  # floats per sample held at once by an inference pass over many samples


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
    hidden: Growth  # its hidden_size, as its parameters grow with it (squared)

    @property
    def per_sample(self) -> tuple[Growth, ...]:
        """What activations grow with: the slots' settings and the hidden size (linearly)."""
        return (*self.grows, replace(self.hidden, power=1.0))

    @property
    def obs_bytes(self) -> int:
        return observation_bytes(self.observation_space)


# -- sizes ------------------------------------------------------------------------------------


def observation_bytes(space: spaces.Space) -> int:
    """Bytes of one observation of ``space`` as stored (counted on the meta device)."""
    obs = alloc_obs(space, (1,), "meta")
    leaves = obs.values() if isinstance(obs, Mapping) else [obs]
    return sum(t.numel() * t.element_size() for t in leaves)


def _num_actions(space: spaces.Space) -> int:
    if isinstance(space, spaces.Discrete):
        return int(space.n)
    if isinstance(space, spaces.MultiDiscrete):
        return int(sum(int(n) for n in space.nvec))
    return 1


def _new_floats(inputs: tuple[Any, ...], out: Any) -> int:
    """Elements a layer's output adds (none for an in-place one, e.g. ``ReLU(inplace=True)``)."""
    if not isinstance(out, torch.Tensor) or any(out is x for x in inputs):
        return 0
    return out.numel()


def network_size(net: NetworkConfig, obs_space: spaces.Space, act_space: spaces.Space,
                 heads: int = 2) -> NetSize:  # fmt: skip
    """The :class:`NetSize` of a torso of ``net`` and ``heads`` heads (PPO's actor and critic,
    DRQN's Q head): the torso built on the meta device, its encoder and trunk run once on a
    meta observation; from the sizes alone where even that fails (absurd sizes)."""
    head = [net.hidden_size, *net.head_sizes, _num_actions(act_space)]
    head_params = heads * sum(a * b + b for a, b in zip(head, head[1:], strict=False))
    head_width = heads * sum(head[1:])
    try:
        with torch.device("meta"):
            torso = Torso(obs_space, net)
        outs: list[int] = []
        hooks = [
            m.register_forward_hook(lambda _m, inputs, out: outs.append(_new_floats(inputs, out)))
            for m in torso.modules()
            if not list(m.children())
        ]
        torso.features(alloc_obs(obs_space, (1, 1), "meta"), 1, 1)
        for hook in hooks:
            hook.remove()
        params = float(sum(p.numel() for p in torso.parameters()))
        state_size = int(torso.state_size)
    except (RuntimeError, ValueError, TypeError, OverflowError, NotImplementedError):
        widths = [observation_bytes(obs_space), *net.trunk_sizes]
        params = float(sum(a * b for a, b in zip(widths, widths[1:], strict=False)))
        params += 4.0 * (widths[-1] + net.hidden_size) * net.hidden_size  # an LSTM's gates
        outs, state_size = list(net.trunk_sizes), 2 * net.hidden_size
    inputs = 4 * observation_bytes(obs_space)  # the observation as floats and as long ids
    hidden = net.hidden_size
    width = inputs + sum(outs) + MEMORY_WIDTH * hidden + state_size + head_width
    peak = inputs + 4 * max(outs, default=0) + (outs[-1] if outs else 0) + 4 * hidden + state_size
    return NetSize(params + head_params, state_size, float(width), float(peak + head_width))


# -- the parts of a run -----------------------------------------------------------------------


def _defaults(cfg: Any) -> Any:
    return type(cfg)()


def _network_needs(what: str, use: _Use, net: NetSize, copies: int) -> list[Need]:
    """The parameter-sized tensors of a network and its acting (see the module docstring)."""
    per_slot = STEP_COPIES * (use.obs_bytes + net.state_size * 4) + net.peak * 4
    return [
        Need(f"the {what}", net.params * 4 * copies, (use.hidden,)),
        Need(f"acting for the {what}", use.slots * per_slot, use.per_sample),
    ]


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
    row = use.obs_bytes + (1 if _num_actions(use.action_space) <= 256 else 8) + 10
    replay = cfg.buffer_size * row + records * (4 * net.state_size + 86)
    size = (Growth(f"{key}.buffer_size", cfg.buffer_size, d.buffer_size),)
    batch = (
        Growth(f"{key}.batch_size", cfg.batch_size, d.batch_size),
        Growth(f"{key}.seq_len", cfg.seq_len, d.seq_len),
        replace(use.hidden, power=1.0),
    )
    trained = cfg.batch_size * (window - cfg.burn_in)  # rows with gradients (no burn-in)
    rows = cfg.batch_size * window  # rows gathered, and through the target network
    update = trained * net.width * 4 * TRAIN_FACTOR + rows * (net.peak * 4 + 2 * use.obs_bytes)
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
            hidden=Growth(f"{key}.network.hidden_size", c.network.hidden_size,
                          NetworkConfig().hidden_size, 2.0),
        )  # fmt: skip
        heads = _HEADS.get(c.algo, lambda _: 2)(c)
        net = network_size(c.network, use.observation_space, use.action_space, heads)
        needs += _network_needs(f"networks of {key}", use, net, TRAIN_COPIES)
        needs += ESTIMATORS.get(c.algo, lambda *_: [])(key, c, use, net)
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


# -- the limit and the check ------------------------------------------------------------------

_UNITS = {"": 1, "K": 2**10, "M": 2**20, "G": 2**30, "T": 2**40}


def memory_limit() -> tuple[float | None, str]:
    """``(bytes a run may use, where that comes from)``; ``None`` when the check is off or
    nothing tells the memory available."""
    text = os.environ.get(MEMORY_LIMIT_ENV, "").strip()
    if text:
        if text.lower() == "off":
            return None, f"{MEMORY_LIMIT_ENV}=off"
        found = re.fullmatch(r"(\d+(?:\.\d+)?)\s*([KMGT]?)(?:I?B)?", text.upper())
        if found is None:
            raise ConfigError(
                f"{MEMORY_LIMIT_ENV} must be a size such as 8G, 512M or a byte count, or off; "
                f"got {text!r}"
            )
        return float(found[1]) * _UNITS[found[2]], f"{MEMORY_LIMIT_ENV}={text}"
    available = _available_bytes()
    if available is None:
        return None, "the available memory is unknown"
    return available * MARGIN, (
        f"{MARGIN:.0%} of the {_size(available)} available; {MEMORY_LIMIT_ENV} sets another limit"
    )


def _available_bytes() -> float | None:
    """Memory available now: ``MemAvailable``, or the cgroup's room when smaller."""
    found: list[float] = []
    try:
        for line in Path("/proc/meminfo").read_text().splitlines():
            if line.startswith("MemAvailable:"):
                found.append(float(line.split()[1]) * 1024)
    except OSError:
        with contextlib.suppress(ValueError, OSError, AttributeError):  # not every OS has them
            found.append(float(os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_AVPHYS_PAGES")))
    cgroup = Path("/sys/fs/cgroup")
    for limit, usage in (
        ("memory.max", "memory.current"),  # cgroup v2
        ("memory/memory.limit_in_bytes", "memory/memory.usage_in_bytes"),  # cgroup v1
    ):
        try:
            room = float((cgroup / limit).read_text()) - float((cgroup / usage).read_text())
        except (OSError, ValueError):  # absent, or "max"
            continue
        found.append(max(room, 0.0))
    return min(found) if found else None


def _size(nbytes: float) -> str:
    """``nbytes`` for a reader: ``1.5 GB`` (powers of 1024), ``3.2e+10 PB`` past petabytes."""
    for unit, scale in (("PB", 2**50), ("TB", 2**40), ("GB", 2**30), ("MB", 2**20)):
        if nbytes >= scale:
            value = f"{nbytes / scale:.3g}" if unit == "PB" else f"{nbytes / scale:.1f}"
            return f"{value} {unit}"
    return f"{nbytes / 2**10:.1f} KB"


def check_memory(
    cfg: TrainConfig, configs: Mapping[str, Any] | None = None, limit: float | None = None
) -> list[Need]:
    """Refuse ``cfg`` with a :class:`ConfigError` when :func:`estimate_memory` exceeds
    ``limit`` bytes (default :func:`memory_limit`), naming the setting that dominates, the
    estimate, the limit and the most of that setting that fits; returns the estimate."""
    source = "the limit given to check_memory"
    if limit is None:
        limit, source = memory_limit()
        if limit is None:
            return []
    needs = estimate_memory(cfg, configs)
    total = sum(n.nbytes for n in needs)
    if total <= limit:
        return needs
    raise ConfigError(_refusal(needs, total, limit, source))


def _most_that_fits(needs: list[Need], setting: str, room: float) -> int:
    """The largest value of ``setting`` at which ``needs`` (each growing with it as its
    :class:`Growth` says) take at most ``room`` bytes; 0 when none does."""
    grown = [(n.nbytes, next(g for g in n.grows if g.setting == setting)) for n in needs]
    value = grown[0][1].value

    def at(x: int) -> float:
        return sum(b * (x / g.value) ** g.power for b, g in grown)

    low, high = 0, value  # at(high) > room
    while high - low > 1:
        mid = (low + high) // 2
        low, high = (mid, high) if at(mid) <= room * (1 - 1e-9) else (low, mid)
    return low


def _refusal(needs: list[Need], total: float, limit: float, source: str) -> str:
    """The one-line message of a run that does not fit (see :func:`check_memory`)."""
    groups: dict[str, list[Need]] = {}
    growths: dict[str, Growth] = {}
    for need in needs:
        for g in need.grows:
            groups.setdefault(g.setting, []).append(need)
            growths[g.setting] = g
    size = {s: sum(n.nbytes for n in ns) for s, ns in groups.items()}
    top = max(size.values())
    near = [s for s in size if size[s] >= top / 2]  # of those, the one furthest above default
    setting = max(near, key=lambda s: (growths[s].value / max(growths[s].default, 1), size[s]))
    g, part = growths[setting], size[setting]
    biggest = max(groups[setting], key=lambda n: n.nbytes)
    rest = total - part
    most = _most_that_fits(groups[setting], setting, limit - rest)
    if rest >= limit:
        fits = f"; the rest of the run alone needs ~{_size(rest)}"
    else:
        fits = f"; at most ~{most} fits" if most >= 1 else "; no value of it fits"
    return (
        f"{g.setting}={g.value}: {biggest.what} would need ~{_size(biggest.nbytes)} and the run "
        f"~{_size(total)} in all, more than the {_size(limit)} allowed ({source}){fits}"
    )
