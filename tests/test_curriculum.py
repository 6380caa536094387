"""Rules that change between episodes, schedules of them, and the curriculum callback."""

from __future__ import annotations

import csv
import math
import os
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pytest

import marlgrid
from marlgrid.agents.training.curriculum import (
    CurriculumCallback,
    PointSchedule,
    ScheduleConfig,
    ThresholdSchedule,
    check_curriculum,
)
from marlgrid.config import ConfigError
from marlgrid.constants import FORWARD, LEFT
from marlgrid.core import kernels as K
from marlgrid.policies import make_policy
from marlgrid.vector import VectorEnv
from tests.conftest import HandMadeEnv

ROOT = Path(__file__).resolve().parents[1]
EAST = 0
# One spawn cell (x=1) west of goal-cycle tiles with ids 1, 2, 0 at x = 2, 4, 6.
CORRIDOR = [
    "#########",
    "#s1.2.0.#",
    "#########",
]
# Into tile 1 (first: +1), on to tile 2 (its successor: +1), then back onto tile 1 (wrong: its
# successor is 0): the last step pays -penalty. Seven steps: the episode's whole length.
PATH = [FORWARD, FORWARD, FORWARD, LEFT, LEFT, FORWARD, FORWARD]


def corridor_vec(num_envs: int = 2, **rules) -> VectorEnv:
    rules = {"penalty": 0.5, "max_steps": len(PATH), **rules}
    vec = VectorEnv(HandMadeEnv(CORRIDOR, **rules), num_envs)
    vec.reset(seed=0)
    return vec


def play_path(vec: VectorEnv, on_step: Callable[[int], None] | None = None) -> np.ndarray:
    """Face every agent east at its spawn cell, walk PATH; rewards ``(steps, num_envs)``."""
    vec.engine.dirs[:, 0] = EAST
    vec.engine.observe()
    out = []
    for t, action in enumerate(PATH):
        _, rewards, *_ = vec.step(np.full((vec.num_envs, 1), action))
        out.append(rewards[:, 0].copy())
        if on_step is not None:
            on_step(t)
    return np.array(out)


def expected(penalties) -> np.ndarray:
    return np.array([[1, 0, 1, 0, 0, 0, -p] for p in penalties], dtype=np.float32).T


# -- changing rules between episodes -----------------------------------------------------------


def test_penalty_changes_at_the_next_episode_and_the_running_one_keeps_its_rules():
    vec = corridor_vec()
    np.testing.assert_array_equal(play_path(vec), expected([0.5, 0.5]))
    seen = []

    def change_after_step_3(t: int) -> None:
        if t == 2:
            vec.set_rules(penalty=2.0)
        if t == 5:
            seen.append(([r.penalty for r in vec.episode_rules], vec.next_rules[0].penalty))

    # Changed after step 3 of the second episode: that episode still pays 0.5 for its mistake.
    np.testing.assert_array_equal(play_path(vec, change_after_step_3), expected([0.5, 0.5]))
    assert seen == [([0.5, 0.5], 2.0)]
    # The autoreset at the end of that episode started the next one under the new rules.
    assert [r.penalty for r in vec.episode_rules] == [2.0, 2.0]
    np.testing.assert_array_equal(play_path(vec), expected([2.0, 2.0]))


def test_envs_of_one_batch_can_play_under_different_rules():
    vec = corridor_vec(num_envs=3)
    vec.set_rules(envs=[1], penalty=-1.25)  # the sign does not matter: -abs(penalty)
    vec.set_rules(envs=2, penalty=3.0)
    vec.set_rules(envs=2, streak_bonus=0.5)  # changes add up until the reset
    np.testing.assert_array_equal(play_path(vec), expected([0.5, 0.5, 0.5]))
    rewards = play_path(vec)
    np.testing.assert_array_equal(rewards[:, :2], expected([0.5, 1.25]))
    # env 2: the second correct tile is a streak of 1: 1 + 0.5; the mistake pays -3.
    np.testing.assert_array_equal(rewards[:, 2], [1, 0, 1.5, 0, 0, 0, -3.0])
    with pytest.raises(ValueError, match=r"different rules.*episode_rules\[n\]"):
        vec.engine.rules  # noqa: B018


