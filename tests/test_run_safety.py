"""Run safety: unique run directories, locks, signals, complete runs, values refused up front."""

from __future__ import annotations

import csv
import os
import random
import re
import signal
import subprocess
import sys
import textwrap
import threading
import time
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("hydra")

from hydra import compose, initialize_config_dir  # noqa: E402
from hydra.core.hydra_config import HydraConfig  # noqa: E402
from omegaconf import OmegaConf  # noqa: E402

from marlgrid.agents.algorithms.ppo import PPO, PPOConfig  # noqa: E402
from marlgrid.agents.bookkeeping.checkpoint import (  # noqa: E402
    CheckpointError,
    list_checkpoints,
    load_checkpoint,
    save_checkpoint,
)
from marlgrid.agents.bookkeeping.run_dir import (  # noqa: E402
    RunLock,
    RunLockedError,
    StopRequest,
    job_subdir,
    remove_fresh_dirs,
)
from marlgrid.agents.training.callbacks import Callback  # noqa: E402
from marlgrid.agents.training.trainer import Interrupted, TrainConfig, Trainer, train  # noqa: E402
from marlgrid.config import ConfigError  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
TRAIN = [sys.executable, str(ROOT / "experiments" / "train.py")]
TINY = ["run=smoke", "env.num_envs=4", "agent.num_steps=16", "logger.progress=false"]


def _env() -> dict[str, str]:
    return {**os.environ, "PYTHONUNBUFFERED": "1", "OMP_NUM_THREADS": "1"}


def _run(args: list[str], cwd: Path = ROOT) -> subprocess.CompletedProcess:
    return subprocess.run(
        TRAIN + args, capture_output=True, text=True, env=_env(), cwd=cwd, timeout=300
    )


def _rows(run_dir: Path) -> list[dict[str, str]]:
    path = run_dir / "metrics.csv"
    if not path.exists():
        return []
    with path.open(newline="") as f:
        return list(csv.DictReader(f))


def _steps(run_dir: Path) -> list[int]:
    return [int(r["step"]) for r in _rows(run_dir)]


def _tiny(**overrides) -> TrainConfig:
    cfg = TrainConfig(total_timesteps=256, checkpoint_every=1, video=False)
    cfg.agent = PPOConfig(num_steps=16)
    cfg.env.num_envs = 4
    cfg.logger.progress, cfg.logger.tensorboard = False, False
    for key, value in overrides.items():
        setattr(cfg, key, value)
    return cfg


def _compose(overrides: list[str], hydra_config: bool = False):
    import experiments.train  # noqa: F401  (registers the schema and the run_subdir resolver)

    with initialize_config_dir(str(ROOT / "conf"), version_base="1.3"):
        return compose("train", overrides=overrides, return_hydra_config=hydra_config)


# -- 1. run directories: one per override set, locked while in use ------------------------------


def test_job_subdir_is_one_level_per_override_set_then_the_seed():
    assert job_subdir("", 0) == "seed_0"
    assert job_subdir("agent.lr=0.001", 3) == "agent.lr=0.001/seed_3"
    # A path in a value never adds levels, reads plainly, and stays distinct from a look-alike.
    name = job_subdir('roles.x="a/b.pt"', 0)
    assert re.fullmatch(r"roles\.x=a-b\.pt~[0-9a-f]{8}/seed_0", name), name
    assert job_subdir("roles.x=a-b.pt", 0) == "roles.x=a-b.pt/seed_0" != name
    # quotes, braces and %-escapes never appear; a long name is cut at 120 characters
    name = job_subdir("+streams={solo: {env: {id: MarlGrid-GoalCycle-13x13-v0}}}", 1)
    assert not set(name) & set("'\"{}% ") and name.startswith("+streams=solo-env-id-MarlGrid")
    long_a, long_b = "a=" + "x" * 300, "a=" + "x" * 299 + "y"
    name_a, name_b = job_subdir(long_a, 0).split("/")[0], job_subdir(long_b, 0).split("/")[0]
    assert name_a != name_b and len(name_a) <= 120 and len(name_b) <= 120


