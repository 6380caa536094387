"""``experiments/results/derived_tables.py``: R5's, R6's and R7's tables from per-agent
evaluation tables, on hand-made inputs."""

from __future__ import annotations

import csv
from pathlib import Path

import pytest

from tests.conftest import results_script

derived_tables = results_script("derived_tables")
HEADER = "condition,target,partners,role,greedy,metric,mean,low,high,n,checkpoint\n"


def table(path: Path, condition: str, ret: float, correct: float, wrong: float) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    rows = [("return", ret), ("rewards", correct), ("penalties", -1.5 * wrong),
            ("social/penalties", wrong)]  # fmt: skip
    body = "".join(f"{condition},T,alone,agent_0,True,{m},{v},0,0,200,x.pt\n" for m, v in rows)
    new = not path.exists()
    with path.open("a") as f:
        f.write((HEADER if new else "") + body)


def read(path: Path) -> list[dict[str, str]]:
    return list(csv.DictReader(path.open(newline="")))


def test_r6_means_and_the_claimed_orderings_neighbours(tmp_path, monkeypatch) -> None:
    monkeypatch.setattr(derived_tables, "RESULTS", tmp_path)
    returns = {"r3_social_aux": [3.0, 5.0], "r3_alone_aux": [1.0, 2.0, 3.0], "r5_bc": [0.0, 0.0]}
    for agent, values in returns.items():
        for seed, value in enumerate(values, 1):
            for cond in ("GC4/oracle", "GC4/none"):
                table(tmp_path / "social_r6" / f"{agent}_seed_{seed}_gc4.csv", cond, value, 9, 2)
    expert = tmp_path / "social_r6" / "goal_cycle_7x7_3agents_expert_seed0_gc4.csv"
    table(expert, "GC4/oracle", 7, 8, 1)
    derived_tables.r6_transfer()
    means = {(r["agent"], r["condition"]): r for r in read(tmp_path / "social_r6_transfer_t.csv")}
    assert means[("r3_social_aux", "GC4/oracle")]["mean"] == "4.0"
    assert means[("r3_alone_aux", "GC4/none")]["seeds"] == "3"
    assert means[("goal_cycle_7x7_3agents_expert", "GC4/oracle")]["seeds"] == "1"
    seeds = read(tmp_path / "social_r6_transfer.csv")
    assert {(r["seed"], r["correct"], r["wrong"]) for r in seeds if r["agent"] == "r5_bc"} == {
        ("1", "9.0", "2.0"), ("2", "9.0", "2.0")}  # fmt: skip
    tests = read(tmp_path / "social_r6_transfer_welch.csv")
    # A against C in both conditions; the expert has one seed, so no test touches it
    pair = ("r3_social_aux", "r3_alone_aux")
    assert [(r["condition"], r["a"], r["b"]) for r in tests] == [
        ("GC4/none", *pair), ("GC4/oracle", *pair)]  # fmt: skip
    assert float(tests[0]["welch_t"]) == pytest.approx(2.0 / (1.0 + 1 / 3) ** 0.5, rel=1e-3)


