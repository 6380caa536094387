"""POPGym environments as gymnasium batches for marlgrid's learners (no torch).

- :func:`resolve_env_id`: a POPGym env by short name (``RepeatPreviousEasy``) or by the gymnasium
  id popgym registers (``popgym-RepeatPreviousEasy-v0``), case-insensitively.
- :func:`make_env` / :func:`make_vector_env`: one env with POPGym's standard wrappers as options
  (``PreviousAction``, ``Antialias``, ``DiscreteAction``), and a batch of them with same-step
  autoreset, the :class:`~marlgrid.agents.training.rollout.BatchedEnv` form the trainer steps
  (``env.id=popgym:<Name>``, :mod:`marlgrid.agents.training.env_sources`). ``Tuple`` (and
  nested) observations become a flat ``Dict`` (:class:`FlatDictObservation`), the form marlgrid's
  storage and rollouts carry; the encoders one-hot its discrete parts.
- :class:`BinnedBoxAction`: a continuous (``Box``) action as ``K`` evenly spaced values per
  dimension, for learners with categorical heads (``box_action_bins``; POPGym's pendulum tasks).

POPGym's metric, the MMER, is computed from a run's ``metrics.csv`` by
:mod:`marlgrid.analysis.mmer`; ``experiments/examples/popgym_sweep.py`` trains and scores sweeps.

popgym is imported only when an env is made (``pip install 'marlgrid[popgym]'``).

Memory Gym's grid tasks (``MortarMayhem-Grid-v0``, ``MysteryPath-Grid-v0``) run through the same
functions: :func:`resolve_env_id` and :func:`make_env` accept their ids
(:mod:`marlgrid.tasks.memory_gym_env`; memory-gym is imported only then). POPGym's wrappers
stay options there and need popgym.
"""

from __future__ import annotations

import functools
import importlib
from collections.abc import Iterable
from typing import Any

import gymnasium as gym
import numpy as np
from gymnasium import spaces

from marlgrid.config import check_int, check_names
from marlgrid.tasks.memory_gym_env import (
    import_memory_gym,
    make_memory_gym_env,
    memory_gym_env_ids,
    resolve_memory_gym_id,
)

__all__ = [
    "BinnedBoxAction",
    "FlatDictObservation",
    "make_env",
    "make_vector_env",
    "popgym_env_ids",
    "resolve_env_id",
]

#: the options of :func:`make_env` that choose POPGym wrappers
WRAPPER_OPTIONS = ("previous_action", "antialias", "discrete_action", "box_action_bins")


def _import_popgym() -> Any:
    try:
        return importlib.import_module("popgym")
    except ImportError as err:
        raise ImportError(
            "POPGym environments need the popgym package: pip install 'marlgrid[popgym]'"
        ) from err


def _popgym_module(name: str) -> Any:
    """``popgym.<name>``, for POPGym's wrappers; a missing popgym raises naming the extra."""
    try:
        return importlib.import_module(f"popgym.{name}")
    except ImportError as err:
        raise ImportError(
            "POPGym's wrappers need the popgym package: pip install 'marlgrid[popgym]' "
            f"(or turn them off: {', '.join(f'{w}=False' for w in WRAPPER_OPTIONS)})"
        ) from err


def _wrapper(name: str) -> Any:
    return getattr(_popgym_module("wrappers"), name)


@functools.cache
def _popgym_env_adapter() -> type[gym.Wrapper]:
    """A wrapper class that makes any env a ``POPGymEnv``, the type POPGym's wrappers accept;
    its hidden state is the unwrapped env's if that is a POPGym env (none otherwise)."""
    base = _popgym_module("core.env").POPGymEnv

    class AsPOPGymEnv(gym.Wrapper, base):  # type: ignore[misc, valid-type]
        def get_state(self) -> Any:
            if isinstance(self.env.unwrapped, base):
                return self.env.unwrapped.get_state()
            raise NotImplementedError(f"{self.env} has no hidden state to report")

    return AsPOPGymEnv


# --------------------------------------------------------------------------------------------------
# Environments
# --------------------------------------------------------------------------------------------------


