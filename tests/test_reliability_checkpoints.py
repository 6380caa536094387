"""Saved checkpoints, used again: frozen roles, evaluate.py and export_expert.py check a file's
learners (saved config as a fresh one is checked, finite weights) before anything runs and say
what is wrong in one line; frozen paths are saved absolute and old relative ones are read
against the run's launch directory; an export never lands on a run's own checkpoints."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("hydra")

ROOT = Path(__file__).resolve().parents[1]
ENV = "MarlGrid-GoalCycle-13x13-3Agents-v0"
#: a tiny run of the 3-agent goal cycle: one update of 16 env steps, small networks
TINY = [
    "env=goal_cycle_13x13_3agents",
    "env.num_envs=2",
    "+env.settings.max_steps=12",
    "agent.num_steps=8",
    "agent.chunk_len=4",
    "agent.num_minibatches=2",
    "agent.update_epochs=1",
    "agent.network.hidden_size=16",
    "agent.network.trunk_sizes=[16]",
    "agent.network.head_sizes=[8]",
    "agent.network.conv_channels=[4]",
    "total_timesteps=16",
    "video=false",
    "logger.progress=false",
    "logger.tensorboard=false",
]
#: the novice preset: agent_0 learns beside agent_1 and agent_2 frozen from one checkpoint
NOVICE = ["roles=novice_with_trained_experts"]


@pytest.fixture(autouse=True)
def _one_thread() -> None:
    torch.set_num_threads(1)


def _script(name: str, args: list[str], cwd: Path) -> subprocess.CompletedProcess:
    """``python experiments/<name> args`` in ``cwd``, this checkout first on the path."""
    env = {**os.environ, "PYTHONPATH": str(ROOT), "OMP_NUM_THREADS": "1"}
    cmd = [sys.executable, str(ROOT / "experiments" / name), *args]
    return subprocess.run(cmd, capture_output=True, text=True, cwd=cwd, env=env, timeout=300)


def _one_line_error(out: subprocess.CompletedProcess) -> str:
    """The single ``error: ...`` line a refused command prints (exit 1, no traceback)."""
    text = out.stdout + out.stderr
    assert out.returncode == 1, text
    assert "Traceback" not in text, text
    lines = [line for line in out.stderr.splitlines() if line.strip()]
    assert len(lines) == 1 and lines[0].startswith("error: "), text
    return lines[0]


@pytest.fixture(scope="module")
def saved(tmp_path_factory) -> dict[str, Path]:
    """An expert run made by train.py (learner ``main`` drives all three agents), its checkpoint
    copied to ``launch/experts/expert.pt``, and an empty directory ``elsewhere``."""
    root = tmp_path_factory.mktemp("checkpoints")
    out = _script("train.py", [*TINY, "name=expert", "hydra.run.dir=expert"], root)
    assert out.returncode == 0, out.stdout + out.stderr
    ckpt = sorted((root / "expert" / "checkpoints").glob("ckpt_*.pt"))[-1]
    launch, elsewhere = root / "launch", root / "elsewhere"
    (launch / "experts").mkdir(parents=True)
    elsewhere.mkdir()
    shutil.copy(ckpt, launch / "experts" / "expert.pt")
    return {"expert_run": root / "expert", "ckpt": ckpt, "launch": launch, "elsewhere": elsewhere}


@pytest.fixture(scope="module")
def novice(saved) -> Path:
    """A novice run launched by train.py in ``launch``: it plays the expert frozen by the
    relative path ``experts/expert.pt``."""
    args = [*TINY, *NOVICE, "roles.agent_1.checkpoint=experts/expert.pt", "name=novice"]
    out = _script("train.py", [*args, "hydra.run.dir=runs/novice"], saved["launch"])
    assert out.returncode == 0, out.stdout + out.stderr
    return saved["launch"] / "runs" / "novice"


# -- corrupt copies of a real checkpoint -----------------------------------------------------------


def _first_weight(state: dict) -> str:
    return next(k for k, v in state["net"].items() if v.is_floating_point())


def _no_config(p: dict) -> None:
    del p["learners"]["main"]["config"]


def _no_learners(p: dict) -> None:
    del p["learners"]


def _unknown_algo(p: dict) -> None:
    p["learners"]["main"]["config"]["algo"] = "sarsa"


def _unknown_key(p: dict) -> None:
    p["learners"]["main"]["config"]["bogus"] = 1


def _negative_hidden(p: dict) -> None:
    p["learners"]["main"]["config"]["network"]["hidden_size"] = -5


def _nan_weight(p: dict) -> None:
    state = p["learners"]["main"]
    state["net"][_first_weight(state)][0] = float("nan")


def _inf_weight(p: dict) -> None:
    state = p["learners"]["main"]
    state["net"][_first_weight(state)][-1] = float("inf")


#: corruption -> (how, what the error says)
CORRUPTIONS = {
    "no_config": (_no_config, r"learners\.main has no 'config' entry \(its entries are \[.*'net'"),
    "no_learners": (
        _no_learners,
        r"holds no 'learners' entry of learner states \(its entries are \[.*'format'",
    ),
    "unknown_algo": (_unknown_algo, r"learners\.main\.config: unknown learner algorithm 'sarsa'; "),
    "unknown_key": (_unknown_key, r"learners\.main\.config: PPOConfig has no fields \['bogus'\]"),
    "negative_hidden": (
        _negative_hidden,
        r"learners\.main\.config\.network\.hidden_size must be >= 1, got -5",
    ),
    "nan_weight": (_nan_weight, r"learners\.main\.net\.\S+ holds NaN or infinite values"),
    "inf_weight": (_inf_weight, r"learners\.main\.net\.\S+ holds NaN or infinite values"),
}


def _corrupt(source: Path, target: Path, how) -> Path:
    """A copy of ``source`` whose payload ``how`` changed, written with a digest of the changed
    content (a file written that way, not damaged later: the checks below the digest's)."""
    from marlgrid.agents.bookkeeping.checkpoint import DIGEST_KEY, content_digest

    payload = torch.load(source, map_location="cpu", weights_only=True)
    how(payload)
    if isinstance(payload, dict) and DIGEST_KEY in payload:
        payload[DIGEST_KEY] = content_digest(payload)
    target.parent.mkdir(parents=True, exist_ok=True)
    torch.save(payload, target)
    return target


def _corrupt_run(saved: dict[str, Path], target: Path, how) -> Path:
    """A copy of the expert run whose newest checkpoint is corrupted by ``how``."""
    shutil.copytree(saved["expert_run"], target)
    ckpt = sorted((target / "checkpoints").glob("ckpt_*.pt"))[-1]
    _corrupt(ckpt, ckpt, how)
    return target


# -- the one check ---------------------------------------------------------------------------------


@pytest.mark.parametrize("name", sorted(CORRUPTIONS))
def test_load_learners_names_what_is_wrong_with_a_checkpoint(saved, tmp_path, name):
    from marlgrid.agents.bookkeeping.checkpoint import CheckpointError, load_learners

    how, message = CORRUPTIONS[name]
    bad = _corrupt(saved["ckpt"], tmp_path / f"{name}.pt", how)
    with pytest.raises(CheckpointError, match=rf"^checkpoint {re.escape(str(bad))}: {message}"):
        load_learners(bad)


def test_a_missing_checkpoint_is_not_found_not_truncated(tmp_path):
    from marlgrid.agents.bookkeeping.checkpoint import CheckpointError, load_checkpoint

    gone = tmp_path / "gone.pt"
    with pytest.raises(CheckpointError, match=rf"^checkpoint {re.escape(str(gone))} not found$"):
        load_checkpoint(gone)


def test_the_sound_checkpoint_and_the_library_experts_pass(saved):
    from marlgrid.agents.bookkeeping.checkpoint import load_learners

    assert set(load_learners(saved["ckpt"])["learners"]) == {"main"}
    for expert in sorted((ROOT / "experiments" / "experts").glob("*.pt")):
        assert load_learners(expert)["learners"], expert


def test_fresh_learner_configs_get_the_same_check(tmp_path):
    from marlgrid.agents.algorithms.ppo import PPOConfig
    from marlgrid.agents.networks.models import NetworkConfig
    from marlgrid.agents.training.trainer import TrainConfig, Trainer
    from marlgrid.config import ConfigError

    cfg = TrainConfig(agent=PPOConfig(network=NetworkConfig(hidden_size=-5)), video=False)
    with pytest.raises(ConfigError, match=r"^agent\.network\.hidden_size must be >= 1, got -5$"):
        Trainer(cfg, tmp_path / "run")


# -- frozen roles: refused when the trainer is built -----------------------------------------------


def _frozen_cfg(checkpoint: Path):
    from marlgrid.agents.algorithms.ppo import PPOConfig
    from marlgrid.agents.networks.models import NetworkConfig
    from marlgrid.agents.training.roles import RoleConfig
    from marlgrid.agents.training.trainer import EnvConfig, LoggerConfig, TrainConfig

    small = NetworkConfig(hidden_size=16, trunk_sizes=(16,), head_sizes=(8,), conv_channels=(4,))
    agent = PPOConfig(network=small, num_steps=8, chunk_len=4, num_minibatches=2, update_epochs=1)
    return TrainConfig(
        env=EnvConfig(ENV, num_envs=2, settings={"max_steps": 12}),
        agent=agent,
        roles={"agent_1": RoleConfig(kind="frozen", checkpoint=str(checkpoint))},
        total_timesteps=16,
        video=False,
        logger=LoggerConfig(tensorboard=False, progress=False),
    )


@pytest.mark.parametrize("name", [*sorted(CORRUPTIONS), "missing"])
def test_a_frozen_role_with_a_bad_checkpoint_is_refused_before_anything_is_built(
    saved, tmp_path, monkeypatch, name
):
    from marlgrid.agents.bookkeeping.checkpoint import CheckpointError
    from marlgrid.agents.learner import LEARNERS, load_builtin_learners
    from marlgrid.agents.training.trainer import Trainer

    if name == "missing":
        bad, message = tmp_path / "gone.pt", "not found"
    else:
        how, message = CORRUPTIONS[name]
        bad = _corrupt(saved["ckpt"], tmp_path / f"{name}.pt", how)
    load_builtin_learners()
    built = []
    spec = LEARNERS["ppo"]
    monkeypatch.setitem(LEARNERS, "ppo", spec._replace(build=lambda *a, **k: built.append(a)))
    where = rf"^frozen role of agent_1: checkpoint {re.escape(str(bad))}:? {message}"
    with pytest.raises(CheckpointError, match=where):
        Trainer(_frozen_cfg(bad), tmp_path / "run")
    assert built == [] and not (tmp_path / "run").exists()  # no network, no folder


@pytest.mark.parametrize("name", ["nan_weight", "missing"])
def test_train_py_refuses_a_bad_frozen_checkpoint_in_one_line(saved, tmp_path, name):
    if name == "missing":
        bad, message = tmp_path / "gone.pt", r" not found$"
    else:
        how, message = CORRUPTIONS[name]
        bad = _corrupt(saved["ckpt"], tmp_path / "experts" / f"{name}.pt", how)
    rel = bad.relative_to(tmp_path)
    args = [*TINY, *NOVICE, f"roles.agent_1.checkpoint={rel}", "hydra.run.dir=runs/novice"]
    line = _one_line_error(_script("train.py", args, tmp_path))
    assert line.startswith(f"error: frozen role of agent_1: checkpoint {bad}"), line
    assert re.search(message, line) and "truncated" not in line, line
    assert not (tmp_path / "runs").exists()


# -- evaluate.py -----------------------------------------------------------------------------------


@pytest.mark.parametrize("name", sorted(CORRUPTIONS))
def test_evaluate_refuses_a_run_whose_checkpoint_is_bad_in_one_line(saved, tmp_path, name):
    from experiments.evaluate import main as evaluate_main

    how, message = CORRUPTIONS[name]
    run = _corrupt_run(saved, tmp_path / "run", how)
    with pytest.raises(SystemExit) as exit_:
        evaluate_main([str(run), "--episodes", "1", "--num-envs", "1"])
    assert re.match(rf"error: checkpoint \S+ckpt_\d+\.pt: {message}", exit_.value.code)


def test_evaluate_py_refuses_a_bad_checkpoint_in_one_line(saved, tmp_path):
    run = _corrupt_run(saved, tmp_path / "run", _unknown_algo)
    line = _one_line_error(
        _script("evaluate.py", [str(run), "--episodes", "1"], saved["elsewhere"])
    )
    assert "unknown learner algorithm 'sarsa'" in line and "'ppo'" in line, line


def test_evaluate_of_a_run_whose_frozen_file_is_gone_says_not_found(novice, tmp_path):
    from experiments.evaluate import main as evaluate_main

    run = tmp_path / "novice"
    shutil.copytree(novice, run)
    data = json.loads((run / "config.json").read_text())
    gone = tmp_path / "gone.pt"
    for agent in ("agent_1", "agent_2"):
        data["roles"][agent]["checkpoint"] = str(gone)
    (run / "config.json").write_text(json.dumps(data))
    with pytest.raises(SystemExit) as exit_:
        evaluate_main([str(run), "--episodes", "1", "--num-envs", "1"])
    assert exit_.value.code == f"error: frozen role of agent_1: checkpoint {gone} not found"


# -- relative frozen paths -------------------------------------------------------------------------


def test_a_run_with_a_relative_frozen_path_evaluates_from_another_directory(saved, novice):
    out = _script("evaluate.py", [str(novice), "--episodes", "1", "--num-envs", "1"],
                  saved["elsewhere"])  # fmt: skip
    assert out.returncode == 0, out.stdout + out.stderr
    assert "agent_1 (frozen): mean return" in out.stdout, out.stdout
    expert = saved["launch"] / "experts" / "expert.pt"
    roles = json.loads((novice / "config.json").read_text())["roles"]  # saved absolute
    assert roles["agent_1"]["checkpoint"] == roles["agent_2"]["checkpoint"] == str(expert)


@pytest.mark.parametrize("record", ["hydra", "runs_folder"])
def test_an_old_run_s_relative_frozen_paths_are_read_against_its_launch_directory(
    saved, novice, monkeypatch, record
):
    """A run from before config.json: only Hydra's record, with the path as given."""
    from marlgrid.agents.bookkeeping.saved_run import SavedRun

    old = saved["launch"] / "runs" / f"old_{record}"
    shutil.copytree(novice, old)
    (old / "config.json").unlink()
    if record == "runs_folder":  # no record of the launch directory: the folder holding runs/
        (old / ".hydra" / "hydra.yaml").unlink()
    assert "experts/expert.pt" in (old / ".hydra" / "config.yaml").read_text()
    monkeypatch.chdir(saved["elsewhere"])
    run = SavedRun(old)
    expert = str(saved["launch"] / "experts" / "expert.pt")
    assert run.config["roles"]["agent_1"]["checkpoint"] == expert
    assert run.config["roles"]["agent_2"]["checkpoint"] == expert  # the interpolation, resolved
    returns = run.policies(greedy=True).evaluate(episodes=1, seed=0, num_envs=1)
    assert returns.shape == (1, 3)


def test_relative_frozen_paths_are_saved_absolute_also_from_python_and_in_streams(
    saved, tmp_path, monkeypatch
):
    from marlgrid.agents.bookkeeping.launch import resolve_paths
    from marlgrid.agents.bookkeeping.saved_run import config_data
    from marlgrid.agents.training.roles import RoleConfig
    from marlgrid.agents.training.trainer import StreamConfig

    monkeypatch.chdir(saved["launch"])
    cfg = _frozen_cfg(Path("experts/expert.pt"))
    expert = str(saved["launch"] / "experts" / "expert.pt")
    assert config_data(cfg)["roles"]["agent_1"]["checkpoint"] == expert
    assert cfg.roles["agent_1"].checkpoint == "experts/expert.pt"  # not changed in place
    frozen = RoleConfig(kind="frozen", checkpoint="experts/expert.pt")
    other = {"roles": {"agent_1": {"kind": "frozen", "checkpoint": "x.pt"}}}
    cfg.streams = {"a": StreamConfig(roles={"agent_1": frozen}), "b": other}
    out, _ = resolve_paths(cfg, "run", base=tmp_path)
    assert out.streams["a"].roles["agent_1"].checkpoint == str(tmp_path / "experts/expert.pt")
    assert out.streams["b"]["roles"]["agent_1"]["checkpoint"] == str(tmp_path / "x.pt")
    assert cfg.streams["a"].roles["agent_1"] is frozen  # not mutated


# -- export_expert.py ------------------------------------------------------------------------------


@pytest.mark.parametrize("name", sorted(CORRUPTIONS))
def test_export_refuses_a_bad_checkpoint_and_writes_nothing(saved, tmp_path, name):
    from experiments.export_expert import main as export_main

    how, message = CORRUPTIONS[name]
    bad = _corrupt(saved["ckpt"], tmp_path / "in" / "bad.pt", how)
    out = tmp_path / "experts" / "e.pt"
    with pytest.raises(SystemExit) as exit_:
        export_main([str(bad), str(out)])
    assert re.match(rf"error: checkpoint {re.escape(str(bad))}: {message}", exit_.value.code)
    assert not out.exists() and not (tmp_path / "experts").exists()


def test_export_py_never_overwrites_an_existing_file_unless_asked(saved, tmp_path):
    from experiments.export_expert import main as export_main

    out = tmp_path / "library" / "expert.pt"
    export_main([str(saved["expert_run"]), str(out)])
    before = out.read_bytes()
    with pytest.raises(SystemExit, match="refusing to overwrite the existing file"):
        export_main([str(saved["expert_run"]), str(out), "--note", "another"])
    assert out.read_bytes() == before
    export_main([str(saved["expert_run"]), str(out), "--note", "another", "--overwrite"])
    assert out.read_bytes() != before


def test_export_py_never_overwrites_a_run_s_checkpoint_and_the_run_resumes(saved, tmp_path):
    run = tmp_path / "expert"
    shutil.copytree(saved["expert_run"], run)
    newest = sorted((run / "checkpoints").glob("ckpt_*.pt"))[-1]
    before = newest.read_bytes()
    line = _one_line_error(_script("export_expert.py", [str(run), str(newest)], tmp_path))
    assert "refusing to overwrite the existing file" in line, line
    line = _one_line_error(
        _script("export_expert.py", [str(run), str(newest), "--overwrite"], tmp_path)
    )
    assert "is the checkpoint being exported" in line, line
    assert newest.read_bytes() == before
    from experiments.export_expert import main as export_main
    from marlgrid.agents.bookkeeping.checkpoint import list_checkpoints, load_checkpoint
    from marlgrid.agents.bookkeeping.saved_run import SavedRun
    from marlgrid.agents.training.trainer import train

    for target in (run / "checkpoints" / "ckpt_000000099.pt", run / "checkpoints" / "e.pt"):
        with pytest.raises(SystemExit) as exit_:
            export_main([str(run), str(target)])
        assert "is in the checkpoints folder of run" in exit_.value.code
        assert not target.exists()
    assert newest.read_bytes() == before and "torch_rng" in load_checkpoint(newest)
    cfg = SavedRun(run).train_config
    cfg.total_timesteps, cfg.extend = 32, True
    train(cfg, run)  # resumes from its own checkpoint and trains on
    assert list_checkpoints(run / "checkpoints")[-1].name == "ckpt_000000002.pt"


def test_an_exported_expert_with_flipped_bytes_is_refused(saved, tmp_path):
    """The issue's reproducer: 64 flipped bytes in the weights of an exported expert loaded
    silently (16 weights changed, all finite). Files now carry a digest checked on load."""
    from experiments.export_expert import main as export_main
    from marlgrid.agents.bookkeeping.checkpoint import DIGEST_KEY, CheckpointError, load_checkpoint

    out = tmp_path / "expert.pt"
    export_main([str(saved["expert_run"]), str(out)])
    payload = load_checkpoint(out)
    assert len(payload[DIGEST_KEY]) == 64
    raw = bytearray(out.read_bytes())
    start = len(raw) // 2  # inside the tensor data, far from the pickled header
    for i in range(64):
        raw[start + 7 * i] ^= 0x01
    bad = tmp_path / "flipped.pt"
    bad.write_bytes(bytes(raw))
    with pytest.raises(CheckpointError, match="does not match the digest it was written with"):
        load_checkpoint(bad)
