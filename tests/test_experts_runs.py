"""``experiments/results/experts_runs.sh``: a part it does not have is refused before anything
is queued or analysed, and each part queues its own plan's runs."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from tests.conftest import fake_run, run_results_shell

pytestmark = pytest.mark.skipif(shutil.which("bash") is None, reason="needs bash")


@pytest.mark.parametrize("mode", [{}, {"ANALYSE": "1"}])
@pytest.mark.parametrize("part", ["0", "x", "25", "100"])
def test_unknown_parts_are_refused_before_anything_runs(tmp_path, part, mode) -> None:
    done = run_results_shell("experts_runs", out=tmp_path, PART=part, DRY="1", **mode)
    assert done.returncode == 2 and f"PART must be 1 to 24 (got '{part}')" in done.stderr
    assert not any(tmp_path.iterdir())


def test_part_4_queues_its_two_memory_probes(tmp_path) -> None:
    done = run_results_shell("experts_runs", out=tmp_path, PART="4", DRY="1")
    assert done.returncode == 0, done.stderr
    commands = [line for line in done.stdout.splitlines() if "train.py" in line]
    assert len(commands) == 2
    assert "agent.chunk_len=64" in commands[0] and "seed=1" in commands[0]
    assert "agent.network.memory=gtrxl" in commands[1]
    assert all(f"hydra.run.dir={tmp_path}/goal_cycle_expert_4tiles_gated_" in c for c in commands)


def test_part_5_queues_the_gated_canonical_run(tmp_path) -> None:
    done = run_results_shell("experts_runs", out=tmp_path, PART="5", DRY="1")
    assert done.returncode == 0, done.stderr
    commands = [line for line in done.stdout.splitlines() if "train.py" in line]
    assert len(commands) == 1 and "scale=small" not in commands[0]  # 13x13, full scale
    assert "curriculum=penalty_staged" in commands[0]
    assert "curriculum.penalty.threshold=10.0" in commands[0] and "seed=1" in commands[0]
    assert f"hydra.run.dir={tmp_path}/goal_cycle_expert_13x13_gated/seed_1" in commands[0]
    # the preset's full scale before part 14's recipe became it: from scratch, 8M steps
    assert "init_from=null" in commands[0] and "total_timesteps=8000000" in commands[0]


def test_part_2_keeps_the_first_full_scale_design(tmp_path) -> None:
    """Part 2's 13x13 run: from scratch, 8M steps, the small anneal stretched (the preset's full
    scale before part 14's recipe became it)."""
    done = run_results_shell("experts_runs", "canonical:1", out=tmp_path, DRY="1")
    assert done.returncode == 0, done.stderr
    (command,) = [line for line in done.stdout.splitlines() if "train.py" in line]
    for override in ("experiment=goal_cycle_expert ", "init_from=null", "total_timesteps=8000000",
                     "scale/recipe_penalty=small",
                     "curriculum.penalty.points=[[0,0.0],[800000,0.0],[5300000,1.5]]"):  # fmt: skip
        assert override in command
    assert "scale=small" not in command


def test_unknown_arms_and_bad_seeds_are_refused_before_anything_is_queued(tmp_path) -> None:
    done = run_results_shell("experts_runs", "recipe:1", "nothing:1", out=tmp_path, DRY="1")
    assert done.returncode == 2 and "unknown arm 'nothing'" in done.stderr
    assert not any(tmp_path.iterdir())  # recipe:1 was not queued either
    done = run_results_shell("experts_runs", "recipe:x", out=tmp_path, DRY="1")
    assert done.returncode == 2 and "seed of 'recipe:x' must be a whole number" in done.stderr


