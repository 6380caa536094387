"""Error texts that give the right advice: an unreadable file named for what it is, init_from
across algorithms naming them, a layer that does not fit naming ``extras``, and a run folder
taken as a frozen role's checkpoint (as init_from and evaluate.py take it)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("torch")

from marlgrid.agents.algorithms.drqn import DRQNConfig  # noqa: E402
from marlgrid.agents.algorithms.ppo import PPOConfig  # noqa: E402
from marlgrid.agents.bookkeeping.checkpoint import CheckpointError, load_checkpoint  # noqa: E402
from marlgrid.agents.training.roles import RoleConfig, resolve_roles  # noqa: E402
from marlgrid.agents.training.trainer import (  # noqa: E402
    EnvConfig,
    LoggerConfig,
    TrainConfig,
    Trainer,
)
from marlgrid.config import ConfigError  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
EXPERT = ROOT / "experiments" / "experts" / "goal_cycle_7x7_3agents_expert_seed0.pt"
ENV = EnvConfig("MarlGrid-GoalCycle-13x13-v0", num_envs=2, settings={"size": 7})
QUIET = {"video": False, "logger": LoggerConfig(tensorboard=False, progress=False)}


def test_an_unreadable_file_gets_the_advice_of_where_it_lies(tmp_path):
    expert = tmp_path / "expert.pt"
    ckpt = tmp_path / "run" / "checkpoints" / "ckpt_000000003.pt"
    ckpt.parent.mkdir(parents=True)
    for path in (expert, ckpt):
        path.write_bytes(b"not a checkpoint")
    with pytest.raises(CheckpointError, match="export it again") as info:
        load_checkpoint(expert)
    assert "resume" not in str(info.value)
    with pytest.raises(CheckpointError, match="remove this one to resume from the previous one"):
        load_checkpoint(ckpt)


def test_init_from_a_drqn_run_into_ppo_names_both_algorithms(tmp_path):
    drqn = DRQNConfig(buffer_size=256, batch_size=4, seq_len=4, overlap=2, burn_in=0,
                      learning_starts=16)  # fmt: skip
    Trainer(TrainConfig(env=ENV, agent=drqn, total_timesteps=32, **QUIET), tmp_path / "q").run()
    ppo = PPOConfig(num_steps=8, chunk_len=4, num_minibatches=2)
    cfg = TrainConfig(
        env=ENV, agent=ppo, total_timesteps=32, init_from=str(tmp_path / "q"), **QUIET
    )
    with pytest.raises(ConfigError, match="it is a 'drqn' learner .* this run is a PPO"):
        Trainer(cfg, tmp_path / "p")


def test_a_frozen_role_takes_a_run_folder_as_its_newest_checkpoint(tmp_path):
    ppo = PPOConfig(num_steps=8, chunk_len=4, num_minibatches=2)
    Trainer(TrainConfig(env=ENV, agent=ppo, total_timesteps=32, **QUIET), tmp_path / "r").run()
    roles = {"agent_1": RoleConfig("frozen", checkpoint=str(tmp_path / "r"))}
    resolved = resolve_roles({"agent_0": RoleConfig(), **roles}, ["agent_0", "agent_1"], ["main"])
    newest = Path(resolved["agent_1"].checkpoint)
    assert newest.parent == tmp_path / "r" / "checkpoints" and newest.suffix == ".pt"


def test_a_layer_that_does_not_fit_for_other_extras_names_them(tmp_path):
    done = subprocess.run(
        [sys.executable, "experiments/train.py", "experiment=novice_with_experts", "scale=small",
         f"init_from={EXPERT}", "agent=ppo_lstm_expert", "total_timesteps=64", "video=false",
         "logger.progress=false", f"hydra.run.dir={tmp_path / 'run'}"],
        capture_output=True, text=True, cwd=ROOT, timeout=120,
    )  # fmt: skip
    assert done.returncode != 0
    assert "give env.settings.agent.extras=['reward', 'action'] to match it" in done.stderr
    assert not (tmp_path / "run").exists()
