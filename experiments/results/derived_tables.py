"""Tables derived from committed CSVs alone, for numbers the result pages quote.

    python experiments/results/derived_tables.py                # the committed tables
    python experiments/results/derived_tables.py --dir runs/analysis/results   # a copy

- ``popgym_by_memory.csv`` (for ``popgym.md``): per memory core, from ``popgym_summary.csv``, the
  mean over the eight tasks of the MMER means, the sweep's training wall time over its 24 runs
  (each cell's mean wall time times its seeds), the env steps over them and their ratio, and the
  steps per second against the memoryless core's;
- ``social/experts_correct_share.csv`` (for ``social_expert_curriculum.md``): per condition, the
  mean rewards and penalties per agent-episode over seeds (from ``experts_rewards_runs.csv`` and
  ``experts_penalties_runs.csv``) and the correct share of entries, rewards / (rewards +
  penalties).
- ``experts_pass_rule.csv`` (for ``experts.md``): the experts issue's thresholds, a factor times
  the discoverer's return at penalty 1.5 (``goal_cycle_baselines.csv`` and its 4-tile sibling),
  beside the reward-blind cycler's return in the same setup;
- ``experts_eval_t.csv`` (for ``experts.md``): per arm and mode, the mean over seeds of
  ``experts_eval.csv``'s returns with its Student-t 95% interval (NaN below 2 seeds);
- ``social/refresh_kl_tmaze_kl_ratio.csv`` (for ``social_refresh.md``): per run, the run-mean
  minibatch KL over the run-mean whole-rollout KL (``refresh_kl_tmaze_kl_minibatch_runs.csv``
  and ``refresh_kl_tmaze_kl_batch_runs.csv``), then per arm the mean with its Student-t
  interval, and Welch's test between the arms.
- ``social_r3_view_chance_t.csv`` (for ``social_r3_aux_loss.md``): per R3 arm, the decoder's
  logged cell accuracy (``social_r3_cell_accuracy_runs.csv``) beside the two trivial predictors'
  (``social_r3_view_chance.csv``, by ``view_chance.py``), each a mean over seeds with its
  Student-t 95% interval, and the per-seed differences decoder - predictor likewise.
- ``social_r5_settings.csv`` (for ``social_r5_imitation.md``): the greedy return per seed of the
  cloned novice (R5) and R3's arm A beside the oracles (``social_r5_eval.csv``,
  ``social_r3_eval.csv``) and alone (``social_r5/*_alone.csv``), each arm and setting's mean with
  its Student-t interval, and the plan's Welch tests (the clone alone against beside; the clone
  against A in each setting).
- ``social_r7_alone.csv`` (for ``social_r7_mixed.md``): played alone (``social_r7/*_alone.csv``),
  the greedy return, correct and wrong entries per seed of the mixed-trained novice (R7) and R3's
  arm C (alone from the start), each arm's means with the return's Student-t interval, and the
  plan's Welch test (mixed against alone). ``social_r7_training.csv``: from the mixed runs' own
  training curves (``social_r7_{social,solo}_episodic_return_runs.csv``), each seed's training
  return in its episodes beside the experts and without them, and the per-seed difference's
  mean with its Student-t interval.
- ``social_r8_vs_experts.csv`` (for ``social_r8_imperfect_experts.md``): per epsilon arm and
  seed, the novice's training return (agent 0) beside the mean of its two noisy experts' (agents
  1 and 2), each the mean of the run's last 20 logged values
  (``social_r8_return_agent_{0,1,2}_runs.csv``), and the same in the greedy evaluation
  (``social_r8_eval.csv``: the learner's return and its partners'); per arm, on how many seeds
  the novice scored above its experts in each.
- ``social_hidden_goal_following.csv`` (for ``social_hidden_goal_following.md``): per arm and
  seed the novice's ``repeat_expert_excess`` (the mean of the run's last 20 logged values,
  ``social_hidden_goal_repeat_expert_excess_agent_0_runs.csv``), whether it reaches the plan's
  bar (:data:`HIDDEN_GOAL_BAR`), and its greedy return beside the experts' in the evaluation
  (``social_hidden_goal_eval.csv``); per arm the mean with its Student-t interval and the seeds
  at or above the bar (``arm`` rows: n, mean, t interval in the value columns); Welch's test of
  the loss arm against the no-loss arm (``welch`` row: t and p).
- ``social_r6_transfer.csv``, ``_t.csv`` and ``_welch.csv`` (for ``social_r6_transfer.md``): the
  frozen agents' greedy return, correct and wrong entries per condition and seed
  (``social_r6/*_{gc4,suite}.csv``), the mean return with its Student-t interval and the mean
  entries, and Welch's tests of each neighbouring pair of the claimed ordering (:data:`R6_CLAIMED`).
"""

