"""Sweeps on Hydra's Ray and submitit launchers, and absolute run paths.

The launcher tests need the extras ``ray`` / ``slurm`` (``pip install -e ".[ray,slurm,test]"``)
and are skipped without them; run them with ``python -m pytest -q -m "ray or slurm"``. Every Ray
instance here is bound to loopback, writes its session under a fresh temporary folder and is
checked to leave no process behind (found by a token in the processes' environment).
"""

from __future__ import annotations

import csv
import importlib.util
import os
import re
import shutil
import socket
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
TRAIN = [sys.executable, str(ROOT / "experiments" / "train.py")]
TINY = [
    "run=smoke",
    "logger.tensorboard=false",
    "logger.progress=false",
    "video=false",
    "env.num_envs=4",
    "agent.num_steps=32",
    "total_timesteps=256",
]
LOOPBACK = {
    "RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER": "0",
    "RAY_AUTH_MODE": "disabled",
    "RAY_USAGE_STATS_ENABLED": "0",
}
TOKEN_VAR = "MARLGRID_TEST_TOKEN"


def _has(module: str) -> bool:
    try:
        return importlib.util.find_spec(module) is not None
    except ModuleNotFoundError:
        return False


needs_ray = pytest.mark.skipif(
    not (_has("ray") and _has("hydra_plugins.hydra_ray_launcher")),
    reason="needs the extra ray: pip install -e '.[ray]'",
)
needs_slurm = pytest.mark.skipif(
    not _has("hydra_plugins.hydra_submitit_launcher"),
    reason="needs the extra slurm: pip install -e '.[slurm]'",
)


def _env(token: str, loopback: bool | None = None) -> dict[str, str]:
    """The environment of a command: ``token`` marks its processes; ``loopback`` True sets the
    Ray variables of :data:`LOOPBACK`, False removes them, None leaves them as they are."""
    env = {**os.environ, "PYTHONUNBUFFERED": "1", "OMP_NUM_THREADS": "1", TOKEN_VAR: token}
    env.pop("MARLGRID_TRAIN_STARTED", None)  # set by importing experiments.train in _compose
    if loopback:
        env.update(LOOPBACK)
    elif loopback is False:
        for key in LOOPBACK:
            env.pop(key, None)
    return env


def _processes_with(token: str) -> list[str]:
    """Command lines of live processes whose environment holds ``token``."""
    found = []
    for proc in Path("/proc").iterdir():
        if not proc.name.isdigit() or int(proc.name) == os.getpid():
            continue
        try:
            environ = (proc / "environ").read_bytes()
            if f"{TOKEN_VAR}={token}".encode() in environ.split(b"\0"):
                found.append((proc / "cmdline").read_bytes().replace(b"\0", b" ").decode()[:120])
        except OSError:
            continue
    return found


def _assert_none_left(token: str, wait_s: float = 90.0) -> None:
    """Ray's workers exit a few seconds after their raylet (over 30 s on a loaded machine);
    wait up to ``wait_s`` for them."""
    deadline = time.monotonic() + wait_s
    while (left := _processes_with(token)) and time.monotonic() < deadline:
        time.sleep(0.5)
    assert not left, f"processes left behind: {left}"


def _run_dirs(sweep: Path) -> list[Path]:
    return sorted(p.parent for p in sweep.rglob("metrics.csv"))


def _assert_complete(run_dir: Path) -> None:
    with (run_dir / "metrics.csv").open(newline="") as f:
        rows = list(csv.DictReader(f))
    assert rows and int(float(rows[-1]["step"])) >= 256, rows[-1:]
    assert list((run_dir / "checkpoints").glob("*.pt")), f"no checkpoint in {run_dir}"
    assert (run_dir / ".hydra" / "config.yaml").is_file()


@pytest.fixture
def ray_tmp():
    """A short temporary folder for Ray's session files (its socket paths must stay short)."""
    path = Path(tempfile.mkdtemp(prefix="mgray", dir="/tmp"))
    yield path
    shutil.rmtree(path, ignore_errors=True)


def _compose(overrides: list[str]):
    from hydra import compose, initialize_config_dir

    import experiments.train  # noqa: F401  (registers the schemas and resolvers)

    with initialize_config_dir(str(ROOT / "conf"), version_base="1.3"):
        return compose("train", overrides=overrides, return_hydra_config=True)


# -- absolute paths (no extra needed) ------------------------------------------------------------


