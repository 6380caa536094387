"""Engine speed benchmark: marlgrid against MiniGrid and ini/multigrid.

Throughput is measured per CPU-second of this process (``time.process_time``, which sums all
threads), with wall-clock beside it, using uniformly random actions drawn from a pre-generated
array and resetting on episode end. Each measurement is repeated and the best repeat is reported.
Peers that cannot be imported are skipped with the reason, as is marlgrid while its engine is not
importable. See README.md beside this file for installation and what each line measures.

    python experiments/benchmarks/engine_speed.py --seconds 5 --repeats 2 --json results.json
"""

from __future__ import annotations

import argparse
import itertools
import json
import os
import platform
import sys
import time
import warnings
from collections.abc import Callable, Iterator
from dataclasses import asdict, dataclass, field, replace
from importlib import metadata
from typing import Any

import numpy as np

MINIGRID_ID = "MiniGrid-DoorKey-8x8-v0"
MULTIGRID_ID = "MultiGrid-Empty-16x16-v0"
MULTIGRID_AGENTS = 3
MARLGRID_ID = "MarlGrid-GoalCycle-13x13-3Agents-v0"
MARLGRID_NUM_ACTIONS = 7  # MiniGrid's action set: left, right, forward, pickup, drop, toggle, done
RGB_TILE_SIZE = 8  # MiniGrid RGBImgPartialObsWrapper tile size: a 7x7 view becomes 56x56x3
ACTION_POOL = 4096  # pre-generated action rows per single-env measurement
VEC_ACTION_POOL = 64  # pre-generated (num_envs, num_agents) batches per batched measurement
CLOCK_READ_INTERVAL_S = 0.01  # the harness reads the clock about this often

Step = Callable[[], object]


@dataclass
class Timing:
    """Calls made to a step callable and the CPU and wall time they took."""

    calls: int
    cpu_s: float
    wall_s: float


def time_calls(step: Step, seconds: float) -> Timing:
    """Call ``step`` repeatedly until ``seconds`` of process CPU time have passed.

    The clock is read after chunks of calls sized to take about ``CLOCK_READ_INTERVAL_S``, so
    reading it costs nothing measurable even for microsecond steps.
    """
    calls, chunk = 0, 1
    cpu0, wall0 = time.process_time(), time.perf_counter()
    while True:
        for _ in range(chunk):
            step()
        calls += chunk
        cpu = time.process_time() - cpu0
        if cpu >= seconds:
            return Timing(calls, cpu, time.perf_counter() - wall0)
        per_call = max(cpu / calls, 1e-9)
        chunk = max(1, int(min(CLOCK_READ_INTERVAL_S, seconds - cpu) / per_call))


@dataclass
class Bench:
    """One measurement: ``setup`` builds the env(s), resets, and returns the step callable."""

    name: str
    description: str
    env_id: str
    agents: int
    envs_per_call: int
    setup: Callable[[np.random.Generator], Step]


@dataclass
class Result:
    """Outcome of one measurement; rates are per CPU-second (best repeat) unless named wall."""

    name: str
    description: str
    env_id: str
    status: str = "ok"  # "ok", "skipped" or "error"
    reason: str = ""
    agents: int = 0
    envs_per_call: int = 0
    setup_wall_s: float = 0.0  # construction, first reset and first step (numba compilation)
    env_steps_per_cpu_s: float = 0.0
    agent_steps_per_cpu_s: float = 0.0
    agent_steps_per_wall_s: float = 0.0
    repeats: list[dict[str, float]] = field(default_factory=list)


