"""Resource limits are checked before anything is allocated (``training.resources``).

A run whose envs, storage, update or networks cannot fit the machine is refused when the trainer
is built, naming the setting, the estimate, the limit and the most that fits; values with no
meaning past a limit (a DRQN batch larger than its replay) are refused by validation. Every
preset fits a 24 GiB machine. Tests set the limit (``MARLGRID_MEMORY_LIMIT``) so that nothing
depends on the memory free now, and nothing large is ever allocated.
"""

from __future__ import annotations

import dataclasses
import os
import re
import resource
import subprocess
import sys
import time
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("hydra")

from hydra import compose, initialize_config_dir  # noqa: E402
from omegaconf import OmegaConf  # noqa: E402

from marlgrid.agents.algorithms.drqn import DRQNConfig  # noqa: E402
from marlgrid.agents.algorithms.ppo import PPOConfig  # noqa: E402
from marlgrid.agents.bookkeeping.checkpoint import list_checkpoints  # noqa: E402
from marlgrid.agents.bookkeeping.memory_budget import (  # noqa: E402
    MARGIN,
    MEMORY_LIMIT_ENV,
    check_memory,
)
from marlgrid.agents.bookkeeping.resources import estimate_memory  # noqa: E402
from marlgrid.agents.training.trainer import (  # noqa: E402
    EnvConfig,
    LoggerConfig,
    RoleConfig,
    TrainConfig,
    Trainer,
    train,
)
from marlgrid.config import ConfigError  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
GIB = 2**30
#: what a run may plan to use on a 24 GiB machine
MACHINE_24G = MARGIN * 24 * GIB
THREE_AGENTS = "MarlGrid-GoalCycle-13x13-3Agents-v0"
#: a couple of updates of a preset
TINY = [
    "scale=small",
    "env.num_envs=2",
    "agent.num_steps=16",
    "total_timesteps=32",
    "checkpoint_every=1",
    "video=false",
    "logger.tensorboard=false",
    "logger.progress=false",
]


@pytest.fixture(autouse=True)
def _limit(monkeypatch) -> None:
    """A fixed limit of 16 GiB, whatever the machine has free now."""
    torch.set_num_threads(1)
    monkeypatch.setenv(MEMORY_LIMIT_ENV, "16G")


def _compose(overrides: list[str]) -> TrainConfig:
    import experiments.train  # noqa: F401  (registers the schema)

    with initialize_config_dir(str(ROOT / "conf"), version_base="1.3"):
        return OmegaConf.to_object(compose("train", overrides=overrides))


def _tiny(**overrides) -> TrainConfig:
    base = {
        "env": EnvConfig(THREE_AGENTS, num_envs=2),
        "agent": PPOConfig(num_steps=8, chunk_len=4, num_minibatches=2, update_epochs=1),
        "total_timesteps": 32,
        "checkpoint_every": 1,
        "video": False,
        "logger": LoggerConfig(tensorboard=False, progress=False),
    }
    return TrainConfig(**{**base, **overrides})


def _refused(cfg: TrainConfig, run_dir: Path, match: str) -> str:
    with pytest.raises(ConfigError, match=match) as info:
        Trainer(cfg, run_dir)
    assert not run_dir.exists()
    return str(info.value)


# -- the three reproducers ---------------------------------------------------------------------


def _cap_memory() -> None:  # a run that allocated anyway fails at 4 GiB instead of filling RAM
    resource.setrlimit(resource.RLIMIT_AS, (4 * GIB, 4 * GIB))


def test_a_huge_env_batch_is_refused_by_the_cli_at_once_leaving_no_folder(tmp_path):
    env = {**os.environ, "OMP_NUM_THREADS": "1", MEMORY_LIMIT_ENV: "16G"}
    env["PYTHONPATH"] = os.pathsep.join([str(ROOT), env.get("PYTHONPATH", "")])
    args = ["env.num_envs=100000", "video=false", "logger.progress=false"]
    out = subprocess.run(
        [sys.executable, str(ROOT / "experiments" / "train.py"), *args],
        cwd=tmp_path, env=env, capture_output=True, text=True, timeout=180,
        preexec_fn=_cap_memory,
    )  # fmt: skip
    assert out.returncode == 1, out.stderr[-2000:]
    assert "Traceback" not in out.stderr
    line = out.stderr.strip().splitlines()[-1]
    assert re.fullmatch(
        r"error: env\.num_envs=100000: .+ would need ~[\d.]+ GB and the run ~[\d.]+ GB in all, "
        r"more than the 16\.0 GB allowed \(MARLGRID_MEMORY_LIMIT=16G\); at most ~\d+ fits",
        line,
    ), line
    assert not (tmp_path / "runs").exists()


