"""``experiments/results/experts_eval.py``: a goal-cycle run played frozen under given rules,
its return split into correct entries and penalties."""

from __future__ import annotations

import csv
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")

from marlgrid.agents.algorithms.ppo import PPOConfig  # noqa: E402
from marlgrid.agents.networks.models import NetworkConfig  # noqa: E402
from marlgrid.agents.training.curriculum import ScheduleConfig  # noqa: E402
from marlgrid.agents.training.roles import RoleConfig  # noqa: E402
from marlgrid.agents.training.trainer import (  # noqa: E402
    EnvConfig,
    LoggerConfig,
    TrainConfig,
    train,
)
from marlgrid.analysis.runs import wall_seconds  # noqa: E402
from tests.conftest import results_script  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
experts_eval = results_script("experts_eval")


def tiny_run(root: Path, **overrides) -> Path:
    """A tiny 3-agent goal-cycle run whose curriculum ends at penalty 0.25."""
    torch.set_num_threads(1)
    net = NetworkConfig(hidden_size=16, trunk_sizes=(16,), head_sizes=(8,), conv_channels=(4,))
    cfg = TrainConfig(
        env=EnvConfig(
            "MarlGrid-GoalCycle-13x13-3Agents-v0",
            num_envs=2,
            settings={"size": 7, "max_steps": 30, "agent": {"extras": ["reward"]}},
        ),
        agent=PPOConfig(network=net, num_steps=8, chunk_len=4, num_minibatches=2, update_epochs=1),
        total_timesteps=32,
        curriculum={"penalty": ScheduleConfig(points=[[0, 0.0], [16, 0.25]])},
        checkpoint_every=1,
        video=False,
        logger=LoggerConfig(tensorboard=False, progress=False),
        **overrides,
    )
    train(cfg, root / "run")
    return root / "run"


@pytest.fixture(scope="module")
def run(tmp_path_factory) -> Path:
    return tiny_run(tmp_path_factory.mktemp("experts_eval"))


@pytest.fixture(scope="module")
def novice_run(tmp_path_factory) -> Path:
    """The same, agent_0 a novice beside two scripted oracles."""
    oracle = RoleConfig(kind="scripted", policy="oracle")
    roles = {"agent_1": oracle, "agent_2": oracle}
    return tiny_run(tmp_path_factory.mktemp("experts_eval_novice"), roles=roles)


def test_the_return_is_the_correct_entries_less_the_penalty_paid_for_the_wrong_ones(run):
    for penalty in (1.5, 4.0):
        values, _ = experts_eval.episode_metrics(run, False, 40, 777, {"penalty": penalty})
        assert values["return"].shape == (40, 3)
        assert values["penalties"].sum() > 0  # a barely trained policy enters wrong tiles
        expected = values["rewards"] - penalty * values["penalties"]
        assert abs(values["return"] - expected).max() < 1e-9


def test_the_rule_override_wins_over_the_curriculum_stage(run):
    free, _ = experts_eval.episode_metrics(run, False, 40, 777, {"penalty": 0.0})
    assert (free["return"] == free["rewards"]).all()  # wrong entries cost nothing at 0
    staged, _ = experts_eval.episode_metrics(run, False, 40, 777, {})  # the run's last stage: 0.25
    expected = staged["rewards"] - 0.25 * staged["penalties"]
    assert abs(staged["return"] - expected).max() < 1e-9


def test_the_csv_has_a_greedy_and_a_sampled_row_per_run(run, tmp_path):
    out = tmp_path / "eval.csv"
    experts_eval.main([str(run), "--episodes", "16", "--rule", "penalty=1.5", "--csv", str(out)])
    rows = list(csv.DictReader(out.open()))
    assert [r["mode"] for r in rows] == ["greedy", "sampled"]
    assert all(len(r["return_per_agent"].split()) == 3 for r in rows)
    assert {r["env_steps"] for r in rows} == {"32"}  # what the run trained, from its files
    wall = round(wall_seconds(run), 1)  # from its files too (0.0 when it trained that fast)
    assert wall >= 0 and all(float(r["wall_s"]) == wall for r in rows)


