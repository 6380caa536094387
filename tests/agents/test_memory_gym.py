"""Memory Gym's grid tasks through the POPGym harness: names, spaces and encoders, the tasks'
episode structure, PPO updates, and the harness's episode bookkeeping against the envs' own
(the env tests skip without memory-gym)."""

from __future__ import annotations

import dataclasses
import json
import math
import sys
from pathlib import Path
from typing import Any

import gymnasium as gym
import numpy as np
import pytest
import torch
from gymnasium import spaces

from marlgrid.agents.algorithms.ppo import PPOConfig
from marlgrid.agents.networks.encoders import make_encoder
from marlgrid.agents.networks.models import NetworkConfig
from marlgrid.agents.training.env_sources import ENV_SOURCES, register_env_source
from marlgrid.agents.training.rollout import SingleAgentBatch
from marlgrid.agents.training.trainer import EnvConfig, LoggerConfig, TrainConfig, Trainer
from marlgrid.analysis.mmer import batch_mean_returns, mmer, read_metrics
from marlgrid.tasks.memory_gym_env import (
    TILE_SIZES,
    make_memory_gym_env,
    network_overrides,
    resolve_memory_gym_id,
)
from marlgrid.tasks.popgym_env import make_env, resolve_env_id

MMG, MPG = "MortarMayhem-Grid-v0", "MysteryPath-Grid-v0"
FRAME = spaces.Box(0, 255, (84, 84, 3), np.uint8)
TINY = NetworkConfig(
    memory="gru", hidden_size=16, trunk_sizes=(16,), head_sizes=(16,), conv_channels=(8,)
)


@pytest.fixture(autouse=True)
def _one_thread() -> None:
    torch.set_num_threads(1)


@pytest.fixture
def memory_gym() -> Any:
    return pytest.importorskip("memory_gym")


# -- names and the missing-package errors (no memory-gym needed) ---------------------------------


def test_names_resolve_case_insensitively_with_or_without_suffix_and_dash() -> None:
    for name in (MMG, "mortarmayhem-grid-v0", "MortarMayhem-Grid", "MortarMayhemGrid"):
        assert resolve_memory_gym_id(name) == MMG
    assert resolve_memory_gym_id(" mysterypathgrid ") == MPG
    assert resolve_memory_gym_id("MortarMayhem-v0") is None  # not a grid task
    assert resolve_memory_gym_id("RepeatPreviousEasy") is None
    with pytest.raises(ValueError, match=r"'Nope'; supported: \['MortarMayhem-Grid-v0', 'My"):
        make_memory_gym_env("Nope")


def test_preset_overrides_line_patches_up_with_the_tiles() -> None:
    assert network_overrides(MMG) == ["network.tile_size=7"]  # 14 px tiles after a 7 px margin
    assert network_overrides(MPG) == ["network.tile_size=12"]  # 7 tiles of 12 px
    assert network_overrides("popgym-RepeatPreviousEasy-v0") == []
    assert all(84 % t == 0 for t in TILE_SIZES.values())


def test_missing_memory_gym_names_the_extra(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "memory_gym", None)  # import fails as if not installed
    with pytest.raises(ImportError, match=r"marlgrid\[memorygym\]' && pip install --no-deps"):
        resolve_env_id("MortarMayhemGrid")


# -- envs, wrappers and encoders ------------------------------------------------------------------


def test_unwrapped_spaces_need_no_popgym(memory_gym: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "popgym.wrappers", None)
    env = make_env(MPG, previous_action=False, antialias=False)
    assert (env.observation_space, env.action_space) == (FRAME, spaces.Discrete(4))
    obs, _ = env.reset(seed=0)
    assert obs.shape == (84, 84, 3) and obs.dtype == np.uint8 and obs.max() > 0
    env.close()
    with pytest.raises(ImportError, match="previous_action=False, antialias=False"):
        make_env(MPG)


@pytest.mark.parametrize(("env_id", "cells"), [(MMG, 12), (MPG, 7)])
def test_wrapped_frames_encode_to_cells_plus_one_hots(
    memory_gym: Any, env_id: str, cells: int
) -> None:
    pytest.importorskip("popgym")
    env = make_env(env_id)  # Antialias(PreviousAction(env)): (frame, last action, is-first)
    assert env.observation_space == spaces.Dict(
        {"0": FRAME, "1": spaces.Discrete(4), "2": spaces.Discrete(2)}
    )
    cfg = dataclasses.replace(TINY, tile_size=TILE_SIZES[env_id])
    encoder = make_encoder(env.observation_space, cfg)
    # 84 px / tile = cells per side; one 8-channel conv per cell; one-hots of 4 and 2
    assert encoder.output_size == cells * cells * 8 + 4 + 2
    obs, _ = env.reset(seed=0)
    assert (obs["1"], obs["2"]) == (0, 1)
    obs, *_ = env.step(2)
    assert (obs["1"], obs["2"]) == (2, 0)
    batch = {k: torch.as_tensor(np.asarray(v))[None] for k, v in obs.items()}
    features = encoder(batch)
    assert features.shape == (1, encoder.output_size)
    assert features[0, -6:].tolist() == [0, 0, 1, 0, 1, 0]  # action 2, not the first step
    env.close()


