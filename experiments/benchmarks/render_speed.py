"""Full-frame render speed: marlgrid's ``render()`` against MiniGrid's, in the same run.

Lines (frames per CPU-second of this process, wall-clock beside it; best of ``--repeats``):

* ``minigrid``: MiniGrid's ``render()`` in ``rgb_array`` mode (the whole map with the agent's view
  highlighted, 32 px tiles) on a 13x13 room with 18 clutter walls and 3 goals: the nearest MiniGrid
  map to goal cycle 13x13. One agent.
* ``marlgrid``: ``render()`` of ``MarlGrid-GoalCycle-13x13-3Agents-v0`` (32 px tiles): the map with
  the three agents' fields of view tinted and the column of their three views.
* ``marlgrid_map``: the same without the view column.

Only the ``render()`` calls are timed. Between two frames each env takes one step with uniformly
random actions (and resets at the episode end), untimed, so that every frame shows a new state.

    python experiments/benchmarks/render_speed.py --seconds 3 --repeats 2
"""

from __future__ import annotations

import argparse
import json
import platform
import time
from collections.abc import Callable
from importlib import metadata
from typing import Any

import numpy as np

TILE = 32
MARLGRID_ID = "MarlGrid-GoalCycle-13x13-3Agents-v0"


def minigrid_setup(seed: int) -> tuple[Callable[[], Any], Callable[[], None]]:
    """MiniGrid's full render on a cluttered 13x13 room with 3 goals."""
    from minigrid.core.grid import Grid
    from minigrid.core.mission import MissionSpace
    from minigrid.core.world_object import Goal, Wall
    from minigrid.minigrid_env import MiniGridEnv

    class ClutteredGoals(MiniGridEnv):
        def __init__(self) -> None:
            super().__init__(
                mission_space=MissionSpace(mission_func=lambda: "visit the goals"),
                grid_size=13,
                max_steps=250,
                render_mode="rgb_array",
                tile_size=TILE,
            )

        def _gen_grid(self, width: int, height: int) -> None:
            self.grid = Grid(width, height)
            self.grid.wall_rect(0, 0, width, height)
            for _ in range(18):
                self.place_obj(Wall())
            for _ in range(3):
                self.place_obj(Goal())
            self.place_agent()
            self.mission = "visit the goals"

    env = ClutteredGoals()
    env.reset(seed=seed)
    rng = np.random.default_rng(seed)

    def advance() -> None:
        _, _, terminated, truncated, _ = env.step(int(rng.integers(0, 3)))
        if terminated or truncated:
            env.reset()

    return env.render, advance


def marlgrid_setup(seed: int, agent_views: bool) -> tuple[Callable[[], Any], Callable[[], None]]:
    import marlgrid

    env = marlgrid.make(MARLGRID_ID, render_mode="rgb_array")
    env.render_tile_size = TILE
    env.render_agent_views = agent_views
    env.reset(seed=seed)
    rng = np.random.default_rng(seed)

    def advance() -> None:
        env.step({a: int(rng.integers(0, 3)) for a in env.agents})
        if not env.agents:
            env.reset()

    return env.render, advance


def measure(
    setup: Callable[[], tuple[Callable[[], Any], Callable[[], None]]], seconds: float
) -> dict[str, float]:
    """Frames per CPU-second and per wall-second of the render calls alone."""
    render, advance = setup()
    shape = render().shape  # the first frame builds caches (and compiles): untimed
    for _ in range(20):
        advance()
        render()
    frames, cpu, wall = 0, 0.0, 0.0
    while cpu < seconds:
        advance()
        c0, w0 = time.process_time(), time.perf_counter()
        render()
        cpu += time.process_time() - c0
        wall += time.perf_counter() - w0
        frames += 1
    return {"fps_cpu": frames / cpu, "fps_wall": frames / wall, "frames": frames, "shape": shape}


def main() -> None:
    p = argparse.ArgumentParser(description="Full-frame render speed, marlgrid vs MiniGrid.")
    p.add_argument("--seconds", type=float, default=3.0, help="CPU-seconds of render per repeat")
    p.add_argument("--repeats", type=int, default=2)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--json", default=None, help="also write the results here")
    args = p.parse_args()

    lines: dict[str, Callable[[], tuple[Callable[[], Any], Callable[[], None]]]] = {
        "minigrid": lambda: minigrid_setup(args.seed),
        "marlgrid": lambda: marlgrid_setup(args.seed, True),
        "marlgrid_map": lambda: marlgrid_setup(args.seed, False),
    }
    results: dict[str, Any] = {}
    for name, setup in lines.items():
        try:
            runs = [measure(setup, args.seconds) for _ in range(args.repeats)]
        except ImportError as err:
            print(f"{name:13s} SKIPPED ({err})")
            continue
        best = max(runs, key=lambda r: r["fps_cpu"])
        results[name] = {"best": best, "runs": runs}
        h, w = best["shape"][:2]
        each = ", ".join(f"{r['fps_cpu']:.0f}" for r in runs)
        print(
            f"{name:13s} {best['fps_cpu']:8.0f} frames/CPU-s {best['fps_wall']:8.0f} frames/s "
            f"wall  frame {h}x{w}  (repeats: {each})"
        )
    if "minigrid" in results:
        base = results["minigrid"]["best"]["fps_cpu"]
        for name in ("marlgrid", "marlgrid_map"):
            if name in results:
                ratio = results[name]["best"]["fps_cpu"] / base
                results[name]["ratio_vs_minigrid"] = ratio
                print(f"ratio {name} / minigrid: {ratio:.1f}x")
    if args.json:
        versions = {}
        for pkg in ("marlgrid", "minigrid", "numpy", "numba"):
            try:
                versions[pkg] = metadata.version(pkg)
            except metadata.PackageNotFoundError:
                versions[pkg] = None
        meta = {"python": platform.python_version(), "machine": platform.machine(), **versions}
        with open(args.json, "w") as fh:
            json.dump({"results": results, "meta": meta, "args": vars(args)}, fh, indent=2)


if __name__ == "__main__":
    main()
