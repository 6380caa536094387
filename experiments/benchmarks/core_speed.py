"""Memory-core refresh speed: ``chunk_unroll`` against one bare inference pass, in the same run.

PPO's hidden-state refresh runs ``core.chunk_unroll(x, state, resets, chunk_len, post_t, post_b)``
over a whole rollout: outputs at every step, states at chunk starts, the final state and a few
post-step states at truncations, all exact. Its floor is one bare inference pass of the same
``nn.LSTM`` / ``nn.GRU`` module over the same ``(T, B, F)`` input with the resets ignored and no
state kept but the final one. Per case and core this script times both in turns (``--reps``
rounds, one of each per round, so a change of load hits both) in CPU time of this process (one
torch thread; wall-clock medians are kept in the JSON too), reports the medians and their ratio
against the target (<= 1.3x), and checks the refresh against a step-by-step recomputation.

    python experiments/benchmarks/core_speed.py
    python experiments/benchmarks/core_speed.py --json experiments/results/core_speed.json
    python experiments/benchmarks/core_speed.py --cases cartpole --kinds lstm --reps 50
    python experiments/benchmarks/core_speed.py --chunk-len 16 --reset-prob 0.05

Cases (``--cases``): ``cartpole`` (B 8, F 4, H 64, as the PPO benchmark's CartPole networks) and
``marlgrid_b{B}_h{H}`` (F 128, the features of the marlgrid encoder), all with T 128, chunk 8.

A second table times the Transformer-XL core (``trxl``, :mod:`marlgrid.agents.memory.trxl`):
its layer-parallel chunk pass (the same ``chunk_unroll`` refresh) against the acting path run
step by step (128 single-step calls), target >= 3x faster, and the largest difference between
the two. Cases (``--trxl-cases``, none to skip): ``b{B}_h{D}_l{L}`` with F 128, 2 layers,
4 heads, T 128, chunk 8.
"""

from __future__ import annotations

import argparse
import json
import platform
import statistics
import sys
import time
from dataclasses import asdict, dataclass, replace

import torch

from marlgrid.agents.memory import MemoryCore, make_memory

TARGET = 1.3  # refresh time <= 1.3x one bare inference pass
TRXL_TARGET = 3.0  # TrXL chunk pass >= 3x faster than the step-by-step acting path


@dataclass(frozen=True)
class Case:
    """One rollout shape."""

    name: str
    batch: int  # B: slots
    features: int  # F: input width of the core
    hidden: int  # H
    steps: int = 128  # T
    chunk_len: int = 8


CASES = {
    c.name: c
    for c in (
        Case("cartpole", 8, 4, 64),
        Case("marlgrid_b16_h64", 16, 128, 64),
        Case("marlgrid_b16_h128", 16, 128, 128),
        Case("marlgrid_b32_h128", 32, 128, 128),
        Case("marlgrid_b64_h128", 64, 128, 128),
    )
}


@dataclass
class Result:
    case: str
    kind: str
    floor_ms: float  # median CPU time of the bare inference pass
    refresh_ms: float  # median CPU time of chunk_unroll
    ratio: float  # refresh_ms / floor_ms
    ratio_of_rounds: float  # median over rounds of (refresh / floor) in the same round
    floor_wall_ms: float  # the same in wall-clock time
    refresh_wall_ms: float
    min_ratio: float  # fastest refresh / fastest floor (least disturbed by other load)
    max_err: float  # chunk_unroll against the step-by-step recomputation
    inner_resets: int
    post_requests: int


def rollout(case: Case, core: MemoryCore, reset_prob: float, seed: int) -> tuple:
    """Inputs, a random start state, random resets, and post requests at truncations: the step
    before a reset, half of the time, plus the last step of two slots."""
    gen = torch.Generator().manual_seed(seed)
    T, B = case.steps, case.batch
    x = torch.randn(T, B, case.features, generator=gen)
    state = 0.5 * torch.randn(B, core.state_size, generator=gen)
    resets = torch.rand(T, B, generator=gen) < reset_prob
    trunc = torch.zeros(T, B, dtype=torch.bool)
    trunc[:-1] = resets[1:] & (torch.rand(T - 1, B, generator=gen) < 0.5)
    trunc[-1, : min(2, B)] = True
    post_t, post_b = trunc.nonzero(as_tuple=True)
    return x, state, resets, post_t, post_b


def build(kind: str, case: Case, seed: int) -> MemoryCore:
    torch.manual_seed(seed)
    core = make_memory(kind, case.features, case.hidden)
    with torch.no_grad():  # non-zero biases, as after some training
        for p in core.parameters():
            if p.dim() == 1:
                p.add_(0.1 * torch.randn_like(p))
    return core.eval()