def test_episode_returns_follow_the_rules_of_their_episode():
    vec = corridor_vec(num_envs=1)
    vec.set_rules(penalty=1.0)  # before any step: the running first episode keeps 0.5
    returns = []
    for _ in range(2):
        vec.engine.dirs[:, 0] = EAST
        vec.engine.observe()
        for action in PATH:
            _, _, _, _, infos = vec.step(np.array([[action]]))
        returns.append(float(infos["episode"]["r"][0, 0]))
    assert returns == [1.5, 1.0]  # 1 + 1 - 0.5, then 1 + 1 - 1


def test_single_env_set_rules_takes_effect_at_reset():
    env = HandMadeEnv(CORRIDOR, penalty=0.5, max_steps=len(PATH))
    env.reset(seed=0)
    new = env.set_rules(penalty=1.5, max_steps=9)
    assert (new.penalty, new.max_steps) == (1.5, 9) and env.next_rules == new
    assert env.rules.penalty == 0.5 and env.max_steps == len(PATH)
    env.reset(seed=1)
    assert env.rules == new and env.max_steps == 9
    env.engine.dirs[0, 0] = EAST
    env.engine.observe()
    rewards = [env.step({"agent_0": a})[1]["agent_0"] for a in PATH]
    assert rewards == [1, 0, 1, 0, 0, 0, -1.5]
    assert env.agents == ["agent_0"]  # 7 of its 9 steps: still playing


def test_rule_vectors_stay_the_kernels_arrays():
    vec = corridor_vec()
    rules_i, rules_f = vec.engine.rules_i, vec.engine.rules_f
    vec.set_rules(envs=[0], penalty=4.0)
    vec.reset(seed=0)
    assert vec.engine.rules_i is rules_i and vec.engine.rules_f is rules_f
    assert rules_f.shape == (2, rules_f.shape[1])
    np.testing.assert_array_equal(rules_f[0], vec.episode_rules[0].to_arrays()[1])
    np.testing.assert_array_equal(rules_f[1], vec.episode_rules[1].to_arrays()[1])


@pytest.mark.parametrize(
    ("changes", "message"),
    [
        ({"penalti": 1.0}, r"unknown rule\(s\) \['penalti'\]; rules are \[.*'penalty'"),
        ({"n_agents": 2}, r"\['n_agents'\] fix the env's array shapes: build a new env"),
        ({"max_steps": 0}, r"max_steps must be >= 1, got 0"),
        ({"penalty": "high"}, r"penalty must be a number, got 'high'"),
        ({"respawn": 1}, r"respawn must be True or False, got 1"),
        ({"n_goals": 4}, r"n_goals=4 is more than the 3 goal-cycle tile\(s\).*n_goals <= 3"),
    ],
)
def test_bad_rule_changes_raise_and_change_nothing(changes, message):
    vec = corridor_vec()
    before = vec.next_rules
    with pytest.raises(ConfigError, match=message):
        vec.set_rules(**changes)
    assert vec.next_rules == before


def test_bad_env_indices_and_spawn_delays_are_refused():
    vec = corridor_vec()
    for envs in ([2], -1, [True], "0"):
        with pytest.raises(ConfigError, match=r"envs must be None \(every env\) or env indices"):
            vec.set_rules(envs=envs, penalty=1.0)
    late = HandMadeEnv(CORRIDOR, agent={"spawn_delay": 5}, max_steps=20)
    with pytest.raises(ConfigError, match=r"spawn_delay of every agent \(\[5\]\) is >= max_steps"):
        late.set_rules(max_steps=5)


def test_n_goals_change_generates_the_new_layout_and_the_oracle_follows_it():
    vec = marlgrid.make_vec("MarlGrid-GoalCycle-7x7-v0", 4)
    vec.reset(seed=3)
    oracle = make_policy("oracle")
    actions = np.zeros((4, 1), dtype=np.int64)
    rewards = []
    for t in range(2 * 60):  # two episodes of 60 steps
        if t == 30:
            vec.set_rules(envs=[0, 1], n_goals=3)  # half-way through the first episode
        if t == 59:
            tiles = (vec.engine.cycle_id >= 0).sum(axis=(1, 2))
            assert tiles.tolist() == [2, 2, 2, 2]  # the running episodes keep their layout
        actions[:, 0] = oracle.scripted_actions(vec.engine, 0)
        rewards.append(vec.step(actions)[1][:, 0].copy())
    tiles = (vec.engine.cycle_id >= 0).sum(axis=(1, 2))
    assert tiles.tolist() == [3, 3, 2, 2]
    assert [r.n_goals for r in vec.episode_rules] == [3, 3, 2, 2]
    rewards = np.array(rewards)
    # The oracle read each episode's own cycle: it never paid a penalty and kept collecting.
    assert (rewards >= 0).all()
    assert (rewards[60:] > 0).sum(axis=0).min() >= 5


