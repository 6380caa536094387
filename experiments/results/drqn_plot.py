"""Figures and a CSV summary for experiments/results/drqn.md from its runs (drqn/arms.toml).

    python experiments/results/drqn_plot.py                      # reads runs/drqn_results
    python experiments/results/drqn_plot.py --greedy-episodes 0  # skip the greedy evaluation

Per run (``runs/drqn_results/<line>/seed_<k>``) it reads ``metrics.csv`` and ``train.log``:

- the curve: ``charts/episodic_length`` (mean length of the episodes that ended in a logged
  iteration of 1024 env steps), smoothed per seed over ``--smooth`` rows, each row weighted by
  the episodes it averages;
- training time: the cumulative ``charts/rollout_time + charts/update_time`` of the rows (the
  trainer's own clock: acting, env steps and updates; checkpoint writes and start-up excluded),
  and the run's wall time from ``train.log`` (first to last message of each session, summed);
- final length: the mean of the raw per-row lengths over the last ``--last`` rows (exploring, as
  trained); and, unless ``--greedy-episodes 0``, the mean length of that many greedy episodes of
  the final checkpoint on fresh envs (cached in ``greedy_length.json`` in the run directory);
- steps and training seconds until the smoothed length first falls to the line's threshold
  (``THRESHOLDS``, fixed before the runs: 20 steps on Empty-8x8, 30 on Cluttered-11x11),
  counted only past ``--min-step`` (the first three rows hold only the few episodes that ended
  early, a biased sample).

Per line, means come with Student-t 95% confidence intervals over seeds; curves are the mean
over seeds with a shaded 95% CI band (seeds interpolated onto a common step or time grid).
Lines without finished runs under ``--root`` keep their rows of ``drqn_summary.csv`` and their
figures as they are (a figure is drawn only from all its lines), so rerunning some lines
updates only theirs. With both lines of the 400-step soft-Q correction, its pre-registered
Welch tests (DRQN against DQN: final length; steps to the threshold) go to
``drqn_cl400_welch.csv``. The
random policy's episode length is played on each env for reference; on Empty-8x8 the mean
shortest-path length (BFS over position and heading, every start) is drawn too.
"""

from __future__ import annotations

import argparse
import csv
import json
import math
from pathlib import Path

import numpy as np
from scipy.stats import t as t_dist

from marlgrid.analysis.runs import wall_seconds
from marlgrid.analysis.stats import t_interval, welch

