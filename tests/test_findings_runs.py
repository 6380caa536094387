"""``experiments/results/findings_runs.sh``: its arms and pages are checked before anything
runs, and its evaluations take only the runs whose training ended."""

from __future__ import annotations

import re
import shutil
from pathlib import Path

import pytest

from tests.conftest import fake_run, run_results_shell

pytestmark = pytest.mark.skipif(shutil.which("bash") is None, reason="needs bash")


def test_unknown_arms_and_bad_seeds_are_refused_before_anything_runs(tmp_path) -> None:
    done = run_results_shell("findings_runs", "r2_social", "r9_nothing", out=tmp_path, DRY="1")
    assert done.returncode == 2 and "unknown page or arm 'r9_nothing'" in done.stderr
    done = run_results_shell("findings_runs", "r2_social:1,x", out=tmp_path, DRY="1")
    assert done.returncode == 2 and "seed 'x' of arm 'r2_social'" in done.stderr
    assert not any(tmp_path.iterdir())  # nothing was queued or written


def test_analysis_evaluates_finished_runs_only(tmp_path) -> None:
    fake_run(tmp_path / "r2/social/seed_1", 1500, 1500)
    fake_run(tmp_path / "r2/social_long/seed_1", 700, 5000)
    done = run_results_shell(
        "findings_runs", "r2", out=tmp_path, DRY="1", ANALYSE="1", RESULTS="experiments/results"
    )
    assert done.returncode == 0, done.stderr
    evaluation = next(line for line in done.stdout.splitlines() if "experts_eval.py" in line)
    assert f"{tmp_path}/r2/social/seed_1" in evaluation
    assert "social_long" not in evaluation
    assert "not finished" in done.stderr and "700 of 5000" in done.stderr


def test_r3_analysis_draws_the_next_view_loss_and_the_social_arms_following(tmp_path) -> None:
    for arm in ("social_aux", "alone_aux", "social_autoencoder"):
        fake_run(tmp_path / f"r3/{arm}/seed_1", 1500, 1500)
    done = run_results_shell(
        "findings_runs", "r3", out=tmp_path, DRY="1", ANALYSE="1", RESULTS="experiments/results"
    )
    assert done.returncode == 0, done.stderr
    lines = [line for line in done.stdout.splitlines() if "aggregate.py" in line]

    def folders(metric: str) -> set[str]:
        line = next(line for line in lines if f"--metric {metric} " in line)
        return {part.rsplit("/", 1)[1] for part in line.split() if part.startswith(str(tmp_path))}

    assert folders("losses/next_view") == {"social_aux", "alone_aux", "social_autoencoder"}
    assert folders("losses/next_view/cell_accuracy") == folders("losses/next_view")
    assert folders("social/follow_expert_agent_0") == {"social_aux", "social_autoencoder"}
    assert folders("charts/episodic_return") == {"social_aux", "alone_aux", "social_autoencoder"}
    chance = next(line for line in done.stdout.splitlines() if "view_chance.py" in line)
    played = {part.rsplit("/", 2)[1] for part in chance.split() if part.startswith(str(tmp_path))}
    assert played == {"social_aux", "alone_aux", "social_autoencoder"}
    assert chance.endswith("--csv experiments/results/social_r3_view_chance.csv --merge")
    # every table merges into the committed one: runs lost with a session keep their rows
    writers = ("aggregate.py", "experts_eval.py", "view_chance.py")
    tables = [line for line in done.stdout.splitlines() if any(w in line for w in writers)]
    assert len(tables) > 5 and all(" --merge" in line for line in tables)


def test_r3_draws_the_coefficient_sweep_beside_arm_a(tmp_path) -> None:
    for arm in ("social_aux", "social_aux_coef1", "social_aux_coef10", "alone_aux"):
        fake_run(tmp_path / f"r3/{arm}/seed_1", 1500, 1500)
    done = run_results_shell(
        "findings_runs", "r3", out=tmp_path, DRY="1", ANALYSE="1", RESULTS="experiments/results"
    )
    assert done.returncode == 0, done.stderr
    sweep = [line for line in done.stdout.splitlines()
             if "aggregate.py" in line and "social_r3_sweep_" in line]  # fmt: skip
    assert {line.split("--metric ")[1].split()[0] for line in sweep} == {
        "episodic_return", "losses/next_view/cell_accuracy"}  # fmt: skip
    for line in sweep:
        folders = {p.rsplit("/", 1)[1] for p in line.split() if p.startswith(str(tmp_path))}
        assert folders == {"social_aux", "social_aux_coef1", "social_aux_coef10"}


