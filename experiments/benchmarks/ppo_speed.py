"""Recurrent PPO speed benchmark: marlgrid's learner against sb3-contrib RecurrentPPO and SB3 PPO.

Every learner trains with the same settings (number of envs, steps per update, epochs,
minibatches, hidden size, one torch thread) on CartPole-v1 and on a marlgrid env, in this
process. Per env, every line is built and warmed up (untimed updates), then the lines are timed
in turns, ``--repeats`` segments of whole updates (rollout + update) each, so a change of load on
the machine hits all of them; the best segment of each line is reported. The rate is environment
steps per CPU-second of this process (``time.process_time``), with wall-clock beside it; the
rollout/update split and, for our learner, the time spent refreshing hidden states are reported
too, and, per recurrent line, the time of one refresh against one bare inference pass of the network
over the same rollout (issue 12's target: at most 1.3x). See README.md beside this file ("Recurrent
PPO speed").

    python experiments/benchmarks/ppo_speed.py --json experiments/results/ppo_speed.json
    python experiments/benchmarks/ppo_speed.py --only ours_lstm ppo --envs cartpole
    python experiments/benchmarks/ppo_speed.py --envs canonical --presets ppo_lstm ppo_lstm_fast

``--envs canonical`` is the train loop on the canonical 3-agent task: agent presets of
``conf/agent/`` (``--presets``; today's default ``ppo_lstm`` first, ratios are against it) composed
with ``env=goal_cycle_13x13_3agents`` exactly as ``experiments/train.py`` composes them, driven
by the rollout loop with the trainer's roles (one learner for the three agents), timed in turns
like the other lines. Its rate is agent-steps (env steps x 3) per wall-clock second of the whole
loop, rollout + update, with CPU-seconds beside it and a breakdown of each update: env stepping,
acting forward, recording (buffer writes and bootstrap values), social metrics, the rest of the
rollout, refreshes, optimizer steps and the rest of the update (minibatch forward and backward).

Lines (``--only``): ``ours_lstm``, ``ours_lstm_norefresh``, ``ours_gru``, ``ours_gru_norefresh``
(marlgrid.agents.algorithms.ppo.PPO driven by the rollout loop,
marlgrid.agents.training.rollout.MultiAgentRollout;
"norefresh" sets ``refresh_interval=0``), ``rppo`` (sb3-contrib
``RecurrentPPO``, MlpLstmPolicy with its default separate critic LSTM), ``rppo_shared`` (one LSTM
shared by actor and critic, like ours) and ``ppo`` (SB3 ``PPO``, MlpPolicy, no memory).
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import sys
import time
import warnings
from dataclasses import asdict, dataclass, field
from importlib import metadata
from typing import Any

import numpy as np

OURS = ("ours_lstm", "ours_lstm_norefresh", "ours_gru", "ours_gru_norefresh")
PEERS = ("rppo", "rppo_shared", "ppo")
LINES = OURS + PEERS
ENVS = ("cartpole", "marlgrid", "canonical")
PEER_ENVS = ENVS[:2]  # the envs of the learner-against-peers lines
MARLGRID_ID = "MarlGrid-GoalCycle-7x7-v0"  # 1 agent, 5x5 symbolic view, 60-step episodes
FEATURES_DIM = 128  # marlgrid: width of the observation features fed to the memory / MLP
TARGET_VS_RPPO = 10.0  # ours >= 10x RecurrentPPO
TARGET_VS_PPO = 0.5  # ours >= 0.5x PPO
TARGET_REFRESH = 0.25  # refreshing every 2 minibatches adds <= 25% to update time
TARGET_REFRESH_VS_PASS = 1.3  # one refresh <= 1.3x one bare inference pass over the rollout
CANONICAL_ENV = "goal_cycle_13x13_3agents"  # conf/env: MarlGrid-GoalCycle-13x13-3Agents-v0, 8 envs
CANONICAL_PRESETS = ("ppo_lstm", "ppo_lstm_fast")  # conf/agent; the first is the reference
TARGET_CANONICAL = 4000.0  # agent-steps per second (wall) of the whole train loop, 2 cores
#: the phases of one update of the train loop, in report order
PHASES = ("env", "act", "record", "social", "rollout_rest", "refresh", "optimizer", "update_rest")


@dataclass
class Settings:
    """What every learner shares."""

    num_envs: int = 8  # parallel envs (batch slots)
    num_steps: int = 128  # steps per env per update (n_steps)
    epochs: int = 10  # passes over each rollout (n_epochs)
    minibatches: int = 8  # minibatches per epoch (batch_size = num_envs * num_steps / minibatches)
    hidden: int = 64  # LSTM/GRU size; width of the MLP layers
    chunk_len: int = 8  # ours: BPTT chunk length (RecurrentPPO uses whole episode segments)
    seed: int = 0

    @property
    def batch_size(self) -> int:
        return self.num_envs * self.num_steps // self.minibatches


@dataclass
class Clock:
    """CPU (this process) and wall seconds."""

    cpu: float = 0.0
    wall: float = 0.0

    @staticmethod
    def now() -> Clock:
        return Clock(time.process_time(), time.perf_counter())

    def since(self, start: Clock) -> Clock:
        return Clock(self.cpu - start.cpu, self.wall - start.wall)

    def add(self, other: Clock) -> None:
        self.cpu += other.cpu
        self.wall += other.wall


@dataclass
class Result:
    """One line on one env: the best of its timed repeats (by CPU rate), all repeats kept."""

    env: str
    line: str
    status: str = "ok"  # ok, SKIPPED or ERROR
    reason: str = ""
    steps: int = 0  # env steps per timed repeat
    cpu_s: float = 0.0
    wall_s: float = 0.0
    rollout_cpu_s: float = 0.0
    update_cpu_s: float = 0.0
    rollout_wall_s: float = 0.0
    update_wall_s: float = 0.0
    refresh_wall_s: float = 0.0  # ours: time in refresh, inside update_wall_s
    refreshes: int = 0
    minibatches: int = 0  # ours: minibatches stepped
    forward_pass_s: float = 0.0  # ours: one no-grad pass over a whole rollout (see Ours.floor)
    refresh_pass_s: float = 0.0  # ours: one refresh of that rollout, timed beside the pass
    setup_s: float = 0.0  # construction + warm-up updates
    params: int = 0
    repeats: list[dict[str, float]] = field(default_factory=list)

    @property
    def sps_cpu(self) -> float:
        return self.steps / self.cpu_s if self.cpu_s else float("nan")

    @property
    def sps_wall(self) -> float:
        return self.steps / self.wall_s if self.wall_s else float("nan")

    @property
    def refresh_share(self) -> float:
        """Refresh time over the rest of the update time (what refreshing adds to an update)."""
        rest = self.update_wall_s - self.refresh_wall_s
        return self.refresh_wall_s / rest if self.refreshes and rest > 0 else float("nan")

    @property
    def refresh_floor_share(self) -> float:
        """The least an exact refresh can add: refreshes x one forward pass over the rollout,
        over the rest of the update time."""
        rest = self.update_wall_s - self.refresh_wall_s
        if not (self.refreshes and self.forward_pass_s and rest > 0):
            return float("nan")
        return self.refreshes * self.forward_pass_s / rest

    @property
    def refresh_vs_pass(self) -> float:
        """One refresh over one bare inference pass of the network over the same rollout, both
        timed the same way (best of interleaved repeats, :meth:`Ours.floor`): what an exact
        refresh costs beyond its least work."""
        if not (self.refresh_pass_s and self.forward_pass_s):
            return float("nan")
        return self.refresh_pass_s / self.forward_pass_s

    @property
    def refresh_in_training_vs_pass(self) -> float:
        """The mean refresh time inside the timed updates over the best bare pass (biased high
        on a loaded machine: a mean against a best)."""
        if not (self.refreshes and self.forward_pass_s):
            return float("nan")
        return self.refresh_wall_s / self.refreshes / self.forward_pass_s


# --------------------------------------------------------------------------------------------------
# Environments
# --------------------------------------------------------------------------------------------------


def make_gym_cartpole(s: Settings) -> Any:
    import gymnasium as gym

    return gym.make_vec(
        "CartPole-v1",
        num_envs=s.num_envs,
        vectorization_mode="sync",
        vector_kwargs={"autoreset_mode": gym.vector.AutoresetMode.SAME_STEP},
    )


def make_sb3_env(env: str, s: Settings) -> Any:
    if env == "cartpole":
        from stable_baselines3.common.env_util import make_vec_env

        return make_vec_env("CartPole-v1", n_envs=s.num_envs, seed=s.seed)
    from marlgrid.adapters.sb3 import MarlGridVecEnv

    venv = MarlGridVecEnv(MARLGRID_ID, num_envs=s.num_envs)
    venv.seed(s.seed)
    return venv


# --------------------------------------------------------------------------------------------------
# Learners: each line is built and warmed up once, then timed in segments (repeats interleaved)
# --------------------------------------------------------------------------------------------------


def new_acc() -> dict[str, Any]:
    return {"rollout": Clock(), "update": Clock(), "refresh": 0.0, "refreshes": 0, "minibatches": 0}


class Line:
    """One learner on one env: ``segment(updates)`` runs timed updates into ``res``."""

    res: Result

    def segment(self, updates: int, per_update: int) -> None:
        raise NotImplementedError


class Ours(Line):
    """marlgrid.agents.algorithms.ppo: rollouts by the rollout loop (``MultiAgentRollout`` with one
    ``PolicyGroup``), updates by ``PPO.update``."""

    def __init__(self, env: str, line: str, s: Settings, warmup: int) -> None:
        import marlgrid
        from marlgrid.agents.algorithms.ppo import PPO, PPOConfig
        from marlgrid.agents.networks.models import NetworkConfig
        from marlgrid.agents.training.rollout import (
            MultiAgentRollout,
            PolicyGroup,
            SingleAgentBatch,
        )

        self.res = Result(env, line)
        t0 = Clock.now()
        if env == "cartpole":  # gymnasium's vector env seen as a one-agent VectorEnv
            vec: Any = SingleAgentBatch(make_gym_cartpole(s))
        else:
            vec = marlgrid.make_vec(MARLGRID_ID, s.num_envs)
        if vec.num_agents != 1:
            raise ValueError(f"{env} has {vec.num_agents} agents; the benchmark takes 1")
        agent = vec.possible_agents[0]
        network = NetworkConfig(
            memory="lstm" if "lstm" in line else "gru",
            hidden_size=s.hidden,
            # marlgrid: the SB3 lines' extractor (marlgrid.adapters.sb3.SymbolicGridExtractor):
            # 8-wide embeddings, 2x2 convs of 32 and 64 channels without padding, 128 features
            trunk_sizes=() if env == "cartpole" else (FEATURES_DIM,),
            head_sizes=(s.hidden,),
            conv_channels=(32, 64),
            conv_kernel=2,
            conv_padding=0,
        )
        # SB3's defaults where the two differ (no entropy bonus, no value clipping, constant
        # learning rate, no KL stop), so both do the same work per update
        cfg = PPOConfig(
            network=network,
            num_steps=s.num_steps,
            update_epochs=s.epochs,
            num_minibatches=s.minibatches,
            chunk_len=s.chunk_len,
            refresh_interval=0 if line.endswith("norefresh") else 2,
            lr=3e-4,
            anneal_lr=False,
            ent_coef=0.0,
            clip_vloss=False,
            kl_target=None,
        )
        obs_space, act_space = vec.single_observation_space(agent), vec.single_action_space(agent)
        self.learner = PPO(obs_space, act_space, cfg, seed=s.seed)
        self.res.params = sum(p.numel() for p in self.learner.net.parameters())
        # the learner's own buffer stores states at chunk starts only (PPO.new_buffer)
        self.rollout = MultiAgentRollout(vec, [PolicyGroup("main", self.learner, [agent])], s.seed)
        self.num_steps = s.num_steps
        for _ in range(warmup):
            self.one_update(new_acc())
        self.res.setup_s = Clock.now().since(t0).wall

    def one_update(self, acc: dict[str, Any]) -> None:
        start = Clock.now()
        self.rollout.collect(self.num_steps)  # the learner records each step, closes the buffer
        mid = Clock.now()
        assert self.learner.ready()
        metrics = self.learner.update()
        acc["rollout"].add(mid.since(start))
        acc["update"].add(Clock.now().since(mid))
        acc["refresh"] += metrics["charts/refresh_time"]
        acc["refreshes"] += int(metrics["charts/refreshes"])
        acc["minibatches"] += int(metrics["charts/minibatches"])

    def segment(self, updates: int, per_update: int) -> None:
        acc = new_acc()
        for _ in range(updates):
            self.one_update(acc)
        record(self.res, updates * per_update, acc)

    def floor(self, repeats: int = 20) -> None:
        """Time the least work of an exact refresh: with the current network and no gradients,
        features of every stored observation, memory outputs at every step and values. The
        memory runs as one fused call over the whole rollout with its reset flags ignored and no
        states kept (same arithmetic, fewest calls); the best of ``repeats``."""
        import torch

        net, buf = self.learner.net, self.learner.buffer
        assert buf is not None and buf.full
        torso = net.torso
        T, B = buf.num_steps, buf.num_envs
        no_resets = torch.zeros_like(buf.resets)
        best = best_refresh = float("inf")
        chunk = self.learner.cfg.chunk_len
        with torch.inference_mode():
            for _ in range(repeats):  # the floor and one refresh interleaved, best of each
                t0 = time.perf_counter()
                out, _ = torso.memory(torso.features(buf.obs, T, B), buf.states[0], no_resets)
                net.heads(out, policy=False)
                t1 = time.perf_counter()
                self.learner.refresh(buf, state_stride=chunk)  # idempotent on a fixed buffer
                t2 = time.perf_counter()
                best, best_refresh = min(best, t1 - t0), min(best_refresh, t2 - t1)
        self.res.forward_pass_s = best
        self.res.refresh_pass_s = best_refresh


class SB3(Line):
    """SB3 PPO or sb3-contrib RecurrentPPO, with its two phases timed."""

    def __init__(self, env: str, line: str, s: Settings, warmup: int) -> None:
        import torch
        from stable_baselines3 import PPO

        self.res = Result(env, line)
        if line.startswith("rppo"):
            from sb3_contrib import RecurrentPPO as base
        else:
            base = PPO
        acc = self.acc = new_acc()

        class Timed(base):  # type: ignore[misc, valid-type]
            """Times SB3's two phases: collect_rollouts and train."""

            def collect_rollouts(self, *args: Any, **kwargs: Any) -> bool:
                start = Clock.now()
                out = super().collect_rollouts(*args, **kwargs)
                acc["rollout"].add(Clock.now().since(start))
                return out

            def train(self) -> None:
                start = Clock.now()
                super().train()
                acc["update"].add(Clock.now().since(start))

        t0 = Clock.now()
        venv = make_sb3_env(env, s)
        if env == "cartpole":
            policy_kwargs: dict[str, Any] = {}
        else:
            from marlgrid.adapters.sb3 import symbolic_policy_kwargs

            policy_kwargs = symbolic_policy_kwargs(FEATURES_DIM)
        if line.startswith("rppo"):
            policy = "MlpLstmPolicy"
            policy_kwargs.update(
                lstm_hidden_size=s.hidden, net_arch={"pi": [s.hidden], "vf": [s.hidden]}
            )
            if line == "rppo_shared":  # one LSTM for actor and critic, as ours
                policy_kwargs.update(shared_lstm=True, enable_critic_lstm=False)
        else:
            policy = "MlpPolicy"
            policy_kwargs.update(net_arch={"pi": [s.hidden, s.hidden], "vf": [s.hidden, s.hidden]})
        self.model = Timed(
            policy,
            venv,
            n_steps=s.num_steps,
            batch_size=s.batch_size,
            n_epochs=s.epochs,
            seed=s.seed,
            device="cpu",
            policy_kwargs=policy_kwargs,
            verbose=0,
        )
        torch.set_num_threads(1)  # SB3 sets it from its own argument
        self.res.params = sum(p.numel() for p in self.model.policy.parameters())
        if warmup:
            self.model.learn(warmup * s.num_steps * s.num_envs)
        self.res.setup_s = Clock.now().since(t0).wall

    def segment(self, updates: int, per_update: int) -> None:
        self.acc.update(new_acc())
        self.model.learn(updates * per_update, reset_num_timesteps=False)
        record(self.res, updates * per_update, self.acc)