ROOT = Path(__file__).resolve().parents[2]
HERE = Path(__file__).resolve().parent
LENGTH = "charts/episodic_length"
#: line -> (label, env key)
LINES = {
    "e8_dqn": ("DQN (memoryless), eps-greedy, PER", "e8"),
    "e8_drqn": ("DRQN (LSTM), eps-greedy, PER", "e8"),
    "e8_drqn_uniform": ("DRQN, eps-greedy, uniform replay", "e8"),
    "e8_drqn_refresh": ("DRQN, PER, stored-state refresh every 64 updates", "e8"),
    "e8_soft_a0.005": ("DRQN, soft-Q Boltzmann, alpha 0.005", "e8"),
    "e8_soft_a0.02": ("DRQN, soft-Q Boltzmann, alpha 0.02", "e8"),
    "e8_soft_a0.1": ("DRQN, soft-Q Boltzmann, alpha 0.1", "e8"),
    "e8_ppo": ("PPO-LSTM", "e8"),
    "cl_dqn": ("DQN (memoryless), eps-greedy, PER", "cl"),
    "cl_drqn": ("DRQN (LSTM), eps-greedy, PER", "cl"),
    "cl_ppo": ("PPO-LSTM", "cl"),
    "cl400_soft_dqn": ("DQN (memoryless), soft-Q Boltzmann alpha 0.005, PER", "cl400"),
    "cl400_soft_drqn": ("DRQN (LSTM), soft-Q Boltzmann alpha 0.005, PER", "cl400"),
}
ENVS = {
    "e8": ("MarlGrid-Empty-8x8-v0", {"max_steps": 100}),
    "cl": ("MarlGrid-Cluttered-11x11-v0", {"max_steps": 100}),
    "cl400": ("MarlGrid-Cluttered-11x11-v0", {"max_steps": 400}),  # the blog's protocol
}
#: skill: smoothed mean episode length at or below this (cl400: a quarter of its step limit)
THRESHOLDS = {"e8": 20.0, "cl": 30.0, "cl400": 100.0}
#: the pre-registered DRQN-vs-DQN tests of the cl400 correction: (drqn line, dqn line)
CL400_PAIR = ("cl400_soft_drqn", "cl400_soft_dqn")
#: figure -> panels of (title, lines, env key, x axis: "step" or "time")
FIGURES = {
    "drqn_dqn_vs_drqn.png": [
        ("Empty-8x8, 100-step limit", ["e8_dqn", "e8_drqn"], "e8", "step"),
        ("Cluttered-11x11, 100-step limit", ["cl_dqn", "cl_drqn"], "cl", "step"),
    ],
    "drqn_cl400_soft.png": [
        ("Cluttered-11x11, 400-step limit, soft-Q alpha 0.005 (the blog's protocol)",
         ["cl400_soft_dqn", "cl400_soft_drqn"], "cl400", "step"),
    ],
    "drqn_per_vs_uniform.png": [
        ("Empty-8x8: PER vs uniform", ["e8_drqn", "e8_drqn_uniform"], "e8", "step"),
    ],
    "drqn_temperature.png": [
        ("Empty-8x8: soft-Q temperature",
         ["e8_soft_a0.005", "e8_soft_a0.02", "e8_soft_a0.1", "e8_drqn"], "e8", "step"),
    ],
    "drqn_wallclock.png": [
        ("Empty-8x8: wall-clock", ["e8_ppo", "e8_drqn", "e8_dqn"], "e8", "time"),
        ("Cluttered-11x11: wall-clock", ["cl_ppo", "cl_drqn", "cl_dqn"], "cl", "time"),
    ],
}  # fmt: skip
COLORS = ["tab:blue", "tab:orange", "tab:green", "tab:red", "tab:purple", "tab:brown"]


def t_ci(values) -> tuple[float, float]:
    """Mean and half-width of the Student-t 95% CI over ``values`` (NaNs dropped; the
    half-width is NaN below 2 values, both are NaN for none)."""
    v = np.asarray([x for x in values if np.isfinite(x)], dtype=float)
    if len(v) == 0:
        return float("nan"), float("nan")
    low, high = t_interval(v)
    return float(v.mean()), (high - low) / 2


def t_half_width(ys: np.ndarray) -> np.ndarray:
    """Half-width of the Student-t 95% CI of the mean over axis 0 (zeros for one row)."""
    k = ys.shape[0]
    if k < 2:
        return np.zeros(ys.shape[1:])
    return float(t_dist.ppf(0.975, k - 1)) * ys.std(0, ddof=1) / math.sqrt(k)


def smooth(values: np.ndarray, window: int, weights: np.ndarray | None = None) -> np.ndarray:
    """Trailing moving average over ``window`` rows (shorter at the start), weighted by
    ``weights`` (the episodes each row's mean is over) when given."""
    if window <= 1 or len(values) == 0:
        return values
    w = np.ones_like(values) if weights is None else np.nan_to_num(weights)
    cv, cw = np.cumsum(np.insert(values * w, 0, 0.0)), np.cumsum(np.insert(w, 0, 0.0))
    idx = np.arange(1, len(values) + 1)
    lo = np.maximum(idx - window, 0)
    return (cv[idx] - cv[lo]) / np.maximum(cw[idx] - cw[lo], 1e-9)