def popgym_env_ids() -> list[str]:
    """The gymnasium ids popgym registers (``popgym-<Name>-v0``), sorted."""
    _import_popgym()
    return sorted(i for i in gym.registry if i.startswith("popgym-"))


def resolve_env_id(name: str) -> str:
    """The registered id for ``name``: a full id, or the ``<Name>`` part of
    ``popgym-<Name>-v0`` (any case), or a Memory Gym grid task
    (:func:`~marlgrid.tasks.memory_gym_env.resolve_memory_gym_id`; memory-gym must then be
    installed). An unknown name raises, listing the registered names."""
    memory_gym_id = resolve_memory_gym_id(name)
    if memory_gym_id is not None:
        import_memory_gym()  # a missing package fails here, not when the env is made
        return memory_gym_id
    ids = popgym_env_ids()
    wanted = name.strip().lower()
    for env_id in ids:
        if wanted in (env_id.lower(), env_id.lower().removeprefix("popgym-").removesuffix("-v0")):
            return env_id
    names = ", ".join(i.removeprefix("popgym-").removesuffix("-v0") for i in ids)
    raise ValueError(
        f"unknown POPGym env {name!r}; registered: {names}; "
        f"Memory Gym: {', '.join(memory_gym_env_ids())}"
    )


def _flat_leaves(space: spaces.Space, prefix: str = "") -> dict[str, spaces.Space]:
    """Leaf spaces of nested ``Tuple``/``Dict`` spaces, keyed by path (``"0/1"``). Tuple
    indices are zero-padded so sorted keys keep element order."""
    if isinstance(space, spaces.Tuple):
        width = len(str(len(space.spaces) - 1))
        items: Iterable[tuple[str, spaces.Space]] = (
            (f"{i:0{width}d}", s) for i, s in enumerate(space.spaces)
        )
    elif isinstance(space, spaces.Dict):
        items = space.spaces.items()
    else:
        return {prefix: space}
    out: dict[str, spaces.Space] = {}
    for key, sub in items:
        out.update(_flat_leaves(sub, f"{prefix}/{key}" if prefix else key))
    return out


def _flat_obs(space: spaces.Space, obs: Any, prefix: str = "") -> dict[str, Any]:
    """``obs`` of ``space`` keyed like :func:`_flat_leaves`."""
    if isinstance(space, spaces.Tuple):
        width = len(str(len(space.spaces) - 1))
        items: Iterable[tuple[str, spaces.Space, Any]] = (
            (f"{i:0{width}d}", s, o) for i, (s, o) in enumerate(zip(space.spaces, obs, strict=True))
        )
    elif isinstance(space, spaces.Dict):
        items = ((k, s, obs[k]) for k, s in space.spaces.items())
    else:
        return {prefix: obs}
    out: dict[str, Any] = {}
    for key, sub, value in items:
        out.update(_flat_obs(sub, value, f"{prefix}/{key}" if prefix else key))
    return out


class FlatDictObservation(gym.ObservationWrapper):
    """``Tuple`` or nested ``Dict`` observations as one flat ``Dict`` of their leaves.

    Tuple element ``i`` gets key ``str(i)`` zero-padded to the widest index, nested keys are
    joined by ``/``; sorted keys keep the original order, so the
    :class:`~marlgrid.agents.networks.encoders.DictEncoder` concatenates features as a
    ``TupleEncoder`` would. Values are unchanged.
    """

    def __init__(self, env: gym.Env) -> None:
        super().__init__(env)
        self.observation_space = spaces.Dict(_flat_leaves(env.observation_space))

    def observation(self, observation: Any) -> dict[str, Any]:
        return _flat_obs(self.env.observation_space, observation)