def test_r5_settings_pairs_the_clone_and_arm_a_in_both_settings(tmp_path, monkeypatch) -> None:
    monkeypatch.setattr(derived_tables, "RESULTS", tmp_path)
    head = "run,mode,return\n"
    (tmp_path / "social_r5_eval.csv").write_text(
        head + "runs/r5/bc/seed_1,greedy,6\nruns/r5/bc/seed_1,sampled,1\n"
        "runs/r5/bc/seed_2,greedy,8\n"
    )
    (tmp_path / "social_r3_eval.csv").write_text(
        head + "runs/r3/social_aux/seed_1,greedy,1\nruns/r3/social_aux/seed_2,greedy,0\n"
        "runs/r3/social_aux_coef1/seed_1,greedy,9\n"  # another arm: not A
    )
    for agent, values in (("r5_bc", (5, 5.5)), ("r3_social_aux", (0.5, 1))):
        for seed, value in enumerate(values, 1):
            table(tmp_path / "social_r5" / f"{agent}_seed_{seed}_alone.csv", "GC/none", value, 1, 1)
    derived_tables.r5_settings()
    rows = read(tmp_path / "social_r5_settings.csv")
    means = {(r["arm"], r["setting"]): r["return_or_t"] for r in rows if r["row"] == "mean"}
    assert means == {("r5_bc", "beside"): "7.0", ("r3_social_aux", "beside"): "0.5",
                     ("r3_social_aux", "alone"): "0.75", ("r5_bc", "alone"): "5.25"}  # fmt: skip
    welch = [(r["arm"], r["setting"]) for r in rows if r["row"] == "welch"]
    assert welch == [("r5_bc alone", "r5_bc beside"), ("r5_bc beside", "r3_social_aux beside"),
                     ("r5_bc alone", "r3_social_aux alone")]  # fmt: skip


def test_r7_compares_the_mixed_and_alone_arms_played_alone(tmp_path, monkeypatch) -> None:
    monkeypatch.setattr(derived_tables, "RESULTS", tmp_path)
    arms = {"r7_mixed": (2, 4, 6), "r3_alone_aux": (1, 1.5), "r3_social_aux": (9, 9)}
    for agent, values in arms.items():  # R3's arm A is not one of R7's arms
        for seed, value in enumerate(values, 1):
            table(tmp_path / "social_r7" / f"{agent}_seed_{seed}_alone.csv", "GC/none", value, 3, 1)
    derived_tables.r7_alone()
    rows = read(tmp_path / "social_r7_alone.csv")
    means = {r["arm"]: (r["seed_or_n"], r["return_or_t"]) for r in rows if r["row"] == "mean"}
    assert means == {"r7_mixed": ("3", "4.0"), "r3_alone_aux": ("2", "1.25")}
    seeds = [
        (r["arm"], r["seed_or_n"], r["correct"], r["wrong"]) for r in rows if r["row"] == "seed"
    ]
    assert ("r7_mixed", "3", "3.0", "1.0") in seeds and len(seeds) == 5
    (welch,) = [r for r in rows if r["row"] == "welch"]
    assert float(welch["return_or_t"]) > 0 and 0 < float(welch["t_low_or_p"]) < 1
    assert not (tmp_path / "social_r7_training.csv").exists()  # no training curves yet


def test_r7_pairs_each_mixed_runs_training_return_with_and_without_experts(
    tmp_path, monkeypatch
) -> None:
    monkeypatch.setattr(derived_tables, "RESULTS", tmp_path)
    table(tmp_path / "social_r7" / "r7_mixed_seed_1_alone.csv", "GC/none", 1, 1, 1)
    head = "condition,seed,run,final,steps_to\n"
    for setting, finals in (("social", (3.0, 5.0, 4.0)), ("solo", (1.0, 2.0, 3.0))):
        body = "".join(f"name=r7_mixed,{k},runs/r7/mixed/seed_{k},{v},\n" for k, v in
                       zip((1, 2, 3), finals, strict=True))  # fmt: skip
        (tmp_path / f"social_r7_{setting}_episodic_return_runs.csv").write_text(head + body)
    derived_tables.r7_alone()
    rows = read(tmp_path / "social_r7_training.csv")
    assert [r["difference"] for r in rows if r["row"] == "seed"] == ["2.0", "3.0", "1.0"]
    (mean,) = [r for r in rows if r["row"] == "mean_difference"]
    assert mean["seed_or_n"] == "3" and mean["difference"] == "2.0"
    assert float(mean["t_low"]) < 2.0 < float(mean["t_high"])