def _dirs(overrides: list[str]) -> tuple[str, str]:
    cfg = _compose(overrides, hydra_config=True)
    HydraConfig.instance().set_config(cfg)
    return str(cfg.hydra.run.dir), str(cfg.hydra.sweep.subdir)


def test_run_and_sweep_directories_differ_per_override_set():
    assert _dirs([]) == ("runs/default/seed_0", "seed_0")
    lr_a = _dirs(["agent.lr=0.001", "seed=2", "resume=false", "logger.progress=false"])
    assert lr_a == ("runs/default/agent.lr=0.001/seed_2", "agent.lr=0.001/seed_2")
    lr_b = _dirs(["agent.lr=0.0003", "seed=2"])
    assert lr_b[1] == "agent.lr=0.0003/seed_2" and lr_b[1] != lr_a[1]
    # total_timesteps changes the run, so it names a directory of its own
    t_a, t_b = _dirs(["total_timesteps=4096"]), _dirs(["total_timesteps=8192"])
    assert t_a[1] == "total_timesteps=4096/seed_0" and t_a != t_b
    # bookkeeping keys leave the run where it is
    assert _dirs(["checkpoint_every=5", "video=false", "torch_threads=2"]) == _dirs([])


def _hold_lock_in_child(run_dir: Path) -> subprocess.Popen:
    code = textwrap.dedent(
        f"""
        import sys, time
        from marlgrid.agents.bookkeeping.run_dir import RunLock
        with RunLock({str(run_dir)!r}):
            print("locked", flush=True)
            time.sleep(120)
        """
    )
    child = subprocess.Popen(
        [sys.executable, "-c", code], stdout=subprocess.PIPE, text=True, env=_env()
    )
    assert child.stdout.readline().strip() == "locked"
    return child


def test_run_lock_refuses_a_second_process_and_takes_over_a_killed_ones(tmp_path):
    child = _hold_lock_in_child(tmp_path)
    try:
        with (
            pytest.raises(RunLockedError, match=rf"in use: process {child.pid} is training"),
            RunLock(tmp_path),
        ):
            pass
        with pytest.raises(RunLockedError, match=rf"process {child.pid}"):
            train(_tiny(), tmp_path)  # the trainer takes the same lock before writing anything
        assert not (tmp_path / "metrics.csv").exists() and not (tmp_path / "checkpoints").exists()
    finally:
        child.kill()
        child.wait()
    with RunLock(tmp_path) as lock:  # the killed holder's lock is taken over
        assert lock.stale_pid == child.pid
        assert (tmp_path / ".lock").read_text().strip() == str(os.getpid())
        with RunLock(tmp_path) as inner:  # re-entrant in one process
            assert inner.stale_pid is None
    assert (tmp_path / ".lock").read_text() == ""  # a clean release leaves no PID
    with RunLock(tmp_path) as lock:
        assert lock.stale_pid is None


@pytest.mark.slow
def test_second_training_process_on_one_run_directory_refuses(tmp_path):
    run_dir = tmp_path / "run"
    args = [*TINY, "total_timesteps=409600", f"hydra.run.dir={run_dir}"]
    first = subprocess.Popen(TRAIN + args, cwd=ROOT, env=_env(), stdout=subprocess.PIPE, text=True)
    try:
        assert first.stdout.readline().startswith("training default in")
        record = run_dir / ".hydra" / "config.yaml"
        deadline = time.time() + 60
        while not (record.exists() and _rows(run_dir)) and time.time() < deadline:
            time.sleep(0.1)
        config = record.read_text()
        second = _run([*args[:-2], "total_timesteps=999", f"hydra.run.dir={run_dir}"])
        assert second.returncode == 1
        assert f"is in use: process {first.pid} is training in it" in second.stderr
        assert (run_dir / ".hydra" / "config.yaml").read_text() == config  # record untouched
        assert first.poll() is None  # the first one trains on
    finally:
        first.send_signal(signal.SIGTERM)
        assert first.wait(timeout=60) == 143
    steps = _steps(run_dir)
    assert steps == list(range(64, 64 * len(steps) + 1, 64))  # one writer, no duplicate rows


