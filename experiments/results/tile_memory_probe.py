"""Does a goal-cycle learner's memory state hold which tiles its episode has ruled out?

    python experiments/results/tile_memory_probe.py \
        runs/experts/goal_cycle_expert_4tiles_gated/seed_1 --greedy --rule penalty=1.5 \
        --episodes 200 --seed 777 --csv experiments/results/experts_memory_probe.csv

Each run (a run directory or an expert file) plays ``--episodes`` layouts of its env as
``tile_visits.py`` plays them. At each of agent_0's paid tile entries the label is whether the
episode's entries before it had ruled that tile out (``tile_visits.label_entries``) and the
features are agent_0's memory state after it read the view from which it stepped onto the tile.
A logistic regression is fit on the entries of the first ``--train-share`` of the episodes and
scored on the rest by its ROC AUC; the **control** regression sees only what counting gives
(the step, the correct and wrong entries so far and the distinct tiles entered so far). A
row reports both AUCs and their difference, the counts of entries and the share of them ruled
out.
"""

from __future__ import annotations

import argparse
from pathlib import Path

import numpy as np
import torch

from experiments.evaluate import rule_override
from experiments.results.tile_visits import (
    AGENT,
    label_entries,
    play_episode,
    run_players,
)
from marlgrid.analysis.report import show_and_write_rows


def agent_state(players) -> np.ndarray:
    """agent_0's memory state in its group (the flattened state of its slot)."""
    for group in players.groups:
        if AGENT in group.agents:
            return group.state[group.agents.index(AGENT)].detach().flatten().numpy().copy()
    raise ValueError(f"no trained group plays {AGENT}")


def episode_samples(env, players, scripted, seed: int) -> tuple[list, list, list]:
    """One episode's paid entries of agent_0: (state features, counting features, ruled out)."""
    states: dict[int, np.ndarray] = {}
    played = play_episode(
        env,
        players,
        scripted,
        seed,
        observe=lambda step: states.update({step: agent_state(players)}),
    )
    labels = label_entries(
        [(tile, reward) for _, tile, reward in played.entries], played.n_goals,
        played.reset_on_mistake,
    )  # fmt: skip
    paid = [(step, tile) for step, tile, reward in played.entries if reward != 0.0]
    feats, counts, ys = [], [], []
    correct = wrong = 0
    seen: set[int] = set()
    for (step, tile), entry in zip(paid, labels, strict=True):
        feats.append(states[step])
        counts.append([step, correct, wrong, len(seen)])
        ys.append(entry.ruled_out)
        correct, wrong = correct + (entry.reward > 0), wrong + (entry.reward < 0)
        seen.add(tile)
    return feats, counts, ys


def roc_auc(scores: np.ndarray, labels: np.ndarray) -> float:
    """The probability that a positive scores above a negative (ties count half)."""
    pos, neg = scores[labels], scores[~labels]
    if not len(pos) or not len(neg):
        return float("nan")
    greater = (pos[:, None] > neg[None, :]).mean()
    ties = (pos[:, None] == neg[None, :]).mean()
    return float(greater + 0.5 * ties)


def probe_auc(
    x_train: np.ndarray, y_train: np.ndarray, x_test: np.ndarray, y_test: np.ndarray,
    l2: float = 1e-3, steps: int = 300,
) -> float:  # fmt: skip
    """Held-out ROC AUC of an L2-regularised logistic regression (standardised features,
    full-batch L-BFGS)."""
    mean, std = x_train.mean(0), x_train.std(0) + 1e-6
    xt = torch.as_tensor((x_train - mean) / std, dtype=torch.float64)
    yt = torch.as_tensor(y_train, dtype=torch.float64)
    w = torch.zeros(xt.shape[1], dtype=torch.float64, requires_grad=True)
    b = torch.zeros((), dtype=torch.float64, requires_grad=True)
    opt = torch.optim.LBFGS([w, b], max_iter=steps, line_search_fn="strong_wolfe")

    def closure() -> torch.Tensor:
        opt.zero_grad()
        loss = torch.nn.functional.binary_cross_entropy_with_logits(xt @ w + b, yt)
        loss = loss + l2 * w.square().sum()
        loss.backward()
        return loss

    opt.step(closure)
    with torch.no_grad():
        scores = torch.as_tensor((x_test - mean) / std, dtype=torch.float64) @ w + b
    return roc_auc(scores.numpy(), y_test.astype(bool))


def probe_run(run: Path, episodes: list[int], greedy: bool, rules: dict, train_share: float):
    """The row of one run: entries, share ruled out, and the two probes' held-out AUCs."""
    env, players, scripted = run_players(run, greedy, rules)
    per_episode = [episode_samples(env, players, scripted, seed) for seed in episodes]
    cut = int(round(train_share * len(per_episode)))

    def stack(part: list, i: int, dtype=float) -> np.ndarray:
        rows = [row for ep in part for row in ep[i]]
        return np.asarray(rows, dtype=dtype)

    train, test = per_episode[:cut], per_episode[cut:]
    y_train, y_test = stack(train, 2, bool), stack(test, 2, bool)
    row: dict[str, object] = {
        "run": str(run),
        "episodes": len(per_episode),
        "entries_train": len(y_train),
        "entries_test": len(y_test),
        "ruled_out_share": float(np.concatenate([y_train, y_test]).mean()),
        "ruled_out_test": int(y_test.sum()),
    }
    if y_train.all() or not y_train.any():
        row["state_auc"] = row["control_auc"] = row["state_minus_control"] = float("nan")
        return row
    row["state_auc"] = probe_auc(stack(train, 0), y_train, stack(test, 0), y_test)
    row["control_auc"] = probe_auc(stack(train, 1), y_train, stack(test, 1), y_test)
    row["state_minus_control"] = row["state_auc"] - row["control_auc"]
    return row


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("runs", type=Path, nargs="+", help="run directories or expert files")
    parser.add_argument("--episodes", type=int, default=200)
    parser.add_argument("--seed", type=int, default=777, help="first layout seed")
    parser.add_argument("--greedy", action="store_true")
    parser.add_argument(
        "--rule", type=rule_override, action="append", default=[], metavar="NAME=VALUE",
        help="a rule the runs play under (repeatable)",
    )  # fmt: skip
    parser.add_argument(
        "--train-share", type=float, default=0.7,
        help="share of the episodes (the first ones) the probes are fit on",
    )  # fmt: skip
    parser.add_argument("--csv", type=Path)
    args = parser.parse_args(argv)
    if args.episodes < 2 or not 0.0 < args.train_share < 1.0:
        parser.error(
            f"--episodes must be >= 2 (got {args.episodes}) and --train-share in (0, 1) "
            f"(got {args.train_share})"
        )
    seeds = list(range(args.seed, args.seed + args.episodes))
    rows = [
        probe_run(run, seeds, args.greedy, dict(args.rule), args.train_share) for run in args.runs
    ]
    show_and_write_rows(rows, args.csv)


if __name__ == "__main__":
    main()