from __future__ import annotations

import argparse
import csv
from collections import defaultdict
from itertools import pairwise
from pathlib import Path

RESULTS = Path(__file__).resolve().parent


def read(path: Path) -> list[dict[str, str]]:
    with path.open(newline="", encoding="utf-8") as f:
        return list(csv.DictReader(f))


def mean_t(values: list[float]) -> list[object]:
    """``[n, mean, t_low, t_high]`` of ``values`` (Student-t 95%), rounded to 4 decimals."""
    from marlgrid.analysis.stats import t_interval

    low, high = t_interval(values)
    return [len(values), round(sum(values) / len(values), 4), round(low, 4), round(high, 4)]


def write(path: Path, header: tuple[str, ...], rows: list[list[object]]) -> None:
    from marlgrid.analysis.report import write_csv

    print(f"wrote {write_csv(path, header, rows).relative_to(RESULTS)} ({len(rows)} rows)")


def popgym_by_memory() -> None:
    cells: dict[str, list[dict[str, str]]] = defaultdict(list)
    for row in read(RESULTS / "popgym_summary.csv"):
        cells[row["memory"]].append(row)
    totals = {}
    for memory, rows in cells.items():
        wall = sum(float(r["wall_s_mean"]) * int(r["seeds"]) for r in rows)
        steps = sum(int(r["steps"]) * int(r["seeds"]) for r in rows)
        mean = sum(float(r["mmer_mean"]) for r in rows) / len(rows)
        totals[memory] = (len(rows), mean, wall, steps, steps / wall)
    base = totals["none"][4]
    out = [[m, *t, t[4] / base] for m, t in totals.items()]
    header = ("memory", "tasks", "mmer_mean_over_tasks", "wall_s", "env_steps", "steps_per_s",
              "steps_per_s_vs_memoryless")  # fmt: skip
    write(RESULTS / "popgym_by_memory.csv", header, out)


def experts_correct_share() -> None:
    means: dict[str, dict[str, float]] = defaultdict(dict)
    for what in ("rewards", "penalties"):
        groups: dict[str, list[float]] = defaultdict(list)
        for row in read(RESULTS / "social" / f"experts_{what}_runs.csv"):
            groups[row["condition"]].append(float(row["final"]))
        for condition, values in groups.items():
            means[condition][what] = sum(values) / len(values)
    out = [
        [c, m["rewards"], m["penalties"], m["rewards"] / (m["rewards"] + m["penalties"])]
        for c, m in means.items()
    ]
    header = ("condition", "rewards_mean", "penalties_mean", "correct_share")
    write(RESULTS / "social" / "experts_correct_share.csv", header, out)


# (size, max_steps, n_goals, factor): the experts issue's acceptances 1-3.
EXPERT_THRESHOLDS = ((7, 100, 3, 0.8), (13, 250, 3, 0.6), (7, 100, 4, 0.7), (13, 250, 4, 0.7))


def experts_pass_rule() -> None:
    returns: dict[tuple[str, str, str, str], float] = {}
    for name in ("goal_cycle_baselines.csv", "goal_cycle_baselines_4tiles.csv"):
        for row in read(RESULTS / name):
            if row["condition"] == "all_agents" and float(row["penalty"]) == 1.5:
                key = (row["size"], row["max_steps"], row["n_goals"], row["policy"])
                returns[key] = float(row["return_mean"])
    out = []
    for size, steps, goals, factor in EXPERT_THRESHOLDS:
        task = (str(size), str(steps), str(goals))
        discoverer = returns[(*task, "discoverer")]
        out.append([*task, discoverer, factor, round(factor * discoverer, 4),
                    returns[(*task, "reward_blind")]])  # fmt: skip
    header = ("size", "max_steps", "n_goals", "discoverer", "factor", "threshold", "reward_blind")
    write(RESULTS / "experts_pass_rule.csv", header, out)