@pytest.mark.slow
def test_sweep_over_a_non_seed_parameter_gives_each_job_its_own_directory(tmp_path):
    pytest.importorskip("hydra_plugins.hydra_joblib_launcher")
    sweep = tmp_path / "sweep"
    out = _run(
        ["-m", *TINY, "agent.lr=0.001,0.0003", "hydra/launcher=joblib",
         "hydra.launcher.n_jobs=2", f"hydra.sweep.dir={sweep}"]
    )  # fmt: skip
    assert out.returncode == 0, out.stderr[-2000:]
    jobs = sorted(p.parent.parent for p in sweep.glob("*/seed_0/metrics.csv"))
    assert [p.name for p in jobs] == [
        "agent.lr=0.0003,agent.num_steps=16,env.num_envs=4,run=smoke",
        "agent.lr=0.001,agent.num_steps=16,env.num_envs=4,run=smoke",
    ]
    for job, lr in zip(jobs, (0.0003, 0.001), strict=True):
        run_dir = job / "seed_0"
        assert _steps(run_dir) == list(range(64, 2049, 64))  # its own rows only, once each
        assert [p.name for p in list_checkpoints(run_dir / "checkpoints")][
            -1
        ] == "ckpt_000000032.pt"
        saved = load_checkpoint(list_checkpoints(run_dir / "checkpoints")[-1])
        assert saved["identity"]["learners"]["main"]["lr"] == lr
        assert OmegaConf.load(run_dir / ".hydra" / "config.yaml").agent.lr == lr


# -- 2. keep_checkpoints -------------------------------------------------------------------------


@pytest.mark.parametrize("keep", [-1, 0])
def test_keep_checkpoints_below_one_is_refused(tmp_path, keep):
    with pytest.raises(ConfigError, match=rf"keep_checkpoints must be >= 1, got {keep} \(null"):
        Trainer(_tiny(keep_checkpoints=keep), tmp_path)
    with pytest.raises(ValueError, match="keep must be an integer >= 1 or None"):
        save_checkpoint(tmp_path, 1, {}, keep=keep)


def test_keep_none_keeps_every_checkpoint_and_one_keeps_the_newest(tmp_path):
    train(_tiny(keep_checkpoints=None), tmp_path / "all")
    assert [p.name[-6:-3] for p in list_checkpoints(tmp_path / "all" / "checkpoints")] == [
        "001", "002", "003", "004",
    ]  # fmt: skip
    train(_tiny(keep_checkpoints=1), tmp_path / "one")
    assert [p.name for p in list_checkpoints(tmp_path / "one" / "checkpoints")] == [
        "ckpt_000000004.pt"
    ]


def test_the_checkpoint_just_written_is_never_deleted(tmp_path):
    save_checkpoint(tmp_path, 10, {"update": 10}, keep=1)  # a higher-numbered file already there
    target = save_checkpoint(tmp_path, 3, {"update": 3}, keep=1)
    assert target.exists()
    assert [p.name for p in list_checkpoints(tmp_path)] == [
        "ckpt_000000003.pt",
        "ckpt_000000010.pt",
    ]


# -- 3. signals ----------------------------------------------------------------------------------


def _signal_in_update(monkeypatch, signals: list[int], at_update: int = 2) -> None:
    original, calls = PPO.update, []

    def update(self, progress=0.0, buffer=None):
        calls.append(progress)
        if len(calls) == at_update:
            for sig in signals:
                os.kill(os.getpid(), sig)
        return original(self, progress, buffer)

    monkeypatch.setattr(PPO, "update", update)