def test_n_goals_that_do_not_fit_the_map_are_refused():
    env = marlgrid.make("MarlGrid-GoalCycle-7x7-v0")
    with pytest.raises(ConfigError, match=r"n_goals=40 does not fit GoalCycleEnv's layout"):
        env.set_rules(n_goals=40)
    assert env.next_rules.n_goals == 2


# -- schedules ---------------------------------------------------------------------------------


def test_linear_schedule_interpolates_between_points():
    s = PointSchedule([[10, 1.0], [20, 3.0], [40, 0.0]], "linear")
    values = [s.value(t) for t in (0, 10, 15, 20, 30, 40, 10_000)]
    assert values == pytest.approx([1.0, 1.0, 2.0, 3.0, 1.5, 0.0, 0.0])


def test_step_schedule_holds_the_last_point_reached():
    s = PointSchedule([[0, 0.0], [100, 1.0], [200, 2.5]], "step")
    assert [s.value(t) for t in (0, 99, 100, 199, 200, 10**9)] == [0.0, 0.0, 1.0, 1.0, 2.5, 2.5]
    counts = PointSchedule([[0, 2], [50, 3]], "step")
    assert [counts.value(t) for t in (49, 50)] == [2, 3] and type(counts.value(50)) is int


def test_threshold_schedule_advances_on_a_windowed_metric_with_patience():
    s = ThresholdSchedule("m", 8.0, [0.0, 0.5, 1.0], window=2, patience=2)
    seen = [9, 7, math.nan, None, 10, 10, 5, 20, 20, 0, 0]
    values = []
    for m in seen:
        s.observe({} if m is None else {"m": m})
        values.append(s.value(0))
    # means of full windows: [9,7]=8 pass 1; NaN and missing skipped; [7,10]=8.5 pass 2 ->
    # stage 1, window cleared; [10] not full; [10,5]=7.5 fails; [5,20]=12.5 pass 1;
    # [20,20] pass 2 -> stage 2, the last: nothing moves it on.
    assert values == [0.0, 0.0, 0.0, 0.0, 0.5, 0.5, 0.5, 0.5, 1.0, 1.0, 1.0]


def test_threshold_state_round_trips():
    a = ThresholdSchedule("m", 1.0, [0, 1, 2, 3], window=3, patience=1)
    for m in (5, 5, 5, 0, 5):
        a.observe({"m": m})
    b = ThresholdSchedule("m", 1.0, [0, 1, 2, 3], window=3, patience=1)
    b.load_state_dict(a.state_dict())
    assert b.state_dict() == a.state_dict() == {"stage": 1, "passes": 0, "recent": [0.0, 5.0]}
    for m in (5, 5, 5):
        a.observe({"m": m})
        b.observe({"m": m})
        assert a.value(0) == b.value(0)
    assert a.value(0) == 2  # [0, 5, 5] passes at the first of the three: stage 2, then refills


@pytest.mark.parametrize(
    ("curriculum", "message"),
    [
        ({"penalti": {"points": [[0, 1.0]]}}, r"curriculum.penalti: 'penalti' is not an env rule"),
        ({"max_steps": {"points": [[0, 10], [5, 20]]}}, r"linear interpolation needs a float"),
        ({"penalty": {"points": [[0, 1.0], [0, 2.0]]}}, r"strictly increasing steps, got \[0, 0\]"),
        ({"penalty": {"points": [[0, 1.0, 2.0]]}}, r"points\[0\] must be a pair \[step, value\]"),
        ({"penalty": {"points": []}}, r"points must be a list of 1 or more entries"),
        ({"penalty": {"mode": "cosine", "points": [[0, 1.0]]}}, r"mode must be one of \["),
        ({"penalty": {"points": [[0, 1.0]], "metric": "x"}}, r"points belongs to modes linear"),
        ({"penalty": {"points": [[0, 1.0]], "values": [1]}}, r"values belongs to mode threshold"),
        ({"penalty": {"metric": "m", "values": [0, 1]}}, r"threshold is required"),
        (
            {"penalty": {"metric": "m", "threshold": 1, "values": [0]}},
            r"values must be a list of 2 or more entries",
        ),
        (
            {"penalty": {"metric": "m", "threshold": 1, "values": [0, 1], "window": 0}},
            r"window must be >= 1, got 0",
        ),
        ({"max_steps": {"mode": "step", "points": [[0, 0]]}}, r"max_steps must be >= 1, got 0"),
        ({"penalty": {"pointz": [[0, 1.0]]}}, r"unknown schedule key\(s\) \['pointz'\]"),
    ],
)
def test_bad_schedules_fail_at_config_time(curriculum, message):
    from marlgrid.agents.training.train_config import TrainConfig

    with pytest.raises(ConfigError, match=message):
        check_curriculum(curriculum)
    with pytest.raises(ConfigError, match=message):
        TrainConfig(curriculum=curriculum).validate()


