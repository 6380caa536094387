"""``experiments/results/runner.py``: a study's arms as a table, run, resumed and listed by one
tool; everything asked for is checked before anything runs."""

from __future__ import annotations

import shutil
import sys

import pytest

from experiments.results import runner

pytestmark = pytest.mark.skipif(shutil.which("bash") is None, reason="needs bash")


def test_every_study_table_loads_and_names_its_runs_as_the_shell_scripts_did(capsys):
    assert {"following_pays", "refresh_goal_cycle", "drqn"} <= set(runner.studies())
    for name in runner.studies():
        study = runner.load_study(name)
        assert study.arms and all(arm.seeds for arm in study.arms.values())
    assert runner.main(["following_pays", "dry", "social:3", "social_7x7_rl:1"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[0] == (
        "OMP_NUM_THREADS=1 .venv/bin/python experiments/train.py experiment=hidden_goal_9x9 "
        "name=following_pays_social seed=3 torch_threads=1 video=false logger.progress=false "
        "hydra.run.dir=runs/following_pays/social/seed_3"
    )
    assert lines[1].startswith(
        "OMP_NUM_THREADS=1 .venv/bin/python experiments/train.py experiment=hidden_goal_9x9 "
        "env.settings.size=7 env.settings.max_steps=100 roles=novice_with_trained_experts "
        "'roles.agent_1.checkpoint=\"experiments/experts/goal_cycle_7x7_3agents_expert_seed0.pt\"'"
    )
    assert lines[-1] == "2 runs, 2 at a time"


def test_unknown_studies_arms_and_seeds_are_refused_before_anything_runs(
    tmp_path, capsys, monkeypatch
):
    monkeypatch.setenv("OUT", str(tmp_path))
    assert runner.main(["no_such_study", "run"]) == 2
    assert "unknown study 'no_such_study'" in capsys.readouterr().err
    assert runner.main(["following_pays", "run", "social", "nope"]) == 2
    assert "unknown arm 'nope' of following_pays" in capsys.readouterr().err
    assert runner.main(["following_pays", "run", "social:1,x"]) == 2
    assert "seeds of arm 'social' must be whole numbers: '1,x'" in capsys.readouterr().err
    # an arm whose start is missing names the file and the arm it comes from
    assert runner.main(["following_pays", "run", "social_to_1.5:99"]) == 2
    err = capsys.readouterr().err
    assert "kept/social/seed_99/agent.pt" in err and "from arm 'social'" in err
    assert not any(tmp_path.iterdir())  # nothing was started or written


def test_status_says_which_seeds_ran(tmp_path, capsys, monkeypatch):
    from tests.conftest import fake_run

    fake_run(tmp_path / "refresh_goal_cycle/refresh_2/seed_1", 1500, 1500)
    fake_run(tmp_path / "refresh_goal_cycle/refresh_2/seed_2", 700, 1500)
    monkeypatch.setenv("OUT", str(tmp_path))
    assert runner.main(["refresh_goal_cycle"]) == 0
    out = capsys.readouterr().out
    assert "refresh_2 (seeds 1,2,3,4,5; 1.5M env steps)" in out
    block = out.split("refresh_2 (")[1].split("refresh_off (")[0]
    assert "seed 1: finished" in block and "seed 3: absent" in block
    assert "seed 2: " in block and "seed 2: finished" not in block


def test_play_runs_each_command_once_logs_it_and_counts_failures(tmp_path, capsys):
    queue = [(f"echo hello {k}; exit {k % 2}", tmp_path / "logs" / f"r{k}.log", f"r{k}")
             for k in range(3)]  # fmt: skip
    assert runner.play(queue, jobs=2) == 1
    assert (tmp_path / "logs" / "r2.log").read_text() == "hello 2\n"
    out = capsys.readouterr().out
    assert "done r0" in out and "failed r1" in out and "done r2" in out


def test_a_group_it_does_not_know_is_named(tmp_path, monkeypatch):
    folder = tmp_path / "toy"
    folder.mkdir()
    (folder / "arms.toml").write_text('[[arm]]\nname = "a"\nseeds = [1]\noverrides = "@NOPE@"\n')
    monkeypatch.setattr(runner, "HERE", tmp_path)
    with pytest.raises(runner.StudyError, match="unknown group in \\['@NOPE@'\\]"):
        runner.load_study("toy")
    assert sys.executable  # the module runs under the test's Python


def test_a_study_with_its_own_template_and_runs_folder_prints_its_old_commands(capsys):
    """drqn's table reproduces drqn_runs.sh's commands (its own argument order and folder)."""
    assert runner.main(["drqn", "dry", "e8_drqn:0", "cl400_soft_drqn"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[0] == (
        "OMP_NUM_THREADS=1 .venv/bin/python experiments/train.py name=e8_drqn seed=0 "
        "total_timesteps=40000 agent=drqn agent.network.conv_channels=[] "
        "agent.network.hidden_size=64 agent.network.trunk_sizes=[64] "
        "agent.network.head_sizes=[64] agent.buffer_size=50000 agent.train_freq=1 "
        "agent.target_update_period=200 agent.learning_starts=2064 agent.seq_len=20 "
        "agent.burn_in=10 agent.overlap=10 env.id=MarlGrid-Empty-8x8-v0 "
        "env.settings.max_steps=100 video=false logger.tensorboard=false "
        "logger.progress=false checkpoint_every=10 hydra.run.dir=runs/drqn_results/e8_drqn/seed_0"
    )
    assert lines[-1] == "6 runs, 2 at a time"  # cl400's five seeds by default
    assert all("env.settings.max_steps=400" in line for line in lines[1:6])


def test_seed_order_and_analyse_commands_in_order_with_the_runs_folder(tmp_path, monkeypatch):
    folder = tmp_path / "toy"
    folder.mkdir()
    (folder / "arms.toml").write_text(
        '[study]\nruns = "toy_runs"\norder = "seed"\n'
        "analyse = [\"python -c \\\"open('{runs_dir}/first', 'w')\\\"\", "
        '"python -c \\"import os; assert os.path.exists(\'{runs_dir}/first\')\\""]\n'
        '[[arm]]\nname = "a"\nseeds = [0, 1]\noverrides = "x=1"\n'
        '[[arm]]\nname = "b"\nseeds = [0, 1]\noverrides = "x=2"\n'
    )
    monkeypatch.setattr(runner, "HERE", tmp_path)
    study = runner.load_study("toy")
    order = [(arm.name, seed) for arm, seed in runner.requested(study, [])]
    assert order == [("a", 0), ("b", 0), ("a", 1), ("b", 1)]
    out = tmp_path / "out"
    (out / "toy_runs").mkdir(parents=True)
    monkeypatch.setenv("OUT", str(out))
    assert runner.main(["toy", "analyse"]) == 0  # the second command sees the first's file
    assert (out / "toy_runs" / "first").exists()