def read_metrics(run_dir: Path) -> dict[str, np.ndarray]:
    """Columns of ``metrics.csv`` as float arrays (empty cells are nan) plus ``time``."""
    with (run_dir / "metrics.csv").open(newline="") as f:
        rows = list(csv.DictReader(f))

    def col(name: str) -> np.ndarray:
        return np.array([float(r[name]) if r.get(name) not in (None, "") else np.nan for r in rows])

    out = {k: col(k) for k in (rows[0].keys() if rows else [])}
    spent = np.nan_to_num(out.get("charts/rollout_time", np.zeros(len(rows))))
    spent = spent + np.nan_to_num(out.get("charts/update_time", np.zeros(len(rows))))
    out["time"] = np.cumsum(spent)
    return out


def is_complete(run_dir: Path) -> bool:
    log = run_dir / "train.log"
    return log.is_file() and "run complete" in log.read_text()


def greedy_length(run_dir: Path, episodes: int, seed: int = 12345) -> float:
    """Mean length of ``episodes`` greedy episodes of the newest checkpoint (cached)."""
    import marlgrid
    from marlgrid.agents.bookkeeping.saved_run import SavedRun
    from marlgrid.agents.training.rollout import MultiAgentRollout

    run = SavedRun(run_dir)
    ckpt = run.checkpoint
    cache = run_dir / "greedy_length.json"
    if cache.is_file():
        saved = json.loads(cache.read_text())
        if saved.get("checkpoint") == ckpt.name and saved.get("episodes") == episodes:
            return float(saved["mean_length"])
    policies = run.policies(greedy=True)
    vec = marlgrid.make_vec(policies.cfg.env.id, 16, **policies.settings)
    rollout = MultiAgentRollout(vec, policies.groups, policies.scripted, seed=seed)
    lengths: list[float] = []
    while len(lengths) < episodes:
        rollout.collect(16)
        lengths += np.asarray(rollout.pop_lengths(), dtype=float).reshape(-1).tolist()
    mean = float(np.mean(lengths[:episodes]))
    cache.write_text(json.dumps({"checkpoint": ckpt.name, "episodes": episodes,
                                 "mean_length": mean}))  # fmt: skip
    return mean


def random_length(env_key: str, episodes: int = 400, seed: int = 7) -> float:
    """Mean episode length of uniformly random actions on the env."""
    import marlgrid

    env_id, settings = ENVS[env_key]
    vec = marlgrid.make_vec(env_id, 32, **settings)
    vec.reset(seed=seed)
    rng, lengths = np.random.default_rng(seed), []
    n = vec.single_action_space("agent_0").n
    while len(lengths) < episodes:
        *_, infos = vec.step(rng.integers(0, n, (32, 1)))
        if "_episode" in infos:
            lengths += np.asarray(infos["episode"]["l"])[infos["_episode"]].reshape(-1).tolist()
    return float(np.mean(lengths[:episodes]))


def shortest_length_empty(size: int = 8) -> float:
    """Mean shortest episode length on the empty room (goal at ``(size-2, size-2)``): BFS over
    (x, y, direction) with left / right / forward, averaged over every start cell and direction
    (directions 0-3 = east, south, west, north)."""
    goal, moves = (size - 2, size - 2), ((1, 0), (0, 1), (-1, 0), (0, -1))
    inside = range(1, size - 1)
    dist = {(goal[0], goal[1], d): 0 for d in range(4)}
    frontier = list(dist)
    while frontier:  # backwards BFS: predecessors of each state
        nxt = []
        for x, y, d in frontier:
            preds = [(x, y, (d + 1) % 4), (x, y, (d - 1) % 4)]  # a turn led here
            px, py = x - moves[d][0], y - moves[d][1]  # a forward step led here
            if px in inside and py in inside and (px, py) != goal:
                preds.append((px, py, d))
            for p in preds:
                if (p[0], p[1]) != goal and p not in dist:
                    dist[p] = dist[(x, y, d)] + 1
                    nxt.append(p)
        frontier = nxt
    starts = [dist[(x, y, d)] for x in inside for y in inside for d in range(4) if (x, y) != goal]
    return float(np.mean(starts))