def test_resolve_paths_makes_run_dir_and_checkpoints_absolute(tmp_path):
    pytest.importorskip("torch")
    from marlgrid.agents.bookkeeping.launch import resolve_paths
    from marlgrid.agents.training.roles import RoleConfig
    from marlgrid.agents.training.trainer import TrainConfig

    frozen = RoleConfig(kind="frozen", checkpoint="runs/expert/checkpoints/ckpt_000000010.pt")
    home = RoleConfig(kind="frozen", checkpoint="~/experts/a.pt")
    fixed = RoleConfig(kind="frozen", checkpoint="/data/b.pt")
    cfg = TrainConfig(
        roles={
            "agent_0": frozen,
            "agent_1": {"kind": "frozen", "checkpoint": "c.pt"},
            "agent_2": RoleConfig(),
            "agent_3": home,
            "agent_4": fixed,
        }
    )
    out, run_dir = resolve_paths(cfg, "runs/multirun/default/seed_0", base=tmp_path)
    assert run_dir == tmp_path / "runs/multirun/default/seed_0"
    assert out.roles["agent_0"].checkpoint == str(tmp_path / frozen.checkpoint)
    assert out.roles["agent_1"].checkpoint == str(tmp_path / "c.pt")  # a mapping: a RoleConfig
    assert out.roles["agent_2"].checkpoint is None
    assert out.roles["agent_3"].checkpoint == str(Path.home() / "experts/a.pt")
    assert out.roles["agent_4"] is fixed
    assert cfg.roles["agent_0"] is frozen and frozen.checkpoint.startswith("runs/")  # not mutated
    same, abs_dir = resolve_paths(TrainConfig(), tmp_path / "x", base="/elsewhere")
    assert abs_dir == tmp_path / "x" and same.roles == {}


# -- SLURM and submitit ------------------------------------------------------------------------


@pytest.mark.slurm
@needs_slurm
def test_slurm_preset_composes():
    cfg = _compose(["hydra/launcher=slurm", "hydra.launcher.partition=cpu"])
    launcher = cfg.hydra.launcher
    assert launcher._target_.endswith("submitit_launcher.SlurmLauncher")
    assert launcher.partition == "cpu"
    assert launcher.timeout_min > 0 and launcher.cpus_per_task >= 1 and launcher.mem_gb > 0
    assert launcher.array_parallelism >= 1
    assert str(launcher.submitit_folder).startswith(str(cfg.hydra.sweep.dir))


@pytest.mark.ray
@needs_ray
@pytest.mark.parametrize("preset", ["ray_local", "ray_cluster"])
def test_ray_presets_compose(preset):
    cfg = _compose([f"hydra/launcher={preset}"])
    launcher = cfg.hydra.launcher
    assert launcher._target_.endswith("ray_launcher.RayLauncher")
    assert launcher.ray.remote.num_cpus == 1
    if preset == "ray_local":
        assert launcher.ray.init.address is None and launcher.ray.init.num_cpus == 2
        assert (
            cfg.hydra.callbacks.local_ray._target_ == "marlgrid.agents.bookkeeping.launch.LocalRay"
        )
    else:
        assert launcher.ray.init.address == "auto"
        assert launcher.ray.init.object_store_memory is None  # Ray refuses it when joining


@pytest.mark.slurm
@needs_slurm
def test_submitit_local_runs_a_one_job_sweep(tmp_path):
    token = uuid.uuid4().hex
    sweep = tmp_path / "multirun"
    args = ["-m", "seed=0", "hydra/launcher=submitit_local", "hydra.launcher.timeout_min=10"]
    out = subprocess.run(
        [*TRAIN, *args, *TINY, f"hydra.sweep.dir={sweep}"],
        capture_output=True,
        text=True,
        env=_env(token),
        cwd=tmp_path,
        timeout=300,
    )
    assert out.returncode == 0, out.stdout[-2000:] + out.stderr[-3000:]
    runs = _run_dirs(sweep)
    assert len(runs) == 1 and runs[0].name == "seed_0", runs
    _assert_complete(runs[0])
    assert list((sweep / ".submitit").rglob("*_result.pkl")), "submitit kept no job result"
    _assert_none_left(token, wait_s=10)


# -- Ray ---------------------------------------------------------------------------------------


