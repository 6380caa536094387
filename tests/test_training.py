"""The training pipeline: Hydra entry point, schema, checkpoints and resume, evaluation."""

from __future__ import annotations

import copy
import csv
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("hydra")

from hydra import compose, initialize_config_dir  # noqa: E402
from hydra.errors import ConfigCompositionException  # noqa: E402
from omegaconf import OmegaConf  # noqa: E402
from omegaconf.errors import ValidationError  # noqa: E402

from marlgrid.agents.bookkeeping.checkpoint import (  # noqa: E402
    CheckpointError,
    list_checkpoints,
    load_checkpoint,
)
from marlgrid.agents.training.trainer import TrainConfig, train  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
TRAIN = [sys.executable, str(ROOT / "experiments" / "train.py")]
TINY = ["run=smoke", "env.num_envs=4", "agent.num_steps=16", "logger.progress=false"]
#: the run directory name TINY gives inside a sweep (logger.* and seed are not part of it)
TINY_DIR = "agent.num_steps=16,env.num_envs=4,run=smoke"


def _env() -> dict[str, str]:
    return {**os.environ, "PYTHONUNBUFFERED": "1", "OMP_NUM_THREADS": "1"}


def _run(args: list[str], cwd: Path = ROOT, **kwargs) -> subprocess.CompletedProcess:
    return subprocess.run(
        TRAIN + args, capture_output=True, text=True, env=_env(), cwd=cwd, timeout=300, **kwargs
    )


def _rows(run_dir: Path) -> list[dict[str, str]]:
    with (run_dir / "metrics.csv").open() as f:
        return list(csv.DictReader(f))


def _compose(overrides: list[str]):
    import experiments.train  # noqa: F401  (registers the schema)

    with initialize_config_dir(str(ROOT / "conf"), version_base="1.3"):
        return compose("train", overrides=overrides)


def test_default_config_composes_and_converts():
    cfg = _compose([])
    config = OmegaConf.to_object(cfg)
    assert isinstance(config, TrainConfig)
    assert config.env.id == "MarlGrid-MemoryS7TMaze-v0"
    assert config.agent.network.memory == "lstm" and config.agent.refresh_interval == 2
    gru = OmegaConf.to_object(_compose(["agent=ppo_gru", "seed=3"]))
    assert gru.agent.network.memory == "gru" and gru.seed == 3


@pytest.mark.parametrize(
    "override",
    [
        "agent.lrr=0.1",
        "env.num_env=3",
        "logger.csv=maybe",
        "agent.total_timesteps=5",  # one source of truth: total_timesteps is a TrainConfig key
        "agent.seed=1",
    ],
)
def test_typos_fail_at_compose_time(override):
    with pytest.raises((ConfigCompositionException, ValidationError)):
        _compose([override])


def test_roles_take_any_agent_id_and_a_typo_in_a_role_is_named_before_the_run():
    from marlgrid.config import ConfigError

    config = OmegaConf.to_object(_compose(["roles.agent_0.kind=scripted"]))
    assert config.roles["agent_0"].kind == "scripted"  # a RoleConfig, its other fields default
    with pytest.raises(ConfigError, match=r"role of agent_0 has no settings \['kindd'\]"):
        OmegaConf.to_object(_compose(["roles.agent_0.kindd=x"]))


def test_env_settings_take_new_keys_without_plus():
    config = OmegaConf.to_object(
        _compose(["env=goal_cycle_13x13", "env.settings.penalty=0.5", "env.settings.max_steps=9"])
    )
    # the preset's own setting (every goal cycle gives the reward input) stays beside them
    assert config.env.settings == {"agent": {"extras": ["reward"]}, "penalty": 0.5, "max_steps": 9}
    with pytest.raises(ConfigCompositionException):
        _compose(["env.settingz.penalty=0.5"])  # the env group itself stays closed


def test_smoke_run_writes_config_metrics_checkpoints_and_video(tmp_path):
    run_dir = tmp_path / "run"
    out = _run([*TINY, "video=true", f"hydra.run.dir={run_dir}"])
    assert out.returncode == 0, out.stderr[-2000:]
    assert (run_dir / ".hydra" / "config.yaml").exists()
    rows = _rows(run_dir)
    assert len(rows) == 2048 // (4 * 16)  # one row per update
    assert {"losses/approx_kl", "charts/SPS", "charts/refreshes"} <= set(rows[0])
    assert int(rows[-1]["step"]) == 2048
    assert list_checkpoints(run_dir / "checkpoints")
    assert list((run_dir / "tensorboard").glob("events.out.tfevents.*"))
    log = (run_dir / "train.log").read_text()  # the run's messages, not an empty file
    assert "training default in" in log and "ckpt_000000032.pt (update 32, step 2048)" in log
    assert "run complete at update 32 (step 2048)" in log
    pytest.importorskip("imageio_ffmpeg")
    video = run_dir / "videos" / "final.mp4"
    assert video.exists() and video.stat().st_size > 1000
    assert f"video: {video}" in log


