"""Replay speed benchmark: marlgrid's prioritized-replay sum tree against cpprb and tianshou, and
DRQN's training speed against Stable-Baselines3 DQN.

Section ``tree``: in a tree of 2^20 leaves, one rep samples 64 indices, then writes 64 new
priorities at those indices. Every line is filled, warmed up and timed in this process, one after
another, for ``--rounds`` rounds; the median over all timed reps of each phase (sample, update)
and of their total is reported, in microseconds (``time.perf_counter_ns``, garbage collector off,
one numba/torch/BLAS thread). See README.md beside this file ("Replay speed").

Section ``drqn``: env steps per CPU-second of training in steady state (after learning_starts)
of marlgrid's DRQN (``network.memory`` 'lstm' and 'none', stepped by
``marlgrid.agents.training.rollout.MultiAgentRollout``, updating whenever it is ready) and of
SB3's ``DQN``, with the same env, number of envs, train frequency, gradient steps, transitions
per gradient step and layer widths, on CartPole-v1 and on MarlGrid-Empty-8x8-v0;
``--drqn-rounds`` rounds of every line in turn, the median reported (see :class:`DRQNSettings`
and README.md).

    python experiments/benchmarks/replay_speed.py --json experiments/results/replay_speed.json
    python experiments/benchmarks/replay_speed.py --only tree --reps 1000
    .venv/bin/python experiments/benchmarks/replay_speed.py --only drqn \
        --json experiments/results/replay_speed.json --merge

The tree section's peers are optional: install them into a separate venv (never a marlgrid
dependency). SB3 is in the project's venv (``pip install 'marlgrid[sb3]'``); where it cannot be
imported, the SB3 line is skipped with a hint and ours are still timed::

    python3 -m venv .bench-replay-venv
    .bench-replay-venv/bin/pip install torch==2.13.0
    .bench-replay-venv/bin/pip install -r experiments/benchmarks/requirements-replay.txt
    .bench-replay-venv/bin/pip install -e . --no-deps
    .bench-replay-venv/bin/pip install numpy numba gymnasium pettingzoo
"""

# ruff: noqa: E402  (the thread settings must precede the numpy, numba and torch imports)
from __future__ import annotations

import os

for _var in ("OMP_NUM_THREADS", "MKL_NUM_THREADS", "OPENBLAS_NUM_THREADS", "NUMBA_NUM_THREADS"):
    os.environ.setdefault(_var, "1")  # before numpy, numba or torch are imported

import argparse
import dataclasses
import gc
import json
import platform
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from importlib import metadata
from typing import Any

import numpy as np

INSTALL_HINT = (
    "install the peers into the benchmark venv: "
    ".bench-replay-venv/bin/pip install -r experiments/benchmarks/requirements-replay.txt, "
    "then .bench-replay-venv/bin/pip install -e . --no-deps (from the repository root)"
)
TARGET_US = 30.0  # ours: median total (sample 64 + update 64) <= 30 us at 2^20 leaves
ALPHA, BETA, EPS = 0.6, 0.4, 1e-4  # eps as cpprb's default
BATCH = 64
NEW_PRIORITY_ARRAYS = 256  # pre-drawn priority batches, cycled through by the update phase

# A line is built from (capacity, raw priorities, new raw priority batches, seed) and returns
# (sample, update): ``sample()`` returns what ``update(sampled, rep)`` needs.
Sample = Callable[[], Any]
Update = Callable[[Any, int], None]
Builder = Callable[[int, np.ndarray, np.ndarray, int], tuple[Sample, Update]]


@dataclass
class Line:
    name: str
    what: str
    ours: bool
    build: Builder | None  # None: skipped
    skip_reason: str = ""


# ---------------------------------------------------------------------------------------------
# Section "tree": the lines


def build_ours_tree(cap: int, raw: np.ndarray, new_raw: np.ndarray, seed: int) -> Any:
    from marlgrid.agents.storage import SumTree

    tree, rng = SumTree(cap), np.random.default_rng(seed)
    tree.update(np.arange(cap), raw**ALPHA)
    new_leaves = new_raw**ALPHA  # the tree holds leaf values; the ^alpha is the sampler's job

    def update(idx: np.ndarray, rep: int) -> None:
        tree.update(idx, new_leaves[rep % len(new_leaves)])

    return lambda: tree.sample_stratified(BATCH, rng), update


