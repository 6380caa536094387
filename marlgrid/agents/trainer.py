"""Training runs: a config in, a trained run directory out (metrics, checkpoints, a video).

The configuration is plain dataclasses (:class:`TrainConfig`); ``experiments/train.py`` composes
it with Hydra, which never enters the core package. A run directory holds ``metrics.csv``,
``tensorboard/`` events, ``checkpoints/`` and ``videos/``; running the same command again resumes
from the newest checkpoint.
"""

from __future__ import annotations

import dataclasses
import math
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import torch

import marlgrid
from marlgrid.agents.checkpoint import list_checkpoints, load_checkpoint, save_checkpoint
from marlgrid.agents.logger import Logger
from marlgrid.agents.ppo import PPO, PPOConfig
from marlgrid.agents.rollout import MultiAgentRollout, PolicyGroup, slot_obs
from marlgrid.config import ConfigError
from marlgrid.policies import POLICIES, make_policy

ROLE_KINDS = ("learner", "frozen", "scripted")


@dataclass
class EnvConfig:
    """Which environment to train in."""

    id: str = "MarlGrid-GoalCycle-7x7-v0"  # registered marlgrid id
    num_envs: int = 16  # envs stepped together by the batched API
    settings: dict[str, Any] = field(default_factory=dict)  # overrides of the registered settings


@dataclass
class RoleConfig:
    """What drives one agent id."""

    kind: str = "learner"  # learner (trained), frozen (a checkpoint, not trained) or scripted
    learner: str = "main"  # learner name; agent ids with the same name share one network
    checkpoint: str | None = None  # frozen: checkpoint file to load the learner from
    policy: str = "oracle"  # scripted: random, oracle or discoverer
    deterministic: bool = False  # frozen: act greedily instead of sampling


@dataclass
class LoggerConfig:
    """Where metrics go."""

    csv: bool = True  # metrics.csv in the run directory
    tensorboard: bool = True  # TensorBoard events in run_dir/tensorboard
    print_every: int = 0  # print a line every N updates (0: never)
    progress: bool = True  # tqdm progress bar with steps/s and recent return


@dataclass
class TrainConfig:
    """A whole training run."""

    env: EnvConfig = field(default_factory=EnvConfig)
    agent: PPOConfig = field(default_factory=PPOConfig)
    roles: dict[str, RoleConfig] = field(default_factory=dict)  # agent id -> role (default learner)
    logger: LoggerConfig = field(default_factory=LoggerConfig)
    name: str = "default"  # run name (part of the run directory)
    seed: int = 0  # seeds networks, sampling and environments
    total_timesteps: int = 200_000  # env steps summed over the batch (each is one step per agent)
    checkpoint_every: int = (
        10  # updates between checkpoints (also written at the end and on Ctrl-C)
    )
    keep_checkpoints: int = 3  # newest checkpoints kept
    video: bool = True  # record a greedy episode at the end (needs the video extra)
    video_every: int = 0  # also record every N updates (0: only at the end)
    resume: bool = True  # continue from the newest checkpoint in the run directory if any
    torch_threads: int = 1  # torch CPU threads


def resolve_roles(cfg: TrainConfig, agents: list[str]) -> dict[str, RoleConfig]:
    """A role for every agent id (``learner main`` where none is given); bad roles raise."""
    unknown = sorted(set(cfg.roles) - set(agents))
    if unknown:
        raise ConfigError(f"roles name unknown agent ids {unknown}; the env's agents are {agents}")
    roles = {}
    for agent in agents:
        role = cfg.roles.get(agent, RoleConfig())
        if isinstance(role, dict):
            role = RoleConfig(**role)
        if role.kind not in ROLE_KINDS:
            raise ConfigError(
                f"role kind of {agent} must be one of {ROLE_KINDS}, got {role.kind!r}"
            )
        if role.kind == "scripted" and role.policy not in POLICIES:
            raise ConfigError(f"policy of {agent} must be one of {POLICIES}, got {role.policy!r}")
        if role.kind == "frozen" and not role.checkpoint:
            raise ConfigError(f"frozen role of {agent} needs a checkpoint path")
        roles[agent] = role
    if not any(r.kind == "learner" for r in roles.values()):
        raise ConfigError("no agent has the role 'learner': nothing would be trained")
    return roles


def identity(cfg: TrainConfig) -> dict[str, Any]:
    """The settings a checkpoint must share with the run that resumes it."""
    agent = dataclasses.asdict(cfg.agent)
    for key in ("total_timesteps", "seed", "device"):
        agent.pop(key, None)
    return {
        "env": {"id": cfg.env.id, "num_envs": cfg.env.num_envs, "settings": dict(cfg.env.settings)},
        "agent": agent,
        "roles": {k: dataclasses.asdict(_role(v)) for k, v in sorted(cfg.roles.items())},
    }