@pytest.mark.slow
def test_multirun_over_two_seeds_with_joblib(tmp_path):
    pytest.importorskip("hydra_plugins.hydra_joblib_launcher")
    sweep = tmp_path / "sweep"
    out = _run(
        [
            "-m",
            *TINY,
            "seed=0,1",
            "hydra/launcher=joblib",
            "hydra.launcher.n_jobs=2",
            f"hydra.sweep.dir={sweep}",
        ]
    )
    assert out.returncode == 0, out.stderr[-2000:]
    for seed in (0, 1):
        run_dir = sweep / TINY_DIR / f"seed_{seed}"
        assert list_checkpoints(run_dir / "checkpoints"), f"seed {seed} missing"


def test_killed_run_resumes_from_its_last_checkpoint(tmp_path):
    run_dir = tmp_path / "run"
    args = [
        "run=smoke",
        "total_timesteps=40960",
        "env.num_envs=4",
        "agent.num_steps=16",
        "checkpoint_every=2",
        "logger.progress=false",
        f"hydra.run.dir={run_dir}",
    ]
    proc = subprocess.Popen(
        TRAIN + args, cwd=ROOT, env=_env(), stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
        text=True,
    )  # fmt: skip
    deadline = time.time() + 240
    while time.time() < deadline and len(list_checkpoints(run_dir / "checkpoints")) < 2:
        time.sleep(0.2)
    os.kill(proc.pid, signal.SIGKILL)
    proc.wait()
    found = list_checkpoints(run_dir / "checkpoints")
    assert found, "no checkpoint before the kill"
    saved = load_checkpoint(found[-1])
    step_at_kill = saved["global_step"]
    assert 0 < step_at_kill < 40960
    # A different total needs extend=true (see tests/test_run_safety.py).
    out = _run(args[:1] + [f"total_timesteps={step_at_kill + 128}", "extend=true"] + args[2:])
    assert out.returncode == 0, out.stderr[-2000:]
    assert f"took over the lock of process {proc.pid}" in out.stdout
    assert (
        f"at update {saved['update']} of {saved['update'] + 2} (step {step_at_kill})" in out.stdout
    )
    steps = [int(r["step"]) for r in _rows(run_dir)]
    # One row per update, in order, as if the run had never been killed.
    assert steps == list(range(64, step_at_kill + 129, 64))


def _tiny_config(**overrides) -> TrainConfig:
    from marlgrid.agents.algorithms.ppo import PPOConfig

    cfg = TrainConfig(total_timesteps=256, checkpoint_every=1, video=False)
    cfg.agent = PPOConfig(num_steps=16)
    cfg.env.num_envs = 4
    cfg.logger.progress, cfg.logger.tensorboard = False, False
    for key, value in overrides.items():
        setattr(cfg, key, value)
    return cfg


def test_resume_restores_counters_and_optimizer_state(tmp_path, monkeypatch):
    cfg = _tiny_config()
    train(cfg, tmp_path)
    last = load_checkpoint(list_checkpoints(tmp_path / "checkpoints")[-1])
    assert last["update"] == 4 and last["global_step"] == 256
    saved_opt = last["learners"]["main"]["optimizer"]

    from marlgrid.agents.algorithms.ppo import PPO

    seen = {}
    original = PPO.update

    def spy(self, progress=0.0, buffer=None):
        if not seen:
            seen["opt"] = copy.deepcopy(self.optimizer.state_dict())
            seen["updates"] = self.num_updates
            seen["progress"] = progress
        return original(self, progress, buffer)

    monkeypatch.setattr(PPO, "update", spy)
    train(_tiny_config(total_timesteps=384, extend=True), tmp_path)
    assert seen["updates"] == last["learners"]["main"]["num_updates"]
    assert seen["progress"] == pytest.approx(4 / 6)
    for key, state in saved_opt["state"].items():
        for name, value in state.items():
            torch.testing.assert_close(seen["opt"]["state"][key][name], value)
    assert load_checkpoint(list_checkpoints(tmp_path / "checkpoints")[-1])["update"] == 6


def test_corrupt_checkpoint_gives_a_clear_error_and_leaves_others(tmp_path):
    train(_tiny_config(), tmp_path)
    files = list_checkpoints(tmp_path / "checkpoints")
    assert len(files) == 3
    before = {p: p.read_bytes() for p in files[:-1]}
    files[-1].write_bytes(files[-1].read_bytes()[:1000])  # a truncated file
    with pytest.raises(CheckpointError, match=r"cannot be read .* truncated or corrupt"):
        train(_tiny_config(), tmp_path)
    assert {p: p.read_bytes() for p in files[:-1]} == before


def test_checkpoint_from_another_config_is_refused(tmp_path):
    train(_tiny_config(), tmp_path)
    other = _tiny_config()
    other.agent.network.hidden_size = 64
    with pytest.raises(
        CheckpointError, match=r"learners.main.network.hidden_size is 128 there but 64 now"
    ):
        train(other, tmp_path)
    with pytest.raises(CheckpointError, match=r"seed is 0 there but 5 now"):
        train(_tiny_config(seed=5), tmp_path)
    assert len(list_checkpoints(tmp_path / "checkpoints")) == 3