def experts_eval_t() -> None:
    groups: dict[tuple[str, str], list[float]] = defaultdict(list)
    for row in read(RESULTS / "experts_eval.csv"):
        arm = Path(row["run"]).parent.name  # runs/experts/<arm>/seed_<k>
        groups[(arm, row["mode"])].append(float(row["return"]))
    out = []
    for (arm, mode), values in groups.items():
        out.append([arm, mode, *mean_t(values)])
    write(RESULTS / "experts_eval_t.csv", ("arm", "mode", "seeds", "mean", "t_low", "t_high"), out)


def refresh_kl_ratio() -> None:
    from marlgrid.analysis.stats import welch

    stem = RESULTS / "social" / "refresh_kl_tmaze_kl"
    if not Path(f"{stem}_batch_runs.csv").exists():  # the correction's runs are not in yet
        print(
            f"skipped {stem.name}_ratio.csv: no {stem.name}_batch_runs.csv "
            "(runner.py social_refresh analyse)"
        )
        return
    batch = {r["run"]: float(r["final"]) for r in read(Path(f"{stem}_batch_runs.csv"))}
    ratios: dict[str, list[float]] = defaultdict(list)
    out: list[list[object]] = []
    for row in read(Path(f"{stem}_minibatch_runs.csv")):
        ratio = float(row["final"]) / batch[row["run"]]
        ratios[row["condition"]].append(ratio)
        out.append(["run", row["condition"], row["seed"], round(ratio, 4), "", ""])
    for arm, values in ratios.items():
        out.append(["mean", arm, *mean_t(values)])
    a, b = sorted(ratios)
    t, p = welch(ratios[a], ratios[b])
    out.append(["welch", f"{a} vs {b}", "", round(t, 4), round(p, 4), ""])
    header = ("row", "condition", "seed_or_n", "ratio_or_t", "t_low_or_p", "t_high")
    write(Path(f"{stem}_ratio.csv"), header, out)


def r3_view_chance() -> None:
    import re

    chance = RESULTS / "social_r3_view_chance.csv"
    if not chance.exists():
        print(f"skipped social_r3_view_chance_t.csv: no {chance.name} (view_chance.py)")
        return
    where = re.compile(r"r3[/_](\w+?)[/_]seed_(\d+)")  # runs/r3/ARM/seed_K, r3_ARM_seed_K.pt
    values: dict[str, dict[str, list[float]]] = defaultdict(lambda: defaultdict(list))
    decoder = {}
    for row in read(RESULTS / "social_r3_cell_accuracy_runs.csv"):
        arm, seed = where.search(row["run"]).groups()  # type: ignore[union-attr]
        decoder[(arm, seed)] = float(row["final"])
    for row in read(chance):
        arm, seed = where.search(row["run"]).groups()  # type: ignore[union-attr]
        ours = decoder[(arm, seed)]
        for name, value in (("decoder", ours), ("copy", float(row["copy"])),
                            ("constant", float(row["constant"])),
                            ("decoder_minus_copy", ours - float(row["copy"])),
                            ("decoder_minus_constant", ours - float(row["constant"]))):  # fmt: skip
            values[arm][name].append(value)
    out = []
    for arm, measures in values.items():
        for name, vals in measures.items():
            out.append([arm, name, *mean_t(vals)])
    header = ("arm", "measure", "seeds", "mean", "t_low", "t_high")
    write(RESULTS / "social_r3_view_chance_t.csv", header, out)


def played_alone(path: Path) -> dict[str, float]:
    """Agent_0's greedy means in an ``evaluate.py`` table of a frozen agent played alone: its
    return, correct entries (``rewards``) and wrong entries (``social/penalties``)."""
    wanted = {"return": "return", "rewards": "correct", "social/penalties": "wrong"}
    return {wanted[r["metric"]]: float(r["mean"]) for r in read(path) if r["metric"] in wanted}