def test_modes_are_inferred_and_values_checked_against_the_env():
    checked = check_curriculum(
        {
            "penalty": {"points": [[0, 0.0]]},
            "cycle_reward": {"metric": "m", "threshold": 1, "values": [1, 2]},
        }
    )
    assert checked["penalty"].mode == "linear" and checked["cycle_reward"].mode == "threshold"
    callback = CurriculumCallback({"n_goals": ScheduleConfig("step", [[0, 3], [100, 4]])})
    with pytest.raises(ConfigError, match=r"curriculum.n_goals value 4: n_goals=4 is more than"):
        callback.check_env(corridor_vec())


# -- the callback in training runs -------------------------------------------------------------


def _train_config(tmp_path: Path, curriculum: dict, total: int, **overrides):
    from marlgrid.agents.algorithms.ppo import PPOConfig
    from marlgrid.agents.networks.models import NetworkConfig
    from marlgrid.agents.training.trainer import EnvConfig, LoggerConfig, TrainConfig

    net = NetworkConfig(hidden_size=16, trunk_sizes=(16,), head_sizes=(8,), conv_channels=(4,))
    settings = overrides.pop("settings", {})
    return TrainConfig(
        env=EnvConfig("MarlGrid-GoalCycle-7x7-v0", num_envs=2, settings=settings),
        agent=PPOConfig(network=net, num_steps=8, chunk_len=4, num_minibatches=2, update_epochs=1),
        curriculum=curriculum,
        total_timesteps=total,
        checkpoint_every=1,
        video=False,
        logger=LoggerConfig(tensorboard=False, progress=False),
        **overrides,
    )


def _column(run_dir: Path, key: str) -> list[float]:
    with (run_dir / "metrics.csv").open() as f:
        return [float(row[key]) for row in csv.DictReader(f)]


def test_training_logs_and_applies_a_linear_schedule_and_evaluation_plays_its_stage(tmp_path):
    torch = pytest.importorskip("torch")
    torch.set_num_threads(1)
    from marlgrid.agents.bookkeeping.checkpoint import checkpoint_path, load_checkpoint
    from marlgrid.agents.training.curriculum import checkpoint_rules
    from marlgrid.agents.training.evaluation import training_settings
    from marlgrid.agents.training.trainer import Trainer

    # 2 envs x 8 steps per update: global_step 0, 16, 32 at the starts of the 3 updates.
    curriculum = {"penalty": {"points": [[0, 0.0], [32, 1.6]]}}
    cfg = _train_config(tmp_path, curriculum, total=48, settings={"max_steps": 10})
    trainer = Trainer(cfg, tmp_path / "run")
    trainer.run()
    assert _column(tmp_path / "run", "curriculum/penalty") == pytest.approx([0.0, 0.8, 1.6])
    # Episodes of 10 steps began at steps 0, 10 and 20 of each env: under the value set
    # before the first reset (0, not the env's 0.5), then 0.8 (set at step 8), then 1.6.
    assert [r.penalty for r in trainer.vec.episode_rules] == pytest.approx([1.6, 1.6])
    assert trainer.vec.engine.rules_f[:, K.R_PENALTY].tolist() == pytest.approx([1.6, 1.6])
    # Evaluation and videos play the stage training is at, and a checkpoint's own stage:
    # update 1 ended at step 16, where the schedule gives 0.8.
    assert training_settings(trainer) == {"max_steps": 10, "penalty": pytest.approx(1.6)}
    first = load_checkpoint(checkpoint_path(tmp_path / "run" / "checkpoints", 1))
    assert first["global_step"] == 16
    assert checkpoint_rules(cfg.curriculum, first) == {"penalty": pytest.approx(0.8)}
    assert checkpoint_rules({}, first) == {}


