"""Stable-Baselines3 PPO with parameter sharing on a small multi-agent marlgrid env.

Every (env, agent) pair is one SB3 env slot of :class:`marlgrid.adapters.sb3.MarlGridVecEnv`, so one
PPO policy acts for all agents. By default: 3 agents in an 8x8 empty room, ``respawn=True`` (an
agent that reaches the goal is placed again at random and may score again), 64-step episodes. The
script prints the mean return per agent and episode of a random policy and of the trained one, and
can write a video of the trained agents.

    python experiments/examples/sb3_ppo_example.py      # about 1-2 minutes on 1 CPU
    python experiments/examples/sb3_ppo_example.py --timesteps 200000 --video videos/ppo.mp4

Needs ``pip install 'marlgrid[sb3]'`` (and ``marlgrid[video]`` for ``--video``).
"""

from __future__ import annotations

import argparse
import time

import numpy as np
import torch
from stable_baselines3 import PPO
from stable_baselines3.common.vec_env import VecMonitor

from marlgrid.adapters.sb3 import MarlGridVecEnv, symbolic_policy_kwargs


def parse_args() -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--env", default="MarlGrid-Empty-8x8-3Agents-v0", help="registered env id")
    p.add_argument("--num-envs", type=int, default=8, help="marlgrid envs (x agents = slots)")
    p.add_argument("--timesteps", type=int, default=60_000, help="agent-steps of training")
    p.add_argument("--max-steps", type=int, default=64, help="episode length")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--eval-episodes", type=int, default=96, help="agent-episodes per evaluation")
    p.add_argument("--threads", type=int, default=1, help="torch threads")
    p.add_argument("--video", default=None, help="write an episode of the trained agents here")
    return p.parse_args()


def mean_return(venv: MarlGridVecEnv, model: PPO | None, episodes: int, seed: int) -> float:
    """Mean return per agent-episode of ``model`` (uniformly random actions when None)."""
    venv.seed(seed)
    obs = venv.reset()
    rng = np.random.default_rng(seed)
    running = np.zeros(venv.num_envs)
    returns: list[float] = []
    while len(returns) < episodes:
        if model is None:
            actions = rng.integers(0, venv.action_space.n, venv.num_envs)
        else:
            actions, _ = model.predict(obs, deterministic=True)
        obs, rewards, dones, _ = venv.step(actions)
        running += rewards
        for i in np.flatnonzero(dones):
            returns.append(running[i])
            running[i] = 0.0
    return float(np.mean(returns))


def main() -> None:
    args = parse_args()
    torch.set_num_threads(args.threads)
    settings = {"respawn": True, "max_steps": args.max_steps}
    venv = VecMonitor(MarlGridVecEnv(args.env, num_envs=args.num_envs, **settings))
    eval_env = MarlGridVecEnv(args.env, num_envs=args.num_envs, **settings)
    print(f"{args.env}: {venv.num_envs} slots ({args.num_envs} envs x agents), {settings}")

    random_return = mean_return(eval_env, None, args.eval_episodes, seed=10_000)
    model = PPO(
        "MlpPolicy",
        venv,
        n_steps=128,
        batch_size=512,
        n_epochs=4,
        learning_rate=7e-4,
        gamma=0.95,
        gae_lambda=0.95,
        ent_coef=0.01,
        policy_kwargs=symbolic_policy_kwargs(64, net_arch=[64]),
        seed=args.seed,
        device="cpu",
        verbose=0,
    )
    start = time.perf_counter()
    model.learn(args.timesteps)
    seconds = time.perf_counter() - start
    trained_return = mean_return(eval_env, model, args.eval_episodes, seed=10_000)
    print(f"trained {args.timesteps} agent-steps in {seconds:.0f} s")
    print(f"mean return per agent-episode: random {random_return:.2f}, PPO {trained_return:.2f}")

    if args.video:
        import marlgrid
        from marlgrid.viewing.video import record_episode

        env = marlgrid.make(args.env, **settings)

        def policy(obs: np.ndarray) -> int:
            return int(model.predict(obs[None], deterministic=True)[0][0])

        returns = record_episode(env, policy, args.video, seed=args.seed)
        print(f"video: {args.video} (returns {returns})")


if __name__ == "__main__":
    main()