class BinnedBoxAction(gym.ActionWrapper):
    """A bounded ``Box`` action as ``bins`` evenly spaced values per dimension, ends included:
    ``Discrete(bins)`` for one dimension, ``MultiDiscrete([bins] * n)`` for ``n``. Index ``i``
    of a dimension plays ``low + i * (high - low) / (bins - 1)``.

    The agent then chooses among ``bins`` values instead of any value in the range, a
    restriction of the task to state beside its results."""

    def __init__(self, env: gym.Env, bins: int) -> None:
        super().__init__(env)
        space = env.action_space
        if not isinstance(space, spaces.Box):
            raise TypeError(f"BinnedBoxAction needs a Box action space, got {space}")
        if not (np.all(np.isfinite(space.low)) and np.all(np.isfinite(space.high))):
            raise ValueError(f"BinnedBoxAction needs a bounded Box action space, got {space}")
        self.bins = check_int("box_action_bins", bins, low=2)
        low, high = space.low.reshape(-1), space.high.reshape(-1)
        self._values = low[:, None] + (high - low)[:, None] * np.linspace(0.0, 1.0, self.bins)
        self._shape, self._dtype = space.shape, space.dtype
        n = low.size
        self.action_space = (
            spaces.Discrete(self.bins) if n == 1 else spaces.MultiDiscrete([self.bins] * n)
        )

    def action(self, action: Any) -> np.ndarray:
        index = np.asarray(action, dtype=np.int64).reshape(-1)
        values = self._values[np.arange(index.size), index]
        return values.reshape(self._shape).astype(self._dtype)


def _needs_flat_dict(space: spaces.Space) -> bool:
    if isinstance(space, spaces.Tuple):
        return True
    return isinstance(space, spaces.Dict) and any(
        isinstance(s, spaces.Tuple | spaces.Dict) for s in space.spaces.values()
    )


def make_env(
    name: str,
    previous_action: bool = True,
    antialias: bool = True,
    discrete_action: bool = False,
    box_action_bins: int | None = None,
) -> gym.Env:
    """One POPGym or Memory Gym env (:func:`resolve_env_id` names), wrapped as POPGym's
    baselines are.

    ``box_action_bins``: a continuous (``Box``) action becomes that many values per dimension
    (:class:`BinnedBoxAction`), applied before the other wrappers; envs with discrete actions
    ignore it, and an env with continuous actions needs it (the learners' heads are
    categorical). ``discrete_action``: ``DiscreteAction`` first (a ``MultiDiscrete`` action
    becomes one ``Discrete``, for learners without MultiDiscrete heads); then
    ``PreviousAction`` (the last action joins the observation; a null action at reset); then
    ``Antialias`` (an is-first-step flag joins it). POPGym's baselines use
    ``Antialias(PreviousAction(env))``, the default here.
    ``Tuple`` observations then become a flat ``Dict`` (:class:`FlatDictObservation`).
    """
    env_id = resolve_env_id(name)
    env: gym.Env
    if resolve_memory_gym_id(env_id) is not None:
        env = make_memory_gym_env(env_id)
        if discrete_action or previous_action or antialias:
            env = _popgym_env_adapter()(env)  # POPGym's wrappers take POPGym envs only
    else:
        env = gym.make(env_id, disable_env_checker=True)
    if isinstance(env.action_space, spaces.Box):
        if box_action_bins is None:
            raise ValueError(
                f"{env_id} has continuous actions {env.action_space}; the learners choose among "
                "discrete actions: set box_action_bins=K (experiments/examples/popgym_sweep.py: "
                "--box-action-bins K, K >= 2) to offer K evenly spaced values per dimension"
            )
        env = _popgym_env_adapter()(BinnedBoxAction(env, box_action_bins))
    if discrete_action:
        env = _wrapper("DiscreteAction")(env)
    if previous_action:
        env = _wrapper("PreviousAction")(env)
    if antialias:
        env = _wrapper("Antialias")(env)
    if _needs_flat_dict(env.observation_space):
        env = FlatDictObservation(env)
    return env


def make_vector_env(name: str, num_envs: int, **wrappers: Any) -> gym.vector.SyncVectorEnv:
    """``num_envs`` copies of :func:`make_env` (``wrappers`` are its options) in one
    gymnasium ``SyncVectorEnv`` with same-step autoreset (the
    :class:`~marlgrid.agents.training.rollout.BatchedEnv` form)."""
    check_int("num_envs", num_envs, low=1)
    check_names("wrappers", tuple(wrappers), WRAPPER_OPTIONS)
    make_env(name, **wrappers).close()  # a bad name or option fails here, not in a worker
    return gym.vector.SyncVectorEnv(
        [lambda: make_env(name, **wrappers) for _ in range(num_envs)],
        autoreset_mode=gym.vector.AutoresetMode.SAME_STEP,
    )