def test_part_5_analysis_evaluates_the_run_and_finds_each_stage(tmp_path) -> None:
    """With ``PY=echo`` the analysis prints the commands it would run: part 5 evaluates its run
    at penalty 1.5, draws its curves and finds the step of each of the six stages."""
    (tmp_path / "goal_cycle_expert_13x13_gated" / "seed_1").mkdir(parents=True)
    done = run_results_shell("experts_runs", out=tmp_path, PART="5", ANALYSE="1", PY="echo")
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    evals = [line for line in lines if line.startswith("experiments/results/experts_eval.py")]
    assert len(evals) == 1 and "--rule penalty=1.5" in evals[0]
    assert f"{tmp_path}/goal_cycle_expert_13x13_gated/seed_1" in evals[0]
    stages = [line.split("--threshold ")[1].split()[0] for line in lines if "--threshold" in line]
    assert stages == ["0.25", "0.5", "0.75", "1.0", "1.25", "1.5"]
    assert any("--metric curriculum/penalty --last 20" in line for line in lines)


def test_part_6_queues_seed_1_of_the_lower_gate_with_its_longer_budget(tmp_path) -> None:
    done = run_results_shell("experts_runs", out=tmp_path, PART="6", DRY="1")
    assert done.returncode == 0, done.stderr
    commands = [line for line in done.stdout.splitlines() if "train.py" in line]
    assert len(commands) == 1 and "seed=1" in commands[0]
    for override in ("env.settings.n_goals=4", "curriculum.penalty.threshold=5.0",
                     "total_timesteps=6000000"):  # fmt: skip
        assert override in commands[0]


def test_part_6_analysis_counts_the_ruled_out_mistakes_of_its_run(tmp_path) -> None:
    (tmp_path / "goal_cycle_expert_4tiles_gate5" / "seed_1").mkdir(parents=True)
    done = run_results_shell("experts_runs", out=tmp_path, PART="6", ANALYSE="1", PY="echo")
    assert done.returncode == 0, done.stderr
    visits = [line for line in done.stdout.splitlines() if "tile_visits.py" in line]
    assert len(visits) == 1 and f"{tmp_path}/goal_cycle_expert_4tiles_gate5/seed_1" in visits[0]
    assert "--csv experiments/results/experts_part6_tile_memory.csv" in visits[0]


def test_part_7_trains_a_copy_of_part_5s_run_on_to_16m_steps(tmp_path) -> None:
    """The first time, part 7 copies part 5's run (which it then extends) and leaves part 5's
    directory as it was; a second call resumes the copy instead of copying again."""
    done = run_results_shell("experts_runs", out=tmp_path, PART="7")
    assert done.returncode == 2 and "which has no checkpoints" in done.stderr
    part5 = tmp_path / "goal_cycle_expert_13x13_gated" / "seed_1"
    (part5 / "checkpoints").mkdir(parents=True)
    (part5 / "checkpoints" / "ckpt_000003900.pt").write_bytes(b"8M steps")
    done = run_results_shell("experts_runs", out=tmp_path, PART="7", DRY="1")
    assert done.returncode == 0, done.stderr
    part7 = tmp_path / "goal_cycle_expert_13x13_gated_16m" / "seed_1"
    assert f"cp -r {part5} {part7}" in done.stdout and not part7.exists()  # DRY copies nothing
    commands = [line for line in done.stdout.splitlines() if "train.py" in line]
    assert len(commands) == 1
    for override in ("total_timesteps=16000000", "extend=true", "curriculum.penalty.threshold=10.0",
                     f"hydra.run.dir={part7}"):  # fmt: skip
        assert override in commands[0]
    # the scratch design's 8M comes first; Hydra keeps the last value, the 16M
    assert commands[0].index("total_timesteps=8000000") < commands[0].index(
        "total_timesteps=16000000"
    )
    # for real (PY=true: the "training" does nothing): the copy is made once
    done = run_results_shell("experts_runs", out=tmp_path, PART="7", PY="true")
    assert done.returncode == 0, done.stderr
    assert (part7 / "checkpoints" / "ckpt_000003900.pt").read_bytes() == b"8M steps"
    assert (part5 / "checkpoints" / "ckpt_000003900.pt").exists()
    (part7 / "checkpoints" / "ckpt_000005000.pt").write_bytes(b"trained on")
    done = run_results_shell("experts_runs", out=tmp_path, PART="7", PY="true")
    assert done.returncode == 0 and "cp -r" not in done.stdout
    assert (part7 / "checkpoints" / "ckpt_000005000.pt").exists()