def test_partners_are_the_agents_the_run_did_not_train_in_the_same_episodes(novice_run, tmp_path):
    out = tmp_path / "eval.csv"
    experts_eval.main(
        [str(novice_run), "--episodes", "16", "--rule", "penalty=1.5", "--partners"]
        + ["--csv", str(out)]
    )
    for row in csv.DictReader(out.open()):
        assert len(row["return_per_agent"].split()) == 1  # the novice
        assert len(row["partners_return_per_agent"].split()) == 2  # the two oracles
        assert float(row["partners_penalties"]) == 0.0  # an oracle never enters a wrong tile
        assert float(row["partners_rewards"]) > float(row["rewards"])  # it beats a novice
        expected = float(row["partners_rewards"]) - 1.5 * float(row["partners_penalties"])
        assert float(row["partners_return"]) == pytest.approx(expected, abs=1e-3)


def test_a_run_whose_every_agent_trained_has_empty_partner_columns(run, tmp_path):
    rows = experts_eval.summary_rows(run, 4, 777, {}, partners=True)
    assert [(r["partners_return"], r["partners_penalties_per_agent"]) for r in rows] == [
        ("", "")
    ] * 2
    assert all(isinstance(r["return"], float) for r in rows)


def test_merge_replaces_the_runs_evaluated_now_and_keeps_the_others(run, tmp_path):
    out = tmp_path / "eval.csv"
    args = [str(run), "--episodes", "4", "--csv", str(out)]
    experts_eval.main(args)
    # the same rows as if of a run whose directory is gone
    out.write_bytes(out.read_bytes().replace(str(run).encode(), b"runs/gone/seed_1"))
    experts_eval.main([*args, "--merge"])
    rows = list(csv.DictReader(out.open(newline="")))
    assert [(r["run"], r["mode"]) for r in rows] == [
        ("runs/gone/seed_1", "greedy"), ("runs/gone/seed_1", "sampled"),
        (str(run), "greedy"), (str(run), "sampled"),
    ]  # fmt: skip
    experts_eval.main([*args, "--merge"])  # evaluated again: its rows replaced where they stood
    assert list(csv.DictReader(out.open(newline=""))) == rows
    with pytest.raises(SystemExit, match="error: --merge needs --csv"):
        experts_eval.main([str(run), "--episodes", "4", "--merge"])


@pytest.mark.parametrize("bad", ["penalty", "penalty=high", "=1.5", "bogus=1"])
def test_a_bad_rule_is_refused_naming_it(run, bad, capsys):
    with pytest.raises(SystemExit):
        experts_eval.main([str(run), "--episodes", "4", "--rule", bad])
    out, err = capsys.readouterr()
    assert "--rule" in err and ("penalty" in err or "bogus" in err or "=1.5" in err)
    assert out == ""  # refused before any run was played


def test_a_missing_run_stops_it_before_any_run_is_played(run, tmp_path, capsys):
    missing = tmp_path / "nope"
    with pytest.raises(SystemExit, match=f"error: {missing} is neither a run directory"):
        experts_eval.main([str(run), str(missing), "--episodes", "4"])
    assert capsys.readouterr().out == ""  # the first run was not played either
    with pytest.raises(SystemExit, match="error: --episodes must be >= 1, got 0"):
        experts_eval.main([str(run), "--episodes", "0"])


