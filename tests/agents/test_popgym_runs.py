"""POPGym runs are ordinary trainer runs: a run directory that is interrupted, resumed, evaluated
with the loader every run uses, and scored (MMER) from its ``metrics.csv``; the sweep script's
cells are such runs; ``experiments/train.py``'s config trains a POPGym env. Skipped without
popgym."""

from __future__ import annotations

import json
import math
import signal
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import pytest
import torch

from marlgrid.agents.algorithms.ppo import PPO, PPOConfig
from marlgrid.agents.bookkeeping.checkpoint import list_checkpoints
from marlgrid.agents.networks.models import NetworkConfig
from marlgrid.agents.training.callbacks import Callback
from marlgrid.agents.training.trainer import EnvConfig, LoggerConfig, TrainConfig, Trainer
from marlgrid.analysis.mmer import batch_mean_returns, mmer, read_metrics

pytest.importorskip("popgym")

ROOT = Path(__file__).resolve().parents[2]
TINY = NetworkConfig(memory="gru", hidden_size=8, trunk_sizes=(8,), head_sizes=(8,))
AGENT = PPOConfig(network=TINY, num_steps=32, chunk_len=8)
PER_UPDATE = 2 * 32  # env steps per update (2 envs x 32 steps)


@pytest.fixture(autouse=True)
def _one_thread() -> None:
    torch.set_num_threads(1)


def _cfg(**overrides: Any) -> TrainConfig:
    values: dict[str, Any] = {
        "env": EnvConfig(id="popgym:RepeatPreviousEasy", num_envs=2),
        "agent": AGENT,
        "logger": LoggerConfig(tensorboard=False, progress=False),
        "total_timesteps": 6 * PER_UPDATE,
        "checkpoint_every": 2,
        "video": False,
        **overrides,
    }
    return TrainConfig(**values)


class History(Callback):
    """Keeps every iteration's metrics in memory, as the removed second driver returned them
    (``global_step`` inside each entry)."""

    def __init__(self, history: list[dict[str, float]]) -> None:
        self.history = history

    def on_update_end(self, trainer: Any, metrics: dict[str, float]) -> bool:
        self.history.append({**metrics, "global_step": float(trainer.global_step)})
        return True


class InterruptAt(Callback):
    """Ctrl-C right after iteration ``at`` was logged."""

    def __init__(self, at: int) -> None:
        self.at = at

    def on_update_end(self, trainer: Any, metrics: dict[str, float]) -> bool:
        if trainer.iteration == self.at:
            raise KeyboardInterrupt
        return True


