"""Inputs that used to be accepted and ignored, or crash, are honoured or refused clearly.

Curriculum metrics the run cannot log (refused at start, or warned of once), the image encoder
taken from the observation settings (not the view's size), command-line ``memory_kwargs`` and
curricula of any rule, boolean overrides, the replay a DRQN checkpoint left out, POPGym step
counts below one update, and a ``metrics.csv`` cell that is not a number.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
#: every test run: small, quiet, in ``run/``
QUIET = ["video=false", "logger.progress=false", "logger.tensorboard=false", "hydra.run.dir=run",
         "agent.network.hidden_size=16", "agent.network.trunk_sizes=[16]",
         "agent.network.conv_channels=[4]"]  # fmt: skip
#: a tiny PPO-LSTM run: one update of 2 envs x 8 steps
TINY = [*QUIET, "env.num_envs=2", "agent.num_steps=8", "agent.chunk_len=4",
        "agent.num_minibatches=2", "agent.update_epochs=1", "agent.network.head_sizes=[8]",
        "total_timesteps=16"]  # fmt: skip


def train(tmp_path: Path, *overrides: str, base: list[str] = TINY) -> subprocess.CompletedProcess:
    """``experiments/train.py`` with ``base`` and ``overrides``, run in ``tmp_path``."""
    return subprocess.run(
        [sys.executable, str(ROOT / "experiments" / "train.py"), *base, *overrides],
        capture_output=True, text=True, timeout=120, cwd=tmp_path,
        env={**os.environ, "OMP_NUM_THREADS": "1", "PYTHONPATH": str(ROOT)},
    )  # fmt: skip


def column(run_dir: Path, key: str) -> list[float]:
    import csv

    with (run_dir / "metrics.csv").open() as f:
        return [float(row[key]) for row in csv.DictReader(f)]


def built(tmp_path: Path, *overrides: str):
    """The trainer of ``train.py``'s config composed from :data:`TINY` and ``overrides`` as its
    command line would (Hydra), in ``tmp_path/run`` (built, not run)."""
    from hydra import compose, initialize_config_dir
    from omegaconf import OmegaConf

    import experiments.train as script  # registers the schemas

    given = [o for o in [*TINY, *overrides] if not o.startswith("hydra.")]
    with initialize_config_dir(str(ROOT / "conf"), version_base="1.3"):
        cfg = OmegaConf.to_object(compose("train", overrides=given))
    return script.Trainer(cfg, tmp_path / "run")


def trained(tmp_path: Path, *overrides: str) -> tuple[Path, list[str]]:
    """:func:`built`, trained; the run directory and its main network's tensor names."""
    trainer = built(tmp_path, *overrides)
    trainer.run()
    net = trainer.learners["main"].learner.state_dict()["net"]
    return tmp_path / "run", list(net)


# -- refused at start ---------------------------------------------------------------------------

#: on the command line: one line, exit 1, no folder left behind
REFUSED_CLI = {
    "eval metric without evaluation": (
        [
            "env=goal_cycle_7x7",
            "curriculum=penalty_staged",
            "curriculum.penalty.metric=eval/return",
        ],
        "curriculum.penalty.metric 'eval/return' is logged only by evaluation, and eval_every is 0",
    ),
    "tile size that does not divide the view": (
        ["env=empty_5x5", "env.settings.agent.observation=rgb", "env.settings.agent.tile_size=4"],
        "network.tile_size 8 does not divide the 28x28 px rgb views of agent_0",
    ),
    "agent boolean yes": (
        ["agent.anneal_lr=yes"],
        "agent.anneal_lr must be True or False, got 'yes'",
    ),
    "agent boolean 1": (["agent.norm_adv=1"], "agent.norm_adv must be True or False, got 1"),
    "logger boolean on": (["logger.csv=on"], "logger.csv must be True or False, got 'on'"),
}


@pytest.mark.parametrize("overrides,message", REFUSED_CLI.values(), ids=list(REFUSED_CLI))
def test_bad_input_is_refused_in_one_line_before_any_folder(tmp_path, overrides, message):
    out = train(tmp_path, *overrides)
    assert out.returncode == 1, out.stdout[-2000:] + out.stderr[-2000:]
    lines = out.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: "), out.stderr[-2000:]
    assert message in lines[0]
    assert not (tmp_path / "run").exists()