def build_ours_sampler(cap: int, raw: np.ndarray, new_raw: np.ndarray, seed: int) -> Any:
    from marlgrid.agents.storage import PrioritizedSampler

    sampler, rng = PrioritizedSampler(cap, alpha=ALPHA, eps=EPS), np.random.default_rng(seed)
    sampler.add(np.arange(cap))
    sampler.update(np.arange(cap), raw)

    def update(sampled: tuple[np.ndarray, np.ndarray], rep: int) -> None:
        sampler.update(sampled[0], new_raw[rep % len(new_raw)])

    return lambda: sampler.sample(BATCH, BETA, rng), update


def build_cpprb(cap: int, raw: np.ndarray, new_raw: np.ndarray, seed: int) -> Any:
    import cpprb

    rb = cpprb.PrioritizedReplayBuffer(cap, {"obs": {}}, alpha=ALPHA, eps=EPS)
    rb.add(obs=np.zeros(cap), priorities=raw)  # cpprb draws with its own generator

    def update(batch: dict[str, np.ndarray], rep: int) -> None:
        rb.update_priorities(batch["indexes"], new_raw[rep % len(new_raw)])

    return lambda: rb.sample(BATCH, beta=BETA), update


def build_tianshou_tree(cap: int, raw: np.ndarray, new_raw: np.ndarray, seed: int) -> Any:
    from tianshou.data import SegmentTree

    tree = SegmentTree(cap)
    tree[np.arange(cap)] = raw**ALPHA
    new_leaves = new_raw**ALPHA
    rng = np.random.default_rng(seed)

    def sample() -> np.ndarray:  # i.i.d. u's, as tianshou's own sample_indices draws them
        return tree.get_prefix_sum_idx(rng.random(BATCH) * tree.reduce())

    def update(idx: np.ndarray, rep: int) -> None:
        tree[idx] = new_leaves[rep % len(new_leaves)]

    return sample, update


def build_tianshou_per(cap: int, raw: np.ndarray, new_raw: np.ndarray, seed: int) -> Any:
    from tianshou.data import Batch, PrioritizedReplayBuffer

    buf = PrioritizedReplayBuffer(cap, alpha=ALPHA, beta=BETA)
    # one real transition so that len(buf) > 0; the priorities of all ``cap`` slots are set
    # through the public update_weight. The data gather of buf[indices] is not measured.
    buf.add(Batch(obs=np.zeros(1, np.float32), act=0, rew=0.0, terminated=False, truncated=False))
    buf.update_weight(np.arange(cap), raw)
    np.random.seed(seed)  # noqa: NPY002  (tianshou draws from numpy's global generator)

    def sample() -> tuple[np.ndarray, np.ndarray]:
        idx = buf.sample_indices(BATCH)
        w = buf.get_weight(idx)
        return idx, w / w.max()  # the batch normalisation tianshou's __getitem__ applies

    def update(sampled: tuple[np.ndarray, np.ndarray], rep: int) -> None:
        buf.update_weight(sampled[0], new_raw[rep % len(new_raw)])

    return sample, update


def _peer(module: str) -> str:
    """Empty if ``module`` imports, else why not."""
    try:
        __import__(module)
    except ImportError as exc:
        return f"{module} not importable ({exc}); {INSTALL_HINT}"
    return ""


def tree_lines() -> list[Line]:
    cpprb_skip, tianshou_skip = _peer("cpprb"), _peer("tianshou.data")
    lines = [
        Line("ours_tree", "marlgrid SumTree: sample_stratified + update", True, build_ours_tree),
        Line(
            "ours_sampler",
            "marlgrid PrioritizedSampler: sample (with IS weights) + update",
            True,
            build_ours_sampler,
        ),
        Line(
            "cpprb_per",
            "cpprb PrioritizedReplayBuffer: sample(64, beta) + update_priorities",
            False,
            build_cpprb,
            cpprb_skip,
        ),
        Line(
            "tianshou_tree",
            "tianshou SegmentTree: get_prefix_sum_idx(rand * reduce()) + setitem",
            False,
            build_tianshou_tree,
            tianshou_skip,
        ),
        Line(
            "tianshou_per",
            "tianshou PrioritizedReplayBuffer: sample_indices + get_weight + update_weight",
            False,
            build_tianshou_per,
            tianshou_skip,
        ),
    ]
    for line in lines:
        if line.skip_reason:
            line.build = None
    return lines