def _old_mmer(history: Sequence[Mapping[str, float]], batch_steps: int | None = None) -> float:
    """The MMER as ``marlgrid.tasks.popgym_env.mmer`` computed it from the in-memory history."""
    out: list[tuple[int, float]] = []
    pool: dict[int, list[float]] = {}
    for metrics in history:
        value, step = (
            float(metrics.get("charts/episodic_return", math.nan)),
            int(metrics["global_step"]),
        )
        if math.isnan(value):
            continue
        if batch_steps is None:
            out.append((step, value))
            continue
        n = float(metrics["charts/episodes"])
        entry = pool.setdefault((step - 1) // batch_steps, [0.0, 0.0, 0.0])
        entry[0], entry[1], entry[2] = step, entry[1] + value * n, entry[2] + n
    out += [(int(last), total / n) for last, total, n in pool.values()]
    means = [v for _, v in out]
    return max(means) if means else math.nan


def test_a_popgym_run_is_interrupted_resumed_evaluated_and_scored(tmp_path: Path) -> None:
    history: list[dict[str, float]] = []
    with pytest.raises(KeyboardInterrupt):
        Trainer(_cfg(), tmp_path, [History(history), InterruptAt(3)]).run()
    assert [p.name for p in list_checkpoints(tmp_path / "checkpoints")][-1] == "ckpt_000000003.pt"
    assert [r["step"] for r in read_metrics(tmp_path)] == [64, 128, 192]

    trainer = Trainer(_cfg(), tmp_path, [History(history)])  # the same command again
    trainer.run()
    log = (tmp_path / "train.log").read_text()
    assert "ckpt_000000003.pt at update 3 of 6 (step 192)" in log  # resumed from the checkpoint
    rows = read_metrics(tmp_path)
    steps = [int(r["step"]) for r in rows]
    assert steps == [PER_UPDATE * k for k in range(1, 7)]  # to the total, no duplicate rows
    assert [p.name for p in list_checkpoints(tmp_path / "checkpoints")][-1] == "ckpt_000000006.pt"
    learner = trainer.learners["main"].learner
    assert isinstance(learner, PPO) and learner.num_updates == 6
    assert all(r["charts/update"] == k for k, r in enumerate(rows, 1))

    # MMER from metrics.csv: the same numbers as from the in-memory history, by the old rule
    assert [int(h["global_step"]) for h in history] == steps
    assert not math.isnan(mmer(rows))
    for batch in (None, 2 * PER_UPDATE, 3 * PER_UPDATE):
        assert mmer(rows, batch) == _old_mmer(history, batch)
        assert batch_mean_returns(rows, batch) == batch_mean_returns(history, batch)

    # evaluated with the loader every run uses
    from marlgrid.agents.bookkeeping.saved_run import SavedRun

    run = SavedRun(tmp_path)
    assert run.checkpoint.name == "ckpt_000000006.pt"
    assert run.train_config.env.id == "popgym:RepeatPreviousEasy"
    policies = run.policies(greedy=True)
    assert policies.agents == ["agent_0"] and policies.learner_columns == [0]
    saved = policies.groups[0].learner.state_dict()["net"]
    for key, value in learner.state_dict()["net"].items():
        torch.testing.assert_close(saved[key], value)
    returns = policies.evaluate(episodes=3, seed=5, num_envs=2)
    assert returns.shape == (3, 1) and ((returns >= -1.0) & (returns <= 1.0)).all()


def test_a_sweep_cell_stops_on_sigint_and_resumes_when_rerun(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: Any
) -> None:
    pytest.importorskip("omegaconf")
    import os

    from experiments.examples.popgym_sweep import cell_record, main

    original, calls = PPO.update, []

    def update(self: PPO, progress: float = 0.0, buffer: Any = None) -> dict[str, float]:
        calls.append(progress)
        if len(calls) == 2:
            os.kill(os.getpid(), signal.SIGINT)  # the update finishes, then a checkpoint
        return original(self, progress, buffer)

    monkeypatch.setattr(PPO, "update", update)
    tiny = ["--set", "network.hidden_size=8", "network.trunk_sizes=[8]",
            "network.head_sizes=[8]", "num_steps=32", "chunk_len=8"]  # fmt: skip
    args = ["--env", "RepeatPreviousEasy", "--memory", "gru", "--num-envs", "2", "--steps", "256",
            "--quiet", "--out", str(tmp_path), *tiny]  # fmt: skip
    assert main(args) == 130
    run = tmp_path / "RepeatPreviousEasy/gru/seed_0"
    assert [p.name for p in list_checkpoints(run / "checkpoints")] == ["ckpt_000000002.pt"]
    assert [r["step"] for r in read_metrics(run)] == [64, 128]
    assert "rerun the same command to resume" in capsys.readouterr().out

    monkeypatch.setattr(PPO, "update", original)
    assert main(args) == 0  # the same command: resumes the cell
    out = capsys.readouterr().out
    assert "resumed from" in out and "ckpt_000000002.pt" in out
    rows = read_metrics(run)
    assert [r["step"] for r in rows] == [64, 128, 192, 256]
    settings = json.loads((run / "popgym.json").read_text())["settings"]
    record = cell_record(settings, run)
    assert record["mmer"] == mmer(rows, settings["batch_size"]) and record["env_steps"] == 256
    assert main(args) == 0 and "(skipped)" in capsys.readouterr().out  # complete: nothing to do
    assert main(["--restart", *args]) == 0  # --restart trains from scratch
    assert [r["step"] for r in read_metrics(run)] == [64, 128, 192, 256]


def test_the_train_script_config_trains_a_popgym_env(tmp_path: Path) -> None:
    """``experiments/train.py env.id=popgym:RepeatPreviousEasy agent=ppo_popgym ...``: the
    composed config trains; evaluation plays the same env source, and the default video
    callback says there is no renderer instead of failing."""
    pytest.importorskip("hydra")
    from hydra import compose, initialize_config_dir
    from omegaconf import OmegaConf

    import experiments.train  # noqa: F401  (registers the schemas)

    overrides = [
        "env.id=popgym:RepeatPreviousEasy", "agent=ppo_popgym", "env.num_envs=2",
        "total_timesteps=128", "agent.num_steps=32", "agent.chunk_len=8",
        "agent.network.hidden_size=8", "agent.network.trunk_sizes=[8]",
        "agent.network.head_sizes=[8]", "logger.tensorboard=false", "logger.progress=false",
        "eval_every=2", "eval_episodes=2",
    ]  # fmt: skip
    with initialize_config_dir(str(ROOT / "conf"), version_base="1.3"):
        cfg = OmegaConf.to_object(compose("train", overrides=overrides))
    assert cfg.video  # the default
    trainer = Trainer(cfg, tmp_path)
    assert trainer.vec.possible_agents == ["agent_0"]
    last = trainer.run()
    assert -1.0 <= last["eval/return"] <= 1.0 and "eval/return_agent_0" in last
    assert not any(k.startswith("social/") for k in last)  # no engine: no social metrics
    assert (
        "no video: popgym:RepeatPreviousEasy is not a marlgrid env"
        in (tmp_path / "train.log").read_text()
    )
    assert not (tmp_path / "videos").exists()