def record(res: Result, steps: int, acc: dict[str, Any]) -> None:
    """Add a timed segment to ``res``; keep the best one (by CPU rate) in the top-level fields."""
    rollout, update = acc["rollout"], acc["update"]
    cpu, wall = rollout.cpu + update.cpu, rollout.wall + update.wall
    rep = {
        "steps": steps,
        "cpu_s": cpu,
        "wall_s": wall,
        "sps_cpu": steps / cpu,
        "sps_wall": steps / wall,
        "rollout_cpu_s": rollout.cpu,
        "update_cpu_s": update.cpu,
        "rollout_wall_s": rollout.wall,
        "update_wall_s": update.wall,
        "refresh_wall_s": acc["refresh"],
        "refreshes": acc["refreshes"],
        "minibatches": acc.get("minibatches", 0),
    }
    res.repeats.append(rep)
    if res.cpu_s == 0 or rep["sps_cpu"] > res.sps_cpu:
        res.steps, res.cpu_s, res.wall_s = steps, cpu, wall
        res.rollout_cpu_s, res.update_cpu_s = rollout.cpu, update.cpu
        res.rollout_wall_s, res.update_wall_s = rollout.wall, update.wall
        res.refresh_wall_s, res.refreshes = acc["refresh"], acc["refreshes"]
        res.minibatches = acc.get("minibatches", 0)