def test_sigint_inside_an_update_finishes_it_and_checkpoints(tmp_path, monkeypatch, capsys):
    _signal_in_update(monkeypatch, [signal.SIGINT])
    before = signal.getsignal(signal.SIGINT)  # SIG_IGN in a background job, else Python's
    with pytest.raises(Interrupted) as info:
        train(_tiny(checkpoint_every=1000), tmp_path)
    assert info.value.exit_code == 130
    files = list_checkpoints(tmp_path / "checkpoints")
    assert [p.name for p in files] == ["ckpt_000000002.pt"]
    saved = load_checkpoint(files[0])
    assert (saved["update"], saved["global_step"]) == (2, 128)
    assert saved["learners"]["main"]["num_updates"] == 2  # the learners as of that iteration
    assert _steps(tmp_path) == [64, 128]
    assert "SIGINT at update 2 (step 128): checkpoint" in capsys.readouterr().out
    assert "SIGINT at update 2 (step 128)" in (tmp_path / "train.log").read_text()
    assert signal.getsignal(signal.SIGINT) is before  # handlers restored
    train(_tiny(), tmp_path)  # resume continues from it
    assert _steps(tmp_path) == [64, 128, 192, 256]


def test_a_second_signal_stops_at_once_and_keeps_the_newest(tmp_path, monkeypatch):
    _signal_in_update(monkeypatch, [signal.SIGINT, signal.SIGINT])
    with pytest.raises(KeyboardInterrupt) as info:
        train(_tiny(), tmp_path)
    assert not isinstance(info.value, Interrupted)
    assert [p.name for p in list_checkpoints(tmp_path / "checkpoints")] == ["ckpt_000000001.pt"]


def test_a_signal_before_the_first_update_checkpoints_the_initial_state(tmp_path):
    stop = StopRequest()
    stop.signum = signal.SIGTERM  # as if it came while the trainer was being built
    with pytest.raises(Interrupted) as info:
        train(_tiny(), tmp_path, stop=stop)
    assert info.value.exit_code == 143
    assert load_checkpoint(info.value.checkpoint)["update"] == 0
    assert _rows(tmp_path) == []


def test_sigterm_checkpoints_and_exits_143(tmp_path):
    code = textwrap.dedent(
        f"""
        import os, signal, sys
        sys.path.insert(0, {str(ROOT)!r})
        from tests.test_run_safety import _tiny
        from marlgrid.agents.algorithms.ppo import PPO
        from marlgrid.agents.training.trainer import Interrupted, train
        original, calls = PPO.update, []
        def update(self, progress=0.0, buffer=None):
            calls.append(1)
            if len(calls) == 3:
                os.kill(os.getpid(), signal.SIGTERM)
            return original(self, progress, buffer)
        PPO.update = update
        try:
            train(_tiny(checkpoint_every=1000), {str(tmp_path)!r})
        except Interrupted as exc:
            sys.exit(exc.exit_code)
        """
    )
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, env=_env(), timeout=300
    )
    assert out.returncode == 143, out.stderr[-2000:]
    assert [p.name for p in list_checkpoints(tmp_path / "checkpoints")] == ["ckpt_000000003.pt"]
    assert _steps(tmp_path) == [64, 128, 192]


def _start(args: list[str]) -> tuple[subprocess.Popen, list[str], threading.Event]:
    proc = subprocess.Popen(
        TRAIN + args, cwd=ROOT, env=_env(), stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
        text=True,
    )  # fmt: skip
    lines: list[str] = []
    started = threading.Event()

    def read() -> None:
        for line in proc.stdout:
            lines.append(line)
            if line.startswith("training "):
                started.set()

    threading.Thread(target=read, daemon=True).start()
    return proc, lines, started