def test_a_huge_env_batch_is_refused_within_seconds_before_any_env_is_built(tmp_path):
    cfg = _tiny(env=EnvConfig(THREE_AGENTS, num_envs=100_000))
    Trainer(_tiny(), tmp_path / "warm")  # imports and compiled kernels warm
    start = time.perf_counter()
    message = _refused(cfg, tmp_path / "run", r"^env\.num_envs=100000: ")
    assert time.perf_counter() - start < 10, "the check must not build the envs"
    most = int(re.search(r"at most ~(\d+) fits", message)[1])
    assert 100 < most < 100_000
    check_memory(dataclasses.replace(cfg, env=EnvConfig(THREE_AGENTS, num_envs=most)))


def test_a_drqn_batch_larger_than_its_replay_is_refused_by_validation(tmp_path):
    cfg = _tiny(agent=DRQNConfig(batch_size=100_000))
    _refused(
        cfg,
        tmp_path / "run",
        r"agent\.batch_size must be <= the sequences the replay holds \(2 \* buffer_size // "
        r"\(seq_len - overlap\) = 2 \* 100000 // 20 = 10000\): a larger batch only repeats "
        r"them; got 100000",
    )


def test_a_drqn_batch_whose_update_cannot_fit_is_refused_naming_the_batch(tmp_path):
    cfg = _tiny(agent=DRQNConfig(batch_size=100_000, buffer_size=1_000_000))
    message = _refused(
        cfg,
        tmp_path / "run",
        r"^agent\.batch_size=100000: the update of agent \(one batch\) would need ~[\d.]+ GB and "
        r"the run ~[\d.]+ GB in all, more than the 16\.0 GB allowed \(MARLGRID_MEMORY_LIMIT=16G\)"
        r"; at most ~\d+ fits$",
    )
    most = int(re.search(r"at most ~(\d+) fits", message)[1])
    fits = dataclasses.replace(cfg, agent=dataclasses.replace(cfg.agent, batch_size=most))
    check_memory(fits)  # the most it names does fit


def test_a_frozen_checkpoint_saved_with_a_huge_hidden_size_is_refused_before_building(tmp_path):
    train(_tiny(), tmp_path / "expert")
    payload = torch.load(list_checkpoints(tmp_path / "expert" / "checkpoints")[-1])
    payload["learners"]["main"]["config"]["network"]["hidden_size"] = 2**40
    from marlgrid.agents.bookkeeping.checkpoint import DIGEST_KEY, content_digest

    payload[DIGEST_KEY] = content_digest(payload)  # a file written so, not damaged later
    path = tmp_path / "huge.pt"
    torch.save(payload, path)
    frozen = RoleConfig(kind="frozen", checkpoint=str(path))
    cfg = _tiny(roles={"agent_1": frozen, "agent_2": frozen})
    _refused(
        cfg,
        tmp_path / "run",
        r"^roles\.agent_1\.checkpoint's network\.hidden_size=1099511627776: the frozen network of "
        r"agent_1 \(huge\.pt\) would need ~.+ PB and the run ~.+ PB in all, more than the 16\.0 "
        r"GB allowed \(MARLGRID_MEMORY_LIMIT=16G\); at most ~\d+ fits$",
    )


# -- bounds ------------------------------------------------------------------------------------


def test_a_drqn_replay_too_small_for_its_slots_is_refused_before_the_run(tmp_path):
    agent = DRQNConfig(buffer_size=160, batch_size=4)  # 2 envs x 3 agents x 2 x 43 rows needed
    _refused(
        _tiny(agent=agent),
        tmp_path / "run",
        r"agent\.buffer_size must hold two sequence windows per slot, >= num_slots \* 2 \* "
        r"\(seq_len \+ n_step\) = 6 \* 2 \* 43 = 516, got 160",
    )