def test_checkpoint_without_a_newer_setting_resumes_at_its_default(tmp_path):
    """A run checkpointed before a learner setting existed resumes while it stays default."""
    from marlgrid.agents.bookkeeping.checkpoint import first_difference
    from marlgrid.agents.training.train_config import identity, identity_defaults

    cfg = _tiny_config()
    now, defaults = identity(cfg), identity_defaults(cfg)
    old = copy.deepcopy(now)
    del old["learners"]["main"]["network"]["bag_dim"]  # as written before bag_dim existed
    assert first_difference(old, now, defaults=defaults) is None
    assert first_difference(old, now) == ("learners.main.network.bag_dim", None, 128)
    cfg.agent.network.bag_dim = 64
    assert first_difference(old, identity(cfg), defaults=defaults) == (
        "learners.main.network.bag_dim",
        128,
        64,
    )


def test_checkpoint_of_another_format_is_refused(tmp_path):
    train(_tiny_config(), tmp_path)
    last = list_checkpoints(tmp_path / "checkpoints")[-1]
    payload = torch.load(last, weights_only=True)
    payload["format"] = 1
    old = tmp_path / "old.pt"
    torch.save(payload, old)
    with pytest.raises(CheckpointError, match=r"has format 1; .* reads format 3 only"):
        load_checkpoint(old)
    torch.save({"net": {}}, old)
    with pytest.raises(CheckpointError, match=r"is not a marlgrid checkpoint"):
        load_checkpoint(old)


def test_evaluate_prints_mean_return_with_ci(tmp_path):
    run_dir = tmp_path / "run"
    assert _run([*TINY, f"hydra.run.dir={run_dir}"]).returncode == 0
    out = subprocess.run(
        [
            sys.executable,
            str(ROOT / "experiments" / "evaluate.py"),
            str(run_dir),
            "--episodes",
            "8",
        ],
        capture_output=True,
        text=True,
        cwd=ROOT,
        timeout=300,
    )
    assert out.returncode == 0, out.stderr[-2000:]
    assert "8 episodes" in out.stdout and "(95% CI)" in out.stdout
    assert "agent_0 (learner): mean return" in out.stdout


def test_env_reset_ends_idle_slots_too():
    """An agent that finished earlier closes its idle stretch when its env resets."""
    import numpy as np
    from gymnasium import spaces

    from marlgrid.agents.algorithms.ppo import PPO, PPOConfig
    from marlgrid.agents.training.rollout import PolicyGroup

    space = spaces.Box(0, 1, (3,), np.float32)
    learner = PPO(space, spaces.Discrete(3), PPOConfig(num_steps=1, chunk_len=1))
    group = PolicyGroup("main", learner, ["agent_0", "agent_1"])
    obs = {a: np.zeros((1, 3), np.float32) for a in group.agents}
    group.begin(obs, 1, active=np.array([[False, True]]))  # agent_0 finished earlier
    group.act()
    infos = {"_final_obs": np.array([True]), "final_obs": obs, "active": np.ones((1, 2), bool)}
    # agent_0 terminated earlier (idle, no flag now); agent_1 is truncated as the env resets.
    term, trunc = np.array([[False, False]]), np.array([[False, True]])
    group.record(obs, np.zeros((1, 2), np.float32), term, trunc, infos, [0, 1])
    buffer = learner.buffer
    assert group.resets.tolist() == [True, True]
    assert buffer.terminations[0].tolist() == [True, False]
    assert buffer.truncations[0].tolist() == [False, True]
    assert buffer.valid[0].tolist() == [False, True]  # the idle step is not learned from
    assert group.active.tolist() == [True, True]  # both in play in the new episode


def test_fresh_start_drops_old_log_rows(tmp_path):
    from marlgrid.agents.bookkeeping.logger import Logger

    old = Logger(tmp_path, tensorboard=False)
    for step in (100, 200):
        old.log({"x": step}, step)
    resumed = Logger(tmp_path, tensorboard=False, resume_step=100)
    resumed.log({"x": 1}, 200)
    assert [r["step"] for r in _rows(tmp_path)] == ["100", "200"]
    fresh = Logger(tmp_path, tensorboard=False, resume_step=0)
    fresh.log({"x": 2}, 64)
    assert [(r["step"], r["x"]) for r in _rows(tmp_path)] == [("64", "2.0")]


def test_interrupt_inside_an_update_keeps_the_last_checkpoint(tmp_path, monkeypatch):
    from marlgrid.agents.algorithms.ppo import PPO

    original, calls = PPO.update, []

    def interrupted(self, progress=0.0, buffer=None):
        calls.append(progress)
        out = original(self, progress, buffer)
        if len(calls) == 2:
            raise KeyboardInterrupt  # after the optimizer steps of the second update
        return out

    monkeypatch.setattr(PPO, "update", interrupted)
    with pytest.raises(KeyboardInterrupt):
        train(_tiny_config(), tmp_path)
    files = list_checkpoints(tmp_path / "checkpoints")
    assert [p.name for p in files] == ["ckpt_000000001.pt"]
    assert load_checkpoint(files[0])["learners"]["main"]["num_updates"] == 1