def r5_settings() -> None:
    """R5's greedy returns beside the oracles (``social_r5_eval.csv``, ``social_r3_eval.csv``)
    and alone (``social_r5/<arm>_seed_<k>_alone.csv``) of the cloned novice and R3's arm A."""
    import re

    from marlgrid.analysis.stats import welch

    alone = sorted((RESULTS / "social_r5").glob("*_seed_*_alone.csv"))
    if not alone:
        print("skipped social_r5_settings.csv: no social_r5/*_alone.csv (findings_runs.sh r5)")
        return
    arms = {"bc": "r5_bc", "social_aux": "r3_social_aux"}
    where = re.compile(r"r[35][/_](bc|social_aux)[/_]seed_(\d+)")
    values: dict[tuple[str, str], dict[str, float]] = defaultdict(dict)
    for name in ("social_r5_eval.csv", "social_r3_eval.csv"):
        for row in read(RESULTS / name):
            found = where.search(row["run"])
            if found and row["mode"] == "greedy":
                arm, seed = found.groups()
                values[(arms[arm], "beside")][seed] = float(row["return"])
    for path in alone:
        found = where.search(path.name)
        if found:
            arm, seed = found.groups()
            values[(arms[arm], "alone")][seed] = played_alone(path)["return"]
    out: list[list[object]] = []
    for (arm, setting), by_seed in values.items():
        out += [["seed", arm, setting, seed, v, "", ""] for seed, v in sorted(by_seed.items())]
        out.append(["mean", arm, setting, *mean_t(list(by_seed.values()))])
    clone_alone, clone_beside = ("r5_bc", "alone"), ("r5_bc", "beside")
    pairs = [(clone_alone, clone_beside), (clone_beside, ("r3_social_aux", "beside")),
             (clone_alone, ("r3_social_aux", "alone"))]  # fmt: skip
    for a, b in pairs:
        if values.get(a) and values.get(b):
            t, p = welch(list(values[a].values()), list(values[b].values()))
            out.append(["welch", " ".join(a), " ".join(b), f"{t:.4g}", f"{p:.4g}", "", ""])
    header = ("row", "arm", "setting", "seed_or_n", "return_or_t", "t_low_or_p", "t_high")
    write(RESULTS / "social_r5_settings.csv", header, out)


#: R7's arms: the stems of their alone tables (``social_r7/<stem>_seed_<k>_alone.csv``)
R7_ARMS = ("r7_mixed", "r3_alone_aux")


def r7_alone() -> None:
    """R7's two arms played alone, and the mixed runs' training return with and without the
    experts (see the module's docstring)."""
    import re

    from marlgrid.analysis.stats import welch

    name = re.compile(r"^(?P<arm>.+?)_seed_(?P<seed>\d+)_alone\.csv$")
    played: dict[str, dict[str, dict[str, float]]] = defaultdict(dict)
    for path in sorted((RESULTS / "social_r7").glob("*_alone.csv")):
        found = name.match(path.name)
        if found and found["arm"] in R7_ARMS:
            played[found["arm"]][found["seed"]] = played_alone(path)
    if not played:
        print("skipped social_r7_alone.csv: no social_r7/*_alone.csv (findings_runs.sh r7)")
        return
    out: list[list[object]] = []
    for arm, by_seed in played.items():
        for seed, m in sorted(by_seed.items(), key=lambda item: int(item[0])):
            out.append(["seed", arm, seed, m["return"], "", "", m["correct"], m["wrong"]])
        entries = [round(sum(m[k] for m in by_seed.values()) / len(by_seed), 4)
                   for k in ("correct", "wrong")]  # fmt: skip
        out.append(["mean", arm, *mean_t([m["return"] for m in by_seed.values()]), *entries])
    mixed, alone = played.get("r7_mixed", {}), played.get("r3_alone_aux", {})
    if len(mixed) > 1 and len(alone) > 1:
        t, p = welch([m["return"] for m in mixed.values()], [m["return"] for m in alone.values()])
        out.append(["welch", "r7_mixed vs r3_alone_aux", "", f"{t:.4g}", f"{p:.4g}", "", "", ""])
    header = ("row", "arm", "seed_or_n", "return_or_t", "t_low_or_p", "t_high", "correct", "wrong")
    write(RESULTS / "social_r7_alone.csv", header, out)
    training = {}  # setting -> {seed: the run's training return over its last 20 logged values}
    for setting in ("social", "solo"):
        path = RESULTS / f"social_r7_{setting}_episodic_return_runs.csv"
        if path.exists():
            training[setting] = {r["seed"]: float(r["final"]) for r in read(path)}
    seeds = sorted(set(training.get("social", {})) & set(training.get("solo", {})), key=int)
    if len(seeds) < 2:
        print("skipped social_r7_training.csv: under 2 seeds in social_r7_{social,solo}_*_runs")
        return
    rows: list[list[object]] = []
    for seed in seeds:
        social, solo = training["social"][seed], training["solo"][seed]
        rows.append(
            ["seed", seed, round(social, 4), round(solo, 4), round(social - solo, 4), "", ""]
        )
    n, mean, low, high = mean_t([training["social"][k] - training["solo"][k] for k in seeds])
    rows.append(["mean_difference", n, "", "", mean, low, high])
    header = ("row", "seed_or_n", "beside_experts", "without", "difference", "t_low", "t_high")
    write(RESULTS / "social_r7_training.csv", header, rows)