def run_bench(bench: Bench, seconds: float, repeats: int, warmup: float, seed: int) -> Result:
    """Set up, warm up and time ``bench``; a failure is recorded rather than raised."""
    result = Result(bench.name, bench.description, bench.env_id, agents=bench.agents)
    result.envs_per_call = bench.envs_per_call
    t0 = time.perf_counter()
    try:
        step = bench.setup(np.random.default_rng(seed))
        step()
    except Exception as exc:
        result.status = "skipped" if isinstance(exc, ImportError) else "error"
        result.reason = f"{type(exc).__name__}: {exc}"
        return result
    result.setup_wall_s = time.perf_counter() - t0
    try:
        time_calls(step, warmup)
        timings = [time_calls(step, seconds) for _ in range(repeats)]
    except Exception as exc:
        result.status, result.reason = "error", f"{type(exc).__name__}: {exc}"
        return result
    for t in timings:
        env_steps = t.calls * bench.envs_per_call
        result.repeats.append(
            {
                "env_steps": env_steps,
                "cpu_s": t.cpu_s,
                "wall_s": t.wall_s,
                "agent_steps_per_cpu_s": env_steps * bench.agents / t.cpu_s,
                "agent_steps_per_wall_s": env_steps * bench.agents / t.wall_s,
            }
        )
    best = max(result.repeats, key=lambda r: r["agent_steps_per_cpu_s"])
    result.agent_steps_per_cpu_s = best["agent_steps_per_cpu_s"]
    result.agent_steps_per_wall_s = best["agent_steps_per_wall_s"]
    result.env_steps_per_cpu_s = result.agent_steps_per_cpu_s / bench.agents
    return result


# --- peers -----------------------------------------------------------------------------------


def _minigrid_env(rgb: bool) -> Any:
    """MiniGrid DoorKey-8x8 without gymnasium's checker wrappers; optionally RGB partial view."""
    import gymnasium as gym
    import minigrid  # noqa: F401  (registers the MiniGrid-* ids)
    from minigrid.wrappers import ImgObsWrapper, RGBImgPartialObsWrapper

    env = gym.make(MINIGRID_ID).unwrapped
    if rgb:
        env = ImgObsWrapper(RGBImgPartialObsWrapper(env, tile_size=RGB_TILE_SIZE))
    return env


def setup_minigrid(rng: np.random.Generator, rgb: bool = False) -> Step:
    """One MiniGrid env, one agent: reset on terminated or truncated."""
    env = _minigrid_env(rgb)
    env.reset(seed=0)
    actions = itertools.cycle(rng.integers(0, env.action_space.n, ACTION_POOL).tolist())

    def step() -> None:
        _, _, terminated, truncated, _ = env.step(next(actions))
        if terminated or truncated:
            env.reset()

    return step


def setup_multigrid(rng: np.random.Generator) -> Step:
    """ini/multigrid, 3 agents; actions are a dict keyed by int agent index (0..n-1)."""
    import gymnasium as gym
    import multigrid.envs  # noqa: F401  (registers the MultiGrid-* ids)

    env = gym.make(MULTIGRID_ID, agents=MULTIGRID_AGENTS).unwrapped
    env.reset(seed=0)  # first call compiles (or loads cached) numba kernels
    n = env.action_space[0].n
    rows = rng.integers(0, n, (ACTION_POOL, MULTIGRID_AGENTS)).tolist()
    actions = itertools.cycle([dict(enumerate(row)) for row in rows])

    def step() -> None:
        env.step(next(actions))
        if env.is_done():  # truncated, or every agent terminated (success ends all by default)
            env.reset()

    return step


# --- marlgrid ----------------------------------------------------------------------------------


def _import_marlgrid() -> Any:
    """Import marlgrid; an engine without ``make``/``make_vec`` counts as not importable yet."""
    try:
        import marlgrid
    except ModuleNotFoundError as exc:
        if exc.name != "marlgrid":
            raise ImportError(f"marlgrid engine not importable yet ({exc})") from exc
        hint = "not installed, or installed before marlgrid/__init__.py existed: pip install -e ."
        raise ImportError(f"marlgrid engine not importable yet ({exc}; {hint})") from exc
    except Exception as exc:
        raise ImportError(
            f"marlgrid engine not importable yet ({type(exc).__name__}: {exc})"
        ) from exc
    missing = [name for name in ("make", "make_vec") if not hasattr(marlgrid, name)]
    if missing:
        raise ImportError(
            f"marlgrid engine not ready yet: no marlgrid.{', marlgrid.'.join(missing)}"
        )
    return marlgrid


def setup_marlgrid_pz(rng: np.random.Generator) -> Step:
    """marlgrid PettingZoo ParallelEnv: a dict of int actions for live agents; reset when none.

    Action dicts are built before timing, as for multigrid; a dict is built per step only while
    some agents are out of play.
    """
    env = _import_marlgrid().make(MARLGRID_ID)
    env.reset(seed=0)
    agents = list(env.possible_agents)
    rows = rng.integers(0, MARLGRID_NUM_ACTIONS, (ACTION_POOL, len(agents))).tolist()
    actions = itertools.cycle([dict(zip(agents, row, strict=True)) for row in rows])

    def step() -> None:
        full = next(actions)
        live = env.agents
        env.step(full if len(live) == len(agents) else {a: full[a] for a in live})
        if not env.agents:
            env.reset()

    return step