def _role(role: RoleConfig | dict) -> RoleConfig:
    return RoleConfig(**role) if isinstance(role, dict) else role


def _learner_config(cfg: TrainConfig, index: int) -> PPOConfig:
    return dataclasses.replace(
        cfg.agent, total_timesteps=cfg.total_timesteps, seed=cfg.seed * 1000 + index
    )


def build_groups(
    cfg: TrainConfig, vec: Any, roles: dict[str, RoleConfig]
) -> tuple[list[PolicyGroup], dict[str, Any]]:
    """Learner groups (one network per learner name), frozen groups and scripted policies."""
    by_name: dict[tuple[str, str], list[str]] = {}
    scripted: dict[str, Any] = {}
    for agent, role in roles.items():
        if role.kind == "scripted":
            scripted[agent] = make_policy(role.policy, seed=cfg.seed)
        else:
            key = (role.kind, role.learner if role.kind == "learner" else agent)
            by_name.setdefault(key, []).append(agent)
    groups = []
    for index, ((kind, name), agents) in enumerate(sorted(by_name.items())):
        spaces = {str(vec.single_observation_space(a)) for a in agents}
        if len(spaces) > 1:
            raise ConfigError(
                f"agents {agents} share learner {name!r} but see different observations; give "
                "them separate learner names"
            )
        obs_space = vec.single_observation_space(agents[0])
        act_space = vec.single_action_space(agents[0])
        learner = PPO(obs_space, act_space, _learner_config(cfg, index))
        group = PolicyGroup(name, learner, agents, train=kind == "learner")
        if kind == "frozen":
            role = roles[agents[0]]
            payload = load_checkpoint(Path(role.checkpoint))
            learners = payload["learners"]
            source = role.learner if role.learner in learners else next(iter(learners))
            learner.load_state_dict(learners[source])
            group.deterministic = role.deterministic
        else:
            group.buffer = learner.new_buffer(vec.num_envs * len(agents))
        groups.append(group)
    return groups, scripted


def record_video(
    cfg: TrainConfig, groups: list[PolicyGroup], scripted: dict[str, Any], path: Path, seed: int
) -> Path | None:
    """Play one greedy episode (learners act on their most likely action) and write a video."""
    from marlgrid.policies import act as scripted_act
    from marlgrid.video import VideoFile

    env = marlgrid.make(cfg.env.id, render_mode="rgb_array", **cfg.env.settings)
    obs, _ = env.reset(seed=seed)
    spaces = {a: env.observation_space(a) for a in env.possible_agents}
    players = [
        PolicyGroup(g.name, g.learner, g.agents, train=False, deterministic=True) for g in groups
    ]
    for p in players:
        p.begin(_batched(obs, spaces), 1)
    with VideoFile(path, fps=env.metadata["render_fps"]) as video:
        video.add_frame(env.render())
        while env.agents:
            actions: dict[str, int] = {}
            for p in players:
                for agent, a in zip(p.agents, p.act()[0], strict=True):
                    actions[agent] = int(a)
            for agent, policy in scripted.items():
                actions[agent] = scripted_act(policy, env, agent)
            obs, rewards, terms, truncs, _ = env.step({a: actions[a] for a in env.agents})
            video.add_frame(env.render())
            flags = {a: (terms.get(a, False), truncs.get(a, False)) for a in env.possible_agents}
            for p in players:
                p.starts = torch.as_tensor(
                    [any(flags[a]) for a in p.agents], device=p.learner.device
                )
                p.obs = _to_slots(p, obs, spaces)
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


def _to_slots(group: PolicyGroup, obs: dict[str, Any], spaces: dict[str, Any]) -> Any:
    from marlgrid.agents.ppo import obs_to_tensor

    return obs_to_tensor(slot_obs(_batched(obs, spaces), group.agents), group.learner.device)


