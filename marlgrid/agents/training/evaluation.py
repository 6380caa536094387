"""Greedy evaluation on fresh envs and episode videos of trained groups."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

import marlgrid
from marlgrid.agents.training.env_sources import is_marlgrid_id, make_env_source
from marlgrid.agents.training.rollout import MultiAgentRollout, PolicyGroup
from marlgrid.agents.training.view import TrainerView
from marlgrid.config import ConfigError

#: what only evaluation (``eval_every``) logs starts with this
EVAL_PREFIX = "eval/"
#: evaluation's mean return over the trained agents (``<EVAL_RETURN>_<agent>``: each agent's)
EVAL_RETURN = f"{EVAL_PREFIX}return"


def acting_copies(groups: list[PolicyGroup], explore: bool | None = False) -> list[PolicyGroup]:
    """Groups that act with the same learners but never record (greedy unless ``explore``;
    ``explore=None`` keeps each group's own setting)."""
    return [
        PolicyGroup(
            g.name,
            g.learner,
            g.agents,
            train=False,
            explore=g.explore if explore is None else explore,
        )
        for g in groups
    ]


def evaluate_groups(
    env_id: str,
    settings: dict[str, Any],
    groups: list[PolicyGroup],
    scripted: dict[str, Any],
    episodes: int,
    seed: int,
    num_envs: int = 16,
    explore: bool | None = False,
) -> np.ndarray:
    """Returns ``(episodes, K)`` of ``episodes`` episodes on fresh envs seeded from ``seed``
    (greedy unless ``explore``; ``None`` keeps each group's own setting)."""
    vec = make_env_source(env_id, min(num_envs, episodes), settings)  # any env source
    rollout = MultiAgentRollout(vec, acting_copies(groups, explore), scripted, seed=seed)
    returns = np.zeros((0, vec.num_agents))
    while len(returns) < episodes:
        rollout.collect(16)
        returns = np.concatenate([returns, rollout.pop_returns()])
    return returns[:episodes]


def training_settings(trainer: TrainerView) -> dict[str, Any]:
    """The env settings the trainer's batch plays now: the config's, with the rules a
    curriculum has set (so evaluation and videos see the stage training is at)."""
    return {**trainer.cfg.env.settings, **trainer.rules}


def evaluate(trainer: TrainerView, episodes: int, seed: int) -> dict[str, float]:
    """``eval/return`` (mean over the trained agents) and ``eval/return_<agent>``, greedy, under
    the rules training is at."""
    cfg = trainer.cfg
    returns = evaluate_groups(
        cfg.env.id, training_settings(trainer), trainer.groups, trainer.scripted, episodes, seed
    )
    agents = trainer.vec.possible_agents
    means = [returns[:, trainer.learner_columns].mean(), *returns.mean(0)]
    return {k: float(v) for k, v in zip(eval_metric_names(agents), means, strict=True)}


def eval_metric_names(agents: Sequence[str]) -> list[str]:
    """What :func:`evaluate` logs for an env of ``agents``: ``eval/return``, then
    ``eval/return_<agent>`` for each agent."""
    return [EVAL_RETURN, *(f"{EVAL_RETURN}_{a}" for a in agents)]


class GroupPolicy:
    """Policy groups acting in one PettingZoo env (a batch of one), for episode runners."""

    def __init__(self, groups: list[PolicyGroup], env: Any) -> None:
        self.groups = acting_copies(groups)
        self.spaces = {a: env.observation_space(a) for a in env.possible_agents}

    def reset(self, obs: dict[str, Any]) -> None:
        for g in self.groups:
            g.begin(_batched(obs, self.spaces), 1)

    def actions(self, obs: dict[str, Any], ended: dict[str, bool]) -> dict[str, int]:
        """Actions of every grouped agent (``ended[a]``: agent ``a``'s last step ended it)."""
        out: dict[str, int] = {}
        for g in self.groups:
            if ended:
                g.restart(_batched(obs, self.spaces), [ended.get(a, False) for a in g.agents])
            out.update({a: int(x) for a, x in zip(g.agents, g.act()[0], strict=True)})
        return out


def record_video(trainer: TrainerView, path: Path, seed: int) -> Path | None:
    """Play one greedy episode of the trainer's groups and scripted policies under the rules
    training is at; write a video."""
    return record_groups_video(
        trainer.cfg.env.id, training_settings(trainer), trainer.groups, trainer.scripted, path,
        seed,
    )  # fmt: skip


def record_groups_video(
    env_id: str,
    settings: dict[str, Any],
    groups: list[PolicyGroup],
    scripted: dict[str, Any],
    path: Path,
    seed: int,
) -> Path:
    """Play one greedy episode of ``groups`` and ``scripted`` policies in a fresh ``env_id``
    env seeded with ``seed``; write it as a video to ``path``."""
    from marlgrid.policies import act as scripted_act
    from marlgrid.viewing.video import VideoFile

    if not is_marlgrid_id(env_id):
        raise ConfigError(f"videos need a marlgrid env; {env_id!r} has no renderer")
    env = marlgrid.make(env_id, render_mode="rgb_array", **settings)
    obs, _ = env.reset(seed=seed)
    players = GroupPolicy(groups, env)
    players.reset(obs)
    ended: dict[str, bool] = {}
    with VideoFile(path, fps=env.metadata["render_fps"]) as video:
        video.add_frame(env.render())
        while env.agents:
            actions = players.actions(obs, ended)
            for agent, policy in scripted.items():
                actions[agent] = scripted_act(policy, env, agent)
            obs, _, terms, truncs, _ = env.step({a: actions[a] for a in env.agents})
            video.add_frame(env.render())
            ended = {a: terms.get(a, False) or truncs.get(a, False) for a in env.possible_agents}
    env.close()
    return path


def _batched(obs: dict[str, Any], spaces: dict[str, Any]) -> dict[str, Any]:
    """Single-env observations as a batch of one; absent (finished) agents as zeros."""

    def one(space: Any, value: Any) -> Any:
        if hasattr(space, "spaces") and isinstance(space.spaces, dict):
            return {k: one(s, None if value is None else value[k]) for k, s in space.spaces.items()}
        if value is None:
            shape = () if space.shape is None else space.shape
            return np.zeros((1, *shape), dtype=space.dtype)
        return np.asarray(value)[None]

    return {a: one(space, obs.get(a)) for a, space in spaces.items()}