def test_r3_keeps_its_agents_for_r6_and_r6_plays_the_kept_files(tmp_path) -> None:
    fake_run(tmp_path / "r3/social_aux/seed_1", 1500, 1500)
    fake_run(tmp_path / "r3/social_aux/seed_2", 700, 1500)  # unfinished: not kept
    fake_run(tmp_path / "r3/social_autoencoder/seed_1", 1500, 1500)  # not an R6 agent
    done = run_results_shell(
        "findings_runs", "r3", out=tmp_path, DRY="1", ANALYSE="1", RESULTS="experiments/results"
    )
    assert done.returncode == 0, done.stderr
    kept = [line for line in done.stdout.splitlines() if "export_expert.py" in line]
    assert len(kept) == 1 and f"{tmp_path}/r3/social_aux/seed_1 " in kept[0]
    assert kept[0].split()[3] == "experiments/results/social_r6/agents/r3_social_aux_seed_1.pt"
    done = run_results_shell(
        "findings_runs", "r6", out=tmp_path, DRY="1", ANALYSE="1", RESULTS="experiments/results"
    )
    assert done.returncode == 0, done.stderr
    played = [line.split()[2] for line in done.stdout.splitlines() if "--transfer" in line]
    root = Path(__file__).resolve().parents[1]
    committed = sorted((root / "experiments/results/social_r6/agents").glob("*.pt"))
    kept_files = [str(p.relative_to(root)) for p in committed]
    assert committed and [p for p in played if "/agents/" in p] == kept_files
    assert sum("goal_cycle_7x7_3agents_expert_seed" in p for p in played) == 2
    tables = [
        line.split("--table ")[1] for line in done.stdout.splitlines() if "--transfer" in line
    ]
    assert "experiments/results/social_r6/r3_social_aux_seed_1_gc4.csv" in tables
    assert "experiments/results/social_r6/goal_cycle_7x7_3agents_expert_seed0_gc4.csv" in tables
    assert done.stdout.splitlines()[-1].endswith(
        "social_r6_transfer.png"
    )  # the figure, from the tables


def test_r5_plays_finished_clones_and_arm_a_kept_agents_alone(tmp_path) -> None:
    fake_run(tmp_path / "r5/bc/seed_1", 1500, 1500)
    fake_run(tmp_path / "r5/bc/seed_2", 700, 1500)  # still training: not played
    done = run_results_shell(
        "findings_runs", "r5", out=tmp_path, DRY="1", ANALYSE="1", RESULTS="experiments/results"
    )
    assert done.returncode == 0, done.stderr
    alone = [line for line in done.stdout.splitlines() if "evaluate.py" in line]
    played = [line.split()[2] for line in alone]
    assert [p for p in played if "r5/bc" in p] == [f"{tmp_path}/r5/bc/seed_1"]
    kept = [Path(p).name for p in played[1:]]
    assert kept == [f"r3_social_aux_seed_{k}.pt" for k in range(1, 6)]  # committed agents
    assert all("_alone.csv" in line and "--partners none" in line for line in alone)
    assert any(
        line.endswith("derived_tables.py --dir experiments/results")
        for line in done.stdout.splitlines()
    )