@pytest.mark.slow
@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM], ids=["SIGINT", "SIGTERM"])
def test_signals_at_random_moments_leave_a_loadable_checkpoint_and_a_clean_csv(tmp_path, sig):
    """10 trials: a signal at a random moment of training; then a resume from what it left."""
    rng = random.Random(sig)
    results = []
    for trial in range(10):
        run_dir = tmp_path / f"trial_{trial}"
        base = ["run=smoke", "env.num_envs=4", "agent.num_steps=16", "logger.progress=false",
                "checkpoint_every=1000", f"hydra.run.dir={run_dir}"]  # fmt: skip
        proc, lines, started = _start([*base, "total_timesteps=409600"])
        assert started.wait(120), "".join(lines)
        delay = rng.uniform(0.0, 4.0)
        time.sleep(delay)
        t_signal = time.perf_counter()
        proc.send_signal(sig)
        code = proc.wait(timeout=60)
        took = time.perf_counter() - t_signal
        assert code == 128 + sig, "".join(lines)
        newest = list_checkpoints(run_dir / "checkpoints")[-1]  # exactly the signal's one
        saved = load_checkpoint(newest)
        update, step = saved["update"], saved["global_step"]
        assert step == 64 * update
        text = (run_dir / "metrics.csv").read_text() if update else ""
        assert text.endswith("\n") or not text  # no partial line
        assert all(None not in row for row in _rows(run_dir))  # no row with extra fields
        assert _steps(run_dir) == list(range(64, step + 1, 64))  # every row once, none past it
        name = signal.Signals(sig).name
        assert f"{name} at update {update} (step {step}): checkpoint {newest}" in "".join(lines)
        out = _run([*base, f"total_timesteps={step + 128}", "extend=true"])
        assert out.returncode == 0, out.stderr[-2000:]
        assert f"resumed from {newest} at update {update} of {update + 2}" in out.stdout
        assert _steps(run_dir) == list(range(64, step + 129, 64))
        results.append((round(delay, 2), update, round(took, 2)))
    print(f"{signal.Signals(sig).name} trials (delay s, update, exit after s): {results}")
    assert max(t for _, _, t in results) < 20  # bounded: one iteration plus the checkpoint


# -- 4. complete runs ----------------------------------------------------------------------------


class _Spy(Callback):
    def __init__(self) -> None:
        self.calls: list[str] = []

    def on_training_start(self, trainer) -> None:
        self.calls.append("start")

    def on_training_end(self, trainer, completed: bool) -> None:
        self.calls.append(f"end {completed}")


def test_rerunning_a_complete_run_says_so_and_does_nothing(tmp_path, capsys):
    first = _Spy()
    train(_tiny(), tmp_path, callbacks=[first])
    assert first.calls == ["start", "end True"]
    files = {p: p.stat().st_mtime_ns for p in (tmp_path / "checkpoints").iterdir()}
    csv_text = (tmp_path / "metrics.csv").read_text()
    capsys.readouterr()
    again = _Spy()
    metrics = train(_tiny(), tmp_path, callbacks=[again])
    out = capsys.readouterr().out
    assert f"run {tmp_path} is complete: update 4 of 4 (step 256); nothing to do" in out
    assert "resumed" not in out
    assert again.calls == []  # no callback: no video, no evaluation
    assert metrics["step"] == 256.0  # the last logged metrics
    assert {p: p.stat().st_mtime_ns for p in (tmp_path / "checkpoints").iterdir()} == files
    assert (tmp_path / "metrics.csv").read_text() == csv_text
    assert "is complete" in (tmp_path / "train.log").read_text()


def test_another_total_timesteps_needs_extend(tmp_path):
    train(_tiny(), tmp_path)
    with pytest.raises(
        CheckpointError, match=r"total_timesteps=256, but total_timesteps is 384 now"
    ):
        train(_tiny(total_timesteps=384), tmp_path)
    assert _steps(tmp_path) == [64, 128, 192, 256]
    train(_tiny(total_timesteps=384, extend=True), tmp_path)
    assert _steps(tmp_path) == [64, 128, 192, 256, 320, 384]


# -- 5./6. bad values refused before anything runs or any folder is made -----------------------