@pytest.mark.ray
@needs_ray
def test_ray_local_sweep_runs_two_seeds_on_loopback(tmp_path, ray_tmp):
    token = uuid.uuid4().hex
    sweep = tmp_path / "multirun"
    token_file = Path.home() / ".ray" / "auth_token"
    had_token = token_file.exists()
    args = [
        "-m",
        "seed=0,1",
        "hydra/launcher=ray_local",
        "hydra.launcher.ray.init.num_cpus=2",
        f"+hydra.launcher.ray.init._temp_dir={ray_tmp}",
    ]
    out = subprocess.run(
        [*TRAIN, *args, *TINY, f"hydra.sweep.dir={sweep}"],
        capture_output=True,
        text=True,
        env=_env(token, loopback=False),  # no Ray variables: the LocalRay callback sets them
        cwd=tmp_path,
        timeout=400,
    )
    log = out.stdout[-3000:] + out.stderr[-3000:]
    assert out.returncode == 0, log
    assert "Started a local Ray instance" in out.stdout + out.stderr, log
    runs = _run_dirs(sweep)
    assert [r.name for r in runs] == ["seed_0", "seed_1"], runs
    for run in runs:
        _assert_complete(run)
    assert (sweep / "multirun.yaml").is_file()
    # The instance had 2 CPUs, and its node and every address its raylet opened are loopback.
    raylet = (ray_tmp / "session_latest" / "logs" / "raylet.out").read_text()
    assert re.search(r"\bCPU: 2\b", raylet), raylet[-800:]
    assert set(re.findall(r"node:(\d[\d.]*\d)", raylet)) == {"127.0.0.1"}, raylet[-800:]
    opened = set(re.findall(r"address: ([\w.:-]+):\d+", raylet))
    assert opened == {"127.0.0.1"}, opened
    _assert_none_left(token)
    assert had_token or not token_file.exists(), "Ray wrote an auth token file"


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.mark.ray
@needs_ray
def test_ray_cluster_preset_writes_runs_under_the_launch_directory(tmp_path, ray_tmp):
    """Workers of a running cluster work in the head's directory, not the launch directory: the
    runs still land under the launching command's ``runs/`` (absolute paths)."""
    token = uuid.uuid4().hex
    head_dir, launch_dir = tmp_path / "head", tmp_path / "launch"
    head_dir.mkdir()
    launch_dir.mkdir()
    port = _free_port()
    ray_bin = Path(sys.executable).with_name("ray")
    head_log = head_dir / "head.log"
    with head_log.open("w") as log_file:
        head = subprocess.Popen(
            [
                str(ray_bin),
                "start",
                "--head",
                "--block",
                "--node-ip-address=127.0.0.1",
                f"--port={port}",
                "--num-cpus=2",
                "--include-dashboard=false",
                f"--temp-dir={ray_tmp}",
                "--disable-usage-stats",
            ],
            cwd=head_dir,
            env=_env(token, loopback=True),
            stdout=log_file,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
    try:
        deadline = time.monotonic() + 120
        while "Ray runtime started" not in head_log.read_text():
            assert head.poll() is None and time.monotonic() < deadline, head_log.read_text()
            time.sleep(0.5)
        args = [
            "-m",
            "seed=0",
            "hydra/launcher=ray_cluster",
            f"hydra.launcher.ray.init.address=127.0.0.1:{port}",
            "name=cluster_check",
        ]
        out = subprocess.run(
            [*TRAIN, *args, *TINY],
            capture_output=True,
            text=True,
            env=_env(token, loopback=True),
            cwd=launch_dir,
            timeout=400,
        )
        assert out.returncode == 0, out.stdout[-2000:] + out.stderr[-3000:]
        runs = _run_dirs(launch_dir / "runs")
        assert len(runs) == 1, (runs, _run_dirs(head_dir))
        _assert_complete(runs[0])
        assert not _run_dirs(head_dir), "a run was written in the workers' working directory"
    finally:
        os.killpg(head.pid, 2)  # SIGINT: `ray start --block` stops the processes it started
        try:
            head.wait(timeout=60)
        except subprocess.TimeoutExpired:
            os.killpg(head.pid, 9)
            head.wait(timeout=10)
    _assert_none_left(token)


# -- signals to a sweep whose jobs run in other processes ---------------------------------------


def _csv_steps(run_dir: Path) -> list[int]:
    """The steps of ``metrics.csv``'s rows; none where a job stopped before its first update
    (its checkpoint is then at step 0 and no row was written)."""
    if not (run_dir / "metrics.csv").exists():
        return []
    with (run_dir / "metrics.csv").open(newline="") as f:
        return [int(float(r["step"])) for r in csv.DictReader(f)]


def _sigterm_trials(tmp_path: Path, launcher: list[str], trials: int, loopback=None) -> None:
    """``trials`` times: SIGTERM to the sweep's parent at a random moment while two jobs train
    in the launcher's worker processes (a third waits, or trains too where the launcher starts
    every job at once): every job checkpoints and stops, a waiting one never starts, no process
    is left, and rerunning the command completes all three."""
    import random
    import signal

    from marlgrid.agents.bookkeeping.checkpoint import list_checkpoints, load_checkpoint

    rng, total = random.Random(4), 128 * 60  # 60 updates of 4 envs x 32 steps
    for trial in range(trials):
        token, sweep = uuid.uuid4().hex, tmp_path / f"trial_{trial}"
        cmd = [*TRAIN, "-m", "seed=0,1,2", *launcher, *TINY, f"total_timesteps={total}",
               f"hydra.sweep.dir={sweep}"]  # fmt: skip
        env = _env(token, loopback)
        proc = subprocess.Popen(cmd, cwd=tmp_path, env=env, stdout=subprocess.PIPE,
                                stderr=subprocess.STDOUT, text=True)  # fmt: skip
        deadline = time.monotonic() + 240
        while len(started := sorted(sweep.glob("*/seed_*/metrics.csv"))) < 2:
            assert time.monotonic() < deadline and proc.poll() is None, proc.stdout.read()
            time.sleep(0.1)
        jobs = [started[0].parent.parent / f"seed_{s}" for s in range(3)]
        time.sleep(rng.uniform(0.0, 1.0))
        proc.send_signal(signal.SIGTERM)
        out, _ = proc.communicate(timeout=240)
        assert proc.returncode == 143, out[-3000:]
        _assert_none_left(token, wait_s=60)
        stopped = [job for job in jobs if list_checkpoints(job / "checkpoints")]
        assert jobs[:2] == stopped[:2], (jobs, stopped)
        for job in stopped:  # a third job either never started or stopped like the others
            saved = load_checkpoint(list_checkpoints(job / "checkpoints")[-1])
            steps = _csv_steps(job)
            assert (steps[-1] if steps else 0) == saved["global_step"] < total, (job, steps[-3:])
            assert f"SIGTERM at update {saved['update']} " in out + _job_logs(sweep), out[-2000:]
        assert len(stopped) == 3 or not jobs[2].exists(), f"{jobs[2]} left half started"
        again = subprocess.run(cmd, cwd=tmp_path, env=_env(token, loopback),
                               capture_output=True, text=True, timeout=900)  # fmt: skip
        assert again.returncode == 0, again.stdout[-2000:] + again.stderr[-2000:]
        assert (again.stdout + again.stderr + _job_logs(sweep)).count("resumed from") >= 2
        for job in jobs:
            assert _csv_steps(job) == list(range(128, total + 1, 128))  # every row once
        _assert_none_left(token, wait_s=60)


def _job_logs(sweep: Path) -> str:
    """What the jobs wrote where the launcher keeps it (submitit's .submitit/*/ logs, each
    run's train.log), for launchers whose jobs do not print to the sweep's output."""
    logs = [*sweep.glob(".submitit/**/*.out"), *sweep.glob("*/seed_*/train.log")]
    return "\n".join(p.read_text(errors="replace") for p in logs)


@pytest.mark.slow
def test_sigterm_to_a_joblib_sweep_checkpoints_every_job_and_the_rerun_resumes_them(tmp_path):
    """5 trials on joblib's worker processes (see :func:`_sigterm_trials`)."""
    pytest.importorskip("hydra_plugins.hydra_joblib_launcher")
    _sigterm_trials(tmp_path, ["hydra/launcher=joblib", "hydra.launcher.n_jobs=2"], trials=5)


@pytest.mark.ray
@needs_ray
def test_sigterm_to_a_ray_local_sweep_checkpoints_every_job_and_the_rerun_resumes_them(
    tmp_path, ray_tmp
):
    """1 trial on a local Ray instance of 2 CPUs (see :func:`_sigterm_trials`)."""
    launcher = ["hydra/launcher=ray_local", "hydra.launcher.ray.init.num_cpus=2",
                f"+hydra.launcher.ray.init._temp_dir={ray_tmp}"]  # fmt: skip
    _sigterm_trials(tmp_path, launcher, trials=1, loopback=False)


@pytest.mark.slurm
@needs_slurm
def test_sigterm_to_a_submitit_local_sweep_checkpoints_every_job_and_the_rerun_resumes_them(
    tmp_path,
):
    """1 trial on submitit's local executor (see :func:`_sigterm_trials`)."""
    launcher = ["hydra/launcher=submitit_local", "hydra.launcher.timeout_min=10"]
    _sigterm_trials(tmp_path, launcher, trials=1)
