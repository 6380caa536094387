"""Record videos of scripted agents: ``marlgrid-record ENV_ID --policy oracle --episodes 3``.

Writes ``OUT/{ENV_ID}-{episode:04d}.mp4`` (or ``.gif``) for each recorded episode and prints each
file with the agents' returns. ``--policy`` takes one name for every agent or a comma-separated
name per agent (``random``, ``oracle``, ``discoverer``); ``--every k`` records only episodes
0, k, 2k, ... of the ``--episodes`` played.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence

from marlgrid.play import add_set_option, parse_overrides


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="marlgrid-record", description="Write videos of scripted agents in a marlgrid env."
    )
    p.add_argument("env_id", help="registered id, e.g. MarlGrid-GoalCycle-13x13-3Agents-v0")
    p.add_argument(
        "--policy",
        default="random",
        help="policy name for all agents, or comma-separated per agent (random, oracle, "
        "discoverer)",
    )
    p.add_argument("--episodes", type=int, default=1, help="episodes to play")
    p.add_argument("--every", type=int, default=1, help="record episodes 0, k, 2k, ...")
    p.add_argument("--out", default="videos", help="output directory")
    p.add_argument("--format", dest="fmt", default="mp4", choices=("mp4", "gif"))
    p.add_argument("--fps", type=float, default=None, help="default: the env's render_fps")
    p.add_argument("--seed", type=int, default=None, help="seed of the first episode")
    p.add_argument("--max-steps", type=int, default=None, help="cut episodes after this many")
    p.add_argument("--tile-size", type=int, default=None, help="pixels per map cell")
    p.add_argument("--no-views", action="store_true", help="no column of agent views")
    p.add_argument("--no-highlight", action="store_true", help="no field-of-view tint")
    add_set_option(p)
    return p


def main(argv: Sequence[str] | None = None) -> int:
    """Console entry point of ``marlgrid-record``."""
    import marlgrid
    from marlgrid.policies import POLICIES, make_policy
    from marlgrid.rendering import render_frame
    from marlgrid.video import EpisodeRecorder, policy_action

    args = build_parser().parse_args(argv)
    if args.episodes < 1 or args.every < 1:
        raise SystemExit("--episodes and --every must be >= 1")
    env = marlgrid.make(args.env_id, **parse_overrides(args.set))
    names = [n.strip() for n in args.policy.split(",")]
    if len(names) == 1:
        names = names * len(env.possible_agents)
    if len(names) != len(env.possible_agents):
        raise SystemExit(
            f"--policy lists {len(names)} policies for {len(env.possible_agents)} agents"
        )
    for name in names:
        if name not in POLICIES:
            raise SystemExit(f"unknown policy {name!r}; choose from {list(POLICIES)}")
        if name in ("oracle", "discoverer") and env.rules.n_goals < 2:
            raise SystemExit(f"policy {name!r} needs a goal-cycle env; use random")
    seed = args.seed
    policies = {
        agent: make_policy(name, None if seed is None else seed + 1000 + i)
        for i, (agent, name) in enumerate(zip(env.possible_agents, names, strict=True))
    }
    render_kwargs = {}
    if args.tile_size is not None:
        render_kwargs["tile_size"] = args.tile_size
    if args.no_views:
        render_kwargs["agent_views"] = False
    if args.no_highlight:
        render_kwargs["highlight"] = False
    fps = args.fps or env.metadata.get("render_fps", 8)
    recorder = EpisodeRecorder(
        args.out, fps=fps, fmt=args.fmt, trigger=args.every, name_prefix=args.env_id
    )
    with recorder:
        for episode in range(args.episodes):
            recorded = recorder.start_episode()
            obs, _ = env.reset(seed=seed if episode == 0 else None)
            returns = dict.fromkeys(env.possible_agents, 0.0)
            if recorded:
                recorder.add_frame(render_frame(env, **render_kwargs))
            steps = 0
            while env.agents and (args.max_steps is None or steps < args.max_steps):
                actions = {a: policy_action(policies[a], env, a, obs[a]) for a in env.agents}
                obs, rewards, _, _, _ = env.step(actions)
                for a, r in rewards.items():
                    returns[a] += float(r)
                if recorded:
                    recorder.add_frame(render_frame(env, **render_kwargs))
                steps += 1
            path = recorder.end_episode()
            summary = ", ".join(f"{a} {r:+.2f}" for a, r in returns.items())
            where = str(path) if path else "(not recorded)"
            print(f"episode {episode}: {steps} steps, {summary} -> {where}")
    env.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