def floor_pass(core: MemoryCore, x: torch.Tensor, state: torch.Tensor) -> torch.Tensor:
    """One ``nn.LSTM`` / ``nn.GRU`` call over the whole rollout, resets ignored."""
    rnn = core.rnn
    hx = core.split_state(state)
    if isinstance(rnn, torch.nn.LSTM):
        return rnn(x, (hx["h"][None].contiguous(), hx["c"][None].contiguous()))[0]
    return rnn(x, hx["h"][None].contiguous())[0]


def step_by_step(core: MemoryCore, x, state, resets, chunk_len, post_t, post_b) -> tuple:
    """Reference: T single-step calls (the acting path), states kept at every step."""
    outs, used, posts = [], [], []
    s = state
    for t in range(x.shape[0]):
        used.append(core.reset_state(s, resets[t]))
        o, s = core(x[t : t + 1], s, resets[t : t + 1])
        outs.append(o[0])
        posts.append(s)
    post = torch.stack(posts)
    return torch.stack(outs), torch.stack(used)[::chunk_len], s, post[post_t, post_b]


def measure(kind: str, case: Case, reps: int, reset_prob: float, seed: int) -> Result:
    core = build(kind, case, seed)
    x, state, resets, post_t, post_b = rollout(case, core, reset_prob, seed)
    L = case.chunk_len

    def refresh() -> object:
        return core.chunk_unroll(x, state, resets, L, post_t, post_b)

    floors, refreshes, walls = [], [], ([], [])
    with torch.inference_mode():
        got = refresh()
        ref = step_by_step(core, x, state, resets, L, post_t, post_b)
        pairs = zip(got, ref, strict=True)
        err = max(float((a - b).abs().max()) if a.numel() else 0.0 for a, b in pairs)
        for _ in range(3):  # warm-up (oneDNN primitive caches, allocator)
            floor_pass(core, x, state)
            refresh()
        for i in range(reps):
            for which in (0, 1) if i % 2 == 0 else (1, 0):
                t0, w0 = time.process_time(), time.perf_counter()
                floor_pass(core, x, state) if which == 0 else refresh()
                (floors if which == 0 else refreshes).append(time.process_time() - t0)
                walls[which].append(time.perf_counter() - w0)
    f, r = statistics.median(floors), statistics.median(refreshes)
    per_round = statistics.median(b / a for a, b in zip(floors, refreshes, strict=True))
    fw, rw = (statistics.median(w) * 1e3 for w in walls)
    inner = int(resets[1:].sum())
    best = min(refreshes) / min(floors)
    return Result(
        case.name, kind, f * 1e3, r * 1e3, r / f, per_round, fw, rw, best, err, inner, len(post_t)
    )


@dataclass(frozen=True)
class TrXLCase:
    """One rollout shape for the TrXL core."""

    name: str
    batch: int  # B
    hidden: int  # D
    memory_length: int  # L
    features: int = 128  # F
    n_layers: int = 2
    n_heads: int = 4
    steps: int = 128  # T
    chunk_len: int = 8


TRXL_CASES = {
    c.name: c
    for c in (
        TrXLCase("b16_h64_l32", 16, 64, 32),
        TrXLCase("b16_h128_l32", 16, 128, 32),
        TrXLCase("b32_h128_l64", 32, 128, 64),
    )
}


@dataclass
class TrXLResult:
    case: str
    chunk_ms: float  # median CPU time of chunk_unroll over the rollout (one layer-parallel pass)
    steps_ms: float  # median CPU time of T single-step calls (the acting path)
    speedup: float  # steps_ms / chunk_ms
    chunk_wall_ms: float
    steps_wall_ms: float
    max_err: float  # chunk_unroll against the step-by-step recomputation
    state_kib: float  # state size per slot


