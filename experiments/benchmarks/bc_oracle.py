"""Behaviour cloning of the oracle on the 2-tile goal cycle: how close does imitation get?

A BC learner (``agent=bc``, :mod:`marlgrid.agents.algorithms.bc`) plays agent_0 of
``MarlGrid-GoalCycle-7x7-v0`` with two agents, beside the scripted oracle (agent_1), and clones
the oracle's actions on the oracle's own views. Then the BC policy and the oracle are each
evaluated ALONE (``n_agents=1``, greedy, the same fresh layouts), and the script prints the
ratio of their mean returns::

    OMP_NUM_THREADS=1 .venv/bin/python experiments/benchmarks/bc_oracle.py --steps 80000
    OMP_NUM_THREADS=1 .venv/bin/python experiments/benchmarks/bc_oracle.py --epsilon 0.25

``--epsilon`` makes the teaching oracle take a random action with that chance each step (its
random actions are recorded as its actions too); the BC policy then sees how the oracle
recovers from states off its own path, which a noiseless oracle never shows (BC's classic
compounding error), and is compared with the noiseless oracle. ``tests/agents/test_bc.py``
runs the same comparison (:func:`bc_oracle_ratio`).
"""

from __future__ import annotations

import argparse
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np
import torch

from marlgrid.agents.algorithms.bc import BC, BCConfig
from marlgrid.agents.networks.config import NetworkConfig
from marlgrid.agents.training.evaluation import evaluate_groups
from marlgrid.agents.training.roles import RoleConfig
from marlgrid.agents.training.rollout import PolicyGroup
from marlgrid.agents.training.trainer import EnvConfig, LoggerConfig, TrainConfig, Trainer
from marlgrid.policies import make_policy

ENV = "MarlGrid-GoalCycle-7x7-v0"


def bc_config(memory: str = "lstm", **overrides: Any) -> BCConfig:
    """A small BC learner with the fast 'bag' torso, updating every 32 steps."""
    net = NetworkConfig(memory=memory, hidden_size=64, trunk_sizes=(64,), head_sizes=(64,),
                        symbolic_encoder="bag", bag_dim=64)  # fmt: skip
    return BCConfig(network=net, **{"num_steps": 32, **overrides})


def train_bc(
    run_dir: Path, steps: int, num_envs: int, cfg: BCConfig, seed: int = 0, epsilon: float = 0.0
) -> tuple[BC, dict[str, float]]:
    """``steps`` env steps of BC beside the oracle (2 agents; ``epsilon``: the oracle's chance of
    a random action each step); returns the trained learner and the last iteration's metrics."""
    oracle = RoleConfig("scripted", policy="oracle", epsilon=epsilon)
    train_cfg = TrainConfig(
        env=EnvConfig(ENV, num_envs=num_envs, settings={"n_agents": 2}),
        agent=cfg,
        roles={"agent_0": RoleConfig(), "agent_1": oracle},
        logger=LoggerConfig(tensorboard=False, progress=False),
        total_timesteps=steps,
        video=False,
        checkpoint_every=10_000,
        seed=seed,
    )
    trainer = Trainer(train_cfg, run_dir)
    metrics = trainer.run()
    learner = trainer.learners["main"].learner
    assert isinstance(learner, BC)
    return learner, metrics


def evaluate_alone(learner: BC | None, episodes: int, seed: int) -> np.ndarray:
    """Returns of ``episodes`` greedy episodes alone on fresh layouts: the BC ``learner``, or
    the oracle when ``learner`` is None."""
    settings = {"n_agents": 1}
    if learner is None:
        scripted = {"agent_0": make_policy("oracle", seed=seed)}
        return evaluate_groups(ENV, settings, [], scripted, episodes, seed)[:, 0]
    group = PolicyGroup("bc", learner, ["agent_0"], train=False, explore=False)
    return evaluate_groups(ENV, settings, [group], {}, episodes, seed)[:, 0]


def bc_oracle_ratio(
    steps: int,
    num_envs: int = 16,
    episodes: int = 100,
    cfg: BCConfig | None = None,
    seed: int = 0,
    epsilon: float = 0.0,
) -> dict[str, float]:
    """Train BC for ``steps`` env steps beside the oracle (``epsilon``-noisy while it teaches),
    then evaluate BC and the (noiseless) oracle alone, greedy, on the same fresh layouts."""
    cfg = cfg or bc_config()
    t0 = time.perf_counter()
    with tempfile.TemporaryDirectory() as tmp:
        learner, metrics = train_bc(Path(tmp) / "run", steps, num_envs, cfg, seed, epsilon)
    train_time = time.perf_counter() - t0
    bc = float(evaluate_alone(learner, episodes, seed=10_000 + seed).mean())
    oracle = float(evaluate_alone(None, episodes, seed=10_000 + seed).mean())
    return {
        "bc": bc,
        "oracle": oracle,
        "ratio": bc / oracle,
        "train_seconds": train_time,
        "accuracy": metrics["losses/bc_accuracy"],
    }


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=80_000, help="training env steps")
    parser.add_argument("--envs", type=int, default=16, help="training envs")
    parser.add_argument("--episodes", type=int, default=100, help="evaluation episodes each")
    parser.add_argument("--epsilon", type=float, default=0.0, help="the teaching oracle's noise")
    parser.add_argument("--memory", default="lstm", help="memory core of the BC network")
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args(argv)
    torch.set_num_threads(1)
    cfg = bc_config(args.memory)
    out = bc_oracle_ratio(args.steps, args.envs, args.episodes, cfg, args.seed, args.epsilon)
    print(
        f"BC {out['bc']:.2f} / oracle {out['oracle']:.2f} = {out['ratio']:.3f} "
        f"({args.steps} env steps, {out['train_seconds']:.0f} s training, memory {args.memory}, "
        f"teacher epsilon {args.epsilon}, last training accuracy {out['accuracy']:.3f})"
    )


if __name__ == "__main__":
    main()
