"""Cost ledger of the training loops the result pages use: where the wall time goes, against
the arithmetic floor of the network work.

Each loop is an ordinary training run of :class:`~marlgrid.agents.training.trainer.Trainer`
(the config ``experiments/train.py`` composes from the loop's overrides) in a scratch run
directory, with logging, checkpoints and social metrics as a page's run has them (no video, no
evaluation). After ``--warmup`` untimed iterations, ``--iterations`` are timed; wrappers on the
loop's methods split their wall time into phases (each phase counts its own time, not that of
phases nested in it):

========== ===================================================================================
phase      what it times
========== ===================================================================================
env        the batched env's ``step`` (engine, views, rewards, autoreset)
obs        numpy -> torch: views to per-slot tensors (``obs_to_tensor``, ``stack_agents``)
act        the learners' acting forwards (``PolicyGroup.act``, bootstrap ``value``)
frozen     frozen policies' acting forwards
scripted   scripted policies' ``scripted_actions``
social     social metrics (the observer's ``before_step`` / ``after_step``)
log        metrics, CSV / TensorBoard rows, checkpoints, curriculum (callbacks)
storage    recording steps (rollout buffer / replay writes, GAE) and gathering minibatches
update     the update's forward passes and loss (its remainder)
backward   ``loss.backward()``
optimizer  zeroing and clipping gradients, the optimizer step, target-network copies
refresh    hidden-state refreshes of stored states
rest       everything else in the loop (Python glue of the rollout and the trainer)
========== ===================================================================================

The **floor** is the network's arithmetic: one more iteration runs under a dispatch mode that
records every matrix product (``mm``, ``addmm``, ``bmm``, ``linear``, the fused RNN layers as
their input-projection and per-step recurrent products, twice that for their backward) and
every convolution (its backward as two of its forward) with its shape and phase; each distinct
shape is then timed alone, in this run, with the loop's torch threads (best of several
repeats), and the floor is the sum of count x time. It leaves out the env, lookups
(``embedding_bag``), elementwise work and the optimizer, so it is about a lower bound on the
loop's wall time (a convolution's backward may take less than twice its forward). The
headline is wall / floor per loop.

    python experiments/benchmarks/ledger.py                      # every loop, 1 thread
    python experiments/benchmarks/ledger.py --loops canonical --threads 2
    python experiments/benchmarks/ledger.py --json experiments/results/ledger.json

See README.md beside this file ("Cost ledger").
"""

from __future__ import annotations

import argparse
import json
import os
import tempfile
import time
from collections import Counter, defaultdict
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]

EXPERT = "experiments/experts/goal_cycle_7x7_3agents_curriculum_seed1.pt"
FINDINGS_EXTRAS = "env.settings.agent.extras=[reward,action]"
#: the loops: name -> (what it is, train.py overrides)
LOOPS: dict[str, tuple[str, list[str]]] = {
    "canonical": (
        "3 agents, one shared ppo_lstm_fast network, GoalCycle 13x13, 8 envs",
        ["env=goal_cycle_13x13_3agents", "agent=ppo_lstm_fast"],
    ),
    "scripted_experts": (
        "novice (ppo_lstm_fast) beside 2 scripted oracles, GoalCycle 7x7, 16 envs",
        ["experiment=novice_with_experts", "scale=small"],
    ),
    "frozen_experts": (
        "novice (ppo_lstm_fast) beside 2 frozen trained experts, GoalCycle 7x7, 16 envs",
        [
            "experiment=novice_with_experts",
            "scale=small",
            "roles=novice_with_trained_experts",
            f"roles.agent_1.checkpoint={EXPERT}",
        ],
    ),  # fmt: skip
    "findings_novice": (
        "the findings pages' novice (ppo_lstm_expert, reward and action inputs) beside 2 "
        "scripted oracles, GoalCycle 7x7, 16 envs",
        ["experiment=novice_with_experts", "scale=small", "agent=ppo_lstm_expert", FINDINGS_EXTRAS],
    ),
    "findings_novice_aux": (
        "the same novice with the next-view loss (ppo_lstm_expert_aux, R3's arm A)",
        [
            "experiment=novice_with_experts",
            "scale=small",
            "agent=ppo_lstm_expert_aux",
            FINDINGS_EXTRAS,
        ],
    ),  # fmt: skip
    "main_job": ("the README's main job: ppo_lstm (conv encoder) on the 7x7 T-maze, 8 envs", []),
    "main_job_fast": ("the main job with ppo_lstm_fast", ["agent=ppo_lstm_fast"]),
    "drqn": (
        "DRQN (LSTM), Empty-8x8, 8 envs",
        ["agent=drqn", "env.id=MarlGrid-Empty-8x8-v0", "env.num_envs=8", "env.settings={}"],
    ),
    "popgym": (
        "the POPGym preset (GRU 256), RepeatPreviousEasy, 16 envs",
        [
            "agent=ppo_popgym",
            "env.id=popgym:RepeatPreviousEasy",
            "env.num_envs=16",
            "env.settings={}",
        ],
    ),  # fmt: skip
}
PHASES = ("env", "obs", "act", "frozen", "scripted", "social", "log", "storage", "update",
          "backward", "optimizer", "refresh", "rest")  # fmt: skip