def test_evaluate_cli_reads_rules_and_refuses_unknown_ones():
    import argparse

    from experiments.evaluate import rule_override

    assert rule_override("penalty=1.5") == ("penalty", 1.5)
    assert rule_override("respawn=false") == ("respawn", False)
    with pytest.raises(argparse.ArgumentTypeError, match=r"unknown rule\(s\) \['bogus'\]"):
        rule_override("bogus=1")
    with pytest.raises(argparse.ArgumentTypeError, match="expected NAME=VALUE"):
        rule_override("penalty")


def test_resume_continues_a_threshold_schedule(tmp_path):
    torch = pytest.importorskip("torch")
    torch.set_num_threads(1)
    from marlgrid.agents.bookkeeping.checkpoint import list_checkpoints, load_checkpoint
    from marlgrid.agents.training.trainer import Trainer

    # charts/update counts the updates (1, 2, ...): the stage moves on from update 2 on.
    staged = {"metric": "charts/update", "threshold": 2, "values": [0.0, 0.5, 1.0, 1.5]}
    run = tmp_path / "run"
    Trainer(_train_config(tmp_path, {"penalty": staged}, total=32), run).run()
    saved = load_checkpoint(list_checkpoints(run / "checkpoints")[-1])
    assert saved["curriculum"] == {"penalty": {"stage": 1, "passes": 0, "recent": []}}
    assert saved["identity"]["curriculum"]["penalty"]["values"] == [0.0, 0.5, 1.0, 1.5]
    cfg = _train_config(tmp_path, {"penalty": staged}, total=64, extend=True)
    trainer = Trainer(cfg, run)
    trainer.run()
    # Fresh, updates 3 and 4 would log 0.0 and 0.5; resumed, stage 1 continues.
    assert _column(run, "curriculum/penalty") == [0.0, 0.0, 0.5, 1.0]
    assert trainer.vec.episode_rules[0].penalty == 0.5  # set before the resumed run's reset
    assert trainer.vec.next_rules[0].penalty == 1.5
    assert "curriculum: penalty -> 1.5 after update 4" in (run / "train.log").read_text()


def test_hydra_composes_the_curriculum_group():
    pytest.importorskip("hydra")
    from hydra import compose, initialize_config_dir
    from hydra.errors import ConfigCompositionException
    from omegaconf import OmegaConf

    import experiments.train  # noqa: F401  (registers the schema)

    with initialize_config_dir(str(ROOT / "conf"), version_base="1.3"):
        assert OmegaConf.to_object(compose("train")).curriculum == {}
        anneal = OmegaConf.to_object(compose("train", overrides=["curriculum=penalty_anneal"]))
        staged = OmegaConf.to_object(compose("train", overrides=["curriculum=penalty_staged"]))
        with pytest.raises(ConfigCompositionException, match="pointz"):
            compose("train", overrides=["curriculum=penalty_anneal", "curriculum.penalty.pointz=1"])
    assert anneal.curriculum["penalty"].points == [[0, 0.0], [200000, 1.5]]
    assert staged.curriculum["penalty"].values == [0.0, 0.5, 1.0, 1.5]
    anneal.validate()
    staged.validate()


@pytest.mark.slow
def test_train_cli_runs_with_the_penalty_anneal(tmp_path):
    run_dir = tmp_path / "run"
    args = ["curriculum=penalty_anneal", "run=smoke", "total_timesteps=192", "env.num_envs=4",
            "agent.num_steps=16", "logger.progress=false", f"hydra.run.dir={run_dir}"]  # fmt: skip
    out = subprocess.run(
        [sys.executable, str(ROOT / "experiments" / "train.py"), *args],
        capture_output=True, text=True, timeout=300, cwd=ROOT,
        env={**os.environ, "OMP_NUM_THREADS": "1"},
    )  # fmt: skip
    assert out.returncode == 0, out.stderr[-2000:]
    # 64 env steps per update: 1.5 * step / 200000 at steps 0, 64, 128.
    assert _column(run_dir, "curriculum/penalty") == pytest.approx([0.0, 0.00048, 0.00096])