@pytest.mark.parametrize(
    ("part", "steps"), [("8", 4_000_000), ("9", 8_000_000), ("14", 16_000_000)]
)
def test_parts_8_9_and_14_start_13x13_from_the_7x7_library_expert(tmp_path, part, steps) -> None:
    """Parts 8, 9 and 14 differ only in the budget; each is a new run (no ``extend``)."""
    done = run_results_shell("experts_runs", out=tmp_path, PART=part, PY="echo")
    assert done.returncode == 0, done.stderr
    (command,) = [line for line in done.stdout.splitlines() if "train.py" in line]
    expert = "experiments/experts/goal_cycle_7x7_3agents_expert_seed0.pt"
    assert f"init_from={expert}" in command and (Path(__file__).parents[1] / expert).is_file()
    assert "experiment=goal_cycle_expert " in command and "scale=small" not in command
    assert "curriculum.penalty.threshold=10.0" in command and f"total_timesteps={steps}" in command
    assert "extend" not in command


@pytest.mark.parametrize(
    ("part", "change"),
    [
        ("10", None),
        ("13", "total_timesteps=6000000"),
        ("15", "agent.chunk_len=64"),
        ("18", "agent=ppo_lstm_expert_next_reward"),
        ("19", "agent=ppo_lstm_expert_next_reward total_timesteps=6000000"),
    ],
)
def test_parts_10_13_15_18_and_19_start_two_4_tile_seeds_from_the_3_tile_library_expert(
    tmp_path, part, change
) -> None:
    """Part 10 is part 3's gated 4-tile design with one change, the starting weights; part 13
    is part 10 with a 6M-step budget (a new run, not an extension), part 15 with 64-step BPTT
    chunks, part 18 with the reward-prediction loss, part 19 with both that loss and 6M steps."""
    done = run_results_shell("experts_runs", out=tmp_path, PART=part, DRY="1")
    assert done.returncode == 0, done.stderr
    commands = [line for line in done.stdout.splitlines() if "train.py" in line]
    assert [c.split(" seed=")[1].split()[0] for c in commands] == ["1", "2"]
    expert = "experiments/experts/goal_cycle_7x7_3agents_expert_seed0.pt"
    for command in commands:
        overrides = ("scale=small", "env.settings.n_goals=4", "curriculum.penalty.threshold=8.0",
                     f"init_from={expert}", "name=goal_cycle_expert_4tiles_warm")  # fmt: skip
        assert all(override in command for override in overrides) and "extend" not in command
        assert ("chunk_len" in command) == (part == "15")  # else the preset's 16 steps
        if part not in ("13", "19"):
            assert "total_timesteps" not in command  # part 3's budget: the preset's 3M steps
        if change is not None:
            assert change in command


@pytest.mark.parametrize(
    ("part", "arm"),
    [
        ("10", "goal_cycle_expert_4tiles_warm"),
        ("18", "goal_cycle_expert_4tiles_warm_next_reward"),
        ("19", "goal_cycle_expert_4tiles_warm_next_reward_6m"),
    ],
)
def test_parts_10_18_and_19_analyses_count_the_ruled_out_mistakes_of_both_seeds(
    tmp_path, part, arm
) -> None:
    for seed in (1, 2):
        (tmp_path / arm / f"seed_{seed}").mkdir(parents=True)
    done = run_results_shell("experts_runs", out=tmp_path, PART=part, ANALYSE="1", PY="echo")
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    (visits,) = [line for line in lines if "tile_visits.py" in line]
    assert f"--csv experiments/results/experts_part{part}_tile_memory.csv" in visits
    assert all(f"{arm}/seed_{k}" in visits for k in (1, 2))
    term = [line.split("--metric ")[1].split()[0] for line in lines if "losses/next_reward" in line]
    want = ["losses/next_reward", "losses/next_reward/accuracy", "losses/next_reward/nonzero"]
    assert term == ([] if part == "10" else want)  # the reward-prediction term's logs
    stages = [line.split("--threshold ")[1].split()[0] for line in lines if "--threshold" in line]
    assert stages == ["0.25", "0.5", "0.75", "1.0", "1.25", "1.5"]


