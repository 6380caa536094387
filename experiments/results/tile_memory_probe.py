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
row reports both AUCs and their difference with 95% intervals from resampling the test
episodes, the same two read-outs among wrong entries only (ruled out against exploring), the
counts of entries and the share of them ruled out.
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


def episode_samples(env, players, scripted, seed: int) -> tuple[list, list, list, list]:
    """One episode's paid entries of agent_0: (state features, counting features, ruled out,
    wrong). The counting features are the step, the correct and wrong entries so far and the
    distinct tiles entered so far (an unpaid entry counts as entered, as ``label_entries``
    counts it as seen)."""
    states: dict[int, np.ndarray] = {}
    played = play_episode(
        env,
        players,
        scripted,
        seed,
        observe=lambda step: states.update({step: agent_state(players)}),
    )
    labels = iter(label_entries(
        [(tile, reward) for _, tile, reward in played.entries], played.n_goals,
        played.reset_on_mistake,
    ))  # fmt: skip
    feats, counts, ruled_out, wrong_entry = [], [], [], []
    correct = wrong = 0
    seen: set[int] = set()
    for step, tile, reward in played.entries:
        if reward != 0.0:  # label_entries lists the paid entries, in order
            entry = next(labels)
            feats.append(states[step])
            counts.append([step, correct, wrong, len(seen)])
            ruled_out.append(entry.ruled_out)
            wrong_entry.append(reward < 0)
            correct, wrong = correct + (reward > 0), wrong + (reward < 0)
        seen.add(tile)
    assert next(labels, None) is None
    return feats, counts, ruled_out, wrong_entry


def roc_auc(scores: np.ndarray, labels: np.ndarray) -> float:
    """The probability that a positive scores above a negative (ties count half)."""
    pos, neg = scores[labels], scores[~labels]
    if not len(pos) or not len(neg):
        return float("nan")
    greater = (pos[:, None] > neg[None, :]).mean()
    ties = (pos[:, None] == neg[None, :]).mean()
    return float(greater + 0.5 * ties)


def probe_scores(
    x_train: np.ndarray, y_train: np.ndarray, x_test: np.ndarray,
    l2: float = 1e-3, steps: int = 300,
) -> np.ndarray:  # fmt: skip
    """Held-out scores of an L2-regularised logistic regression fit on ``(x_train, y_train)``
    (features standardised by the training set's statistics, full-batch L-BFGS)."""
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
    return scores.numpy()


def probe_auc(
    x_train: np.ndarray, y_train: np.ndarray, x_test: np.ndarray, y_test: np.ndarray
) -> float:
    """Held-out ROC AUC of :func:`probe_scores`."""
    return roc_auc(probe_scores(x_train, y_train, x_test), y_test.astype(bool))


def episode_bootstrap(
    groups: np.ndarray, labels: np.ndarray, state: np.ndarray, control: np.ndarray,
    resamples: int = 1000, seed: int = 0,
) -> dict[str, tuple[float, float]]:  # fmt: skip
    """95% percentile intervals of the state and control AUCs and of their difference, with the
    test episodes (``groups``: each entry's episode) drawn with replacement."""
    rng = np.random.default_rng(seed)
    ids = np.unique(groups)
    rows = {g: np.flatnonzero(groups == g) for g in ids}
    draws: dict[str, list[float]] = {"state": [], "control": [], "difference": []}
    for _ in range(resamples):
        take = np.concatenate([rows[g] for g in rng.choice(ids, len(ids))])
        a, c = roc_auc(state[take], labels[take]), roc_auc(control[take], labels[take])
        draws["state"].append(a)
        draws["control"].append(c)
        draws["difference"].append(a - c)
    return {k: tuple(np.nanpercentile(v, [2.5, 97.5]).tolist()) for k, v in draws.items()}


#: the columns :func:`probe_run` adds after the counts (every row has them, NaN where no probe)
RESULT_COLUMNS = (
    "state_auc", "control_auc", "state_minus_control", "state_low", "state_high",
    "control_low", "control_high", "difference_low", "difference_high", "wrong_test",
    "wrong_only_state_auc", "wrong_only_control_auc",
)  # fmt: skip


def probe_run(run: Path, episodes: list[int], greedy: bool, rules: dict, train_share: float):
    """The row of one run: entries, share ruled out, the two probes' held-out AUCs with their
    episode-bootstrap intervals, and the same two among wrong entries only (ruled out against
    exploring: whether the state tells a repeated mistake from a new one, not only a costly
    entry from a paid one)."""
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
    if y_train.all() or not y_train.any() or y_test.all() or not y_test.any():
        return {**row, **dict.fromkeys(RESULT_COLUMNS, float("nan"))}  # the same columns
    state = probe_scores(stack(train, 0), y_train, stack(test, 0))
    control = probe_scores(stack(train, 1), y_train, stack(test, 1))
    row["state_auc"], row["control_auc"] = roc_auc(state, y_test), roc_auc(control, y_test)
    row["state_minus_control"] = row["state_auc"] - row["control_auc"]
    groups = np.concatenate([np.full(len(ep[2]), i) for i, ep in enumerate(test)])
    for name, (low, high) in episode_bootstrap(groups, y_test, state, control).items():
        row[f"{name}_low"], row[f"{name}_high"] = low, high
    wrong_train, wrong_test = stack(train, 3, bool), stack(test, 3, bool)
    row["wrong_test"] = int(wrong_test.sum())
    for i, name in ((0, "wrong_only_state_auc"), (1, "wrong_only_control_auc")):
        y_fit, y_score = y_train[wrong_train], y_test[wrong_test]
        ok = 0 < y_fit.sum() < len(y_fit) and 0 < y_score.sum() < len(y_score)
        row[name] = probe_auc(
            stack(train, i)[wrong_train], y_fit, stack(test, i)[wrong_test], y_score
        ) if ok else float("nan")  # fmt: skip
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
