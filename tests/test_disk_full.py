"""A full disk ends a run with one line naming its folder, and the run resumes once there is
room (a patched writer stands in for the disk: every file is written through it)."""

from __future__ import annotations

import errno

import pytest

torch = pytest.importorskip("torch")

from marlgrid.agents.algorithms.ppo import PPOConfig  # noqa: E402
from marlgrid.agents.bookkeeping import checkpoint  # noqa: E402
from marlgrid.agents.bookkeeping.checkpoint import list_checkpoints  # noqa: E402
from marlgrid.agents.bookkeeping.run_dir import DiskFullError, is_disk_full  # noqa: E402
from marlgrid.agents.training.trainer import (  # noqa: E402
    EnvConfig,
    LoggerConfig,
    TrainConfig,
    Trainer,
)


def _config() -> TrainConfig:
    return TrainConfig(
        env=EnvConfig("MarlGrid-GoalCycle-13x13-v0", num_envs=2, settings={"size": 7}),
        agent=PPOConfig(num_steps=8, chunk_len=4, num_minibatches=2, update_epochs=1),
        total_timesteps=96,
        checkpoint_every=1,
        video=False,
        logger=LoggerConfig(tensorboard=False, progress=False),
    )


def test_a_full_disk_stops_the_run_in_one_line_and_it_resumes(tmp_path, monkeypatch):
    real = checkpoint.replace_atomically
    calls = {"n": 0}

    def full_after_two(target, write):
        calls["n"] += 1
        if calls["n"] > 2:
            raise OSError(errno.ENOSPC, "No space left on device")
        return real(target, write)

    monkeypatch.setattr(checkpoint, "replace_atomically", full_after_two)
    run_dir = tmp_path / "run"
    with pytest.raises(DiskFullError) as info:
        Trainer(_config(), run_dir).run()
    message = str(info.value)
    assert "\n" not in message and str(run_dir) in message and "is full" in message
    assert "rerun the same command to resume" in message
    kept = list_checkpoints(run_dir / "checkpoints")
    assert [p.name for p in kept] == ["ckpt_000000001.pt", "ckpt_000000002.pt"]
    assert not list((run_dir / "checkpoints").glob("*.tmp"))  # nothing half-written
    monkeypatch.setattr(checkpoint, "replace_atomically", real)  # room again
    trainer = Trainer(_config(), run_dir)
    trainer.run()
    assert trainer.global_step == 96


def test_torch_save_messages_of_a_full_disk_count_as_a_full_disk():
    assert is_disk_full(RuntimeError("[enforce fail at inline_container.cc:626] . unexpected pos"))
    assert is_disk_full(OSError(errno.ENOSPC, "No space left on device"))
    wrapped = RuntimeError("saving failed")
    wrapped.__cause__ = OSError(errno.EDQUOT, "Disk quota exceeded")
    assert is_disk_full(wrapped)
    assert not is_disk_full(RuntimeError("shape mismatch"))