# --------------------------------------------------------------------------------------------------
# Train loop on the canonical 3-agent task (``--envs canonical``)
# --------------------------------------------------------------------------------------------------


@dataclass
class LoopResult:
    """One agent preset's train loop: the best timed segment (by wall rate), all segments kept."""

    spec: str  # preset name, then any Hydra overrides: "ppo_lstm_fast,torch_threads=2"
    status: str = "ok"
    reason: str = ""
    agent_steps: int = 0  # per timed segment (env steps x agents)
    wall_s: float = 0.0
    cpu_s: float = 0.0
    phases: dict[str, float] = field(default_factory=dict)  # wall seconds, best segment
    updates: int = 0
    refreshes: int = 0
    torch_threads: int = 1
    update_threads: int = 0
    params: int = 0
    setup_s: float = 0.0
    repeats: list[dict[str, Any]] = field(default_factory=list)

    @property
    def sps_wall(self) -> float:
        return self.agent_steps / self.wall_s if self.wall_s else float("nan")

    @property
    def sps_cpu(self) -> float:
        return self.agent_steps / self.cpu_s if self.cpu_s else float("nan")


def compose_train(overrides: list[str]) -> Any:
    """The :class:`TrainConfig` ``experiments/train.py`` would run with these overrides."""
    from hydra import compose, initialize_config_dir
    from omegaconf import OmegaConf

    from experiments.train import CONF_DIR  # importing it registers the config schemas

    with initialize_config_dir(str(CONF_DIR), version_base="1.3"):
        return OmegaConf.to_object(compose("train", overrides=overrides))