#: when the trainer is built: a ConfigError naming the setting
REFUSED = {
    "eval metric evaluation does not log": (
        [
            "env=goal_cycle_7x7",
            "curriculum=penalty_staged",
            "curriculum.penalty.metric=eval/ret",
            "eval_every=1",
        ],
        "curriculum.penalty.metric 'eval/ret' is not logged; evaluation logs ['eval/return', ",
    ),
    "image_mode against the observation": (
        [
            "env=empty_5x5",
            "env.settings.agent.observation=rgb",
            "agent.network.image_mode=symbolic",
        ],
        "network.image_mode is 'symbolic', but agent_0 has observation=rgb",
    ),
    "unknown memory option": (
        ["env=empty_5x5", "agent.network.memory_kwargs.forget_bais=1.0"],
        "agent.network.memory_kwargs: memory core 'lstm' (LSTMCore) has no option 'forget_bais'",
    ),
}


@pytest.mark.parametrize("overrides,message", REFUSED.values(), ids=list(REFUSED))
def test_bad_settings_are_refused_when_the_trainer_is_built(tmp_path, overrides, message):
    from marlgrid.config import ConfigError

    with pytest.raises(ConfigError) as refused:
        built(tmp_path, *overrides)
    assert message in str(refused.value)
    assert not (tmp_path / "run").exists()


# -- curricula ------------------------------------------------------------------------------------


def test_a_threshold_metric_that_is_never_logged_is_warned_of_once(tmp_path, capsys):
    typo = "charts/episodic_retrun"
    run, _ = trained(tmp_path, "env=goal_cycle_7x7", "curriculum=penalty_staged",
                     f"curriculum.penalty.metric={typo}", "total_timesteps=48")  # fmt: skip
    out = capsys.readouterr().out
    warning = f"warning: curriculum.penalty.metric {typo!r} was not logged in update 1"
    assert out.count(warning) == 1, out[-3000:]
    assert "did you mean ['charts/episodic_return'" in out
    assert (run / "train.log").read_text().count(warning) == 1
    assert column(run, "curriculum/penalty") == [0.0, 0.0, 0.0]


def test_a_curriculum_of_any_rule_is_given_on_the_command_line(tmp_path):
    run, _ = trained(tmp_path, "env=goal_cycle_7x7", "total_timesteps=32",
                     "curriculum.streak_bonus.points=[[0,0.0],[16,0.5]]")  # fmt: skip
    assert column(run, "curriculum/streak_bonus") == [0.0, 0.5]


# -- the image encoder comes from the observation settings ----------------------------------------


def test_a_large_symbolic_view_trains_with_the_symbolic_encoder(tmp_path):
    _, names = trained(tmp_path, "env=empty_5x5", "env.settings.agent.view_size=17")
    assert any(".encoder.embed." in n for n in names), names


def test_a_small_rgb_view_trains_with_the_pixel_encoder(tmp_path):
    _, names = trained(tmp_path, "env=empty_5x5", "env.settings.agent.observation=rgb",
                       "env.settings.agent.view_size=5", "env.settings.agent.tile_size=2",
                       "agent.network.tile_size=2")  # fmt: skip  # 10x10 px views
    assert any(".encoder.cell." in n for n in names), names
    assert not any(".encoder.embed." in n for n in names)


# -- memory_kwargs without '+', and the replay a checkpoint left out ------------------------------


def test_memory_kwargs_take_a_plain_override(tmp_path):
    run, _ = trained(tmp_path, "env=empty_5x5", "agent.network.memory_kwargs.forget_bias=0.5")
    config = json.loads((run / "config.json").read_text())
    assert config["agent"]["network"]["memory_kwargs"] == {"forget_bias": 0.5}


def test_resuming_without_a_saved_replay_says_so(tmp_path, capsys):
    import torch

    from marlgrid.agents.algorithms.drqn_config import DRQNConfig
    from marlgrid.agents.networks.config import NetworkConfig
    from marlgrid.agents.training.trainer import EnvConfig, LoggerConfig, TrainConfig, Trainer

    torch.set_num_threads(1)
    net = NetworkConfig(memory="none", hidden_size=16, trunk_sizes=(16,), conv_channels=(4,))
    agent = DRQNConfig(network=net, seq_len=8, burn_in=0, overlap=0, buffer_size=512,
                       learning_starts=32, batch_size=4, checkpoint_replay=False)  # fmt: skip

    def run(total: int) -> None:
        cfg = TrainConfig(
            env=EnvConfig("MarlGrid-Empty-5x5-v0", num_envs=1), agent=agent, video=False,
            logger=LoggerConfig(tensorboard=False, progress=False), total_timesteps=total,
            extend=True,
        )  # fmt: skip
        Trainer(cfg, tmp_path / "run").run()

    run(64)  # one iteration of 64 steps, a checkpoint without the replay
    run(128)
    said = "learner main: the checkpoint holds no replay (checkpoint_replay=false)"
    assert capsys.readouterr().out.count(said) == 1
    assert said in (tmp_path / "run" / "train.log").read_text()


