"""Evaluate saved policies: mean return over N episodes with a 95% confidence interval.

    python experiments/evaluate.py runs/default/seed_0 --episodes 100
    python experiments/evaluate.py runs/default/seed_0/checkpoints/ckpt_000000293.pt --greedy \
        --videos 2

The run's own configuration (``.hydra/config.yaml``) says which env and roles to use; the newest
checkpoint of a run directory is taken unless a checkpoint file is given.
"""

from __future__ import annotations

import argparse
import math
from pathlib import Path

import numpy as np
from omegaconf import OmegaConf

from marlgrid.agents.checkpoint import list_checkpoints, load_checkpoint
from marlgrid.agents.rollout import MultiAgentRollout
from marlgrid.agents.trainer import TrainConfig, build_groups, record_video, resolve_roles


def load_run(target: Path) -> tuple[TrainConfig, Path]:
    """The training config and the checkpoint file for a run directory or a checkpoint file."""
    if target.is_file():
        ckpt, run_dir = target, target.parent.parent
    else:
        run_dir = target
        found = list_checkpoints(run_dir / "checkpoints")
        if not found:
            raise SystemExit(f"no checkpoints in {run_dir / 'checkpoints'}")
        ckpt = found[-1]
    config_file = run_dir / ".hydra" / "config.yaml"
    if not config_file.exists():
        raise SystemExit(f"{config_file} not found: is {run_dir} a training run directory?")
    schema = OmegaConf.structured(TrainConfig)
    cfg = OmegaConf.to_object(OmegaConf.merge(schema, OmegaConf.load(config_file)))
    return cfg, ckpt


def mean_ci(values: np.ndarray) -> tuple[float, float]:
    """Mean and the half-width of its normal-approximation 95% confidence interval."""
    if len(values) < 2:
        return float(np.mean(values)), float("nan")
    return float(values.mean()), 1.96 * float(values.std(ddof=1)) / math.sqrt(len(values))


def evaluate(target: Path, episodes: int, greedy: bool, num_envs: int, seed: int, videos: int):
    import marlgrid

    cfg, ckpt = load_run(target)
    payload = load_checkpoint(ckpt)
    vec = marlgrid.make_vec(cfg.env.id, min(num_envs, episodes), **cfg.env.settings)
    roles = resolve_roles(cfg, vec.possible_agents)
    groups, scripted = build_groups(cfg, vec, roles)
    for g in groups:
        if g.train:
            g.learner.load_state_dict(payload["learners"][g.name])
            g.train = False
        g.deterministic = g.deterministic or greedy
    rollout = MultiAgentRollout(vec, groups, scripted, seed=seed)
    returns = np.zeros((0, vec.num_agents))
    while len(returns) < episodes:
        rollout.collect(16)
        returns = np.concatenate([returns, rollout.pop_returns()])
    returns = returns[:episodes]
    print(f"{ckpt} on {cfg.env.id}: {episodes} episodes, {'greedy' if greedy else 'sampled'}")
    for k, agent in enumerate(vec.possible_agents):
        mean, half = mean_ci(returns[:, k])
        print(f"  {agent} ({roles[agent].kind}): mean return {mean:.3f} +/- {half:.3f} (95% CI)")
    for i in range(videos):
        path = ckpt.parent.parent / "videos" / f"eval_{ckpt.stem}_{i}.mp4"
        print(f"  video: {record_video(cfg, groups, scripted, path, seed=seed + i)}")
    return returns


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("target", type=Path, help="run directory or checkpoint file")
    parser.add_argument("--episodes", type=int, default=100)
    parser.add_argument("--greedy", action="store_true", help="learners take the likeliest action")
    parser.add_argument("--num-envs", type=int, default=16)
    parser.add_argument("--seed", type=int, default=12345)
    parser.add_argument("--videos", type=int, default=0, help="also record this many episodes")
    args = parser.parse_args(argv)
    evaluate(args.target, args.episodes, args.greedy, args.num_envs, args.seed, args.videos)


if __name__ == "__main__":
    main()