def test_r7_and_r8_draw_arm_c_from_r3s_committed_curves_and_kept_agents(tmp_path) -> None:
    fake_run(tmp_path / "r7/mixed/seed_1", 1500, 1500)
    fake_run(tmp_path / "r8/eps_0.3/seed_1", 1500, 1500)
    for page in ("r7", "r8"):
        done = run_results_shell(
            "findings_runs", page, out=tmp_path, DRY="1", ANALYSE="1", RESULTS="experiments/results"
        )
        assert done.returncode == 0, done.stderr
        curves = [line for line in done.stdout.splitlines() if "aggregate.py" in line]
        own = [line for line in curves if "charts/social/" in line or "charts/solo/" in line
               or "social/return_agent_" in line]  # fmt: skip
        assert len(own) == (2 if page == "r7" else 3) and not any("--borrow" in c for c in own)
        curves = [line for line in curves if line not in own]
        assert curves and all(
            "--borrow experiments/results/social_r3_" in line and " name=r3_alone_aux " in line
            for line in curves
        )
        assert "alone_aux" not in " ".join(line.split("--borrow")[0] for line in curves)
    played = [line.split()[2] for line in done.stdout.splitlines() if "evaluate.py" in line]
    assert not played  # R8 plays no frozen tables
    assert done.stdout.splitlines()[-1].endswith(
        "derived_tables.py --dir experiments/results"
    )  # social_r8_vs_experts.csv
    done = run_results_shell(
        "findings_runs", "r7", out=tmp_path, DRY="1", ANALYSE="1", RESULTS="experiments/results"
    )
    played = [line.split()[2] for line in done.stdout.splitlines() if "evaluate.py" in line]
    assert played[0] == f"{tmp_path}/r7/mixed/seed_1"
    assert [Path(p).name for p in played[1:]] == [f"r3_alone_aux_seed_{k}.pt" for k in range(1, 6)]
    assert done.stdout.splitlines()[-1].endswith(
        "derived_tables.py --dir experiments/results"
    )  # social_r7_alone.csv


def test_hidden_goal_ends_with_its_pass_rule_table(tmp_path) -> None:
    fake_run(tmp_path / "hidden_goal/ppo_lstm_expert_aux/seed_1", 1500, 1500)
    fake_run(tmp_path / "hidden_goal/ppo_lstm_expert_aux_long/seed_1", 5000, 5000)
    done = run_results_shell(
        "findings_runs",
        "hidden_goal",
        out=tmp_path,
        DRY="1",
        ANALYSE="1",
        RESULTS="experiments/results",
    )
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    following = [line for line in lines if "repeat_expert_excess_agent_0" in line]
    assert following and "social_hidden_goal_repeat_expert_excess_agent_0" in following[0]
    assert "ppo_lstm_expert_aux_long" in following[0]  # the long seed beside the two arms
    evaluation = next(line for line in lines if "experts_eval.py" in line)
    assert "ppo_lstm_expert_aux_long/seed_1" in evaluation
    assert lines[-1].endswith(
        "derived_tables.py --dir experiments/results"
    )  # social_hidden_goal_following.csv


@pytest.mark.parametrize(("page", "arm"), [("r5", "full_bc"), ("r7", "full_mixed")])
def test_full_scale_seeds_are_played_alone_on_the_canonical_map(tmp_path, page, arm) -> None:
    fake_run(tmp_path / f"{page}/{arm}/seed_1", 1500, 1500)
    done = run_results_shell(
        "findings_runs", page, out=tmp_path, DRY="1", ANALYSE="1", RESULTS="experiments/results"
    )
    assert done.returncode == 0, done.stderr
    (alone,) = [line for line in done.stdout.splitlines() if f"{page}/{arm}/seed_1 " in line
                and "evaluate.py" in line]  # fmt: skip
    assert f"social_{page}/{page}_{arm}_seed_1_alone_full.csv" in alone
    assert "--partners none" in alone and "size=7" not in alone  # 13x13 / 250 steps


def test_analysis_writes_a_copy_of_the_results_unless_told_to_write_them(tmp_path) -> None:
    """ANALYSE=1 by default writes its tables under $OUT/analysis/results (a copy of the
    committed folder): no command of it writes into experiments/results."""
    for page in ("r2", "r3", "hidden_goal"):
        done = run_results_shell("findings_runs", page, out=tmp_path, DRY="1", ANALYSE="1")
        assert done.returncode == 0, done.stderr
        assert f"analysis into {tmp_path}/analysis/results" in done.stdout
        written = re.findall(r"--(?:csv|out|table|dir) (\S+)", done.stdout)
        assert written, done.stdout
        assert all(w.startswith(str(tmp_path)) for w in written), written


def test_dry_social_runs_prints_its_commands_and_runs_nothing(tmp_path) -> None:
    done = run_results_shell("social_runs", out=tmp_path, DRY="1")
    assert done.returncode == 0, done.stderr
    commands = done.stdout.splitlines()
    assert len(commands) == 12 and all("experiments/train.py -m" in c for c in commands)