# ---------------------------------------------------------------------------------------------
# Section "tree": measuring


def time_reps(sample: Sample, update: Update, reps: int, warmup: int) -> np.ndarray:
    """Nanoseconds of (sample, update) per timed rep, shape (reps, 2)."""
    out = np.empty((reps, 2), dtype=np.int64)
    clock = time.perf_counter_ns
    gc.disable()
    try:
        for rep in range(-warmup, reps):
            t0 = clock()
            sampled = sample()
            t1 = clock()
            update(sampled, rep)
            t2 = clock()
            if rep >= 0:
                out[rep] = (t1 - t0, t2 - t1)
    finally:
        gc.enable()
    return out


def distinct_of_64(build: Builder, batches: int = 200) -> float:
    """Mean distinct indices in a batch of 64 from 64 equal leaves: 64 if stratified, ~40.7 iid."""
    ones = np.ones(64)
    sample, _ = build(64, ones, ones[None, :], 123)
    total = 0
    for _ in range(batches):
        got = sample()
        idx = got["indexes"] if isinstance(got, dict) else got[0] if isinstance(got, tuple) else got
        total += len(np.unique(idx))
    return total / batches


def summarise(ns: np.ndarray) -> dict[str, float]:
    us = ns / 1e3
    return {
        "sample_us": float(np.median(us[:, 0])),
        "update_us": float(np.median(us[:, 1])),
        "total_us": float(np.median(us.sum(axis=1))),
        "total_p10_us": float(np.percentile(us.sum(axis=1), 10)),
        "total_p90_us": float(np.percentile(us.sum(axis=1), 90)),
    }


def run_tree(args: argparse.Namespace) -> dict[str, Any]:
    """Section ``tree``: every line filled, then timed in turns for ``args.rounds`` rounds."""
    cap = 1 << args.log2_leaves
    rng = np.random.default_rng(args.seed)
    raw = rng.random(cap) + 1e-3
    new_raw = rng.random((NEW_PRIORITY_ARRAYS, BATCH)) + 1e-3
    lines = tree_lines()
    built: dict[str, tuple[Sample, Update]] = {}
    results: dict[str, dict[str, Any]] = {}
    for line in lines:
        if line.build is None:
            print(f"  {line.name:<14} SKIPPED: {line.skip_reason}")
            results[line.name] = {"what": line.what, "skipped": line.skip_reason}
            continue
        t0 = time.perf_counter()
        built[line.name] = line.build(cap, raw, new_raw, args.seed)
        results[line.name] = {
            "what": line.what,
            "setup_s": time.perf_counter() - t0,
            "distinct_of_64": distinct_of_64(line.build),
        }
    rounds: dict[str, list[np.ndarray]] = {name: [] for name in built}
    for _ in range(args.rounds):
        for name, (sample, update) in built.items():
            rounds[name].append(time_reps(sample, update, args.reps, args.warmup))
    for name, parts in rounds.items():
        results[name].update(summarise(np.concatenate(parts)))
        results[name]["round_total_us"] = [summarise(p)["total_us"] for p in parts]
    ratios = tree_ratios(results)
    report_tree(results, ratios)
    return {
        "leaves": cap,
        "batch": BATCH,
        "alpha": ALPHA,
        "beta": BETA,
        "eps": EPS,
        "results": results,
        "ratios": ratios,
        "acceptance": acceptance(results),
    }


def tree_ratios(results: dict[str, dict[str, Any]]) -> dict[str, float]:
    """Peer median total / our median total, for every (ours, peer) pair measured."""
    ours = [n for n in ("ours_tree", "ours_sampler") if "total_us" in results.get(n, {})]
    peers = [n for n in ("cpprb_per", "tianshou_tree", "tianshou_per") if "total_us" in results[n]]
    return {
        f"{p}/{o}": results[p]["total_us"] / results[o]["total_us"] for o in ours for p in peers
    }


