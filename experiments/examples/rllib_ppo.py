"""Train RLlib PPO with an LSTM on a marlgrid env (no Hydra; needs ``pip install 'marlgrid[ray]'``).

    python experiments/examples/rllib_ppo.py                       # 3-agent goal cycle, shared
    python experiments/examples/rllib_ppo.py --independent --iterations 50   # a policy per agent
    python experiments/examples/rllib_ppo.py --address auto        # on a running Ray cluster
    python experiments/examples/rllib_ppo.py --env-runners 4 --cpus 6   # sampling in 4 processes

Each iteration collects ``--batch`` env steps (one step of every agent each), updates every
policy and prints the iteration's env steps/s and mean episode return (about 250 env steps/s on
2 cores with the defaults; 110 with ``--envs-per-runner 1``); ``--out DIR`` saves a
checkpoint at the end. Without ``--address`` a local Ray instance is started, bound to loopback,
and stopped at the end.
"""

from __future__ import annotations

import argparse
import math
import os
import sys
import time
from pathlib import Path
from typing import Any

GOAL_CYCLE_3 = "MarlGrid-GoalCycle-13x13-3Agents-v0"


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--env", default=GOAL_CYCLE_3, help="marlgrid id (default: %(default)s)")
    group = p.add_mutually_exclusive_group()
    group.add_argument(
        "--shared",
        dest="shared",
        action="store_true",
        default=True,
        help="one policy for every agent id (default)",
    )
    group.add_argument(
        "--independent", dest="shared", action="store_false", help="one policy per agent id"
    )
    p.add_argument("--iterations", type=int, default=20, help="training iterations")
    p.add_argument("--batch", type=int, default=2000, help="env steps per iteration")
    p.add_argument("--minibatch", type=int, default=500, help="minibatch size (agent steps)")
    p.add_argument("--epochs", type=int, default=4, help="passes over each batch")
    p.add_argument("--lr", type=float, default=3e-4)
    p.add_argument("--gamma", type=float, default=0.99)
    p.add_argument("--cell", type=int, default=128, help="LSTM cell size")
    p.add_argument("--seq-len", type=int, default=20, help="LSTM max_seq_len")
    p.add_argument(
        "--observation",
        choices=("symbolic", "onehot", "rgb"),
        default="onehot",
        help="agents' view encoding (default: %(default)s)",
    )
    p.add_argument(
        "--env-runners",
        type=int,
        default=0,
        help="sampling worker processes (0: sample in the learner's process)",
    )
    p.add_argument(
        "--envs-per-runner",
        type=int,
        default=8,
        help="envs stepped together by each sampler, one batched forward pass (default: 8)",
    )
    p.add_argument("--cpus", type=int, default=None, help="CPUs of the local Ray instance")
    p.add_argument(
        "--address", default=None, help="join this Ray cluster instead ('auto', host:port)"
    )
    p.add_argument("--torch-threads", type=int, default=1, help="torch CPU threads per process")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--out", type=Path, default=None, help="save a checkpoint here at the end")
    args = p.parse_args(argv)
    if args.iterations < 1 or args.batch < 1:
        p.error("--iterations and --batch must be at least 1")
    return args


def episode_return(result: dict[str, Any]) -> float:
    runners = result.get("env_runners", {})
    value = runners.get("episode_return_mean", float("nan"))
    return float(value) if value is not None else float("nan")


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    if args.address is None:
        # A local instance stays on this machine; Ray reads these when it is imported.
        from marlgrid.agents.bookkeeping.launch import LOCAL_RAY_ENV

        os.environ["RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER"] = "0"
        for key, value in LOCAL_RAY_ENV.items():
            os.environ.setdefault(key, value)
    try:
        import ray
        import torch

        import marlgrid.adapters.rllib as mr
    except ModuleNotFoundError as err:
        print(f"error: {err}", file=sys.stderr)
        return 1

    torch.set_num_threads(args.torch_threads)
    settings = {"agent": {"observation": args.observation}}
    config = mr.ppo_config(
        args.env,
        shared=args.shared,
        settings=settings,
        cell_size=args.cell,
        max_seq_len=args.seq_len,
        num_env_runners=args.env_runners,
        num_envs_per_env_runner=args.envs_per_runner,
        train_batch_size=args.batch,
        minibatch_size=args.minibatch,
        num_epochs=args.epochs,
        lr=args.lr,
        gamma=args.gamma,
        seed=args.seed,
    )
    started = not ray.is_initialized()  # a caller's Ray (tests, notebooks) is used as it is
    if started and args.address is None:
        cpus = args.cpus or max(2, args.env_runners + 1)
        ray.init(num_cpus=cpus, include_dashboard=False, log_to_driver=False)
    elif started:
        ray.init(address=args.address, log_to_driver=False)
    policies = "shared" if args.shared else "independent"
    print(f"RLlib PPO-LSTM on {args.env}: {policies} policies, {args.batch} env steps/iteration")
    algo = None
    try:
        algo = config.build_algo()
        steps = 0
        for it in range(1, args.iterations + 1):
            t0 = time.perf_counter()
            result = algo.train()
            dt = time.perf_counter() - t0
            done = int(result.get("num_env_steps_sampled_lifetime", steps + args.batch))
            rate = (done - steps) / dt if dt > 0 else math.nan
            steps = done
            print(
                f"iter {it:4d}  env steps {steps:8d}  {rate:7.1f} env steps/s  "
                f"return {episode_return(result):8.3f}",
                flush=True,
            )
        if args.out is not None:
            path = algo.save_to_path(str(args.out.absolute()))
            print(f"checkpoint: {path}")
    finally:
        if algo is not None:
            algo.stop()
        if started:
            ray.shutdown()
    return 0


if __name__ == "__main__":
    sys.exit(main())
