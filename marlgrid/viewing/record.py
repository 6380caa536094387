"""Record videos of scripted agents: ``marlgrid-record ENV_ID --policy oracle --episodes 3``.

Writes ``OUT/{ENV_ID}-{episode:04d}.mp4`` (or ``.gif``) for each recorded episode and prints each
file with the agents' returns; with ``--out FILE.mp4`` (or ``.gif``) all recorded episodes go into
that one file. ``--policy`` takes one name for every agent or a comma-separated name per agent
(``random``, ``oracle``, ``discoverer``); ``--every k`` records only episodes 0, k, 2k, ... of the
``--episodes`` played. Existing video files are never overwritten unless ``--overwrite`` is given;
then each is replaced atomically once its new version is complete.
"""

from __future__ import annotations

import argparse
import math
import sys
from collections.abc import Callable, Sequence
from pathlib import Path

from marlgrid.viewing.play import add_set_option, parse_overrides

VIDEO_SUFFIXES = (".mp4", ".gif")


def _number(kind: type, low: float, strict: bool) -> Callable[[str], float]:
    """An argparse ``type`` reading a ``kind`` number ``> low`` (``>= low`` unless strict)."""
    bound = f"{'>' if strict else '>='} {low:g}"

    def parse(text: str) -> float:
        try:
            value = kind(text)
        except ValueError:
            raise argparse.ArgumentTypeError(
                f"must be a {kind.__name__} {bound}, got {text!r}"
            ) from None
        ok = value > low if strict else value >= low
        if not ok or not math.isfinite(value):
            raise argparse.ArgumentTypeError(f"must be a {kind.__name__} {bound}, got {text!r}")
        return value

    return parse


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
    p.add_argument("--episodes", type=_number(int, 1, False), default=1, help="episodes to play")
    p.add_argument(
        "--every", type=_number(int, 1, False), default=1, help="record episodes 0, k, 2k, ..."
    )
    p.add_argument(
        "--out",
        default="videos",
        help="output directory (one file per recorded episode, created if missing), or a file "
        "ending in .mp4 or .gif that gets every recorded episode",
    )
    p.add_argument(
        "--overwrite",
        action="store_true",
        help="replace existing video files (each atomically, once its new version is "
        "complete); without it the command refuses to start when one exists",
    )
    p.add_argument(
        "--format",
        dest="fmt",
        default=None,
        choices=("mp4", "gif"),
        help="video format (default: the --out file's suffix, else mp4)",
    )
    p.add_argument(
        "--fps",
        type=_number(float, 0, True),
        default=None,
        help="frames per second, > 0 (default: the env's render_fps)",
    )
    p.add_argument("--seed", type=_number(int, 0, False), default=None, help="first seed")
    p.add_argument(
        "--max-steps", type=_number(int, 0, False), default=None, help="cut episodes after this"
    )
    p.add_argument(
        "--tile-size", type=_number(int, 1, False), default=None, help="pixels per map cell"
    )
    p.add_argument("--no-views", action="store_true", help="no column of agent views")
    p.add_argument("--no-highlight", action="store_true", help="no field-of-view tint")
    add_set_option(p)
    return p


def output_paths(args: argparse.Namespace) -> tuple[Path, str, list[Path]]:
    """The recorder target, the format and every video file the run would write.

    Raises ``SystemExit`` when ``--out`` cannot be used or (without ``--overwrite``) a video file
    exists already.
    """
    out = Path(args.out)
    single = out.suffix.lower() in VIDEO_SUFFIXES
    if single:
        suffix_fmt = out.suffix.lower().lstrip(".")
        if args.fmt is not None and args.fmt != suffix_fmt:
            raise SystemExit(f"--format {args.fmt} contradicts --out {out} ({suffix_fmt})")
        fmt = suffix_fmt
        if out.is_dir():
            raise SystemExit(f"--out {out} is a directory; give a file name or another path")
        paths = [out]
    else:
        fmt = args.fmt or "mp4"
        if out.exists() and not out.is_dir():
            raise SystemExit(
                f"--out {out} is an existing file, not a directory; give a directory, or a file "
                f"name ending in {' or '.join(VIDEO_SUFFIXES)} for a single video"
            )
        paths = [out / f"{args.env_id}-{e:04d}.{fmt}" for e in range(0, args.episodes, args.every)]
    existing = [str(p) for p in paths if p.exists()]
    if existing and not args.overwrite:
        raise SystemExit(
            f"refusing to overwrite existing video file(s) {existing}; pass --overwrite to "
            "replace them"
        )
    return out, fmt, paths


def main(argv: Sequence[str] | None = None) -> int:
    """Console entry point of ``marlgrid-record``."""
    import marlgrid
    from marlgrid.episode import resolve_policies, run_episode
    from marlgrid.policies import POLICIES
    from marlgrid.viewing.rendering import render_frame
    from marlgrid.viewing.video import EpisodeRecorder

    args = build_parser().parse_args(argv)
    target, fmt, _ = output_paths(args)
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
            raise SystemExit(f"unknown policy {name!r}; choose from {sorted(POLICIES)}")
        if name in ("oracle", "discoverer") and env.rules.n_goals < 2:
            raise SystemExit(f"policy {name!r} needs a goal-cycle env; use random")
    seed = args.seed
    policies = resolve_policies(
        env,
        dict(zip(env.possible_agents, names, strict=True)),
        seed=None if seed is None else seed + 1000,
    )
    render_kwargs = {}
    if args.tile_size is not None:
        render_kwargs["tile_size"] = args.tile_size
    if args.no_views:
        render_kwargs["agent_views"] = False
    if args.no_highlight:
        render_kwargs["highlight"] = False
    fps = args.fps if args.fps is not None else env.metadata.get("render_fps", 8)
    recorder = EpisodeRecorder(
        target, fps=fps, fmt=fmt, trigger=args.every, name_prefix=args.env_id
    )

    def add_frame(e: object) -> None:
        recorder.add_frame(render_frame(e, **render_kwargs))

    with recorder:
        for episode in range(args.episodes):
            recorded = recorder.start_episode()
            result = run_episode(
                env,
                policies,
                seed=seed if episode == 0 else None,
                on_frame=add_frame if recorded else None,
                max_steps=args.max_steps,
            )
            path = recorder.end_episode()
            summary = ", ".join(f"{a} {r:+.2f}" for a, r in result.returns.items())
            if path:
                where = str(path)
            elif recorded and recorder.single_file:
                where = f"{target} (written at the end)"
            else:
                where = "(not recorded)"
            print(f"episode {episode}: {result.steps} steps, {summary} -> {where}")
    env.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