class PhaseTimer:
    """Wall seconds spent inside wrapped callables, by phase."""

    def __init__(self) -> None:
        self.seconds = dict.fromkeys(PHASES, 0.0)

    def wrap(self, phase: str, fn: Any) -> Any:
        def timed(*args: Any, **kwargs: Any) -> Any:
            t0 = time.perf_counter()
            try:
                return fn(*args, **kwargs)
            finally:
                self.seconds[phase] += time.perf_counter() - t0

        return timed

    def take(self) -> dict[str, float]:
        out, self.seconds = self.seconds, dict.fromkeys(PHASES, 0.0)
        return out


class TrainLoop:
    """An agent preset training on the canonical task: the env, roles and learner built as the
    trainer builds them, the loop of :meth:`Trainer._iterate
    <marlgrid.agents.training.trainer.Trainer._iterate>` (rollout steps, then the update when
    ready), with the phases of each update timed by wrappers on the env, learner and optimizer."""

    def __init__(self, spec: str, warmup: int) -> None:
        import torch

        import marlgrid
        from marlgrid.agents.training.roles import build_groups, resolve_roles
        from marlgrid.agents.training.rollout import MultiAgentRollout
        from marlgrid.agents.training.social_observer import SocialObserver
        from marlgrid.agents.training.train_config import iteration_steps, learner_configs

        self.res = LoopResult(spec)
        t0 = time.perf_counter()
        preset, *extra = spec.split(",")
        cfg = compose_train([f"env={CANONICAL_ENV}", f"agent={preset}", *extra])
        configs = learner_configs(cfg)
        self.threads = cfg.torch_threads
        torch.set_num_threads(self.threads)
        vec = marlgrid.make_vec(cfg.env.id, cfg.env.num_envs, **cfg.env.settings)
        roles = resolve_roles(cfg.roles, vec.possible_agents, sorted(configs))
        groups, scripted = build_groups(roles, vec, configs, cfg.seed)
        group = next(g for g in groups if g.train)
        self.learner: Any = group.learner
        self.steps = iteration_steps(cfg)
        if self.steps != getattr(self.learner.cfg, "num_steps", None):
            raise ValueError(f"{spec}: iteration_steps must equal agent.num_steps to time updates")
        self.per_update = self.steps * cfg.env.num_envs * len(group.agents)  # agent-steps
        self.res.torch_threads = self.threads
        self.res.update_threads = int(getattr(self.learner.cfg, "update_threads", 0) or 0)
        self.res.params = sum(p.numel() for p in self.learner.net.parameters())
        social = SocialObserver.for_roles(vec, groups, scripted)  # as the trainer attaches it
        observers = [social] if social is not None else []
        self.rollout = MultiAgentRollout(vec, groups, scripted, seed=cfg.seed, observers=observers)
        self.timer = timer = PhaseTimer()
        vec.step = timer.wrap("env", vec.step)
        learner = self.learner
        learner.act = timer.wrap("act", learner.act)
        learner.record = timer.wrap("record", learner.record)
        learner.refresh = timer.wrap("refresh", learner.refresh)
        learner.optimizer.step = timer.wrap("optimizer", learner.optimizer.step)
        if social is not None:
            social.before_step = timer.wrap("social", social.before_step)
            social.after_step = timer.wrap("social", social.after_step)
        for _ in range(warmup):
            self.one_update()
        self.timer.take()
        self.res.setup_s = time.perf_counter() - t0

    def one_update(self) -> tuple[Clock, Clock, int]:
        """Rollout and update; returns their clocks and the refreshes done."""
        start = Clock.now()
        self.rollout.collect(self.steps)
        mid = Clock.now()
        assert self.learner.ready()
        metrics = self.learner.update(0.5)
        return mid.since(start), Clock.now().since(mid), int(metrics.get("charts/refreshes", 0))

    def segment(self, updates: int) -> None:
        import torch

        torch.set_num_threads(self.threads)  # the lines run in turns in one process
        rollout, update, refreshes = Clock(), Clock(), 0
        for _ in range(updates):
            r, u, n = self.one_update()
            rollout.add(r)
            update.add(u)
            refreshes += n
        sec = self.timer.take()
        sec["rollout_rest"] = rollout.wall - sec["env"] - sec["act"] - sec["record"] - sec["social"]
        sec["update_rest"] = update.wall - sec["refresh"] - sec["optimizer"]
        res, steps = self.res, self.per_update * updates
        rep = {
            "agent_steps": steps,
            "wall_s": rollout.wall + update.wall,
            "cpu_s": rollout.cpu + update.cpu,
            "rollout_wall_s": rollout.wall,
            "update_wall_s": update.wall,
            "refreshes": refreshes,
            "phases_s": sec,
        }
        rep["sps_wall"], rep["sps_cpu"] = steps / rep["wall_s"], steps / rep["cpu_s"]
        res.repeats.append(rep)
        if not res.wall_s or rep["sps_wall"] > res.sps_wall:
            res.agent_steps, res.wall_s, res.cpu_s, res.phases = (
                steps,
                rep["wall_s"],
                rep["cpu_s"],
                sec,
            )
            res.updates, res.refreshes = updates, refreshes