def setup_marlgrid_vec(rng: np.random.Generator, num_envs: int, rgb: bool = False) -> Step:
    """marlgrid batched API: (num_envs, num_agents) int actions, same-step autoreset."""
    agent_cfg = {"agent": {"observation": "rgb", "tile_size": RGB_TILE_SIZE}} if rgb else {}
    vec = _import_marlgrid().make_vec(MARLGRID_ID, num_envs=num_envs, **agent_cfg)
    vec.reset(seed=0)
    num_agents = int(getattr(vec, "num_agents", 0)) or _marlgrid_agents()
    actions: Iterator[np.ndarray] = itertools.cycle(
        rng.integers(0, MARLGRID_NUM_ACTIONS, (VEC_ACTION_POOL, num_envs, num_agents))
    )

    def step() -> None:
        vec.step(next(actions))

    return step


def _marlgrid_agents() -> int:
    """Number of agents in the marlgrid benchmark env, read from its PettingZoo API."""
    return len(_import_marlgrid().make(MARLGRID_ID).possible_agents)


# --- report ------------------------------------------------------------------------------------


@dataclass
class Ratio:
    """An acceptance ratio between two measurements' agent-steps per CPU-second."""

    name: str
    numerator: str
    denominator: str
    target: float
    value: float | None = None
    verdict: str = "SKIP"
    reason: str = ""


RATIOS = [
    Ratio("(a) marlgrid PettingZoo / multigrid", "marlgrid_pz", "multigrid", 2.0),
    Ratio("(b) marlgrid batched / multigrid", "marlgrid_vec", "multigrid", 10.0),
    Ratio("(c) marlgrid batched RGB / MiniGrid RGB", "marlgrid_vec_rgb", "minigrid_rgb", 50.0),
]


def build_benches(num_envs: int) -> list[Bench]:
    """All measurements, in report order."""
    n = MULTIGRID_AGENTS  # marlgrid's env id has 3 agents too
    mg, mrl = MINIGRID_ID, MARLGRID_ID
    return [
        Bench("minigrid", "MiniGrid DoorKey-8x8, symbolic", mg, 1, 1, setup_minigrid),
        Bench(
            "minigrid_rgb",
            "MiniGrid DoorKey-8x8, RGB partial 56x56x3",
            mg,
            1,
            1,
            lambda rng: setup_minigrid(rng, rgb=True),
        ),
        Bench("multigrid", "multigrid Empty-16x16, 3 agents", MULTIGRID_ID, n, 1, setup_multigrid),
        Bench("marlgrid_pz", "(a) marlgrid PettingZoo, symbolic", mrl, n, 1, setup_marlgrid_pz),
        Bench(
            "marlgrid_vec",
            f"(b) marlgrid batched x{num_envs}, symbolic",
            mrl,
            n,
            num_envs,
            lambda rng: setup_marlgrid_vec(rng, num_envs),
        ),
        Bench(
            "marlgrid_vec_rgb",
            f"(c) marlgrid batched x{num_envs}, RGB 56x56x3",
            mrl,
            n,
            num_envs,
            lambda rng: setup_marlgrid_vec(rng, num_envs, rgb=True),
        ),
    ]


def compute_ratios(results: dict[str, Result]) -> list[Ratio]:
    """Fill in each acceptance ratio whose two measurements both succeeded."""
    ratios = []
    for template in RATIOS:
        ratio = replace(template)
        missing = [
            n
            for n in (ratio.numerator, ratio.denominator)
            if n not in results or results[n].status != "ok"
        ]
        if missing:
            ratio.reason = "no result for " + ", ".join(missing)
        else:
            num = results[ratio.numerator].agent_steps_per_cpu_s
            ratio.value = num / results[ratio.denominator].agent_steps_per_cpu_s
            ratio.verdict = "PASS" if ratio.value >= ratio.target else "FAIL"
        ratios.append(ratio)
    return ratios