def acceptance(results: dict[str, dict[str, Any]]) -> dict[str, Any]:
    def total(name: str) -> float | None:
        return results.get(name, {}).get("total_us")

    checks: dict[str, Any] = {}
    for ours in ("ours_tree", "ours_sampler"):
        checks[f"{ours} <= {TARGET_US:g} us"] = total(ours) is not None and total(ours) <= TARGET_US
        for peer in ("cpprb_per", "tianshou_tree", "tianshou_per"):
            if total(peer) is None or total(ours) is None:
                checks[f"{ours} faster than {peer}"] = "skipped"
            else:
                checks[f"{ours} faster than {peer}"] = total(ours) < total(peer)
    return checks


def report_tree(results: dict[str, dict[str, Any]], ratios: dict[str, float]) -> None:
    print(f"\n  {'line':<14} {'sample':>8} {'update':>8} {'total':>8}  (median us)  distinct/64")
    for name, r in results.items():
        if "total_us" in r:
            print(
                f"  {name:<14} {r['sample_us']:8.1f} {r['update_us']:8.1f} {r['total_us']:8.1f}"
                f"  rounds {', '.join(f'{t:.1f}' for t in r['round_total_us'])}"
                f"  {r['distinct_of_64']:.1f}"
            )
    for key, value in ratios.items():
        print(f"  {key:<28} {value:5.2f}x")
    for key, ok in acceptance(results).items():
        print(f"  {key:<38} {ok if ok == 'skipped' else ('PASS' if ok else 'FAIL')}")


# ---------------------------------------------------------------------------------------------
# Section "drqn": DRQN training speed against Stable-Baselines3 DQN (memoryless)
#
# Per env, every line is built, its replay filled to learning_starts and a little past it
# (untimed: the fill and the first updates, numba's compilation included, are the warm-up),
# then the lines run in turns for --drqn-rounds rounds of --drqn-steps (CartPole) or
# --drqn-marlgrid-steps env steps each, a whole number of updates; the rate
# of a round is env steps (summed over the N envs) per CPU-second of this process
# (``time.process_time``; wall-clock beside it) of one whole training call in steady state, after
# learning_starts. The median over the rounds is reported.

DRQN_ENVS = ("cartpole", "marlgrid")
DRQN_LINES = ("ours_lstm", "ours_none", "sb3_dqn")
DRQN_MARLGRID_ID = "MarlGrid-Empty-8x8-v0"  # 1 agent, 7x7 symbolic view (uint8), 7 actions
DRQN_TARGETS = {"ours_lstm": 0.5, "ours_none": 1.0}  # ours / SB3 DQN, env steps per second
SB3_HINT = (
    "stable_baselines3 is installed in the project's venv: run this section with "
    ".venv/bin/python (or pip install 'stable-baselines3==2.9.2' into the venv in use)"
)


@dataclass
class DRQNSettings:
    """What both sides share (see README.md, "What is measured (`drqn`)")."""

    num_envs: int = 8  # N copies of the env, stepped as one batch
    train_freq: int = 4  # batched steps (each of the N envs steps once) between updates
    gradient_steps: int = 1  # gradient steps per update
    sequences: int = 16  # ours: sequences per gradient step
    seq_len: int = 16  # ours: steps per sequence (burn-in included); SB3 batch = 16 * 16
    burn_in: int = 8  # ours: leading steps of a sequence that only warm up the state
    overlap: int = 8  # ours: steps shared by consecutive sequences
    learning_starts: int = 2_000  # env steps (over all envs) stored before the first update
    buffer_size: int = 100_000  # env steps (over all envs)
    trunk: int = 128  # first layer (CartPole) / features of the symbolic encoder (marlgrid)
    hidden: int = 128  # memory core width ('lstm' or 'none') = SB3's matching layer
    head: int = 64  # hidden layer of the Q head
    lr: float = 1e-4  # Adam, both (SB3 DQN's default)
    gamma: float = 0.99
    epsilon: float = 0.05  # constant exploration rate, both
    target_period: int = 250  # gradient steps between target copies (SB3: in env steps)
    seed: int = 0

    @property
    def batch_transitions(self) -> int:
        return self.sequences * self.seq_len

    def sb3_net_arch(self, env: str) -> list[int]:
        """SB3's layers after its features extractor, matching ours layer for layer."""
        return (
            [self.trunk, self.hidden, self.head] if env == "cartpole" else [self.hidden, self.head]
        )