def test_drqn_max_sequences_past_the_buffer_and_batches_past_them_are_refused():
    with pytest.raises(ConfigError, match=r"agent\.max_sequences must be <= agent\.buffer_size"):
        DRQNConfig(buffer_size=1000, max_sequences=1001).validate("agent")
    with pytest.raises(ConfigError, match=r"\(agent\.max_sequences = 64\).*got 65"):
        DRQNConfig(max_sequences=64, batch_size=65).validate("agent")
    DRQNConfig(max_sequences=64, batch_size=64).validate("agent")


_FIRST_MEASURE = """
from marlgrid.agents.bookkeeping.resources import _measure_env_bytes
from marlgrid.agents.training.trainer import EnvConfig
env = EnvConfig(id="MarlGrid-GoalCycle-13x13-3Agents-v0",
                settings={"agent": {"extras": ["reward", "action"]}})
print(_measure_env_bytes(env), _measure_env_bytes(env))
"""


def test_an_env_measured_first_in_a_process_counts_its_bytes():
    """The first build of a process also allocates what later builds share; the measure must
    not subtract that from the envs (it once gave 0 bytes per env in a fresh process)."""
    out = subprocess.run(
        [sys.executable, "-c", _FIRST_MEASURE], capture_output=True, text=True, check=True, cwd=ROOT
    ).stdout.split()
    first, again = map(float, out)
    assert first > 1000 and abs(first - again) < 0.2 * again


# -- the limit ---------------------------------------------------------------------------------


def test_the_limit_variable_takes_sizes_or_off_and_names_itself_when_bad(monkeypatch, tmp_path):
    cfg = _tiny()
    monkeypatch.setenv(MEMORY_LIMIT_ENV, "lots")
    with pytest.raises(ConfigError, match=r"MARLGRID_MEMORY_LIMIT must be a size such as 8G"):
        check_memory(cfg)
    monkeypatch.setenv(MEMORY_LIMIT_ENV, "1M")
    message = _refused(cfg, tmp_path / "run", r"more than the 1\.0 MB allowed")
    assert "(MARLGRID_MEMORY_LIMIT=1M)" in message
    monkeypatch.setenv(MEMORY_LIMIT_ENV, "off")
    assert check_memory(cfg) == []
    monkeypatch.delenv(MEMORY_LIMIT_ENV)
    assert check_memory(cfg)  # this machine's available memory: a tiny run fits


# -- presets -----------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def cluttered_experts(tmp_path_factory) -> Path:
    """A checkpoint of a tiny run of the cluttered experts (cluttered_with_experts plays it)."""
    run_dir = tmp_path_factory.mktemp("cluttered_experts")
    import experiments.train  # noqa: F401

    train(_compose(["experiment=cluttered_experts", *TINY]), run_dir)
    return list_checkpoints(run_dir / "checkpoints")[-1]


EXPERIMENTS = sorted(p.stem for p in (ROOT / "conf" / "experiment").glob("*.yaml"))
AGENTS = sorted(p.stem for p in (ROOT / "conf" / "agent").glob("*.yaml") if p.stem != "bc")


@pytest.mark.parametrize(
    "overrides",
    [[f"experiment={e}"] for e in EXPERIMENTS] + [[f"agent={a}"] for a in AGENTS],
    ids=lambda o: o[0],
)
def test_every_preset_at_its_default_scale_fits_a_24_gib_machine(overrides, cluttered_experts):
    cfg = _compose(overrides)
    if any(r.kind == "frozen" and not r.checkpoint for r in map(_role, cfg.roles.values())):
        cfg = _compose([*overrides, f"roles.agent_1.checkpoint={cluttered_experts}"])
    needs = check_memory(cfg, limit=MACHINE_24G)
    assert needs and all(n.nbytes > 0 for n in needs)
    assert sum(n.nbytes for n in needs) < 4 * GIB  # far below: the estimate is not near the edge


def _role(role):
    return role if isinstance(role, RoleConfig) else RoleConfig(**role)


def test_the_estimate_counts_the_frozen_network_once_for_agents_that_share_it(tmp_path):
    train(_tiny(), tmp_path / "expert")
    path = str(list_checkpoints(tmp_path / "expert" / "checkpoints")[-1])
    one = {"agent_1": RoleConfig(kind="frozen", checkpoint=path)}
    both = {**one, "agent_2": RoleConfig(kind="frozen", checkpoint=path)}

    def frozen_networks(roles) -> list[str]:
        needs = estimate_memory(_tiny(roles=roles))
        return [n.what for n in needs if n.what.startswith("the frozen network")]

    assert len(frozen_networks(one)) == len(frozen_networks(both)) == 1