@pytest.mark.parametrize(
    ("override", "message"),
    [
        ("checkpoint_every=0", r"checkpoint_every must be >= 1, got 0"),
        ("agent.num_steps=0", r"agent.num_steps must be >= 1, got 0"),
        ("agent.update_epochs=0", r"agent.update_epochs must be >= 1, got 0"),
        ("total_timesteps=0", r"total_timesteps must be >= 1, got 0"),
        ("total_timesteps=-4096", r"total_timesteps must be >= 1, got -4096"),
        ("seed=-1", r"seed must be >= 0, got -1"),
        ("seed=4294967296", r"seed must be <= 4294967295, got 4294967296"),
        ("agent.gamma=1.5", r"agent.gamma must be in \[0, 1\], got 1.5"),
        ("agent.clip_coef=-1", r"agent.clip_coef must be > 0, got -1"),
        ("agent.lr=0", r"agent.lr must be > 0, got 0"),
        ("agent.ent_coef=nan", r"agent.ent_coef must be a finite number, got nan"),
        ("agent.chunk_len=65", r"agent.chunk_len must be <= agent.num_steps \(64\), got 65"),
        (
            "agent.num_minibatches=129",
            r"agent.num_minibatches must be <= .* = 8 \* 16 = 128, got 129",
        ),
        ("agent.network.hidden_size=0", r"agent.network.hidden_size must be >= 1, got 0"),
        ("agent.network.memory=transformer", r"agent.network.memory must be one of .*'lstm'"),
        ("keep_checkpoints=-1", r"keep_checkpoints must be >= 1, got -1"),
        ("iteration_steps=0", r"iteration_steps must be >= 1, got 0"),
        ("eval_every=-1", r"eval_every must be >= 0, got -1"),
        ("torch_threads=0", r"torch_threads must be >= 1, got 0"),
        ("env.num_envs=0", r"env.num_envs must be >= 1, got 0"),
        ("env.settings.penalty=inf", r"env 'MarlGrid-MemoryS7TMaze-v0': penalty must be a finite"),
        ("env.settings.agent={spawn_delay:245}", r"spawn_delay of every agent \(\[245\]\) is >= "),
    ],
)
def test_bad_values_are_refused_before_anything_is_written(tmp_path, override, message):
    config = OmegaConf.to_object(_compose([override]))
    with pytest.raises(ConfigError, match=message):
        Trainer(config, tmp_path / "run")
    assert not (tmp_path / "run").exists()


@pytest.mark.parametrize(
    ("overrides", "chunks"),
    [
        (["env=goal_cycle_13x13_3agents"], "8 * 24 = 192"),  # 8 envs x 3 agents share main
        (["env=goal_cycle_13x13_3agents", "roles=novice_with_expert"], "8 * 16 = 128"),
    ],
)
def test_minibatches_are_checked_against_the_chunks_of_the_agents_a_learner_drives(
    tmp_path, overrides, chunks
):
    total = int(chunks.split(" = ")[1])
    ok = OmegaConf.to_object(_compose([*overrides, f"agent.num_minibatches={total}"]))
    Trainer(ok, tmp_path / "ok")
    bad = OmegaConf.to_object(_compose([*overrides, f"agent.num_minibatches={total + 1}"]))
    with pytest.raises(ConfigError, match=rf"= {re.escape(chunks)}, got {total + 1}"):
        Trainer(bad, tmp_path / "bad")


def test_every_registered_algorithm_is_validated_through_the_registry(tmp_path, monkeypatch):
    from dataclasses import dataclass

    from marlgrid.agents import learner as registry

    @dataclass
    class OtherConfig:
        algo: str = "other"
        num_steps: int = 16
        horizon: int = -3

        def validate(self, key: str, num_slots: int | None = None) -> None:
            if self.horizon < 1:
                raise ConfigError(f"{key}.horizon must be >= 1, got {self.horizon}")

    monkeypatch.setitem(registry.LEARNERS, "other", registry.LearnerSpec(OtherConfig, PPO))
    with pytest.raises(ConfigError, match=r"^agent.horizon must be >= 1, got -3$"):
        Trainer(_tiny(agent=OtherConfig()), tmp_path)
    with pytest.raises(ConfigError, match=r"learners.expert.horizon must be >= 1"):
        Trainer(_tiny(learners={"expert": {"algo": "other"}}), tmp_path)
    with pytest.raises(ConfigError, match=r"learners.expert: unknown learner algorithm 'nope'"):
        Trainer(_tiny(learners={"expert": {"algo": "nope"}}), tmp_path)


