"""Ray RLlib adapter: every marlgrid id as an RLlib multi-agent env, with PPO configs to match.

>>> import marlgrid.adapters.rllib as mr                    # registers every marlgrid id with RLlib
>>> config = mr.ppo_config("MarlGrid-GoalCycle-13x13-3Agents-v0", shared=True)
>>> algo = config.build_algo()
>>> algo.train()

Importing this module imports ray (``pip install 'marlgrid[ray]'``); ``import marlgrid`` does not.
``experiments/examples/rllib_ppo.py`` trains PPO with an LSTM from one command.

**Env.** :class:`MarlGridMultiAgentEnv` is a native RLlib ``MultiAgentEnv`` driving
``marlgrid.make(id)`` (the engine with one env) directly. RLlib's env runners vectorize
multi-agent envs themselves, one Python env object per sub-env, so a batch of marlgrid envs cannot
be handed over whole. Of the adapters measured on the 3-agent goal cycle, this one and RLlib's
``ParallelPettingZooEnv`` around the same env (:func:`pettingzoo_env`, kept for comparison) step
equally fast (about 50k env steps/s on one core), twice a ``MultiAgentEnv`` over a one-env
``marlgrid.make_vec``; inside RLlib all of them sample at the same rate, as the RLModule's forward
pass dominates (about 250 env steps/s with an LSTM). This one is kept because it also ends an
episode right when one agent terminates on the step the others are truncated
(``ParallelPettingZooEnv`` then sets neither ``__all__`` flag and steps an env with no agents).
Env config keys: ``id`` (a marlgrid id; implied by a registered name), ``settings`` (overrides
for ``marlgrid.make``, e.g. ``{"agent": {"observation": "onehot"}}``), ``seed``.

**Observations** are float32, as RLlib's default encoders need: symbolic and one-hot views keep
their values (cell ids and 0/1), RGB views are scaled to [0, 1]. View images are ``(v, v, C)``
boxes; RLlib has no default CNN for views this small, so :func:`conv_filters` gives valid-padding
3x3 stacks (7x7 -> 5x5 -> 3x3, 5x5 -> 3x3 -> 1x1, larger views first strided down).
:func:`model_config` puts them together with an LSTM. Dict observations (agents with ``extras``)
are Dicts of float32 boxes; :func:`ppo_config` flattens them for RLlib's MLP encoder.

**Episodes.** An agent's entry leaves the dicts after the step on which it terminated or was
truncated, as in the PettingZoo env; ``__all__`` is set once no agent is left in play (truncated
when any agent was truncated on that last step, else terminated). Agents not yet spawned
(``spawn_delay``) are listed with blank views, their actions ignored.

**Policies.** :func:`policy_spec` builds the ``multi_agent(policies=..., policy_mapping_fn=...)``
arguments: one shared policy for all agent ids, one per agent id, or named groups.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import Any

import numpy as np

try:
    import gymnasium as gym
    from ray.rllib.env.multi_agent_env import MultiAgentEnv
    from ray.tune.registry import register_env
except ModuleNotFoundError as err:
    if (err.name or "").split(".")[0] not in ("ray", "tree", "pandas", "pyarrow", "scipy"):
        raise
    raise ModuleNotFoundError(
        f"marlgrid.adapters.rllib needs Ray RLlib ({err.name} is missing): "
        "pip install 'marlgrid[ray]'",
        name=err.name,
    ) from err

import marlgrid
from marlgrid.config import ConfigError

__all__ = [
    "MarlGridMultiAgentEnv",
    "PolicyMapping",
    "conv_filters",
    "float_space",
    "model_config",
    "pettingzoo_env",
    "policy_spec",
    "ppo_config",
    "register_envs",
]

_ENV_KEYS = ("id", "settings", "seed")


# -- observations ------------------------------------------------------------------------------


def float_space(space: gym.Space, rgb: bool = False) -> gym.Space:
    """The float32 version of an observation space (``rgb``: pixels scaled to [0, 1])."""
    if isinstance(space, gym.spaces.Dict):
        return gym.spaces.Dict({k: float_space(s, rgb and k == "image") for k, s in space.items()})
    if isinstance(space, gym.spaces.Box):
        high = 1.0 if rgb else space.high.astype(np.float32)
        return gym.spaces.Box(
            space.low.astype(np.float32),
            np.broadcast_to(high, space.shape).astype(np.float32),
            shape=space.shape,
            dtype=np.float32,
        )
    return space  # Discrete (direction) stays an int


def _caster(space: gym.Space, rgb: bool) -> Any:
    """A function turning one observation of ``space`` into its :func:`float_space` form."""
    if isinstance(space, gym.spaces.Dict):
        parts = {k: _caster(s, rgb and k == "image") for k, s in space.items()}
        return lambda obs: {k: f(obs[k]) for k, f in parts.items()}
    if isinstance(space, gym.spaces.Box):
        if rgb:
            return lambda x: np.multiply(x, np.float32(1 / 255), dtype=np.float32)
        return lambda x: np.asarray(x, dtype=np.float32)
    return lambda x: int(x)


def _is_rgb(env: Any, agent: str) -> bool:
    return env.agent_configs[env.possible_agents.index(agent)].observation == "rgb"


def conv_filters(view: int, channels: Sequence[int] = (32, 64)) -> list[list[Any]]:
    """RLlib ``conv_filters`` for a square ``view`` (cells or pixels): ``[out, kernel, stride,
    padding]`` rows. Views of 15 and more are first cut by 3x3 stride-3 convolutions (21 -> 7),
    then come up to ``len(channels)`` 3x3 valid ones while the map is at least 3 wide
    (7 -> 5 -> 3, 5 -> 3 -> 1, 3 -> 1, 9 -> 7 -> 5). RLlib flattens the last map.
    """
    if view < 3:
        raise ConfigError(f"view must be at least 3 cells or pixels wide, got {view}")
    rows: list[list[Any]] = []
    size = int(view)
    while size >= 15:
        rows.append([channels[0], 3, 3, "valid"])
        size = (size - 3) // 3 + 1
    for out in channels:
        if size < 3:
            break
        rows.append([out, 3, 1, "valid"])
        size -= 2
    return rows


# -- the env -----------------------------------------------------------------------------------


class MarlGridMultiAgentEnv(MultiAgentEnv):
    """A marlgrid env as an RLlib ``MultiAgentEnv`` with float32 observations (module docstring).

    ``config``: ``{"id": ..., "settings": {...}, "seed": None}`` (RLlib passes its ``env_config``,
    an ``EnvContext``, here). ``seed`` seeds the first reset that RLlib does not seed itself.
    """

    def __init__(self, config: Mapping[str, Any] | None = None) -> None:
        super().__init__()
        config = dict(config or {})
        unknown = sorted(set(config) - set(_ENV_KEYS))
        if unknown:
            raise ConfigError(f"unknown env_config key(s) {unknown}; allowed: {list(_ENV_KEYS)}")
        env_id = config.get("id")
        if not env_id:
            raise ConfigError(
                "env_config needs the marlgrid id, e.g. {'id': "
                "'MarlGrid-GoalCycle-13x13-3Agents-v0'}; registered ids: "
                f"{sorted(marlgrid.REGISTRY)}"
            )
        self.env_id = env_id
        self.env = env = marlgrid.make(env_id, **dict(config.get("settings") or {}))
        self.possible_agents = list(env.possible_agents)
        self.agents = []
        self.observation_spaces = {
            a: float_space(env.observation_space(a), _is_rgb(env, a)) for a in self.possible_agents
        }
        self.action_spaces = {a: env.action_space(a) for a in self.possible_agents}
        self._cast = {
            a: _caster(env.observation_space(a), _is_rgb(env, a)) for a in self.possible_agents
        }
        self._seed = config.get("seed")
        self.render_mode = env.render_mode

    def reset(
        self, *, seed: int | None = None, options: dict | None = None
    ) -> tuple[dict[str, Any], dict[str, Any]]:
        if seed is None:
            seed, self._seed = self._seed, None
        obs, infos = self.env.reset(seed=seed, options=options)
        self.agents = list(self.env.agents)
        cast = self._cast
        return {a: cast[a](o) for a, o in obs.items()}, infos

    def step(self, action_dict: Mapping[str, Any]):
        env, cast = self.env, self._cast
        if len(action_dict) != len(env.agents):  # a live agent without an action: action 0
            action_dict = {a: action_dict.get(a, 0) for a in env.agents}
        obs, rewards, terminateds, truncateds, infos = env.step(action_dict)
        obs = {a: cast[a](o) for a, o in obs.items()}
        self.agents = left = env.agents
        if left:
            terminateds["__all__"] = truncateds["__all__"] = False
        else:
            truncated = True in truncateds.values()
            terminateds["__all__"] = not truncated
            truncateds["__all__"] = truncated
        return obs, rewards, terminateds, truncateds, infos

    def render(self) -> Any:
        return self.env.render()

    def close(self) -> None:
        self.env.close()


def pettingzoo_env(config: Mapping[str, Any] | None = None) -> MultiAgentEnv:
    """The alternative adapter: RLlib's ``ParallelPettingZooEnv`` around ``marlgrid.make`` with
    the same float32 observations (slower than :class:`MarlGridMultiAgentEnv`; for comparison)."""
    from ray.rllib.env.wrappers.pettingzoo_env import ParallelPettingZooEnv

    config = dict(config or {})
    env = marlgrid.make(config["id"], **dict(config.get("settings") or {}))
    return ParallelPettingZooEnv(_FloatParallel(env))


class _FloatParallel:
    """A PettingZoo ParallelEnv view of ``env`` with float32 observations."""

    def __init__(self, env: Any) -> None:
        self.env = env
        self.possible_agents = env.possible_agents
        self.render_mode = env.render_mode
        self.metadata = env.metadata
        self._spaces = {
            a: float_space(env.observation_space(a), _is_rgb(env, a)) for a in env.possible_agents
        }
        self._cast = {
            a: _caster(env.observation_space(a), _is_rgb(env, a)) for a in env.possible_agents
        }

    @property
    def agents(self) -> list[str]:
        return self.env.agents

    @property
    def unwrapped(self) -> Any:
        return self.env

    def observation_space(self, agent: str) -> gym.Space:
        return self._spaces[agent]

    def action_space(self, agent: str) -> gym.Space:
        return self.env.action_space(agent)

    def reset(self, seed: int | None = None, options: dict | None = None):
        obs, infos = self.env.reset(seed=seed, options=options)
        return {a: self._cast[a](o) for a, o in obs.items()}, infos

    def step(self, actions: dict[str, Any]):
        obs, *rest = self.env.step(actions)
        return ({a: self._cast[a](o) for a, o in obs.items()}, *rest)

    def render(self, *args: Any) -> Any:
        return self.env.render()

    def close(self) -> None:
        self.env.close()


class _Creator:
    """A picklable env creator for one registered id (RLlib calls it with ``env_config``)."""

    def __init__(self, env_id: str) -> None:
        self.env_id = env_id

    def __call__(self, env_config: Mapping[str, Any] | None = None) -> MarlGridMultiAgentEnv:
        return MarlGridMultiAgentEnv({**dict(env_config or {}), "id": self.env_id})


def register_envs(ids: Iterable[str] | None = None) -> list[str]:
    """Register marlgrid ids (default: all of ``marlgrid.REGISTRY``) under their own names with
    RLlib (``config.environment("MarlGrid-...")``); returns the ids. Run at import."""
    names = sorted(marlgrid.REGISTRY) if ids is None else list(ids)
    for env_id in names:
        marlgrid.spec(env_id)  # unknown ids fail here, naming the close ones
        register_env(env_id, _Creator(env_id))
    return names


# -- policies and models -----------------------------------------------------------------------


class PolicyMapping:
    """``policy_mapping_fn``: agent id -> policy id from a fixed table (picklable)."""

    def __init__(self, table: Mapping[str, str]) -> None:
        self.table = dict(table)

    def __call__(self, agent_id: str, episode: Any = None, **kwargs: Any) -> str:
        try:
            return self.table[agent_id]
        except KeyError:
            raise ConfigError(
                f"agent {agent_id!r} has no policy; mapped agents: {sorted(self.table)}"
            ) from None


def policy_spec(
    agents: Sequence[str],
    shared: bool = True,
    groups: Mapping[str, Sequence[str]] | None = None,
    shared_id: str = "shared",
) -> dict[str, Any]:
    """Keyword arguments for ``AlgorithmConfig.multi_agent``: ``policies`` and
    ``policy_mapping_fn``. ``shared``: one policy ``shared_id`` for every agent id; else one policy
    per agent id (named after it). ``groups`` (policy id -> agent ids, covering every agent once)
    overrides both, e.g. ``{"experts": ["agent_0"], "novices": ["agent_1", "agent_2"]}``.
    """
    agents = list(agents)
    if groups is not None:
        table = {a: pid for pid, members in groups.items() for a in members}
        counts = [a for pid, members in groups.items() for a in members]
        if sorted(counts) != sorted(agents):
            raise ConfigError(
                f"groups must name every agent exactly once; agents {agents}, groups {dict(groups)}"
            )
    elif shared:
        table = {a: shared_id for a in agents}
    else:
        table = {a: a for a in agents}
    return {"policies": set(table.values()), "policy_mapping_fn": PolicyMapping(table)}


def model_config(
    observation_space: gym.Space,
    *,
    lstm: bool = True,
    cell_size: int = 128,
    max_seq_len: int = 20,
    channels: Sequence[int] = (32, 64),
    **overrides: Any,
) -> dict[str, Any]:
    """An RLlib ``DefaultModelConfig`` dict for one agent's (float) observation space: image
    boxes ``(h, w, c)`` get :func:`conv_filters`, others (flattened Dicts) an MLP; ``lstm`` adds
    an LSTM core (RLlib's recurrent encoder with the CNN or MLP as its tokenizer). ``overrides``
    set any other field."""
    cfg: dict[str, Any] = {"fcnet_hiddens": [128], "head_fcnet_hiddens": [64]}
    if isinstance(observation_space, gym.spaces.Box) and len(observation_space.shape) == 3:
        cfg["conv_filters"] = conv_filters(min(observation_space.shape[:2]), channels)
    if lstm:
        cfg.update(use_lstm=True, lstm_cell_size=cell_size, max_seq_len=max_seq_len)
    cfg.update(overrides)
    return cfg


def ppo_config(
    env_id: str,
    *,
    shared: bool = True,
    groups: Mapping[str, Sequence[str]] | None = None,
    settings: Mapping[str, Any] | None = None,
    lstm: bool = True,
    cell_size: int = 128,
    max_seq_len: int = 20,
    num_env_runners: int = 0,
    num_envs_per_env_runner: int = 1,
    train_batch_size: int = 4000,
    minibatch_size: int = 500,
    num_epochs: int = 4,
    lr: float = 3e-4,
    gamma: float = 0.99,
    seed: int | None = None,
    **training: Any,
) -> Any:
    """A ``PPOConfig`` (RLlib's new API stack, torch) for a marlgrid id: the registered env,
    :func:`policy_spec` policies, :func:`model_config` modules (one config for all policies; the
    agents' observation spaces must agree), Dict observations flattened. ``training`` passes
    other ``PPOConfig.training`` arguments. Call ``.build_algo()`` on the result.
    """
    from ray.rllib.algorithms.ppo import PPOConfig
    from ray.rllib.core.rl_module.default_model_config import DefaultModelConfig

    register_envs([env_id])
    probe = MarlGridMultiAgentEnv({"id": env_id, "settings": dict(settings or {})})
    agents = probe.possible_agents
    space = probe.observation_spaces[agents[0]]
    probe.close()
    env_config: dict[str, Any] = {"settings": dict(settings or {})}
    if seed is not None:
        env_config["seed"] = seed
    config = (
        PPOConfig()
        .environment(env_id, env_config=env_config)
        .framework("torch")
        .env_runners(
            num_env_runners=num_env_runners,
            num_envs_per_env_runner=num_envs_per_env_runner,
        )
        .multi_agent(**policy_spec(agents, shared=shared, groups=groups))
        .rl_module(
            model_config=DefaultModelConfig(
                **model_config(space, lstm=lstm, cell_size=cell_size, max_seq_len=max_seq_len)
            )
        )
        .training(
            train_batch_size_per_learner=train_batch_size,
            minibatch_size=minibatch_size,
            num_epochs=num_epochs,
            lr=lr,
            gamma=gamma,
            **training,
        )
    )
    if isinstance(space, gym.spaces.Dict):
        from ray.rllib.connectors.env_to_module import FlattenObservations

        config.env_runners(
            env_to_module_connector=lambda env, spaces=None, device=None: FlattenObservations(
                multi_agent=True
            )
        )
    if seed is not None:
        config.debugging(seed=seed)
    return config


register_envs()
