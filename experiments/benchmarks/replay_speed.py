"""Replay speed benchmark: marlgrid's prioritized-replay sum tree against cpprb and tianshou.

Section ``tree``: in a tree of 2^20 leaves, one rep samples 64 indices, then writes 64 new
priorities at those indices. Every line is filled, warmed up and timed in this process, one after
another, for ``--rounds`` rounds; the median over all timed reps of each phase (sample, update)
and of their total is reported, in microseconds (``time.perf_counter_ns``, garbage collector off,
one numba/torch/BLAS thread). See README.md beside this file ("Replay speed").

    python experiments/benchmarks/replay_speed.py --json experiments/results/replay_speed.json
    python experiments/benchmarks/replay_speed.py --only tree --reps 1000

The peers are optional: install them into a separate venv (never a marlgrid dependency)::

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
# Sections selectable with --only. The DRQN training speed (env-steps/s against SB3 DQN) joins
# here as another ``name: run_function`` entry once the DRQN learner exists.

SECTIONS: dict[str, Callable[[argparse.Namespace], dict[str, Any]]] = {"tree": run_tree}


def environment_info() -> dict[str, Any]:
    versions = {}
    for pkg in ("marlgrid", "numpy", "numba", "torch", "cpprb", "tianshou"):
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
        out["sections"][name] = SECTIONS[name](args)
    out["loadavg_1_5_15_end"] = list(os.getloadavg())
    if args.json:
        os.makedirs(os.path.dirname(os.path.abspath(args.json)), exist_ok=True)
        with open(args.json, "w") as f:
            json.dump(out, f, indent=2)
        print(f"\nwrote {args.json}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