def environment_info() -> dict[str, Any]:
    """Machine, load and package versions, for the JSON record."""
    versions = {}
    for pkg in ("marlgrid", "minigrid", "multigrid", "gymnasium", "numpy", "numba", "pettingzoo"):
        try:
            versions[pkg] = metadata.version(pkg)
        except metadata.PackageNotFoundError:
            versions[pkg] = None
    return {
        "date": time.strftime("%Y-%m-%d %H:%M:%S"),
        "python": platform.python_version(),
        "platform": platform.platform(),
        "processor": platform.processor() or platform.machine(),
        "cpu_count": os.cpu_count(),
        "loadavg_1_5_15": list(os.getloadavg()) if hasattr(os, "getloadavg") else None,
        "versions": versions,
    }


def print_report(results: list[Result], ratios: list[Ratio]) -> None:
    """Print the results table and the acceptance ratios."""
    print()
    header = (
        f"{'measurement':<44} {'env-st/CPU-s':>13} {'agent-st/CPU-s':>15} {'agent-st/wall-s':>15}"
    )
    print(header + f" {'setup s':>8}")
    print("-" * (len(header) + 9))
    for r in results:
        if r.status == "ok":
            print(
                f"{r.description:<44} {r.env_steps_per_cpu_s:>13,.0f} "
                f"{r.agent_steps_per_cpu_s:>15,.0f} {r.agent_steps_per_wall_s:>15,.0f} "
                f"{r.setup_wall_s:>8.1f}"
            )
        else:
            print(f"{r.description:<44} {r.status.upper()}: {r.reason}")
    print()
    for ratio in ratios:
        target = f"target >= {ratio.target:g}x"
        if ratio.value is None:
            print(f"{ratio.name:<44} {'-':>9}  {target:<15} SKIP ({ratio.reason})")
        else:
            print(f"{ratio.name:<44} {ratio.value:>8.2f}x  {target:<15} {ratio.verdict}")


def parse_args(argv: list[str] | None, names: list[str]) -> argparse.Namespace:
    """Command-line options."""
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--seconds", type=float, default=5.0, help="CPU seconds per repeat (5)")
    p.add_argument("--repeats", type=int, default=2, help="repeats per measurement; best kept (2)")
    p.add_argument("--warmup", type=float, default=1.0, help="untimed CPU seconds after setup (1)")
    p.add_argument("--num-envs", type=int, default=256, help="envs in the batched API (256)")
    p.add_argument(
        "--only",
        nargs="+",
        choices=names,
        metavar="NAME",
        help=f"run only these measurements: {' '.join(names)}",
    )
    p.add_argument("--seed", type=int, default=0, help="seed of the pre-generated actions (0)")
    p.add_argument("--json", metavar="PATH", help="also write the results as JSON here")
    return p.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    """Run the selected measurements, print the report and optionally write JSON."""
    names = [b.name for b in build_benches(1)]
    args = parse_args(argv, names)
    benches = [b for b in build_benches(args.num_envs) if not args.only or b.name in args.only]
    # gymnasium warns about the peers' multi-agent dicts and obs space details: not our subject
    warnings.filterwarnings("ignore", module=r"gymnasium\..*")
    info = environment_info()
    print(
        f"{info['date']}  python {info['python']}  {info['cpu_count']} CPUs  "
        f"load {info['loadavg_1_5_15']}  {args.seconds:g} CPU-s x {args.repeats}, best kept"
    )
    results: list[Result] = []
    for bench in benches:
        print(f"  {bench.name} ...", end=" ", flush=True)
        result = run_bench(bench, args.seconds, args.repeats, args.warmup, args.seed)
        results.append(result)
        if result.status == "ok":
            print(
                f"{result.agent_steps_per_cpu_s:,.0f} agent-steps/CPU-s "
                f"(setup {result.setup_wall_s:.1f} s)",
                flush=True,
            )
        else:
            print(f"{result.status}: {result.reason}", flush=True)
    ratios = compute_ratios({r.name: r for r in results})
    print_report(results, ratios)
    if args.json:
        record = {
            **info,
            "args": vars(args),
            "results": [asdict(r) for r in results],
            "ratios": [asdict(r) for r in ratios],
        }
        with open(args.json, "w") as f:
            json.dump(record, f, indent=2)
        print(f"\nwrote {args.json}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