def test_a_config_error_leaves_no_folder(tmp_path):
    out = _run(["agent.gamma=1.5", *TINY], cwd=tmp_path)  # default run directory under cwd
    assert out.returncode == 1
    assert "error: agent.gamma must be in [0, 1], got 1.5" in out.stderr
    assert list(tmp_path.iterdir()) == []
    explicit = tmp_path / "a" / "run"
    out = _run(["checkpoint_every=0", f"hydra.run.dir={explicit}"])
    assert out.returncode == 1 and "checkpoint_every must be >= 1, got 0" in out.stderr
    assert not explicit.exists()


def test_a_config_error_never_removes_an_existing_run(tmp_path):
    run_dir = tmp_path / "run"
    train(_tiny(total_timesteps=128), run_dir)
    before = sorted(p.relative_to(run_dir) for p in run_dir.rglob("*"))
    out = _run([*TINY, "agent.clip_coef=-1", f"hydra.run.dir={run_dir}"])
    assert out.returncode == 1 and "agent.clip_coef must be > 0" in out.stderr
    assert sorted(p.relative_to(run_dir) for p in run_dir.rglob("*")) == before


def test_remove_fresh_dirs_removes_only_empty_new_folders(tmp_path):
    old = tmp_path / "old"
    old.mkdir()
    os.utime(old, (1.0, 1.0))
    assert remove_fresh_dirs(old, since=time.time() - 5, stop_at=tmp_path) == []  # older
    new = tmp_path / "x" / "y"
    new.mkdir(parents=True)
    assert remove_fresh_dirs(new, since=time.time() - 5, stop_at=tmp_path) == [new, new.parent]
    assert tmp_path.exists() and old.exists()
    full = tmp_path / "full"
    full.mkdir()
    (full / "metrics.csv").write_text("step\n")
    assert remove_fresh_dirs(full, since=0, stop_at=tmp_path) == []


def test_frozen_checkpoint_of_another_shape_names_the_field(tmp_path):
    import marlgrid
    from marlgrid.agents.training.roles import load_frozen

    train(_tiny(total_timesteps=64), tmp_path)
    path = list_checkpoints(tmp_path / "checkpoints")[-1]
    env = marlgrid.make("MarlGrid-GoalCycle-7x7-v0", agent={"restrict_actions": True})
    with pytest.raises(
        CheckpointError,
        match=r"net.policy_head.\d+.weight has shape \[7, 64\] in the checkpoint but \[3, 64\] "
        r"for this env \(it was trained on MarlGrid-GoalCycle-7x7-v0",
    ):
        load_frozen(path, "main", env.observation_space("agent_0"), env.action_space("agent_0"))


def test_a_malicious_checkpoint_is_refused_without_the_weights_only_hint(tmp_path):
    class Payload:
        def __reduce__(self):
            return (os.system, ("echo owned",))

    path = tmp_path / "evil.pt"
    torch.save({"format": 3, "learners": Payload()}, path)
    with pytest.raises(CheckpointError) as info:
        load_checkpoint(path)
    message = str(info.value)
    assert "refused" in message and "GLOBAL" in message and "system" in message
    assert "weights_only" not in message and "will likely succeed" not in message
    assert info.value.__cause__ is None  # torch's own text (with its hint) is not chained


# -- 7. evaluate.py ------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("flags", "message"),
    [
        (["--episodes", "0"], "argument --episodes: must be >= 1, got 0"),
        (["--videos", "-1"], "argument --videos: must be >= 0, got -1"),
        (["--num-envs", "0"], "argument --num-envs: must be >= 1, got 0"),
        (["--episodes", "x"], "argument --episodes: expected an integer, got 'x'"),
    ],
)
def test_evaluate_flags_are_checked_by_argparse(tmp_path, capsys, flags, message):
    from experiments.evaluate import main

    with pytest.raises(SystemExit) as info:
        main([str(tmp_path), *flags])
    assert info.value.code == 2
    assert message in capsys.readouterr().err