def run_canonical(specs: list[str], updates: int, repeats: int, warmup: int) -> list[LoopResult]:
    """Build and warm up every preset's loop, then time them in turns."""
    loops: list[TrainLoop] = []
    results: list[LoopResult] = []
    for spec in specs:
        print(f"  canonical/{spec}: setup and {warmup} warm-up update(s)", flush=True)
        try:
            loops.append(TrainLoop(spec, warmup))
        except Exception as exc:  # noqa: BLE001 - report and go on with the other presets
            results.append(LoopResult(spec, "ERROR", f"{type(exc).__name__}: {exc}"))
    for rep in range(repeats):
        for loop in loops:
            if loop.res.status != "ok":
                continue
            print(
                f"  canonical/{loop.res.spec}: segment {rep + 1}, {updates} update(s)", flush=True
            )
            try:
                loop.segment(updates)
            except Exception as exc:  # noqa: BLE001
                loop.res.status, loop.res.reason = "ERROR", f"{type(exc).__name__}: {exc}"
    by_spec = {r.spec: r for r in [*results, *(loop.res for loop in loops)]}
    return [by_spec[s] for s in specs]


def canonical_rows(results: list[LoopResult]) -> list[dict[str, Any]]:
    """Each preset against the first (the same run) and against the 4k target."""
    ok = [r for r in results if r.status == "ok" and r.repeats]
    rows: list[dict[str, Any]] = []
    if not ok:
        return rows
    ref = ok[0]
    for r in ok:
        rows.append(
            {
                "spec": r.spec,
                "agent_steps_per_s": r.sps_wall,
                "agent_steps_per_cpu_s": r.sps_cpu,
                "vs_first_wall": r.sps_wall / ref.sps_wall,
                "vs_first_cpu": r.sps_cpu / ref.sps_cpu,
                "target": f">= {TARGET_CANONICAL:,.0f} agent-steps/s",
                "verdict": verdict(r.sps_wall, TARGET_CANONICAL),
            }
        )
    return rows