# -- phase timing ---------------------------------------------------------------------------------


class PhaseTimer:
    """Exclusive wall seconds by phase: time inside a nested phase counts for it, not its parent."""

    def __init__(self) -> None:
        self.seconds: dict[str, float] = defaultdict(float)
        self.stack: list[list[Any]] = []  # [phase, start, seconds of nested phases]

    @property
    def current(self) -> str:
        return self.stack[-1][0] if self.stack else "rest"

    @contextmanager
    def phase(self, name: str) -> Iterator[None]:
        frame = [name, time.perf_counter(), 0.0]
        self.stack.append(frame)
        try:
            yield
        finally:
            self.stack.pop()
            spent = time.perf_counter() - frame[1]
            self.seconds[name] += spent - frame[2]
            if self.stack:
                self.stack[-1][2] += spent

    def wrap(self, name: str | Callable[..., str], fn: Callable[..., Any]) -> Callable[..., Any]:
        """``fn`` timed as phase ``name`` (or ``name(*args)``, chosen per call)."""

        def timed(*args: Any, **kwargs: Any) -> Any:
            with self.phase(name(*args) if callable(name) else name):
                return fn(*args, **kwargs)

        timed.__wrapped__ = fn  # type: ignore[attr-defined]
        return timed

    def take(self) -> dict[str, float]:
        out, self.seconds = dict(self.seconds), defaultdict(float)
        return out


class Patches:
    """Attribute replacements undone on exit (class methods, module functions)."""

    def __init__(self) -> None:
        self.saved: list[tuple[Any, str, Any]] = []

    def set(self, owner: Any, name: str, value: Any) -> None:
        self.saved.append((owner, name, owner.__dict__.get(name, getattr(owner, name))))
        setattr(owner, name, value)

    def wrap(self, timer: PhaseTimer, owner: Any, name: str, phase: Any) -> None:
        self.set(owner, name, timer.wrap(phase, getattr(owner, name)))

    def undo(self) -> None:
        for owner, name, value in reversed(self.saved):
            setattr(owner, name, value)
        self.saved.clear()


def instrument(timer: PhaseTimer, trainer: Any) -> Patches:
    """Wrap the methods of ``trainer``'s loop in phases (see the module docstring)."""
    import torch

    from marlgrid import vector
    from marlgrid.agents.bookkeeping import logger
    from marlgrid.agents.training import callbacks, rollout, social_observer, streams

    p = Patches()
    p.wrap(timer, vector.VectorEnv, "step", "env")
    p.wrap(timer, rollout.SingleAgentBatch, "step", "env")
    for fn in ("obs_to_tensor", "slot_obs", "obs_repeat"):
        p.wrap(timer, rollout, fn, "obs")
    p.wrap(timer, rollout.PolicyGroup, "act", lambda g: "act" if g.train else "frozen")
    p.wrap(timer, rollout.PolicyGroup, "record", "storage")
    p.wrap(timer, social_observer.SocialObserver, "before_step", "social")
    p.wrap(timer, social_observer.SocialObserver, "after_step", "social")
    p.wrap(timer, logger.Logger, "log", "log")
    p.wrap(timer, streams.EnvStream, "pop_metrics", "log")
    for name in ("on_rollout_end", "on_update_end"):
        p.wrap(timer, callbacks.CallbackList, name, "log")
    p.wrap(timer, torch.Tensor, "backward", "backward")
    seen: set[int] = set()
    for stream in trainer.streams:
        for policy in stream.scripted.values():
            p.wrap(timer, policy, "scripted_actions", "scripted")
        for g in stream.groups:
            learner = g.learner
            if id(learner) in seen:
                continue
            seen.add(id(learner))
            if not g.train:
                continue
            if hasattr(learner, "value"):
                p.wrap(timer, learner, "value", "act")
            p.wrap(timer, learner, "update", "update")
            for name in ("minibatch", "sample", "refresh", "update_target"):
                if hasattr(learner, name):
                    phase = {"minibatch": "storage", "sample": "storage"}.get(name, name)
                    phase = "optimizer" if name == "update_target" else phase
                    p.wrap(timer, learner, name, phase)
            for holder, name in ((learner, "optimizer"), (learner, "grads")):
                obj = getattr(holder, name, None)
                for method in ("step", "zero", "clip_"):
                    if obj is not None and hasattr(obj, method):
                        p.wrap(timer, obj, method, "optimizer")
            replay = getattr(learner, "replay", None)
            if replay is not None and hasattr(replay, "sample"):
                p.wrap(timer, replay, "sample", "storage")
    return p