def drqn_cartpole(s: DRQNSettings) -> Any:
    import gymnasium as gym

    return gym.make_vec(
        "CartPole-v1",
        num_envs=s.num_envs,
        vectorization_mode="sync",
        vector_kwargs={"autoreset_mode": gym.vector.AutoresetMode.SAME_STEP},
    )


class DRQNLine:
    """One learner on one env, trained further by every ``segment(steps)`` call (the first one
    fills the replay and warms up; the later ones are the timed rounds)."""

    name: str

    def grad_steps(self) -> int:
        raise NotImplementedError

    def run(self, steps: int) -> None:
        raise NotImplementedError

    def segment(self, steps: int) -> dict[str, float]:
        """One timed training call of ``steps`` env steps: CPU and wall seconds, grad steps."""
        g0 = self.grad_steps()
        gc.collect()
        c0, w0 = time.process_time(), time.perf_counter()
        self.run(steps)
        cpu, wall = time.process_time() - c0, time.perf_counter() - w0
        return {"cpu_s": cpu, "wall_s": wall, "grad_steps": self.grad_steps() - g0}


class OursDRQN(DRQNLine):
    """marlgrid.agents.algorithms.drqn.DRQN trained by the bare rollout loop
    (``rollout.MultiAgentRollout`` steps, the learner updates when ready; what the trainer
    iterates, without its bookkeeping): a gymnasium ``SyncVectorEnv`` (wrapped in
    ``SingleAgentBatch``) or ``marlgrid.make_vec``."""

    def __init__(self, env: str, memory: str, s: DRQNSettings) -> None:
        import marlgrid
        from marlgrid.agents.algorithms.drqn import DRQN, DRQNConfig
        from marlgrid.agents.networks.models import NetworkConfig
        from marlgrid.agents.training.rollout import SingleAgentBatch

        self.name, self.s = f"ours_{memory}", s
        self.envs = (
            drqn_cartpole(s)
            if env == "cartpole"
            else marlgrid.make_vec(DRQN_MARLGRID_ID, s.num_envs)
        )
        # marlgrid: the encoder of marlgrid.adapters.sb3.SymbolicGridExtractor (8-wide
        # embeddings, 2x2 convs of 32 and 64 channels without padding); its Linear + ReLU to 128
        # is our trunk
        network = NetworkConfig(
            memory=memory,
            hidden_size=s.hidden,
            trunk_sizes=(s.trunk,),
            head_sizes=(s.head,),
            conv_channels=(32, 64),
            conv_kernel=2,
            conv_padding=0,
            embed_dim=8,
        )
        self.cfg = DRQNConfig(
            network=network,
            double_q=False,  # SB3 DQN bootstraps with the target's max
            gamma=s.gamma,
            n_step=1,
            seq_len=s.seq_len,
            burn_in=s.burn_in,
            overlap=s.overlap,
            buffer_size=s.buffer_size,
            optimizer="adam",
            lr=s.lr,
            max_grad_norm=10.0,
            huber_delta=1.0,
            batch_size=s.sequences,
            learning_starts=s.learning_starts,
            train_freq=s.train_freq,
            gradient_steps=s.gradient_steps,
            target_update_period=s.target_period,
            eps_start=s.epsilon,
            eps_end=s.epsilon,
        )
        self.vec = vec = self.envs if env != "cartpole" else SingleAgentBatch(self.envs)
        agent = vec.possible_agents[0]
        obs_space, act_space = vec.single_observation_space(agent), vec.single_action_space(agent)
        self.learner = DRQN(obs_space, act_space, self.cfg, seed=s.seed)
        self.params = sum(p.numel() for p in self.learner.q.parameters())
        self.config = {"DRQNConfig": dataclasses.asdict(self.cfg), "network": str(self.learner.q)}
        self.round = 0

    def grad_steps(self) -> int:
        return self.learner.num_grad_steps

    def run(self, steps: int) -> None:
        from marlgrid.agents.training.rollout import MultiAgentRollout, PolicyGroup

        # each round resets the envs (the replay, counters and optimizer carry on)
        self.round += 1
        group = PolicyGroup("main", self.learner, list(self.vec.possible_agents))
        rollout = MultiAgentRollout(self.vec, [group], seed=self.s.seed + self.round)
        while rollout.env_steps < steps:
            rollout.step()
            if self.learner.ready():
                self.learner.update(progress=rollout.env_steps / steps)
                rollout.pop_returns()  # the ended episodes, as the trainer takes them
                rollout.pop_lengths()