def train(cfg: TrainConfig, run_dir: str | Path) -> dict[str, float]:
    """Train as ``cfg`` says in ``run_dir`` (resuming there if possible); returns final metrics."""
    run_dir = Path(run_dir)
    torch.set_num_threads(cfg.torch_threads)
    vec = marlgrid.make_vec(cfg.env.id, cfg.env.num_envs, **cfg.env.settings)
    roles = resolve_roles(cfg, vec.possible_agents)
    groups, scripted = build_groups(cfg, vec, roles)
    learners = {g.name: g for g in groups if g.train}
    steps_per_update = cfg.agent.num_steps * cfg.env.num_envs
    num_updates = max(1, math.ceil(cfg.total_timesteps / steps_per_update))
    ckpt_dir = run_dir / "checkpoints"
    update, global_step = 0, 0
    existing = list_checkpoints(ckpt_dir)
    if cfg.resume and existing:
        payload = load_checkpoint(existing[-1], identity(cfg))
        for name, state in payload["learners"].items():
            learners[name].learner.load_state_dict(state)
        update, global_step = int(payload["update"]), int(payload["global_step"])
        torch.set_rng_state(payload["torch_rng"])
        print(f"resumed from {existing[-1]} at update {update} (step {global_step})", flush=True)
    elif existing:
        for old in existing:
            old.unlink()
    logger = Logger(
        run_dir,
        cfg.logger.csv,
        cfg.logger.tensorboard,
        cfg.logger.print_every,
        resume_step=global_step,  # drops rows logged past the checkpoint (all of them at 0)
    )
    # Episodes after a resume start fresh, seeded by the update they start at.
    rollout = MultiAgentRollout(vec, groups, scripted, seed=cfg.seed * 100_003 + update)
    learner_agents = [vec.possible_agents.index(a) for g in learners.values() for a in g.agents]

    def checkpoint() -> Path:
        payload = {
            "identity": identity(cfg),
            "learners": {name: g.learner.state_dict() for name, g in learners.items()},
            "update": update,
            "global_step": global_step,
            "torch_rng": torch.get_rng_state(),
        }
        return save_checkpoint(ckpt_dir, update, payload, keep=cfg.keep_checkpoints)

    bar = _progress(cfg, num_updates, update)
    metrics: dict[str, float] = {}
    recent: list[float] = []
    t_start, steps_start = time.perf_counter(), global_step
    updating = False  # learners are past `update` while True: no interrupt checkpoint then
    try:
        while update < num_updates:
            t0 = time.perf_counter()
            rollout.collect(cfg.agent.num_steps)
            t1 = time.perf_counter()
            metrics = {}
            updating = True
            for name, g in learners.items():
                out = g.learner.update(g.buffer, progress=update / num_updates)
                prefix = "" if len(learners) == 1 else f"{name}/"
                metrics.update({f"{prefix}{k}": v for k, v in out.items()})
            update += 1
            global_step += steps_per_update
            updating = False
            returns = rollout.pop_returns()
            if len(returns):
                recent = returns[:, learner_agents].mean(axis=1).tolist()
                metrics["charts/episodic_return"] = float(np.mean(recent))
                for k, agent in enumerate(vec.possible_agents):
                    metrics[f"charts/return_{agent}"] = float(returns[:, k].mean())
                metrics["charts/episodes"] = float(len(returns))
            elapsed = time.perf_counter() - t_start
            metrics["charts/SPS"] = (global_step - steps_start) / max(elapsed, 1e-9)
            metrics["charts/rollout_time"] = t1 - t0
            metrics["charts/update_time"] = time.perf_counter() - t1
            metrics["charts/update"] = float(update)
            logger.log(metrics, global_step)
            if bar is not None:
                bar.update(1)
                shown = {"sps": f"{metrics['charts/SPS']:.0f}"}
                if recent:
                    shown["return"] = f"{np.mean(recent):.2f}"
                bar.set_postfix(shown)
            if update % cfg.checkpoint_every == 0 or update == num_updates:
                checkpoint()
            if cfg.video and cfg.video_every and update % cfg.video_every == 0:
                _video(cfg, groups, scripted, run_dir / "videos" / f"update_{update:06d}.mp4")
    except KeyboardInterrupt:
        if updating:  # the learners are part-way into the next update: keep the last checkpoint
            print(f"\ninterrupted in update {update + 1}; the newest checkpoint stays", flush=True)
        else:
            print(f"\ninterrupted: checkpoint written to {checkpoint()}", flush=True)
        raise
    finally:
        if bar is not None:
            bar.close()
        logger.close()
    if cfg.video:
        _video(cfg, groups, scripted, run_dir / "videos" / "final.mp4")
    return metrics


def _video(cfg: TrainConfig, groups, scripted, path: Path) -> None:
    try:
        written = record_video(cfg, groups, scripted, path, seed=cfg.seed)
        print(f"video: {written}", flush=True)
    except ImportError as exc:  # the video extra is missing
        print(f"no video written ({exc}); pip install 'marlgrid[video]'", flush=True)


def _progress(cfg: TrainConfig, total: int, initial: int):
    if not cfg.logger.progress:
        return None
    try:
        from tqdm import tqdm
    except ImportError:
        return None
    return tqdm(total=total, initial=initial, unit="update", desc=f"train {cfg.name}")