def print_canonical(results: list[LoopResult], rows: list[dict[str, Any]]) -> None:
    print(f"train loop on {CANONICAL_ENV} (agent-steps = env steps x 3; best segment by wall rate)")
    head = (
        f"{'preset':34s} {'ag-steps/s':>10s} {'/CPU-s':>8s} {'x first':>7s} {'threads':>7s} "
        f"{'params':>8s} {'verdict':>7s}"
    )
    print(head)
    print("-" * len(head))
    by = {row["spec"]: row for row in rows}
    for r in results:
        if r.status != "ok" or r.spec not in by:
            print(f"{r.spec:34s} {r.status}: {r.reason}")
            continue
        row = by[r.spec]
        threads = f"{r.torch_threads}/{r.update_threads or r.torch_threads}"
        print(
            f"{r.spec:34s} {r.sps_wall:10,.0f} {r.sps_cpu:8,.0f} {row['vs_first_wall']:6.2f}x "
            f"{threads:>7s} {r.params:8,d} {row['verdict']:>7s}"
        )
    print("threads: torch threads while acting / during the update")
    print()
    print("ms per update (best segment):")
    print(f"{'preset':34s} " + " ".join(f"{p:>12s}" for p in (*PHASES, "total")))
    for r in results:
        if r.status == "ok" and r.updates:
            ms = [r.phases[p] / r.updates * 1e3 for p in PHASES]
            cells = " ".join(f"{v:12.1f}" for v in [*ms, sum(ms)])
            print(f"{r.spec:34s} {cells}")
    print()


# --------------------------------------------------------------------------------------------------
# Report
# --------------------------------------------------------------------------------------------------


def verdict(value: float, target: float, higher: bool = True) -> str:
    if not np.isfinite(value):
        return "SKIPPED"
    return "PASS" if (value >= target if higher else value <= target) else "FAIL"