# -- the floor: matrix products recorded by shape ------------------------------------------------


def matmul_census(timer: PhaseTimer) -> Any:
    """A dispatch mode that counts the matrix products of the ops it sees, by phase and shape:
    ``("mm", (m, k, n))`` (fused RNN layers as their products) or ``("conv", (input shape,
    weight shape, stride, padding, dilation, groups))`` (a convolution's backward counts as two
    of its forward)."""
    import torch
    from torch.utils._python_dispatch import TorchDispatchMode

    aten = torch.ops.aten

    class Census(TorchDispatchMode):
        def __init__(self) -> None:
            super().__init__()
            self.counts: Counter[tuple[str, tuple[str, tuple[Any, ...]]]] = Counter()

        def add(self, m: int, k: int, n: int, times: int = 1) -> None:
            self.counts[(timer.current, ("mm", (int(m), int(k), int(n))))] += times

        def add_conv(self, x: Any, w: Any, rest: tuple[Any, ...], times: int) -> None:
            stride, padding, dilation, groups = (tuple(r) if isinstance(r, (list, tuple))
                                                 else int(r) for r in rest)  # fmt: skip
            spec = (tuple(x.shape), tuple(w.shape), stride, padding, dilation, groups)
            self.counts[(timer.current, ("conv", spec))] += times

        def __torch_dispatch__(self, func, types, args=(), kwargs=None):  # noqa: ANN001
            kwargs = kwargs or {}
            packet = func.overloadpacket
            if packet in (aten.mm, aten.addmm):
                a, b = (args[0], args[1]) if packet is aten.mm else (args[1], args[2])
                self.add(a.shape[0], a.shape[1], b.shape[1])
            elif packet is aten.linear:  # not decomposed under inference mode
                x, w = args[0], args[1]
                self.add(x.numel() // x.shape[-1], w.shape[1], w.shape[0])
            elif packet in (aten.lstm, aten.gru) and isinstance(args[2], (list, tuple)):
                x, params, batch_first = args[0], args[2], args[-1]  # fused, one layer
                T, B = (x.shape[1], x.shape[0]) if batch_first else x.shape[:2]
                gh, h = params[0].shape[0], params[1].shape[1]
                self.add(T * B, x.shape[-1], gh)
                self.add(B, h, gh, T)
            elif packet in (aten.bmm, aten.baddbmm):
                a, b = (args[0], args[1]) if packet is aten.bmm else (args[1], args[2])
                self.add(a.shape[1], a.shape[2], b.shape[2], a.shape[0])
            elif packet is aten.convolution:  # input, weight, bias, stride, padding, dilation,
                # transposed, output padding, groups
                self.add_conv(args[0], args[1], (args[3], args[4], args[5], args[8]), 1)
            elif packet is aten.convolution_backward:  # grad, input, weight, bias sizes, ...
                self.add_conv(args[1], args[2], (args[4], args[5], args[6], args[9]), 2)
            elif packet in (aten.mkldnn_rnn_layer, aten.mkldnn_rnn_layer_backward):
                x, w_ih = args[0], args[1]
                T, B, F = x.shape
                gh, h = w_ih.shape[0], args[2].shape[1]
                times = 1 if packet is aten.mkldnn_rnn_layer else 2
                self.add(T * B, F, gh, times)
                self.add(B, h, gh, T * times)
            return func(*args, **kwargs)

    return Census()


def best_time(fn: Callable[[], Any], repeats: int = 7, min_seconds: float = 0.05) -> float:
    """Seconds of one call of ``fn``, best of ``repeats`` timed batches of calls."""
    fn()
    t0, calls = time.perf_counter(), 0
    while time.perf_counter() - t0 < min_seconds / 4:
        fn()
        calls += 1
    best = float("inf")
    for _ in range(repeats):
        t0 = time.perf_counter()
        for _ in range(calls):
            fn()
        best = min(best, (time.perf_counter() - t0) / calls)
    return best


def time_matmul(shape: tuple[int, int, int], repeats: int = 7, min_seconds: float = 0.05) -> float:
    """Seconds of one ``torch.mm`` of ``(m, k) @ (k, n)`` in float32, best of ``repeats``."""
    import torch

    m, k, n = shape
    a, b, out = torch.randn(m, k), torch.randn(k, n), torch.empty(m, n)
    return best_time(lambda: torch.mm(a, b, out=out), repeats, min_seconds)


def work_time_and_flop(item: tuple[str, tuple[Any, ...]]) -> tuple[float, float]:
    """Seconds and FLOP of one product of the census (timed alone, float32)."""
    import torch

    kind, spec = item
    if kind == "mm":
        m, k, n = spec
        return time_matmul(spec), 2.0 * m * k * n
    x_shape, w_shape, stride, padding, dilation, groups = spec
    x, w = torch.randn(x_shape), torch.randn(w_shape)
    conv = {3: torch.conv1d, 4: torch.conv2d, 5: torch.conv3d}[len(x_shape)]

    def run() -> Any:
        return conv(x, w, None, stride, padding, dilation, groups)

    with torch.no_grad():
        seconds = best_time(run)
        out = run()
    return seconds, 2.0 * out.numel() * w[0].numel()


# -- one loop -------------------------------------------------------------------------------------


@dataclass
class LoopLedger:
    """One loop's ledger: wall seconds per 1k agent-steps by phase, its floor and their ratio."""

    name: str
    what: str
    overrides: list[str]
    threads: int
    status: str = "ok"
    reason: str = ""
    agents: int = 0
    env_steps: int = 0  # timed
    wall_s: float = 0.0
    cpu_s: float = 0.0
    phases_s: dict[str, float] = field(default_factory=dict)
    gflop: float = 0.0  # matrix-product GFLOP of the timed iterations (census x iterations)
    floor_s: float = 0.0
    floor_phases_s: dict[str, float] = field(default_factory=dict)
    shapes: int = 0  # distinct product shapes timed

    @property
    def agent_steps(self) -> int:
        return self.env_steps * self.agents

    @property
    def ratio(self) -> float:
        return self.wall_s / self.floor_s if self.floor_s else float("nan")

    def per_k(self, seconds: float) -> float:
        """Milliseconds per 1k agent-steps."""
        return 1e6 * seconds / self.agent_steps if self.agent_steps else float("nan")


def run_loop(name: str, threads: int, warmup: int, iterations: int, extra: list[str]) -> LoopLedger:
    """Train loop ``name`` for ``warmup + 1 + iterations`` iterations and return its ledger."""
    import torch

    from experiments.benchmarks.ppo_speed import compose_train as compose
    from marlgrid.agents.training.callbacks import Callback
    from marlgrid.agents.training.train_config import iteration_steps
    from marlgrid.agents.training.trainer import Trainer

    what, overrides = LOOPS[name]
    overrides = [*overrides, *extra]
    res = LoopLedger(name, what, overrides, threads)
    base = compose(overrides)
    steps_per_iteration = iteration_steps(base) * base.env.num_envs
    starts = getattr(base.agent, "learning_starts", 0)  # replay learners: census past it
    warmup = max(warmup, -(-starts // steps_per_iteration) + 1)
    total = steps_per_iteration * (warmup + 1 + iterations)
    cfg = compose([*overrides, f"total_timesteps={total}", f"torch_threads={threads}",
                   "video=false", "eval_every=0", "logger.progress=false",
                   "logger.print_every=0"])  # fmt: skip
    timer = PhaseTimer()
    census = matmul_census(timer)
    marks: list[tuple[float, float]] = []

    class Marks(Callback):
        def on_update_end(self, trainer: Any, metrics: dict[str, float]) -> bool:
            i = trainer.iteration
            if i == warmup:  # the census iteration follows
                timer.take()
                census.__enter__()
            elif i == warmup + 1:
                census.__exit__(None, None, None)
                timer.take()
                marks.append((time.perf_counter(), time.process_time()))
            return True

    with tempfile.TemporaryDirectory(prefix=f"ledger_{name}_") as tmp:
        trainer = Trainer(cfg, Path(tmp) / "run", [Marks()])
        res.agents = trainer.vec.num_agents
        patches = instrument(timer, trainer)
        try:
            trainer.run()
        finally:
            patches.undo()
        end = (time.perf_counter(), time.process_time())
    res.phases_s = timer.take()
    (w0, c0), (w1, c1) = marks[0], end
    res.wall_s, res.cpu_s = w1 - w0, c1 - c0
    res.env_steps = steps_per_iteration * iterations
    res.phases_s["rest"] = res.phases_s.get("rest", 0.0) + max(
        0.0, res.wall_s - sum(res.phases_s.values())
    )
    torch.set_num_threads(threads)
    per_item = {item: work_time_and_flop(item) for item in {i for _, i in census.counts}}
    floors: dict[str, float] = defaultdict(float)
    for (phase, item), count in census.counts.items():
        seconds, flop = per_item[item]
        floors[phase] += count * seconds * iterations
        res.gflop += 1e-9 * count * flop * iterations
    res.floor_phases_s, res.floor_s, res.shapes = dict(floors), sum(floors.values()), len(per_item)
    return res


# -- report ---------------------------------------------------------------------------------------


def print_ledger(results: list[LoopLedger]) -> None:
    ok = [r for r in results if r.status == "ok"]
    print("\nwall ms per 1k agent-steps, by phase (exclusive); floor: matrix products alone")
    head = f"{'loop':<18}" + "".join(f"{p:>9}" for p in PHASES) + f"{'wall':>9}{'floor':>8}"
    print(head + f"{'wall/floor':>11}{'ag-st/s':>9}")
    for r in ok:
        cells = "".join(f"{r.per_k(r.phases_s.get(p, 0.0)):9.1f}" for p in PHASES)
        print(f"{r.name:<18}{cells}{r.per_k(r.wall_s):9.1f}{r.per_k(r.floor_s):8.1f}"
              f"{r.ratio:10.2f}x{r.agent_steps / r.wall_s:9,.0f}")  # fmt: skip
    print("\nfloor ms per 1k agent-steps by phase, and the rate it implies")
    for r in ok:
        parts = ", ".join(f"{p} {r.per_k(s):.1f}" for p, s in sorted(r.floor_phases_s.items()))
        rate = r.gflop / r.floor_s if r.floor_s else float("nan")
        print(f"  {r.name:<18} {parts}  ({r.gflop:.2f} GFLOP timed, {rate:.0f} GFLOP/s,"
              f" {r.shapes} shapes)")  # fmt: skip
    for r in results:
        if r.status != "ok":
            print(f"  {r.name}: {r.status}: {r.reason}")


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--loops", nargs="+", choices=list(LOOPS), default=list(LOOPS))
    p.add_argument("--threads", type=int, default=1, help="torch threads of every loop")
    p.add_argument("--warmup", type=int, default=2, help="untimed iterations first")
    p.add_argument("--iterations", type=int, default=6, help="timed iterations")
    p.add_argument("--set", nargs="*", default=[], metavar="KEY=VALUE",
                   help="Hydra overrides added to every loop")  # fmt: skip
    p.add_argument("--json", default=None, help="also write the ledgers here")
    args = p.parse_args(argv)
    if args.threads < 1 or args.warmup < 0 or args.iterations < 1:
        p.error("--threads and --iterations must be >= 1 and --warmup >= 0")
    return args


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    os.chdir(ROOT)  # the loops' relative paths (the expert file) are the repository's
    results = []
    for name in args.loops:
        print(f"  {name}: {LOOPS[name][0]}", flush=True)
        try:
            results.append(run_loop(name, args.threads, args.warmup, args.iterations, args.set))
        except Exception as exc:  # noqa: BLE001 - report and go on with the other loops
            res = LoopLedger(name, LOOPS[name][0], LOOPS[name][1], args.threads)
            res.status, res.reason = "ERROR", f"{type(exc).__name__}: {exc}"
            results.append(res)
    print_ledger(results)
    if args.json:
        rows = [{**asdict(r), "agent_steps": r.agent_steps, "wall_over_floor": r.ratio}
                for r in results]  # fmt: skip
        Path(args.json).write_text(json.dumps({"loops": rows}, indent=1) + "\n")
    return 0 if all(r.status == "ok" for r in results) else 1


if __name__ == "__main__":
    raise SystemExit(main())