def measure_trxl(case: TrXLCase, reps: int, reset_prob: float, seed: int) -> TrXLResult:
    torch.manual_seed(seed)
    opts = {"memory_length": case.memory_length, "n_layers": case.n_layers}
    core = make_memory("trxl", case.features, case.hidden, n_heads=case.n_heads, **opts).eval()
    shape = Case(case.name, case.batch, case.features, case.hidden, case.steps, case.chunk_len)
    x, _, resets, post_t, post_b = rollout(shape, core, reset_prob, seed)
    L, T = case.chunk_len, case.steps
    with torch.inference_mode():  # a start state from a previous stretch of the episode
        warm = torch.randn(case.memory_length, case.batch, case.features)
        no_resets = torch.zeros(case.memory_length, case.batch, dtype=torch.bool)
        state = core(warm, core.initial_state(case.batch), no_resets)[1]

    def chunk_pass() -> object:
        return core.chunk_unroll(x, state, resets, L, post_t, post_b)

    def acting() -> None:
        s = state
        for t in range(T):
            s = core(x[t : t + 1], s, resets[t : t + 1])[1]

    cpu, wall = ([], []), ([], [])
    with torch.inference_mode():
        got = chunk_pass()
        ref = step_by_step(core, x, state, resets, L, post_t, post_b)
        pairs = zip(got, ref, strict=True)
        err = max(float((a - b).abs().max()) if a.numel() else 0.0 for a, b in pairs)
        chunk_pass(), acting()  # warm-up
        for i in range(reps):
            for which in (0, 1) if i % 2 == 0 else (1, 0):
                t0, w0 = time.process_time(), time.perf_counter()
                chunk_pass() if which == 0 else acting()
                cpu[which].append(time.process_time() - t0)
                wall[which].append(time.perf_counter() - w0)
    c, st = (statistics.median(v) * 1e3 for v in cpu)
    cw, sw = (statistics.median(v) * 1e3 for v in wall)
    kib = core.state_size * 4 / 1024
    return TrXLResult(case.name, c, st, st / c, cw, sw, err, kib)


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--cases", nargs="+", default=list(CASES), choices=list(CASES))
    p.add_argument("--kinds", nargs="+", default=["lstm", "gru"])
    p.add_argument("--reps", type=int, default=30, help="timed rounds per case and core")
    p.add_argument("--reset-prob", type=float, default=0.02, help="per step and slot")
    p.add_argument("--chunk-len", type=int, default=8, help="chunk length of the refresh")
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--trxl-cases", nargs="*", default=list(TRXL_CASES), choices=list(TRXL_CASES))
    p.add_argument("--trxl-reps", type=int, default=5, help="timed rounds per TrXL case")
    p.add_argument("--json", metavar="PATH", help="also write the results as JSON here")
    args = p.parse_args(argv)
    torch.set_num_threads(args.threads)
    results = []
    print(
        f"{'case':<20s} {'core':<5s} {'floor ms':>9s} {'refresh ms':>10s} {'ratio':>6s} "
        f"{'target':>7s} {'min':>6s} {'max err':>8s} {'resets':>6s}"
    )
    for name in args.cases:
        for kind in args.kinds:
            case = replace(CASES[name], chunk_len=args.chunk_len)
            r = measure(kind, case, args.reps, args.reset_prob, args.seed)
            results.append(r)
            verdict = "PASS" if r.ratio <= TARGET else "FAIL"
            print(
                f"{r.case:<20s} {r.kind:<5s} {r.floor_ms:9.3f} {r.refresh_ms:10.3f} "
                f"{r.ratio:5.2f}x {verdict:>7s} {r.min_ratio:5.2f}x {r.max_err:8.1e} "
                f"{r.inner_resets:6d}",
                flush=True,
            )
    trxl = []
    if args.trxl_cases:
        print(
            f"\n{'trxl case':<20s} {'chunk ms':>9s} {'steps ms':>9s} {'speedup':>8s} "
            f"{'target':>7s} {'max err':>8s} {'KiB/slot':>8s}"
        )
    for name in args.trxl_cases:
        r = measure_trxl(TRXL_CASES[name], args.trxl_reps, args.reset_prob, args.seed)
        trxl.append(r)
        verdict = "PASS" if r.speedup >= TRXL_TARGET else "FAIL"
        print(
            f"{r.case:<20s} {r.chunk_ms:9.2f} {r.steps_ms:9.2f} {r.speedup:7.2f}x "
            f"{verdict:>7s} {r.max_err:8.1e} {r.state_kib:8.1f}",
            flush=True,
        )
    if args.json:
        meta = {
            "python": sys.version.split()[0],
            "torch": torch.__version__,
            "machine": platform.processor() or platform.machine(),
            "threads": args.threads,
            "reps": args.reps,
            "reset_prob": args.reset_prob,
            "chunk_len": args.chunk_len,
            "target": TARGET,
            "trxl_target": TRXL_TARGET,
            "trxl_reps": args.trxl_reps,
        }
        out = {"meta": meta, "results": [asdict(r) for r in results]}
        out["trxl"] = [asdict(r) for r in trxl]
        with open(args.json, "w") as f:
            json.dump(out, f, indent=1)


if __name__ == "__main__":
    main()