# -- the estimate against what a run takes -----------------------------------------------------

#: a run measured in a subprocess: peak RSS growth over building and training it, and the estimate
_MEASURE = """
import dataclasses, resource, sys, tempfile
import torch
torch.set_num_threads(1)
from marlgrid.agents.algorithms.drqn import DRQNConfig
from marlgrid.agents.algorithms.ppo import PPOConfig
from marlgrid.agents.bookkeeping.resources import estimate_memory
from marlgrid.agents.training.trainer import EnvConfig, LoggerConfig, TrainConfig, Trainer
cfg = TrainConfig(
    env=EnvConfig({env!r}, num_envs={num_envs}), agent={agent}, total_timesteps={steps},
    checkpoint_every=1000, video=False, logger=LoggerConfig(tensorboard=False, progress=False))
estimate = sum(n.nbytes for n in estimate_memory(cfg))
# warm up: compiled kernels and libraries load in a 2-env run (they are not the run's data)
small = dataclasses.replace(
    cfg, env=EnvConfig({env!r}, num_envs=2), total_timesteps=2 * {steps} // {num_envs})
Trainer(small, tempfile.mkdtemp() + "/warm").run()
before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
Trainer(cfg, tempfile.mkdtemp() + "/run").run()
grown = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024 - before
print(estimate, grown)
"""


@pytest.mark.slow
@pytest.mark.parametrize(
    "env,num_envs,agent,steps",
    [
        ("MarlGrid-GoalCycle-7x7-v0", 512, "PPOConfig(num_steps=64)", 3 * 512 * 64),
        ("MarlGrid-GoalCycle-13x13-3Agents-v0", 256, "PPOConfig(num_steps=128)", 256 * 128),
        # the replay fills (pages are touched as it is written) before the run ends
        ("MarlGrid-Empty-8x8-v0", 64, "DRQNConfig(buffer_size=20_000, batch_size=256, "
         "learning_starts=2_000)", 24_000),
    ],
    ids=["ppo-7x7", "ppo-13x13-3agents", "drqn-empty"],
)  # fmt: skip
def test_the_memory_estimate_covers_a_run_and_is_within_3x_of_it(env, num_envs, agent, steps):
    code = _MEASURE.format(env=env, num_envs=num_envs, agent=agent, steps=steps)
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         cwd=ROOT, timeout=600)  # fmt: skip
    assert out.returncode == 0, out.stderr[-3000:]
    estimate, grown = map(float, out.stdout.split()[-2:])
    print(f"estimate {estimate / 2**20:.0f} MiB, peak RSS growth {grown / 2**20:.0f} MiB")
    assert grown <= estimate <= 3 * grown, (
        f"estimate {estimate / 2**20:.0f} MiB, grown {grown / 2**20:.0f} MiB"
    )


@pytest.mark.parametrize("hidden", [2_000_000, 100_000_000])
def test_a_huge_next_view_decoder_is_refused_naming_its_option(tmp_path, hidden):
    """The issue's reproducers: ``options: {hidden: 2000000}`` filled 24 GB and was killed,
    ``100000000`` gave a traceback. A loss term's head is sized with the run, before it is
    built, and the refusal names the option."""
    terms = [{"name": "next_view", "coef": 3.0, "options": {"hidden": hidden}}]
    agent = PPOConfig(num_steps=8, chunk_len=4, num_minibatches=2, update_epochs=1,
                      aux_losses=terms)  # fmt: skip
    message = _refused(_tiny(agent=agent), tmp_path / "run", r"options\.hidden=")
    assert "next_view" in message and str(hidden) in message


def test_a_next_view_decoder_of_the_default_size_is_counted_and_fits(tmp_path):
    terms = [{"name": "next_view", "coef": 3.0, "options": {}}]
    agent = PPOConfig(num_steps=8, chunk_len=4, num_minibatches=2, update_epochs=1,
                      aux_losses=terms)  # fmt: skip
    needs = estimate_memory(_tiny(agent=agent))
    head = [n for n in needs if "extra head 'next_view'" in n.what]
    assert len(head) == 1 and 0 < head[0].nbytes < 2**30