def ratios(results: list[Result]) -> list[dict[str, Any]]:
    """Ours against the peers (CPU rates, same run) and the refresh cost, with verdicts."""
    out: list[dict[str, Any]] = []
    by = {(r.env, r.line): r for r in results if r.status == "ok"}

    def row(env: str, what: str, kind: str, value: float, target: float, higher: bool) -> None:
        sign = ">=" if higher else "<="
        shown = f"{sign} {target:g}x" if kind == "ratio" else f"{sign} {target:.0%}"
        out.append(
            {
                "env": env,
                "what": what,
                "kind": kind,
                "value": value,
                "target": shown,
                "verdict": verdict(value, target, higher),
            }
        )

    for env in PEER_ENVS:
        for line in OURS:
            ours = by.get((env, line))
            if ours is None:
                continue
            for peer in PEERS:
                other = by.get((env, peer))
                if other is not None:
                    target = TARGET_VS_PPO if peer == "ppo" else TARGET_VS_RPPO
                    row(
                        env, f"{line} / {peer}", "ratio", ours.sps_cpu / other.sps_cpu, target, True
                    )
        for line in OURS[::2]:  # the lines with refreshing
            ours = by.get((env, line))
            if ours is None:
                continue
            what = f"{line}: refresh time / rest of update time"
            row(env, what, "share", ours.refresh_share, TARGET_REFRESH, False)
            what = f"{line}: least an exact refresh can add (forward passes)"
            row(env, what, "share", ours.refresh_floor_share, TARGET_REFRESH, False)
            what = f"{line}: refresh / bare inference pass, same rollout"
            row(env, what, "ratio", ours.refresh_vs_pass, TARGET_REFRESH_VS_PASS, False)
            off = by.get((env, line + "_norefresh"))
            if off is not None:
                value = ours.update_cpu_s / off.update_cpu_s - 1.0
                what = f"{line}: update CPU time / {line}_norefresh's - 1"
                row(env, what, "share", value, TARGET_REFRESH, False)
    return out


def print_report(results: list[Result], rows: list[dict[str, Any]]) -> None:
    head = (
        f"{'env':9s} {'line':20s} {'steps/CPU-s':>11s} {'steps/s':>8s} {'rollout':>8s} "
        f"{'update':>7s} {'refresh':>8s} {'params':>8s} {'setup s':>7s}"
    )
    print(head)
    print("-" * len(head))
    for r in results:
        if r.status != "ok":
            print(f"{r.env:9s} {r.line:20s} {r.status}: {r.reason}")
            continue
        split = r.rollout_cpu_s + r.update_cpu_s
        refresh = f"{r.refresh_share:8.0%}" if r.refreshes else f"{'-':>8s}"
        print(
            f"{r.env:9s} {r.line:20s} {r.sps_cpu:11,.0f} {r.sps_wall:8,.0f} "
            f"{r.rollout_cpu_s / split:8.0%} {r.update_cpu_s / split:7.0%} {refresh} "
            f"{r.params:8,d} {r.setup_s:7.1f}"
        )
    print()
    print(
        "steps/CPU-s: env steps per CPU-second of this process (best segment); steps/s: wall.\n"
        "rollout/update: shares of CPU time. refresh: time refreshing / rest of the update time."
    )
    print()
    for r in results:
        if r.status == "ok" and r.refreshes and r.minibatches:
            train = (r.update_wall_s - r.refresh_wall_s) / r.minibatches
            per_refresh = r.refresh_wall_s / r.refreshes
            print(
                f"{r.env:9s} {r.line:20s} per refresh in training {per_refresh * 1e3:6.2f} ms; "
                f"best refresh {r.refresh_pass_s * 1e3:6.2f} ms vs best bare pass over the "
                f"rollout {r.forward_pass_s * 1e3:6.2f} ms: ratio {r.refresh_vs_pass:.2f}x; "
                f"per minibatch (rest of update) {train * 1e3:6.2f} ms, "
                f"{r.refreshes / r.minibatches:.2f} refreshes per minibatch"
            )
    print()
    for r in rows:
        shown = f"{r['value']:.2f}x" if r["kind"] == "ratio" else f"{r['value']:.0%}"
        print(f"{r['env']:9s} {r['what']:58s} {shown:>8s}  {r['target']:>7s}  {r['verdict']}")


def versions() -> dict[str, str]:
    out = {"python": platform.python_version()}
    for pkg in ("torch", "stable-baselines3", "sb3-contrib", "gymnasium", "numpy", "numba"):
        try:
            out[pkg] = metadata.version(pkg)
        except metadata.PackageNotFoundError:
            out[pkg] = "not installed"
    return out