class Run:
    """One seed's curves and numbers."""

    def __init__(self, run_dir: Path, env_key: str, args: argparse.Namespace) -> None:
        self.dir = run_dir
        m = read_metrics(run_dir)
        ok = np.isfinite(m[LENGTH])
        self.step, self.time, self.raw = m["step"][ok], m["time"][ok], m[LENGTH][ok]
        self.length = smooth(self.raw, args.smooth, m["charts/episodes"][ok])
        self.final = float(self.raw[-args.last :].mean())
        self.total_steps, self.total_time = float(m["step"][-1]), float(m["time"][-1])
        self.wall = wall_seconds(run_dir)
        self.sps = self.total_steps / max(self.total_time, 1e-9)
        self.auc = float(self.raw.mean())  # mean length over training: lower = faster learning
        thr = THRESHOLDS[env_key]
        # the first rows hold only the episodes that ended early (a biased few): not counted
        hit = np.flatnonzero((self.length <= thr) & (self.step > args.min_step))
        self.steps_to = float(self.step[hit[0]]) if len(hit) else float("nan")
        self.time_to = float(self.time[hit[0]]) if len(hit) else float("nan")
        self.stale = {}
        if "charts/staleness_cos" in m:
            s = np.isfinite(m["charts/staleness_cos"])
            self.stale = {"step": m["step"][s], "cos": m["charts/staleness_cos"][s],
                          "mse": m["charts/staleness_mse"][s]}  # fmt: skip
        n = args.greedy_episodes
        self.greedy = greedy_length(run_dir, n) if n else float("nan")


def load_lines(root: Path, args: argparse.Namespace) -> dict[str, list[Run]]:
    out: dict[str, list[Run]] = {}
    for name, (_, env_key) in LINES.items():
        runs = [Run(d, env_key, args) for d in sorted((root / name).glob("seed_*"))
                if (d / "metrics.csv").is_file() and is_complete(d)]  # fmt: skip
        if runs:
            out[name] = runs
    return out