def test_r8_counts_the_seeds_where_the_novice_beats_its_experts(tmp_path, monkeypatch) -> None:
    monkeypatch.setattr(derived_tables, "RESULTS", tmp_path)
    head = "condition,seed,run,final,steps_to\n"
    finals = {0: (5.0, 1.0, 9.0), 1: (4.0, 3.0, 2.0), 2: (2.0, 3.0, 2.0)}  # experts 3.0, 3.0, 2.0
    for agent, values in finals.items():
        body = "".join(f"name=r8_eps_0.3,{k},runs/r8/eps_0.3/seed_{k},{v},\n" for k, v in
                       zip((1, 2, 10), values, strict=True))  # fmt: skip
        (tmp_path / f"social_r8_return_agent_{agent}_runs.csv").write_text(head + body)
    (tmp_path / "social_r8_eval.csv").write_text(
        "run,mode,return,partners_return\n"
        "runs/r8/eps_0.3/seed_1,greedy,2.5,3.0\nruns/r8/eps_0.3/seed_1,sampled,9,0\n"
        "runs/r8/eps_0.3/seed_2,greedy,4.0,3.5\n"
    )
    derived_tables.r8_vs_experts()
    rows = read(tmp_path / "social_r8_vs_experts.csv")
    seeds = [r for r in rows if r["row"] == "seed"]
    assert [r["seed_or_n"] for r in seeds] == ["1", "2", "10"]  # numeric order
    assert [r["training_difference"] for r in seeds] == ["2.0", "-2.0", "7.0"]
    assert [r["greedy_difference"] for r in seeds] == ["-0.5", "0.5", ""]  # seed 10 not played
    (above,) = [r for r in rows if r["row"] == "seeds_above"]
    assert above["arm"] == "r8_eps_0.3" and above["seed_or_n"] == "3"
    assert above["training_difference"] == "2" and above["novice_greedy_or_n"] == "2"
    assert above["greedy_difference"] == "1"


def test_hidden_goal_counts_seeds_at_the_bar_and_tests_the_loss(tmp_path, monkeypatch) -> None:
    monkeypatch.setattr(derived_tables, "RESULTS", tmp_path)
    body = "condition,seed,run,final,steps_to\n"
    for arm, finals in (("ppo_lstm_expert_aux", (0.3, 0.19, 0.5)),
                        ("ppo_lstm_expert", (0.0, 0.1, 0.05))):  # fmt: skip
        body += "".join(f"name=hidden_goal_{arm},{k},runs/hidden_goal/{arm}/seed_{k},{v},\n"
                        for k, v in zip((1, 2, 10), finals, strict=True))  # fmt: skip
    (tmp_path / "social_hidden_goal_repeat_expert_excess_agent_0_runs.csv").write_text(body)
    (tmp_path / "social_hidden_goal_eval.csv").write_text(
        "run,mode,return,partners_return\n"
        "runs/hidden_goal/ppo_lstm_expert_aux/seed_2,greedy,1.5,17.0\n"
        "runs/hidden_goal/ppo_lstm_expert_aux/seed_2,sampled,9,0\n"
    )
    derived_tables.hidden_goal_following()
    rows = read(tmp_path / "social_hidden_goal_following.csv")
    aux = [r for r in rows if r["row"] == "seed" and r["arm"].endswith("_aux")]
    assert [r["seed_or_n"] for r in aux] == ["1", "2", "10"]  # numeric order
    assert [r["at_or_above_0.19"] for r in aux] == ["1", "1", "1"]  # 0.19 itself counts
    assert [r["novice_greedy"] for r in aux] == ["", "1.5", ""]  # only seed 2 was played
    assert aux[1]["experts_greedy"] == "17.0"
    arms = {r["arm"]: r for r in rows if r["row"] == "arm"}
    assert arms["hidden_goal_ppo_lstm_expert"]["at_or_above_0.19"] == "0"
    assert arms["hidden_goal_ppo_lstm_expert_aux"]["excess_or_t"] == "0.33"
    (welch,) = [r for r in rows if r["row"] == "welch"]
    assert float(welch["excess_or_t"]) > 0 and 0 < float(welch["t_low_or_p"]) < 0.2