def test_part_20_queues_the_4_tile_recipes_control_for_three_seeds(tmp_path) -> None:
    done = run_results_shell("experts_runs", out=tmp_path, PART="20", DRY="1")
    assert done.returncode == 0, done.stderr
    commands = [line for line in done.stdout.splitlines() if "train.py" in line]
    assert [c.split(" seed=")[1].split()[0] for c in commands] == ["1", "2", "3"]
    for command in commands:
        assert "experiment=goal_cycle_expert_4tiles_fixed_penalty scale=small" in command
        assert "curriculum" not in command and "total_timesteps" not in command


def test_part_20_analysis_has_no_stages_to_find(tmp_path) -> None:
    (tmp_path / "goal_cycle_expert_4tiles_warm_next_reward_fixed" / "seed_1").mkdir(parents=True)
    done = run_results_shell("experts_runs", out=tmp_path, PART="20", ANALYSE="1", PY="echo")
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    assert not [line for line in lines if "--threshold" in line]
    (visits,) = [line for line in lines if "tile_visits.py" in line]
    assert "--csv experiments/results/experts_part20_tile_memory.csv" in visits
    drawn = [line.split("--metric ")[1].split()[0] for line in lines if "--metric " in line]
    # the control has no curriculum, so no curriculum/penalty curve (aggregate.py refuses it)
    assert drawn[:3] == ["episodic_return", "social/rewards", "social/penalties"]
    assert "curriculum/penalty" not in drawn


@pytest.mark.parametrize(
    ("part", "start", "name"),
    [
        ("21", "init_from=experiments/experts/goal_cycle_13x13_3agents_expert_seed1.pt ", "13x13"),
        ("22", "", "13x13_from_7x7"),  # the preset's own start
        ("23", "agent=ppo_lstm_expert ", "13x13_from_7x7_no_loss"),  # part 22 without the term
    ],
)
def test_parts_21_22_and_23_run_the_4_tile_preset_at_full_scale(
    tmp_path, part, start, name
) -> None:
    done = run_results_shell("experts_runs", out=tmp_path, PART=part, DRY="1")
    assert done.returncode == 0, done.stderr
    (command,) = [line for line in done.stdout.splitlines() if "train.py" in line]
    preset = (
        f"experiment=goal_cycle_expert_4tiles {start}name=goal_cycle_expert_4tiles_{name} seed=1"
    )
    assert f" {preset} " in command
    assert "scale=" not in command and "curriculum" not in command


def test_part_23_reads_both_runs_over_the_same_step_window(tmp_path) -> None:
    arms = (
        "goal_cycle_expert_4tiles_13x13_from_7x7",
        "goal_cycle_expert_4tiles_13x13_from_7x7_no_loss",
    )
    for arm in arms:
        (tmp_path / arm / "seed_1").mkdir(parents=True)
    done = run_results_shell("experts_runs", out=tmp_path, PART="23", ANALYSE="1", PY="echo")
    assert done.returncode == 0, done.stderr
    (window,) = [line for line in done.stdout.splitlines() if "step_window.py" in line]
    assert all(f"{tmp_path}/{arm}/seed_1 " in window for arm in arms)
    assert "--start 1000000 --end 1500000" in window and "experts_part23_window.csv" in window


def test_part_24_runs_part_23_with_stages_of_0_05_and_with_the_gate_at_18(tmp_path) -> None:
    done = run_results_shell("experts_runs", out=tmp_path, PART="24", DRY="1")
    assert done.returncode == 0, done.stderr
    fine, gate18 = [line for line in done.stdout.splitlines() if "train.py" in line]
    part23 = "experiment=goal_cycle_expert_4tiles agent=ppo_lstm_expert "
    stages = ",".join(f"{0.05 * i:.2f}" for i in range(31))  # 0.00, 0.05, ..., 1.50
    assert f" {part23}'curriculum.penalty.values=[{stages}]' " in fine
    assert "threshold" not in fine and "_fine seed=1 " in fine
    assert f" {part23}curriculum.penalty.threshold=18.0 " in gate18 and "values" not in gate18
    assert "_gate18 seed=1 " in gate18