# -- POPGym step counts ---------------------------------------------------------------------------


def test_popgym_steps_below_one_update_are_refused_and_others_rounded_up_aloud(tmp_path):
    pytest.importorskip("popgym")
    from experiments.examples import popgym_sweep

    out = tmp_path / "out"
    with pytest.raises(SystemExit, match=r"--steps 100 is less than one update of 256 env steps"):
        popgym_sweep.main(["--steps", "100", "--num-envs", "2", "--out", str(out), "--quiet"])
    assert not out.exists()
    args = popgym_sweep.parse_args(["--steps", "300", "--num-envs", "2", "--out", str(out)])
    (cell,) = popgym_sweep.plan_cells(args)
    assert popgym_sweep.steps_note(cell) == (
        "training 512 steps (--steps 300 rounded up to 2 whole updates of 256 env steps)"
    )


# -- aggregate.py and a cell that is not a number -------------------------------------------------


def test_aggregate_skips_and_reports_a_non_numeric_cell_and_strict_refuses(tmp_path, capsys):
    pytest.importorskip("scipy")
    import tests.test_aggregate as synthetic
    from experiments.aggregate import main

    sweep = synthetic.write_sweep(tmp_path)
    bad = next(sweep.glob("*agent.lr=0.001*/seed_0")) / "metrics.csv"
    lines = bad.read_text().splitlines()
    lines[2] = lines[2].replace(",9.0,", ",oops,")  # line 3: the second logged row
    bad.write_text("\n".join(lines) + "\n")
    main([str(sweep), "--out", str(tmp_path / "agg"), "--include-unfinished"])
    err = capsys.readouterr().err
    assert f"skipped row: {bad} line 3, column charts/episodic_return: 'oops'" in err
    assert "skipped row:" in (tmp_path / "agg.md").read_text()
    with pytest.raises(SystemExit) as stop:
        main([str(sweep), "--out", str(tmp_path / "strict"), "--strict"])
    assert stop.value.code == 1


@pytest.mark.parametrize("value", ["3", "1.5", "true", "[1,2]", "typo", "penalty_anneal,7"])
def test_a_config_group_given_what_is_not_one_of_its_configs_is_refused_naming_them(value):
    from experiments.schemas import check_group_overrides
    from marlgrid.config import ConfigError

    conf = Path(__file__).resolve().parents[1] / "conf"
    with pytest.raises(ConfigError, match="curriculum=.* penalty_anneal"):
        check_group_overrides(conf, [f"curriculum={value}"])
    check_group_overrides(conf, ["curriculum=penalty_anneal,none", "agent=drqn", "seed=3"])


def test_a_scale_without_an_experiment_is_refused_naming_the_fix():
    from experiments.schemas import check_group_overrides
    from marlgrid.config import ConfigError

    conf = Path(__file__).resolve().parents[1] / "conf"
    for given in (["scale=small"], ["+scale=small", "seed=1"]):
        with pytest.raises(ConfigError, match=r"experiment=<name> scale=small; presets: .*solo"):
            check_group_overrides(conf, given)
    check_group_overrides(conf, ["experiment=solo_novice", "scale=small"])


def test_a_sweep_ends_pointing_at_its_aggregate_command(capsys):
    from omegaconf import OmegaConf

    from experiments.sweep_hint import AggregateHint

    conf = Path(__file__).resolve().parents[1] / "conf" / "train.yaml"
    callbacks = OmegaConf.load(conf).hydra.callbacks
    assert callbacks.aggregate_hint._target_ == "experiments.sweep_hint.AggregateHint"
    AggregateHint().on_multirun_end(OmegaConf.create({"hydra": {"sweep": {"dir": "/r/m/x"}}}))
    out = capsys.readouterr().out
    assert "python experiments/aggregate.py /r/m/x --out /r/m/x/summary" in out