class SB3DQN(DRQNLine):
    """stable_baselines3.DQN (MlpPolicy; on marlgrid with marlgrid.adapters.sb3's
    SymbolicGridExtractor), continued by ``learn(steps, reset_num_timesteps=False)``."""

    def __init__(self, env: str, s: DRQNSettings) -> None:
        import torch
        from stable_baselines3 import DQN
        from stable_baselines3.common.env_util import make_vec_env
        from stable_baselines3.common.vec_env import VecMonitor

        self.name = "sb3_dqn"
        policy_kwargs: dict[str, Any] = {"net_arch": s.sb3_net_arch(env)}
        if env == "cartpole":
            venv = make_vec_env("CartPole-v1", n_envs=s.num_envs, seed=s.seed)
        else:
            from marlgrid.adapters.sb3 import MarlGridVecEnv, symbolic_policy_kwargs

            venv = VecMonitor(MarlGridVecEnv(DRQN_MARLGRID_ID, num_envs=s.num_envs))
            venv.seed(s.seed)
            policy_kwargs.update(symbolic_policy_kwargs(s.trunk))
        kwargs: dict[str, Any] = dict(
            learning_rate=s.lr,
            buffer_size=s.buffer_size,
            learning_starts=s.learning_starts,
            batch_size=s.batch_transitions,
            tau=1.0,
            gamma=s.gamma,
            train_freq=s.train_freq,
            gradient_steps=s.gradient_steps,
            target_update_interval=s.target_period * s.train_freq * s.num_envs,
            exploration_initial_eps=s.epsilon,
            exploration_final_eps=s.epsilon,
            max_grad_norm=10.0,
            policy_kwargs=policy_kwargs,
            seed=s.seed,
            device="cpu",
            verbose=0,
        )
        self.model = DQN("MlpPolicy", venv, **kwargs)
        torch.set_num_threads(1)
        self.params = sum(p.numel() for p in self.model.q_net.parameters())
        kwargs["policy_kwargs"] = {k: repr(v) for k, v in policy_kwargs.items()}
        self.config = {"DQN": kwargs, "network": str(self.model.q_net)}

    def grad_steps(self) -> int:
        return int(self.model._n_updates)

    def run(self, steps: int) -> None:
        self.model.learn(steps, reset_num_timesteps=False)


def build_drqn_line(env: str, name: str, s: DRQNSettings) -> DRQNLine:
    if name == "sb3_dqn":
        return SB3DQN(env, s)
    return OursDRQN(env, name.removeprefix("ours_"), s)


def drqn_summary(rounds: list[dict[str, float]], steps: int) -> dict[str, Any]:
    cpu = [steps / r["cpu_s"] for r in rounds]
    wall = [steps / r["wall_s"] for r in rounds]
    return {
        "sps_cpu": float(np.median(cpu)),
        "sps_wall": float(np.median(wall)),
        "round_sps_cpu": cpu,
        "round_sps_wall": wall,
        "env_steps_per_grad_step": steps / max(np.mean([r["grad_steps"] for r in rounds]), 1),
        "rounds": rounds,
    }