def band(runs: list[Run], x: str, n: int = 200) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Grid, mean and CI half-width of the smoothed length over seeds on a step or time grid."""
    xs = [getattr(r, x) for r in runs]
    lo, hi = max(v[0] for v in xs), min(v[-1] for v in xs)
    grid = np.linspace(lo, hi, n)
    ys = np.stack([np.interp(grid, getattr(r, x), r.length) for r in runs])
    return grid, ys.mean(0), t_half_width(ys)


def plot_lines(
    ax, lines, names, x="step", rand=None, thr=None, best=None, limit: float = 100
) -> None:
    for i, name in enumerate(names):
        if name not in lines:
            continue
        runs = lines[name]
        grid, mean, half = band(runs, x)
        if x == "step":
            grid = grid / 1000
        c = COLORS[i % len(COLORS)]
        ax.plot(grid, mean, color=c, label=f"{LINES[name][0]} (n={len(runs)})")
        ax.fill_between(grid, mean - half, mean + half, color=c, alpha=0.2)
    if rand is not None:
        ax.axhline(rand, color="gray", ls=":", label=f"random policy ({rand:.0f})")
    if best is not None and np.isfinite(best):
        ax.axhline(best, color="green", ls=":", label=f"shortest path ({best:.1f})")
    if thr is not None:
        ax.axhline(thr, color="k", ls="--", lw=0.8, label=f"threshold {thr:.0f}")
    ax.set_xlabel("env steps (thousands)" if x == "step" else "training time (s, 2 shared cores)")
    ax.set_ylabel("episode length (steps; lower is better)")
    ax.set_ylim(0, limit * 1.05)  # the step limit
    ax.grid(alpha=0.3)
    ax.legend(fontsize=7)


def write_cl400_welch(path: Path, drqn: list[Run], dqn: list[Run]) -> None:
    """The correction's two pass rules as Welch tests, DRQN against DQN: the final length
    (1a: DRQN lower) and the env steps to the threshold among the runs that reach it (1b:
    DRQN larger; "not tested" there when either arm has fewer than 3 such runs)."""
    with path.open("w", newline="") as f:
        w = csv.writer(f)
        w.writerow(["metric", "n_drqn", "n_dqn", "mean_drqn", "mean_dqn", "welch_t", "p", "test"])
        for metric, attr in (("final_length", "final"), ("steps_to_threshold", "steps_to")):
            a = np.array([getattr(r, attr) for r in drqn], dtype=float)
            b = np.array([getattr(r, attr) for r in dqn], dtype=float)
            a, b = a[np.isfinite(a)], b[np.isfinite(b)]
            t, p = welch(a, b)
            tested = metric == "final_length" or min(len(a), len(b)) >= 3
            mean = lambda v: f"{v.mean():.2f}" if len(v) else "nan"  # noqa: E731
            w.writerow([metric, len(a), len(b), mean(a), mean(b), f"{t:.4g}", f"{p:.4g}",
                        "tested" if tested else "not tested (< 3 runs reach)"])  # fmt: skip


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--root", type=Path, default=ROOT / "runs" / "drqn_results")
    p.add_argument("--out", type=Path, default=HERE)
    p.add_argument("--smooth", type=int, default=3, help="rows per trailing moving average")
    p.add_argument("--min-step", type=int, default=3072, help="no threshold crossing before")
    p.add_argument("--last", type=int, default=5, help="rows averaged for the final length")
    p.add_argument("--greedy-episodes", type=int, default=100)
    args = p.parse_args(argv)

    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    lines = load_lines(args.root, args)
    rand = {k: random_length(k) for k in {LINES[name][1] for name in lines}}
    # clutter: a new map each episode, no one shortest path
    best = {"e8": shortest_length_empty(8), "cl": float("nan"), "cl400": float("nan")}
    for fname, panels in FIGURES.items():
        needed = {name for _, names, _, _ in panels for name in names}
        if not needed <= set(lines):  # a figure is drawn from all its lines or left as it is
            print(f"  {fname} left as it is: no runs of {sorted(needed - set(lines))}")
            continue
        fig, axes = plt.subplots(1, len(panels), figsize=(6.5 * len(panels), 4.2), squeeze=False)
        for ax, (title, names, env, x) in zip(axes[0], panels, strict=True):
            plot_lines(ax, lines, names, x=x, rand=rand[env], thr=THRESHOLDS[env], best=best[env],
                       limit=ENVS[env][1]["max_steps"])  # fmt: skip
            ax.set_title(title, fontsize=9)
        fig.tight_layout()
        fig.savefig(args.out / fname, dpi=110)
        plt.close(fig)

    if "e8_drqn_refresh" in lines:
        fig, (a1, a2) = plt.subplots(1, 2, figsize=(12, 4))
        runs = [r for r in lines["e8_drqn_refresh"] if len(r.stale.get("step", []))]
        for i, r in enumerate(runs):
            c = COLORS[i % len(COLORS)]
            a1.plot(r.stale["step"] / 1000, r.stale["cos"], color=c, marker=".", label=r.dir.name)
            a2.plot(r.stale["step"] / 1000, r.stale["mse"], color=c, marker=".", label=r.dir.name)
        if runs:
            n = min(len(r.stale["cos"]) for r in runs)
            cos = np.stack([r.stale["cos"][:n] for r in runs])
            half = t_half_width(cos)
            x = runs[0].stale["step"][:n] / 1000
            a1.plot(x, cos.mean(0), color="k", lw=2, label="mean")
            a1.fill_between(x, cos.mean(0) - half, cos.mean(0) + half, color="k", alpha=0.15)
        a1.set_ylabel("cosine(stored, refreshed state)")
        a2.set_ylabel("MSE(stored, refreshed state)")
        for a in (a1, a2):
            a.set_xlabel("env steps (thousands)")
            a.grid(alpha=0.3)
            a.legend(fontsize=7)
        a1.set_title("Empty-8x8 DRQN: staleness of stored LSTM states (95% CI over seeds)")
        fig.tight_layout()
        fig.savefig(args.out / "drqn_staleness.png", dpi=110)
        plt.close(fig)

    cols = ["line", "label", "env", "seeds", "total_steps", "final_length", "final_length_ci",
            "greedy_length", "greedy_length_ci", "mean_length_over_training", "auc_ci",
            "threshold", "seeds_reaching", "steps_to_threshold", "steps_to_ci",
            "train_seconds_to_threshold", "time_to_ci", "train_seconds", "wall_seconds", "sps",
            "staleness_cos_first", "staleness_cos_last", "random_length", "shortest_length",
            "per_seed_final",
            "per_seed_greedy", "per_seed_steps_to", "per_seed_seconds_to"]  # fmt: skip
    rows: dict[str, list[object]] = {}
    summary = args.out / "drqn_summary.csv"
    if summary.is_file():  # the rows of lines without runs here stay as they were
        with summary.open(newline="") as f:
            rows = {r[0]: r for r in list(csv.reader(f))[1:] if r}
    for name, runs in lines.items():
        env = LINES[name][1]
        fin, gr = t_ci([r.final for r in runs]), t_ci([r.greedy for r in runs])
        auc, st = t_ci([r.auc for r in runs]), t_ci([r.steps_to for r in runs])
        tt = t_ci([r.time_to for r in runs])
        stale = [r.stale for r in runs if len(r.stale.get("cos", []))]
        first = np.mean([s["cos"][0] for s in stale]) if stale else np.nan
        last = np.mean([s["cos"][-1] for s in stale]) if stale else np.nan
        fmt = lambda v: ";".join(f"{x:.1f}" for x in v)  # noqa: E731
        rows[name] = [
            name, LINES[name][0], ENVS[env][0], len(runs), int(runs[0].total_steps),
            f"{fin[0]:.2f}", f"{fin[1]:.2f}", f"{gr[0]:.2f}", f"{gr[1]:.2f}",
            f"{auc[0]:.2f}", f"{auc[1]:.2f}", THRESHOLDS[env],
            sum(np.isfinite(r.steps_to) for r in runs), f"{st[0]:.0f}", f"{st[1]:.0f}",
            f"{tt[0]:.1f}", f"{tt[1]:.1f}", f"{np.mean([r.total_time for r in runs]):.1f}",
            f"{np.mean([r.wall for r in runs]):.1f}", f"{np.mean([r.sps for r in runs]):.0f}",
            f"{first:.4f}", f"{last:.4f}", f"{rand[env]:.1f}", f"{best[env]:.1f}",
            fmt([r.final for r in runs]), fmt([r.greedy for r in runs]),
            fmt([r.steps_to for r in runs]), fmt([r.time_to for r in runs]),
        ]  # fmt: skip
    with summary.open("w", newline="") as f:
        w = csv.writer(f)
        w.writerow(cols)
        w.writerows(rows[name] for name in LINES if name in rows)
    if all(name in lines for name in CL400_PAIR):
        write_cl400_welch(args.out / "drqn_cl400_welch.csv", *(lines[n] for n in CL400_PAIR))
    print(f"wrote {args.out / 'drqn_summary.csv'} ({len(lines)} lines) and figures")
    for name, runs in lines.items():
        fin = t_ci([r.final for r in runs])
        t_to = [round(r.time_to) if np.isfinite(r.time_to) else None for r in runs]
        print(f"  {name:18s} n={len(runs)} final {fin[0]:.1f} +/- {fin[1]:.1f}  greedy "
              f"{np.mean([r.greedy for r in runs]):.1f}  steps_to {[r.steps_to for r in runs]}  "
              f"t_to {t_to}")  # fmt: skip


if __name__ == "__main__":
    main()