def test_part_24_reads_each_runs_onset_and_its_last_500k_steps(tmp_path) -> None:
    arms = ("goal_cycle_expert_4tiles_13x13_fine", "goal_cycle_expert_4tiles_13x13_gate18")
    for arm in arms:
        (tmp_path / arm / "seed_1").mkdir(parents=True)
    done = run_results_shell("experts_runs", out=tmp_path, PART="24", ANALYSE="1", PY="echo")
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    (window,) = [line for line in lines if "step_window.py" in line]
    assert all(f"{tmp_path}/{arm}/seed_1 " in window for arm in arms)
    assert "--last 500000" in window and "experts_part24_window.csv" in window
    onsets = [line for line in lines if "--threshold 1.5 --below --smooth 10" in line]
    assert [o.split("--out ")[1].rsplit("/", 1)[1] for o in onsets] == [
        "experts_part24_fine_play_safe",
        "experts_part24_gate18_play_safe",
    ]
    stages = {o.split("--out ")[1].rsplit("/", 1)[1] for o in lines if "--threshold 1.5 " in o}
    assert {"experts_part24_gate18_stage_1.5", "experts_part24_fine_stage_1.5"} <= stages


def test_part_11_trains_a_copy_of_part_9s_run_on_to_16m_steps(tmp_path) -> None:
    part9 = tmp_path / "goal_cycle_expert_13x13_warm_8m" / "seed_1"
    (part9 / "checkpoints").mkdir(parents=True)
    done = run_results_shell("experts_runs", out=tmp_path, PART="11", DRY="1")
    assert done.returncode == 0, done.stderr
    part11 = tmp_path / "goal_cycle_expert_13x13_warm_16m" / "seed_1"
    assert f"cp -r {part9} {part11}" in done.stdout
    (command,) = [line for line in done.stdout.splitlines() if "train.py" in line]
    for override in ("total_timesteps=16000000", "extend=true", "curriculum.penalty.threshold=10.0",
                     f"hydra.run.dir={part11}"):  # fmt: skip
        assert override in command


def test_part_12_trains_copies_of_part_10s_two_seeds_on_to_6m_steps(tmp_path) -> None:
    for seed in (1, 2):
        (tmp_path / "goal_cycle_expert_4tiles_warm" / f"seed_{seed}" / "checkpoints").mkdir(
            parents=True
        )
    done = run_results_shell("experts_runs", out=tmp_path, PART="12", DRY="1")
    assert done.returncode == 0, done.stderr
    commands = [line for line in done.stdout.splitlines() if "train.py" in line]
    assert [c.split(" seed=")[1].split()[0] for c in commands] == ["1", "2"]
    for seed, command in zip((1, 2), commands, strict=True):
        part10 = tmp_path / "goal_cycle_expert_4tiles_warm" / f"seed_{seed}"
        part12 = tmp_path / "goal_cycle_expert_4tiles_warm_6m" / f"seed_{seed}"
        assert f"cp -r {part10} {part12}" in done.stdout
        overrides = ("env.settings.n_goals=4", "total_timesteps=6000000", "extend=true",
                     "curriculum.penalty.threshold=8.0", f"hydra.run.dir={part12}")  # fmt: skip
        assert all(override in command for override in overrides)