def test_the_page_figure_reads_the_committed_curve_csvs_and_the_baselines(tmp_path):
    experts_plot = results_script("experts_plot")
    header = "condition,step,n,mean,mean_ci_low,mean_ci_high,iqm,iqm_ci_low,iqm_ci_high\n"
    rows = "".join(
        f"{c},{s},2,{v},{v - 1},{v + 1},{v},nan,nan\n"
        for c in experts_plot.FIGURES[0].arms
        for s, v in ((0, 0.5), (1000, 2.0))
    )
    for stem in experts_plot.PANELS:
        (tmp_path / f"experts_train_{stem}_curves.csv").write_text(header + rows)
    baselines = ROOT / "experiments" / "results" / "goal_cycle_baselines.csv"
    (tmp_path / "goal_cycle_baselines.csv").write_text(baselines.read_text())
    found = experts_plot.baselines(tmp_path / "goal_cycle_baselines.csv")
    assert set(found) == set(experts_plot.BASELINES)
    assert found["discoverer"] == pytest.approx(17.1667) and found["play_safe"] == 1.0
    curves = experts_plot.arm_curves(tmp_path, experts_plot.FIGURES[0], "rewards")
    expert = curves["name=goal_cycle_expert"]
    assert expert.grid.tolist() == [0.0, 1000.0] and expert.bands.mean.tolist() == [0.5, 2.0]
    assert expert.bands.mean_low.tolist() == [-0.5, 1.0] and expert.bands.n.tolist() == [2, 2]
    out = experts_plot.plot(tmp_path, experts_plot.FIGURES[0], tmp_path / "fig.png")
    assert out.stat().st_size > 10_000
    # part 2's arms read their own setups' baselines: 13x13 / 250 steps, and 4 tiles
    full, tiles4, _ = experts_plot.FIGURES[1].arms.values()
    assert experts_plot.baselines(baselines, full.setup, full.policies) == pytest.approx(
        {"discoverer": 22.8733, "reward_blind": 9.4683}
    )
    assert experts_plot.baselines(
        baselines.with_name(tiles4.baselines), tiles4.setup, tiles4.policies
    ) == pytest.approx({"discoverer": 14.61, "reward_blind": -1.3692})
    experts_plot.main(["--results", str(tmp_path), "--out-dir", str(tmp_path)])
    assert (tmp_path / "experts_curves.png").exists()
    assert not (tmp_path / "experts_part2_curves.png").exists()  # no part-2 CSVs: skipped
    # part 3 draws part 2's 4-tile run from part 2's CSVs beside its own arm
    part3 = experts_plot.FIGURES[2]
    gated, fixed = part3.arms
    part3_csv, part2_csv = (tmp_path / f"experts_part{k}_rewards_curves.csv" for k in (3, 2))
    part3_csv.write_text(header + f'"{gated}",0,2,3,2,4,3,nan,nan\n')
    assert list(experts_plot.arm_curves(tmp_path, part3, "rewards")) == [gated]
    part2_csv.write_text(header + f'"{fixed}",0,1,5,nan,nan,5,nan,nan\n')
    found = experts_plot.arm_curves(tmp_path, part3, "rewards")
    assert (found[fixed].grid.tolist(), found[fixed].bands.mean.tolist()) == ([0.0], [5.0])
    gated_band = found[gated].bands
    assert (gated_band.mean[0], gated_band.mean_low[0], gated_band.mean_high[0]) == (3.0, 2.0, 4.0)


def test_rows_are_printed_and_written_and_no_rows_do_not_leave_an_old_file(tmp_path, capsys):
    from marlgrid.analysis.report import show_and_write_rows

    path = tmp_path / "out.csv"
    show_and_write_rows([{"run": "a", "return": 1.23456}, {"run": "b", "return": 2.0}], path)
    assert "run=a  return=1.235" in capsys.readouterr().out
    assert path.read_text().splitlines() == ["run,return", "a,1.23456", "b,2.0"]
    with pytest.raises(ValueError, match="no rows to write to"):
        show_and_write_rows([], path)


def test_env_settings_reach_the_played_env_beside_the_rules(run, monkeypatch):
    seen = []

    def rows(run, episodes, seed, rules, partners):
        seen.append(rules)
        return [{"return": 0.0}]

    monkeypatch.setattr(experts_eval, "summary_rows", rows)
    experts_eval.main([str(run), "--rule", "penalty=1.5", "--setting", "size=9",
                       "--setting", "max_steps=20"])  # fmt: skip
    assert seen == [{"penalty": 1.5, "size": 9, "max_steps": 20}]
    with pytest.raises(SystemExit, match="--setting agent.extras: only top-level env settings"):
        experts_eval.main([str(run), "--setting", "agent.extras=[]"])


def test_a_run_trained_on_one_map_size_plays_on_another(run):
    played = experts_eval.SavedRun(run).policies(True, {"size": 9, "max_steps": 20})
    assert (played.settings["size"], played.settings["max_steps"]) == (9, 20)
    values, _ = experts_eval.episode_metrics(run, True, 16, 777, {"size": 9, "max_steps": 20})
    assert values["return"].shape == (16, 3)


def test_every_committed_figure_finds_each_of_its_arms_in_the_committed_csvs():
    experts_plot = results_script("experts_plot")
    results = ROOT / "experiments" / "results"
    drawn = [
        f for f in experts_plot.FIGURES if (results / f"{f.prefix}_rewards_curves.csv").exists()
    ]
    assert len(drawn) >= 17  # parts 1 to 18 but 11 (not run to its end) are committed
    for figure in drawn:
        for stem in ("episodic_return", "rewards", "penalties"):  # a fixed penalty logs no curve
            assert set(experts_plot.arm_curves(results, figure, stem)) == set(figure.arms), (
                figure.out,
                stem,
            )