# --------------------------------------------------------------------------------------------------
# Main
# --------------------------------------------------------------------------------------------------


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument(
        "--timesteps",
        type=int,
        default=4096,
        help="env steps per timed segment for ours and PPO (rounded to whole updates)",
    )
    p.add_argument(
        "--rppo-timesteps",
        type=int,
        default=2048,
        help="env steps per timed segment for RecurrentPPO (slow; rounded to whole updates)",
    )
    p.add_argument("--only", nargs="+", choices=LINES, default=list(LINES), help="lines to run")
    p.add_argument("--envs", nargs="+", choices=ENVS, default=list(ENVS), help="envs to run on")
    p.add_argument(
        "--repeats", type=int, default=2, help="timed segments per line (the best is reported)"
    )
    p.add_argument("--warmup", type=int, default=1, help="untimed updates before timing")
    p.add_argument("--num-envs", type=int, default=Settings.num_envs)
    p.add_argument("--num-steps", type=int, default=Settings.num_steps)
    p.add_argument("--epochs", type=int, default=Settings.epochs)
    p.add_argument("--minibatches", type=int, default=Settings.minibatches)
    p.add_argument("--hidden", type=int, default=Settings.hidden)
    p.add_argument("--chunk-len", type=int, default=Settings.chunk_len)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument(
        "--presets",
        nargs="+",
        default=list(CANONICAL_PRESETS),
        help="canonical: agent presets, each optionally with Hydra overrides after commas "
        "(ppo_lstm_fast,torch_threads=2); the first is the reference",
    )
    p.add_argument(
        "--loop-updates", type=int, default=4, help="canonical: updates per timed segment"
    )
    p.add_argument("--json", default=None, help="also write the results here")
    return p.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    import torch

    torch.set_num_threads(1)
    warnings.filterwarnings("ignore", module="gymnasium")
    s = Settings(
        num_envs=args.num_envs,
        num_steps=args.num_steps,
        epochs=args.epochs,
        minibatches=args.minibatches,
        hidden=args.hidden,
        chunk_len=args.chunk_len,
        seed=args.seed,
    )
    per_update = s.num_envs * s.num_steps
    if set(args.envs) & set(PEER_ENVS):
        print(
            f"settings: {asdict(s)} (batch_size {s.batch_size}); 1 torch thread; "
            f"{args.warmup} warm-up update(s), then {args.repeats} timed segment(s) per line"
        )
    results: list[Result] = []
    loops: list[LoopResult] = []
    for env in args.envs:
        if env == "canonical":
            loops = run_canonical(args.presets, args.loop_updates, args.repeats, args.warmup)
            torch.set_num_threads(1)
            continue
        lines: list[Line] = []
        for name in args.only:  # build and warm up every line, then time them in turns
            print(f"  {env}/{name}: setup and {args.warmup} warm-up update(s)", flush=True)
            try:
                lines.append((Ours if name in OURS else SB3)(env, name, s, args.warmup))
            except ImportError as exc:
                results.append(Result(env, name, status="SKIPPED", reason=str(exc)))
            except Exception as exc:  # noqa: BLE001 - report and go on with the other lines
                results.append(Result(env, name, "ERROR", f"{type(exc).__name__}: {exc}"))
        for rep in range(args.repeats):
            for line in lines:
                if line.res.status != "ok":
                    continue
                steps = args.rppo_timesteps if line.res.line.startswith("rppo") else args.timesteps
                updates = max(1, round(steps / per_update))
                print(
                    f"  {env}/{line.res.line}: segment {rep + 1}, {updates} update(s)", flush=True
                )
                try:
                    line.segment(updates, per_update)
                except Exception as exc:  # noqa: BLE001
                    line.res.status, line.res.reason = "ERROR", f"{type(exc).__name__}: {exc}"
        for line in lines:
            if isinstance(line, Ours) and line.res.status == "ok":
                line.floor()
        results += [line.res for line in lines]
    order = {name: i for i, name in enumerate(LINES)}
    results.sort(key=lambda r: (ENVS.index(r.env), order[r.line]))
    print()
    rows = ratios(results)
    if results:
        print_report(results, rows)
    loop_rows = canonical_rows(loops)
    if loops:
        print()
        print_canonical(loops, loop_rows)
    if args.json:
        out = {
            "settings": asdict(s),
            "timesteps": args.timesteps,
            "rppo_timesteps": args.rppo_timesteps,
            "repeats": args.repeats,
            "warmup": args.warmup,
            "marlgrid_env": MARLGRID_ID,
            "machine": {"platform": platform.platform(), "cpus": os.cpu_count()},
            "load_avg": os.getloadavg(),
            "versions": versions(),
            "results": [
                {
                    **asdict(r),
                    "sps_cpu": r.sps_cpu,
                    "sps_wall": r.sps_wall,
                    "refresh_share": r.refresh_share,
                    "refresh_floor_share": r.refresh_floor_share,
                    "refresh_vs_pass": r.refresh_vs_pass,
                    "refresh_in_training_vs_pass": r.refresh_in_training_vs_pass,
                    "refresh_pass_s": r.refresh_pass_s,
                }
                for r in results
            ],
            "ratios": rows,
            "canonical": {
                "env": CANONICAL_ENV,
                "updates_per_segment": args.loop_updates,
                "results": [
                    {**asdict(r), "sps_wall": r.sps_wall, "sps_cpu": r.sps_cpu} for r in loops
                ],
                "rows": loop_rows,
            },
        }
        os.makedirs(os.path.dirname(os.path.abspath(args.json)), exist_ok=True)
        with open(args.json, "w") as f:
            json.dump(out, f, indent=2, default=float)
        print(f"\nwrote {args.json}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