def run_drqn(args: argparse.Namespace) -> dict[str, Any]:
    """Section ``drqn``: per env, every line filled, then timed in turns for the rounds."""
    import torch

    s = DRQNSettings(num_envs=args.drqn_num_envs, seed=args.seed)
    cycle = s.num_envs * s.train_freq  # env steps per update, both sides
    fill = s.learning_starts + args.drqn_warmup_steps
    sb3_skip = _peer("stable_baselines3")
    if sb3_skip:
        sb3_skip = f"stable_baselines3 not importable; {SB3_HINT}"
    out: dict[str, Any] = {"settings": dataclasses.asdict(s), "fill_steps": fill, "envs": {}}
    out["settings"]["sb3_batch_size"] = s.batch_transitions
    for env in args.drqn_envs:
        wanted = args.drqn_steps if env == "cartpole" else args.drqn_marlgrid_steps
        steps = -(-wanted // cycle) * cycle  # whole updates
        print(f"  {env}: {args.drqn_rounds} rounds x {steps} env steps per line")
        lines: list[DRQNLine] = []
        results: dict[str, dict[str, Any]] = {}
        for name in args.drqn_lines:
            if name == "sb3_dqn" and sb3_skip:
                print(f"    {name:<10} SKIPPED: {sb3_skip}")
                results[name] = {"skipped": sb3_skip}
                continue
            t0 = time.perf_counter()
            line = build_drqn_line(env, name, s)
            fill_s = line.segment(fill)
            results[name] = {
                "params": line.params,
                "config": line.config,
                "setup_s": time.perf_counter() - t0,
                "fill": {**fill_s, "sps_cpu": fill / fill_s["cpu_s"]},
            }
            lines.append(line)
        assert torch.get_num_threads() == 1, torch.get_num_threads()
        timed: dict[str, list[dict[str, float]]] = {line.name: [] for line in lines}
        for _ in range(args.drqn_rounds):
            for line in lines:
                timed[line.name].append(line.segment(steps))
        for name, rounds in timed.items():
            results[name].update(drqn_summary(rounds, steps))
        ratios = drqn_ratios(results)
        out["envs"][env] = {"timed_steps": steps, "results": results, "ratios": ratios}
        report_drqn(results, ratios)
    out["acceptance"] = drqn_acceptance(out["envs"])
    for key, ok in out["acceptance"].items():
        print(f"  {key:<44} {ok if ok == 'skipped' else ('PASS' if ok else 'FAIL')}")
    return out


def drqn_ratios(results: dict[str, dict[str, Any]]) -> dict[str, dict[str, Any]]:
    """Our median rate / SB3 DQN's (CPU and wall), and the median of the per-round ratios."""
    peer = results.get("sb3_dqn", {})
    if "sps_cpu" not in peer:
        return {}
    out = {}
    for name in ("ours_lstm", "ours_none"):
        r = results.get(name, {})
        if "sps_cpu" in r:
            per_round = np.array(r["round_sps_cpu"]) / np.array(peer["round_sps_cpu"])
            out[f"{name}/sb3_dqn"] = {
                "cpu": r["sps_cpu"] / peer["sps_cpu"],
                "wall": r["sps_wall"] / peer["sps_wall"],
                "cpu_round_median": float(np.median(per_round)),
            }
    return out


def drqn_acceptance(envs: dict[str, dict[str, Any]]) -> dict[str, Any]:
    checks: dict[str, Any] = {}
    for env, got in envs.items():
        for name, target in DRQN_TARGETS.items():
            ratio = got["ratios"].get(f"{name}/sb3_dqn")
            key = f"{env}: {name} >= {target:g}x sb3_dqn (CPU rate)"
            checks[key] = "skipped" if ratio is None else bool(ratio["cpu"] >= target)
    return checks


def report_drqn(results: dict[str, dict[str, Any]], ratios: dict[str, dict[str, Any]]) -> None:
    print(f"    {'line':<10} {'steps/CPU-s':>11} {'steps/s wall':>12} {'fill/CPU-s':>10}  rounds")
    for name, r in results.items():
        if "sps_cpu" in r:
            rounds = ", ".join(f"{v:.0f}" for v in r["round_sps_cpu"])
            print(
                f"    {name:<10} {r['sps_cpu']:11.0f} {r['sps_wall']:12.0f}"
                f" {r['fill']['sps_cpu']:10.0f}  {rounds}"
                f"  ({r['env_steps_per_grad_step']:.0f} env steps/grad step)"
            )
    for key, r in ratios.items():
        print(f"    {key:<18} {r['cpu']:5.2f}x CPU, {r['wall']:5.2f}x wall")


# ---------------------------------------------------------------------------------------------
# Sections selectable with --only: ``name: run_function``.

SECTIONS: dict[str, Callable[[argparse.Namespace], dict[str, Any]]] = {
    "tree": run_tree,
    "drqn": run_drqn,
}


def environment_info() -> dict[str, Any]:
    versions = {}
    for pkg in ("marlgrid", "numpy", "numba", "torch", "cpprb", "tianshou", "stable_baselines3",
                "gymnasium"):  # fmt: skip
        try:
            versions[pkg] = metadata.version(pkg)
        except metadata.PackageNotFoundError:
            versions[pkg] = None
    cpu = platform.processor() or platform.machine()
    try:
        with open("/proc/cpuinfo") as f:
            cpu = next(ln.split(":", 1)[1].strip() for ln in f if ln.startswith("model name"))
    except (OSError, StopIteration):
        pass
    return {
        "date": time.strftime("%Y-%m-%d %H:%M:%S"),
        "python": platform.python_version(),
        "executable": sys.executable,
        "platform": platform.platform(),
        "cpu": cpu,
        "cpu_count": os.cpu_count(),
        "loadavg_1_5_15_start": list(os.getloadavg()),
        "versions": versions,
        "threads": {v: os.environ.get(v) for v in ("OMP_NUM_THREADS", "NUMBA_NUM_THREADS")},
    }


def limit_torch_threads() -> None:
    """One torch thread, if torch is installed (tianshou and marlgrid.agents import it)."""
    try:
        import torch
    except ImportError:
        return
    torch.set_num_threads(1)


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--only", nargs="+", choices=sorted(SECTIONS), default=sorted(SECTIONS))
    p.add_argument("--reps", type=int, default=1500, help="timed reps per line and round")
    p.add_argument("--rounds", type=int, default=4, help="rounds of every line in turn")
    p.add_argument("--warmup", type=int, default=50, help="untimed reps before each timing")
    p.add_argument("--log2-leaves", type=int, default=20, help="tree size: 2^N leaves")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--json", metavar="PATH", help="also write results and machine info as JSON")
    p.add_argument(
        "--merge",
        action="store_true",
        help="with --json: keep the sections of an existing file that this run does not measure",
    )
    d = p.add_argument_group("section drqn")
    d.add_argument("--drqn-envs", nargs="+", choices=DRQN_ENVS, default=list(DRQN_ENVS))
    d.add_argument("--drqn-lines", nargs="+", choices=DRQN_LINES, default=list(DRQN_LINES))
    d.add_argument("--drqn-rounds", type=int, default=5, help="timed rounds of every line in turn")
    d.add_argument("--drqn-steps", type=int, default=4000, help="CartPole: env steps per round")
    d.add_argument(
        "--drqn-marlgrid-steps", type=int, default=1600, help="marlgrid: env steps per round"
    )
    d.add_argument(
        "--drqn-warmup-steps",
        type=int,
        default=1000,
        help="untimed env steps after learning_starts",
    )
    d.add_argument("--drqn-num-envs", type=int, default=8, help="copies of the env (N)")
    return p.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    limit_torch_threads()
    info = environment_info()
    print(f"{info['cpu']} x{info['cpu_count']}, load {info['loadavg_1_5_15_start']}")
    print(f"versions {info['versions']}")
    out: dict[str, Any] = {**info, "args": vars(args), "sections": {}}
    for name in args.only:
        print(f"\n[{name}]")
        load = list(os.getloadavg())
        out["sections"][name] = SECTIONS[name](args)
        run = {k: info[k] for k in ("date", "executable", "versions")}
        out["sections"][name]["run"] = {
            **run,
            "loadavg_1_5_15_start": load,
            "loadavg_1_5_15_end": list(os.getloadavg()),
        }
    out["loadavg_1_5_15_end"] = list(os.getloadavg())
    if args.json and args.merge and os.path.exists(args.json):
        with open(args.json) as f:
            kept = {k: v for k, v in json.load(f).get("sections", {}).items() if k not in args.only}
        out["sections"] = {**kept, **out["sections"]}  # a kept section holds its own "run"
        if kept:
            print(f"kept sections {sorted(kept)} of {args.json}")
    if args.json:
        os.makedirs(os.path.dirname(os.path.abspath(args.json)), exist_ok=True)
        with open(args.json, "w") as f:
            json.dump(out, f, indent=2)
        print(f"\nwrote {args.json}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