def test_part_16_runs_each_seeds_4_tile_stage_only_from_its_finished_3_tile_stage(tmp_path) -> None:
    """Part 16 widens the LSTM to 256: a 3-tile recipe stage, then part 10's 4-tile stage started
    from that seed's finished stage 1 (never from a half-run)."""
    done = run_results_shell("experts_runs", out=tmp_path, PART="16", DRY="1")
    assert done.returncode == 0, done.stderr
    commands = [line for line in done.stdout.splitlines() if "train.py" in line]
    assert [c.split(" seed=")[1].split()[0] for c in commands] == ["1", "2"]
    for command in commands:
        assert "agent.network.hidden_size=256" in command and "scale=small" in command
        assert "n_goals" not in command and "init_from" not in command  # stage 1: 3 tiles
    refused = run_results_shell("experts_runs", "tiles4_warm_lstm256:1", out=tmp_path, DRY="1")
    assert refused.returncode == 2 and "run recipe_lstm256:1 first" in refused.stderr
    stage1 = tmp_path / "goal_cycle_expert_lstm256"
    fake_run(stage1 / "seed_1", 3000, 3000)
    fake_run(stage1 / "seed_2", 1000, 3000)  # still training
    done = run_results_shell("experts_runs", out=tmp_path, PART="16", DRY="1")
    assert done.returncode == 0, done.stderr
    first, second = [line for line in done.stdout.splitlines() if "train.py" in line]
    overrides = ("env.settings.n_goals=4", "curriculum.penalty.threshold=8.0",
                 "agent.network.hidden_size=256", f"init_from={stage1}/seed_1",
                 "name=goal_cycle_expert_4tiles_warm_lstm256", " seed=1 ")  # fmt: skip
    assert all(override in first for override in overrides)
    assert "name=goal_cycle_expert_lstm256" in second and " seed=2 " in second
    assert "init_from" not in second


@pytest.mark.parametrize(
    ("part", "stage1", "stage2"),
    [
        ("16", "goal_cycle_expert_lstm256", "goal_cycle_expert_4tiles_warm_lstm256"),
        ("17", "goal_cycle_expert_position", "goal_cycle_expert_4tiles_warm_position"),
    ],
)
def test_the_chained_parts_analyses_evaluate_both_stages_apart(tmp_path, part, stage1, stage2):
    for folder in (stage1, stage2):
        (tmp_path / folder / "seed_1").mkdir(parents=True)
    done = run_results_shell("experts_runs", out=tmp_path, PART=part, ANALYSE="1", PY="echo")
    assert done.returncode == 0, done.stderr
    evals = [line for line in done.stdout.splitlines() if "experts_eval.py" in line]
    assert len(evals) == 2
    assert f"{stage1}/seed_1" in evals[0] and f"eval_part{part}_3tiles.csv" in evals[0]
    assert f"{stage2}/seed_1" in evals[1] and f"eval_part{part}.csv" in evals[1]
    (visits,) = [line for line in done.stdout.splitlines() if "tile_visits.py" in line]
    assert f"experts_part{part}_tile_memory.csv" in visits and f"{stage2}/seed_1" in visits
    assert f"{stage1}/" not in visits  # 3 tiles: no 4-tile bookkeeping


def test_part_17_chains_the_128_unit_recipe_with_position_and_direction_inputs(tmp_path) -> None:
    """Part 17 is part 16's chain at the recipe's width, the learners also seeing their cell and
    facing: each seed's 4-tile stage only from its own finished 3-tile stage."""
    inputs = "env.settings.agent.extras=[reward,action,position,direction]"
    done = run_results_shell("experts_runs", out=tmp_path, PART="17", DRY="1")
    assert done.returncode == 0, done.stderr
    commands = [line for line in done.stdout.splitlines() if "train.py" in line]
    assert [c.split(" seed=")[1].split()[0] for c in commands] == ["1", "2"]
    for command in commands:
        assert inputs in command and "name=goal_cycle_expert_position " in command
        assert (
            "n_goals" not in command and "init_from" not in command and "hidden_size" not in command
        )
    refused = run_results_shell("experts_runs", "tiles4_warm_position:2", out=tmp_path, DRY="1")
    assert refused.returncode == 2 and "run recipe_position:2 first" in refused.stderr
    stage1 = tmp_path / "goal_cycle_expert_position"
    fake_run(stage1 / "seed_2", 3000, 3000)
    done = run_results_shell("experts_runs", out=tmp_path, PART="17", DRY="1")
    first, second = [line for line in done.stdout.splitlines() if "train.py" in line]
    assert "name=goal_cycle_expert_position " in first and " seed=1 " in first
    overrides = (
        inputs,
        "env.settings.n_goals=4",
        "curriculum.penalty.threshold=8.0",
        f"init_from={stage1}/seed_2",
        "name=goal_cycle_expert_4tiles_warm_position",
    )
    assert all(override in second for override in overrides) and " seed=2 " in second