R8_ARMS = ("r8_eps_0.3", "r8_eps_0.6")


def arm_seed(run: str) -> tuple[str, str]:
    """``runs/r8/eps_0.3/seed_2`` -> ``("r8_eps_0.3", "2")``: page and arm folders, and seed."""
    parts = Path(run).parts
    return f"{parts[-3]}_{parts[-2]}", parts[-1].removeprefix("seed_")


def greedy_beside(path: Path) -> dict[tuple[str, str], tuple[float, float]]:
    """``{(arm, seed): (novice's return, partners' return)}`` of the greedy rows of an
    ``experts_eval.py --partners`` CSV (none when it is not there yet)."""
    if not path.exists():
        return {}
    return {
        arm_seed(r["run"]): (float(r["return"]), float(r["partners_return"]))
        for r in read(path)
        if r["mode"] == "greedy"
    }


def r8_vs_experts() -> None:
    """R8's novice against its noisy experts in the same runs (see the module's docstring)."""
    training: dict[int, dict[tuple[str, str], float]] = {}
    for agent in (0, 1, 2):
        path = RESULTS / f"social_r8_return_agent_{agent}_runs.csv"
        if not path.exists():
            print(f"skipped social_r8_vs_experts.csv: no {path.name} (findings_runs.sh r8)")
            return
        training[agent] = {arm_seed(r["run"]): float(r["final"]) for r in read(path)}
    greedy = greedy_beside(RESULTS / "social_r8_eval.csv")
    rows: list[list[object]] = []
    for arm in R8_ARMS:
        keys = sorted((k for k in training[0] if k[0] == arm), key=lambda k: int(k[1]))
        above_training = above_greedy = 0
        for key in keys:
            novice = training[0][key]
            experts = (training[1][key] + training[2][key]) / 2
            above_training += novice > experts
            played = ["", "", ""]
            if key in greedy:
                alone, partners = greedy[key]
                played = [alone, partners, round(alone - partners, 4)]
                above_greedy += alone > partners
            rows.append(
                ["seed", arm, key[1], round(novice, 4), round(experts, 4),
                 round(novice - experts, 4), *played]
            )  # fmt: skip
        if keys:
            n_greedy = sum(k in greedy for k in keys)
            rows.append(
                ["seeds_above", arm, len(keys), "", "", above_training, n_greedy, "", above_greedy]
            )
    header = (
        "row", "arm", "seed_or_n", "novice_training", "experts_training", "training_difference",
        "novice_greedy_or_n", "experts_greedy", "greedy_difference",
    )  # fmt: skip
    write(RESULTS / "social_r8_vs_experts.csv", header, rows)


#: the hidden-goal page's arms, the loss arm first (its Welch test: loss against no loss)
HIDDEN_GOAL_ARMS = ("hidden_goal_ppo_lstm_expert_aux", "hidden_goal_ppo_lstm_expert")
#: its pass rule's bar for "following emerges": halfway from the random novice's
#: ``repeat_expert_excess`` on 13x13 (-0.096) to the scripted follower's (0.472), as planned
HIDDEN_GOAL_BAR = 0.19


def hidden_goal_following() -> None:
    """The hidden-goal page's pass rule (see the module's docstring)."""
    from marlgrid.analysis.stats import welch

    path = RESULTS / "social_hidden_goal_repeat_expert_excess_agent_0_runs.csv"
    if not path.exists():
        print(f"skipped social_hidden_goal_following.csv: no {path.name} (findings_runs.sh)")
        return
    excess: dict[str, dict[str, float]] = defaultdict(dict)
    for row in read(path):
        arm, seed = arm_seed(row["run"])
        excess[arm][seed] = float(row["final"])
    greedy = greedy_beside(RESULTS / "social_hidden_goal_eval.csv")
    rows: list[list[object]] = []
    for arm in HIDDEN_GOAL_ARMS:
        seeds = sorted(excess.get(arm, {}), key=int)
        for seed in seeds:
            value = excess[arm][seed]
            played = greedy.get((arm, seed), ("", ""))
            rows.append(["seed", arm, seed, round(value, 4), "", "",
                         int(value >= HIDDEN_GOAL_BAR), *played])  # fmt: skip
        if seeds:
            values = [excess[arm][s] for s in seeds]
            at_bar = sum(v >= HIDDEN_GOAL_BAR for v in values)
            rows.append(["arm", arm, *mean_t(values), at_bar, "", ""])
    a, b = HIDDEN_GOAL_ARMS
    if len(excess.get(a, {})) > 1 and len(excess.get(b, {})) > 1:
        t, p = welch(list(excess[a].values()), list(excess[b].values()))
        rows.append(["welch", f"{a} vs {b}", "", f"{t:.4g}", f"{p:.4g}", "", "", "", ""])
    header = (
        "row", "arm", "seed_or_n", "excess_or_t", "t_low_or_p", "t_high",
        f"at_or_above_{HIDDEN_GOAL_BAR}", "novice_greedy", "experts_greedy",
    )  # fmt: skip
    write(RESULTS / "social_hidden_goal_following.csv", header, rows)