def _frames(envs: list[gym.Env], seeds: list[int], actions: np.ndarray) -> list[np.ndarray]:
    """Frames ``(steps + 1, len(envs), 84, 84, 3)``, the envs stepped in turn (as in a
    ``SyncVectorEnv``), column ``k`` of ``actions`` for env ``k``."""
    out = [[env.reset(seed=s)[0] for env, s in zip(envs, seeds, strict=True)]]
    out += [[env.step(int(a))[0] for env, a in zip(envs, row, strict=True)] for row in actions]
    return [np.stack(column) for column in zip(*out, strict=True)]


@pytest.mark.parametrize("env_id", [MMG, MPG])
def test_envs_sharing_the_display_match_envs_run_alone(memory_gym: Any, env_id: str) -> None:
    actions = np.random.default_rng(1).integers(4, size=(60, 2))
    envs = [make_memory_gym_env(env_id) for _ in range(2)]
    together = _frames(envs, [10, 11], actions)
    for env in envs:
        env.close()
    for k, seed in enumerate([10, 11]):
        env = make_memory_gym_env(env_id)
        (alone,) = _frames([env], [seed], actions[:, k : k + 1])
        env.close()
        assert np.array_equal(alone, together[k])
    assert not np.array_equal(together[0], together[1])


def _wait_episode(env: gym.Env, seed: int) -> tuple[float, int, bool, bool]:
    """Return, length and the last (terminated, truncated) of an episode of action 0 (wait)."""
    env.reset(seed=seed)
    total, steps = 0.0, 0
    while True:
        _, reward, terminated, truncated, _ = env.step(0)
        total, steps = total + float(reward), steps + 1
        if terminated or truncated:
            return total, steps, terminated, truncated


def test_mortar_mayhem_timeline_by_hand(memory_gym: Any) -> None:
    """A waiting agent passes exactly the leading 'stay' commands. 10 commands are shown for
    3 + 1 steps each (the reset frame is the first), so the agent moves from step 40; each
    command is checked 6 steps after the previous one's tiles cleared (+2): checks at steps
    46, 54, ...; the episode ends at the first failed check, +0.1 per passed one."""
    env = make_env(MMG, previous_action=False, antialias=False)
    seen = set()
    for seed in range(8):
        total, steps, terminated, truncated = _wait_episode(env, seed)
        commands = env.unwrapped._commands
        stays = next((i for i, c in enumerate(commands) if c != "stay"), len(commands))
        assert stays < 10
        assert steps == 46 + 8 * stays and terminated and not truncated
        assert total == pytest.approx(0.1 * stays)
        seen.add(stays)
    assert len(seen) > 1  # some seeds start with 'stay'
    env.close()


def test_mystery_path_ends_after_128_steps_without_the_goal(memory_gym: Any) -> None:
    env = make_env(MPG, previous_action=False, antialias=False)
    assert _wait_episode(env, 3) == (0.0, 128, True, False)  # the limit reads as terminated
    env.close()


# -- PPO through the harness ----------------------------------------------------------------------


class _EpisodeLog(gym.Wrapper):
    """Logs ``(env step at the end, the env's own episode reward and length)`` per episode."""

    def __init__(self, env: gym.Env, log: list[tuple[int, float, int]]) -> None:
        super().__init__(env)
        self.log, self.t = log, 0

    def step(self, action: Any) -> tuple[Any, ...]:
        out = self.env.step(action)
        self.t += 1
        if out[2] or out[3]:
            self.log.append((self.t, float(out[4]["reward"]), int(out[4]["length"])))
        return out