#: R6's ordering as the original claims it, best first (agent file stems without the seed)
R6_CLAIMED = ("r3_social_aux", "r3_alone_aux", "goal_cycle_7x7_3agents_expert", "r5_bc")


def r6_transfer() -> None:
    """R6's frozen agents in the transfer conditions (``social_r6/<agent>_seed_<k>_<set>.csv``,
    by ``evaluate.py``): per agent, condition and seed the greedy return, correct and wrong
    entries; per agent and condition their means with Student-t intervals; Welch's tests of
    each neighbouring pair of the claimed ordering."""
    import re

    from marlgrid.analysis.stats import welch

    name = re.compile(r"^(?P<agent>.+?)_seed_?(?P<seed>\d+)_(?P<set>gc4|suite)\.csv$")
    wanted = {"return": "return", "rewards": "correct", "social/penalties": "wrong"}
    values: dict[tuple[str, str], dict[str, float]] = defaultdict(dict)
    entries: dict[tuple[str, str], list[tuple[float, float]]] = defaultdict(list)
    per_seed = []
    for path in sorted((RESULTS / "social_r6").glob("*.csv")):
        found = name.match(path.name)
        if not found:
            continue
        rows: dict[str, dict[str, float]] = defaultdict(dict)
        for row in read(path):
            if row["metric"] in wanted:
                rows[row["condition"]][wanted[row["metric"]]] = float(row["mean"])
        for condition, measures in rows.items():
            values[(found["agent"], condition)][found["seed"]] = measures["return"]
            entries[(found["agent"], condition)].append((measures["correct"], measures["wrong"]))
            per_seed.append([found["agent"], condition, found["seed"],
                             *(measures[m] for m in wanted.values())])  # fmt: skip
    if not per_seed:
        print(
            "skipped social_r6_transfer*.csv: no social_r6/*_{gc4,suite}.csv (findings_runs.sh r6)"
        )
        return
    header = ("agent", "condition", "seed", "return", "correct", "wrong")
    write(RESULTS / "social_r6_transfer.csv", header, per_seed)
    means = []
    for (agent, condition), by_seed in sorted(values.items()):
        correct, wrong = zip(*entries[(agent, condition)], strict=True)
        entry_means = [round(sum(c) / len(c), 4) for c in (correct, wrong)]
        means.append([agent, condition, *mean_t(list(by_seed.values())), *entry_means])
    header = ("agent", "condition", "seeds", "mean", "t_low", "t_high", "correct", "wrong")
    write(RESULTS / "social_r6_transfer_t.csv", header, means)
    tests = []
    for condition in sorted({c for _, c in values}):
        for a, b in pairwise(R6_CLAIMED):
            x, y = values.get((a, condition), {}), values.get((b, condition), {})
            if len(x) > 1 and len(y) > 1:
                t, p = welch(list(x.values()), list(y.values()))
                tests.append([condition, a, b, f"{t:.4g}", f"{p:.4g}"])
    write(RESULTS / "social_r6_transfer_welch.csv", ("condition", "a", "b", "welch_t", "p"), tests)


def main(argv: list[str] | None = None) -> None:
    global RESULTS
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "--dir", type=Path, default=RESULTS,
        help="the results folder read and written (default: this one, the committed tables)",
    )  # fmt: skip
    RESULTS = parser.parse_args(argv).dir.resolve()
    popgym_by_memory()
    experts_correct_share()
    experts_pass_rule()
    experts_eval_t()
    refresh_kl_ratio()
    r3_view_chance()
    r5_settings()
    r6_transfer()
    r7_alone()
    r8_vs_experts()
    hidden_goal_following()


if __name__ == "__main__":
    main()