@pytest.mark.parametrize("env_id", [MMG, MPG])
def test_ppo_updates_and_episode_bookkeeping(memory_gym: Any, env_id: str, tmp_path: Path) -> None:
    pytest.importorskip("popgym")
    num_envs, num_steps, updates = 2, 64, 4
    logs: list[list[tuple[int, float, int]]] = [[] for _ in range(num_envs)]

    def logged_envs(name: str, n: int, settings: Any) -> SingleAgentBatch:
        return SingleAgentBatch(
            gym.vector.SyncVectorEnv(
                [lambda log=log: _EpisodeLog(make_env(name), log) for log in logs[:n]],
                autoreset_mode=gym.vector.AutoresetMode.SAME_STEP,
            )
        )

    cfg = PPOConfig(
        network=dataclasses.replace(TINY, tile_size=TILE_SIZES[env_id]),
        num_steps=num_steps,
        chunk_len=16,
    )
    register_env_source("test-logged", logged_envs)
    try:
        Trainer(
            TrainConfig(
                env=EnvConfig(id=f"test-logged:{env_id}", num_envs=num_envs),
                agent=cfg,
                logger=LoggerConfig(tensorboard=False, progress=False),
                total_timesteps=num_envs * num_steps * updates,
                video=False,
            ),
            tmp_path,
        ).run()
    finally:
        ENV_SOURCES.pop("test-logged")
    history = read_metrics(tmp_path)  # the trainer's metrics.csv: one row per update
    assert [h["step"] for h in history] == [128, 256, 384, 512]
    assert all(math.isfinite(h[k]) for h in history for k in ("losses/value_loss",
               "losses/policy_loss", "losses/entropy"))  # fmt: skip
    # each update holds the episodes that ended in its num_steps steps of every env, with the
    # returns and lengths the env itself reports
    for u, h in enumerate(history):
        ended = [e for log in logs for e in log if u * num_steps < e[0] <= (u + 1) * num_steps]
        assert h["charts/episodes"] == len(ended)
        if ended:
            assert h["charts/episodic_return"] == pytest.approx(np.mean([e[1] for e in ended]))
            assert h["charts/episodic_length"] == pytest.approx(np.mean([e[2] for e in ended]))
        else:
            assert math.isnan(h["charts/episodic_return"])
    episodes = [e for log in logs for e in log]
    if env_id == MMG:  # 46 to 119 steps, +0.1 per command passed
        assert len(episodes) >= num_envs * (num_steps * updates // 119)
        assert all(46 <= length <= 119 and 0 <= r <= 1 for _, r, length in episodes)
        assert all(abs(10 * r - round(10 * r)) < 1e-6 for _, r, _ in episodes)
    else:  # at most 128 steps, 1 at the goal
        assert len(episodes) >= num_envs * (num_steps * updates // 128)
        assert all(length <= 128 and r in (0.0, 1.0) for _, r, length in episodes)
    means = [m for _, m in batch_mean_returns(history)]
    assert mmer(history) == max(means) and 0.0 <= mmer(history) <= 1.0


# -- the entry point ------------------------------------------------------------------------------


def test_entry_point_sets_the_tile_size_before_user_overrides() -> None:
    pytest.importorskip("omegaconf")
    from experiments.examples.popgym_sweep import cell_settings, parse_args

    def tile(env_id: str, *extra: str) -> int:
        args = parse_args(["--env", env_id, *extra])
        return cell_settings(args, env_id, "gru", 0)["agent"]["network"]["tile_size"]

    assert (tile(MMG), tile(MPG), tile("popgym-RepeatPreviousEasy-v0")) == (7, 12, 8)
    assert tile(MMG, "--set", "network.tile_size=14") == 14


def test_entry_point_trains_on_mystery_path(memory_gym: Any, tmp_path: Path) -> None:
    pytest.importorskip("popgym")
    pytest.importorskip("omegaconf")
    from experiments.examples.popgym_sweep import cell_record, main

    args = ["--env", "MysteryPathGrid", "--memory", "gru", "--num-envs", "2", "--steps", "128",
            "--set", "network.hidden_size=8", "network.trunk_sizes=[8]", "network.head_sizes=[8]",
            "network.conv_channels=[4]", "num_steps=32", "chunk_len=8", "--quiet"]  # fmt: skip
    assert main([*args, "--out", str(tmp_path)]) == 0
    run = tmp_path / "MysteryPath-Grid/gru/seed_0"  # a trainer run directory
    record = cell_record(json.loads((run / "popgym.json").read_text())["settings"], run)
    assert record["settings"]["env_id"] == MPG and record["settings"]["batch_size"] == 64
    assert record["env_steps"] == 128 and record["batches"] == 2
    assert record["settings"]["agent"]["network"]["tile_size"] == 12
    assert json.loads((run / "config.json").read_text())["env"]["id"] == f"memorygym:{MPG}"
