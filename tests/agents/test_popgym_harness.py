"""POPGym harness: encoders per observation space, MultiDiscrete PPO actions, MMER, and short
trainer runs on POPGym envs (those skip without popgym); the runs' directories, resume and
evaluation are in ``test_popgym_runs.py``."""

from __future__ import annotations

import dataclasses
import json
import math
import subprocess
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
from marlgrid.agents.networks.models import (
    ActorCritic,
    NetworkConfig,
    env_actions,
    log_prob_entropy,
    multi_log_prob_entropy,
    ravel_actions,
    unravel_actions,
)
from marlgrid.agents.training.env_sources import register_env_source
from marlgrid.agents.training.rollout import SingleAgentBatch
from marlgrid.analysis.mmer import batch_mean_returns, mmer, mmer_over_seeds, read_metrics
from marlgrid.tasks.popgym_env import BinnedBoxAction, FlatDictObservation
from tests.agents.conftest import train_run

ROOT = Path(__file__).resolve().parents[2]
SMALL = NetworkConfig(memory="gru", hidden_size=16, trunk_sizes=(16,), head_sizes=(16,))


@pytest.fixture(autouse=True)
def _one_thread() -> None:
    torch.set_num_threads(1)


# -- encoders -------------------------------------------------------------------------------------


def _encode(space: spaces.Space, obs: Any) -> list[list[float]]:
    return make_encoder(space, NetworkConfig())(obs).tolist()


def test_discrete_is_one_hot_of_value_minus_start() -> None:
    space = spaces.Discrete(3, start=1)
    assert make_encoder(space, NetworkConfig()).output_size == 3
    assert _encode(space, torch.tensor([1, 3, 2])) == [[1, 0, 0], [0, 0, 1], [0, 1, 0]]


def test_multidiscrete_is_concatenated_one_hots() -> None:
    obs = torch.tensor([[1, 2], [0, 0]])
    expected = [[0, 1, 0, 0, 1], [1, 0, 1, 0, 0]]
    assert _encode(spaces.MultiDiscrete([2, 3]), obs) == expected
    shifted = spaces.MultiDiscrete([2, 3], start=[1, -1])
    assert _encode(shifted, obs + torch.tensor([1, -1])) == expected
    grid = spaces.MultiDiscrete([[2, 2], [2, 2]])  # entries in flat (C) order
    assert _encode(grid, torch.tensor([[[1, 0], [0, 1]]])) == [[0, 1, 1, 0, 1, 0, 0, 1]]


def test_box_and_multibinary_are_flattened_floats() -> None:
    box = spaces.Box(0, 9, (2, 2), np.int64)
    assert _encode(box, torch.tensor([[[1, 2], [3, 4]]])) == [[1.0, 2.0, 3.0, 4.0]]
    assert _encode(spaces.MultiBinary(3), torch.tensor([[1, 0, 1]])) == [[1.0, 0.0, 1.0]]


def test_tuple_and_dict_concatenate_their_parts() -> None:
    tup = spaces.Tuple((spaces.Discrete(2), spaces.Box(-5, 5, (1,), np.float32)))
    obs = (torch.tensor([1, 0]), torch.tensor([[0.5], [-2.0]]))
    assert _encode(tup, obs) == [[0, 1, 0.5], [1, 0, -2.0]]
    d = spaces.Dict({"b": spaces.Discrete(2), "a": spaces.MultiDiscrete([3])})
    obs_d = {"b": torch.tensor([1]), "a": torch.tensor([[2]])}
    assert _encode(d, obs_d) == [[0, 0, 1, 0, 1]]  # sorted keys: a, then b


def test_unsupported_space_names_itself_and_the_supported_ones() -> None:
    with pytest.raises(TypeError, match=r"Text.*supported: Box, Discrete, MultiDiscrete"):
        make_encoder(spaces.Text(4), NetworkConfig())
    with pytest.raises(TypeError, match="Graph"):
        make_encoder(
            spaces.Tuple((spaces.Discrete(2), spaces.Graph(spaces.Discrete(2), None))), SMALL
        )


# -- MultiDiscrete actions ------------------------------------------------------------------------


def test_multidiscrete_log_prob_and_entropy_by_hand() -> None:
    # branch 0: logits (0, ln 3) -> p = (1/4, 3/4); branch 1: uniform over 3
    logits = torch.tensor([[0.0, math.log(3.0), 0.0, 0.0, 0.0]])
    logp, ent = multi_log_prob_entropy(logits, torch.tensor([[1, 2]]), (2, 3))
    assert logp.item() == pytest.approx(math.log(0.75) + math.log(1 / 3), abs=1e-6)
    h0 = -(0.25 * math.log(0.25) + 0.75 * math.log(0.75))
    assert ent.item() == pytest.approx(h0 + math.log(3.0), abs=1e-6)


def test_multidiscrete_log_prob_and_entropy_match_torch_distributions() -> None:
    g = torch.Generator().manual_seed(0)
    nvec = (3, 2, 4)
    logits = torch.randn(5, 7, sum(nvec), generator=g)
    branches = torch.stack([torch.randint(n, (5, 7), generator=g) for n in nvec], -1)
    logp, ent = multi_log_prob_entropy(logits, branches, nvec)
    dists = [torch.distributions.Categorical(logits=p) for p in logits.split(nvec, -1)]
    torch.testing.assert_close(logp, sum(d.log_prob(branches[..., i]) for i, d in enumerate(dists)))
    torch.testing.assert_close(ent, sum(d.entropy() for d in dists))


def test_action_indices_are_row_major_like_numpy() -> None:
    nvec = (3, 4, 2)
    idx = torch.arange(24)
    branches = unravel_actions(idx, nvec)
    expected = np.stack(np.unravel_index(idx.numpy(), nvec), -1)
    assert branches.tolist() == expected.tolist()
    assert ravel_actions(branches, nvec).tolist() == idx.tolist()
    space = spaces.MultiDiscrete([3, 4], start=[1, -2])
    assert env_actions(np.array([0, 5, 11]), space).tolist() == [[1, -2], [2, -1], [3, 1]]
    assert env_actions(np.array([4]), spaces.Discrete(5)).tolist() == [4]


def _policy_with_logits(space: spaces.MultiDiscrete, logits: list[float]) -> ActorCritic:
    """An actor-critic whose policy logits are ``logits`` for every input."""
    net = ActorCritic(spaces.Box(0, 1, (2,), np.float32), space, SMALL)
    last = net.policy_head[-1]
    with torch.no_grad():
        last.weight.zero_()
        last.bias.copy_(torch.tensor(logits))
    return net


def test_actor_critic_samples_each_branch_from_its_own_softmax() -> None:
    space = spaces.MultiDiscrete([2, 3])
    logits = [0.0, math.log(3.0), math.log(2.0), 0.0, math.log(5.0)]
    net = _policy_with_logits(space, logits)
    assert net.num_actions == 6 and net.action_start == 0
    B = 20_000
    obs, state = torch.zeros(B, 2), net.initial_state(B)
    g = torch.Generator().manual_seed(1)
    with torch.no_grad():
        idx, logp, _, _ = net.act(obs, state, generator=g)
        lp_eval, _ = net.log_prob_entropy(torch.tensor(logits).expand(B, -1), idx)
    torch.testing.assert_close(logp, lp_eval)
    branches = unravel_actions(idx, (2, 3))
    freq0 = torch.bincount(branches[:, 0], minlength=2).float() / B
    freq1 = torch.bincount(branches[:, 1], minlength=3).float() / B
    torch.testing.assert_close(freq0, torch.tensor([0.25, 0.75]), atol=0.015, rtol=0)
    torch.testing.assert_close(freq1, torch.tensor([0.25, 0.125, 0.625]), atol=0.015, rtol=0)
    with torch.no_grad():
        greedy = net.act(obs[:2], state[:2], deterministic=True)[0]
    assert greedy.tolist() == [1 * 3 + 2] * 2  # argmax of each branch


def test_discrete_actions_keep_the_plain_categorical() -> None:
    net = ActorCritic(spaces.Box(0, 1, (2,), np.float32), spaces.Discrete(4, start=1), SMALL)
    assert net.action_nvec is None and net.action_start == 1
    logits, actions = torch.randn(3, 5, 4), torch.randint(4, (3, 5))
    ours, plain = net.log_prob_entropy(logits, actions), log_prob_entropy(logits, actions)
    assert all(torch.equal(a, b) for a, b in zip(ours, plain, strict=True))
    with pytest.raises(NotImplementedError, match="Discrete and MultiDiscrete"):
        ActorCritic(spaces.Box(0, 1, (2,)), spaces.Box(-1, 1, (1,)), SMALL)


class _MultiDiscreteBandit:
    """Batched one-step episodes: reward 1 when the action equals ``target`` (start included)."""

    def __init__(self, num_envs: int, target: tuple[int, int] = (2, -1)) -> None:
        self.num_envs, self.target = num_envs, np.array(target)
        self.single_observation_space = spaces.Box(0, 1, (1,), np.float32)
        self.single_action_space = spaces.MultiDiscrete([3, 2], start=[0, -1])
        self.received: list[np.ndarray] = []

    def reset(self, seed: int | None = None) -> np.ndarray:
        return np.zeros((self.num_envs, 1), np.float32)

    def step(self, actions: np.ndarray) -> tuple[Any, ...]:
        self.received.append(np.array(actions))
        rewards = np.all(actions == self.target, axis=1).astype(np.float32)
        done = np.ones(self.num_envs, bool)
        infos = {"final_obs": self.reset(), "_final_obs": done}
        return self.reset(), rewards, done, ~done, infos


register_env_source("test-bandit", lambda name, n, s: SingleAgentBatch(_MultiDiscreteBandit(n)))


def test_ppo_learns_a_multidiscrete_bandit_through_single_agent_batch(tmp_path: Path) -> None:
    cfg = PPOConfig(network=dataclasses.replace(SMALL, memory="none"), num_steps=16, chunk_len=4,
                    lr=0.01, anneal_lr=False, refresh_interval=0)  # fmt: skip
    trainer, history = train_run(tmp_path, "test-bandit:v0", 8, cfg, 8 * 16 * 25)
    got = np.concatenate(trainer.vec.envs.received)
    assert got.shape[1] == 2 and set(got[:, 0]) <= {0, 1, 2} and set(got[:, 1]) <= {-1, 0}
    assert history[0]["charts/episodic_return"] < 0.4  # 1/6 by chance
    assert history[-1]["charts/episodic_return"] > 0.9


# -- MMER -----------------------------------------------------------------------------------------


HISTORY = [
    {"global_step": 100.0, "charts/episodic_return": math.nan},
    {"global_step": 200.0, "charts/episodic_return": 0.25},
    {"global_step": 300.0, "charts/episodic_return": 0.5},
    {"global_step": 400.0, "charts/episodic_return": -0.75},
]


def test_mmer_is_the_max_of_the_batch_means() -> None:
    assert batch_mean_returns(HISTORY) == [(200, 0.25), (300, 0.5), (400, -0.75)]
    assert mmer(HISTORY) == 0.5
    assert math.isnan(mmer(HISTORY[:1]))


def test_batches_pool_updates_weighted_by_episodes() -> None:
    history = [
        {"global_step": 100.0, "charts/episodic_return": 1.0, "charts/episodes": 1.0},
        {"global_step": 200.0, "charts/episodic_return": 0.0, "charts/episodes": 3.0},
        {"global_step": 300.0, "charts/episodic_return": math.nan, "charts/episodes": 0.0},
        {"global_step": 400.0, "charts/episodic_return": 0.5, "charts/episodes": 2.0},
    ]
    assert batch_mean_returns(history, batch_steps=200) == [(200, 0.25), (400, 0.5)]
    assert mmer(history, batch_steps=200) == 0.5
    assert mmer(history) == 1.0  # one update per batch


def test_mmer_over_seeds_is_mean_and_population_std() -> None:
    mean, std = mmer_over_seeds([0.5, 0.7, 0.9])
    assert mean == pytest.approx(0.7)
    assert std == pytest.approx(math.sqrt(0.08 / 3))
    assert mmer_over_seeds([0.3]) == (0.3, 0.0)
    with pytest.raises(ValueError, match="NaN"):
        mmer_over_seeds([0.3, math.nan])


# -- Tuple observations as a flat Dict ------------------------------------------------------------


class _TupleEnv(gym.Env):
    def __init__(self, space: spaces.Space, obs: Any) -> None:
        self.observation_space, self.action_space, self._obs = space, spaces.Discrete(2), obs

    def reset(self, seed: int | None = None, options: Any = None) -> tuple[Any, dict]:
        return self._obs, {}

    def step(self, action: Any) -> tuple[Any, ...]:
        return self._obs, 0.0, True, False, {}


def test_tuple_observations_become_a_flat_dict_in_element_order() -> None:
    inner = spaces.Tuple((spaces.Box(0, 1, (1,), np.float32), spaces.Discrete(3)))
    space = spaces.Tuple((spaces.Discrete(2),) * 10 + (inner,))
    obs = (1,) * 10 + ((np.array([0.5], np.float32), 2),)
    env = FlatDictObservation(_TupleEnv(space, obs))
    keys = list(env.observation_space.spaces)
    assert sorted(keys) == [f"{i:02d}" for i in range(10)] + ["10/0", "10/1"]
    flat, _ = env.reset()
    assert flat["10/1"] == 2 and flat["10/0"][0] == 0.5 and flat["03"] == 1
    assert env.observation_space.contains(flat)


class _BoxActionEnv(gym.Env):
    """Returns the action it was given as its observation."""

    def __init__(self, action_space: spaces.Box) -> None:
        self.action_space = action_space
        self.observation_space = spaces.Box(-np.inf, np.inf, action_space.shape)

    def step(self, action: Any) -> tuple[Any, ...]:
        return np.array(action), 0.0, False, False, {}


def test_binned_box_action_one_dimension_by_hand() -> None:
    env = BinnedBoxAction(_BoxActionEnv(spaces.Box(-2.0, 2.0, (1,), np.float32)), 5)
    assert env.action_space == spaces.Discrete(5)
    played = [env.step(a)[0].tolist() for a in range(5)]
    assert played == [[-2.0], [-1.0], [0.0], [1.0], [2.0]]
    assert env.step(np.int64(3))[0].dtype == np.float32


def test_binned_box_action_per_dimension_bounds() -> None:
    box = spaces.Box(np.array([0.0, -1.0], np.float32), np.array([1.0, 3.0], np.float32))
    env = BinnedBoxAction(_BoxActionEnv(box), 3)
    assert env.action_space == spaces.MultiDiscrete([3, 3])
    assert env.step(np.array([0, 2]))[0].tolist() == [0.0, 3.0]
    assert env.step(np.array([1, 1]))[0].tolist() == [0.5, 1.0]


def test_binned_box_action_rejects_bad_input() -> None:
    with pytest.raises(ValueError, match="box_action_bins must be >= 2, got 1"):
        BinnedBoxAction(_BoxActionEnv(spaces.Box(-1.0, 1.0, (1,))), 1)
    with pytest.raises(ValueError, match="bounded Box"):
        BinnedBoxAction(_BoxActionEnv(spaces.Box(-np.inf, 1.0, (1,))), 3)
    with pytest.raises(TypeError, match=r"needs a Box action space, got Discrete\(2\)"):
        BinnedBoxAction(_TupleEnv(spaces.Discrete(2), 0), 3)


# -- POPGym envs (skipped without popgym) ---------------------------------------------------------


def test_env_names_and_wrappers() -> None:
    pytest.importorskip("popgym")
    from marlgrid.tasks.popgym_env import make_env, resolve_env_id

    assert resolve_env_id("RepeatPreviousEasy") == "popgym-RepeatPreviousEasy-v0"
    assert resolve_env_id("popgym-repeatpreviouseasy-v0") == "popgym-RepeatPreviousEasy-v0"
    assert resolve_env_id("VelocityOnlyCartPoleEasy") == "popgym-VelocityOnlyCartpoleEasy-v0"
    with pytest.raises(ValueError, match=r"unknown POPGym env 'Nope'.*RepeatFirstEasy"):
        resolve_env_id("Nope")
    env = make_env("RepeatPreviousEasy")  # Antialias(PreviousAction(env)): (card, action, t0)
    assert env.observation_space == spaces.Dict(
        {"0": spaces.Discrete(4), "1": spaces.Discrete(4), "2": spaces.Discrete(2)}
    )
    obs, _ = env.reset(seed=0)
    assert (obs["1"], obs["2"]) == (0, 1)  # null previous action, first step
    obs, *_ = env.step(3)
    assert (obs["1"], obs["2"]) == (3, 0)
    plain = make_env("RepeatPreviousEasy", previous_action=False, antialias=False)
    assert plain.observation_space == spaces.Discrete(4)
    flat = make_env("BattleshipEasy", discrete_action=True)
    assert flat.action_space == spaces.Discrete(64)
    assert flat.observation_space["1"] == spaces.Discrete(64)  # the previous action, flattened


def test_pendulum_needs_and_gets_binned_torques() -> None:
    pytest.importorskip("popgym")
    from marlgrid.tasks.popgym_env import make_env

    with pytest.raises(ValueError, match=r"continuous actions Box\(-2.0, 2.0.*box_action_bins=K"):
        make_env("PositionOnlyPendulumEasy")
    env = make_env("PositionOnlyPendulumEasy", box_action_bins=5)
    assert env.action_space == spaces.Discrete(5)
    assert env.observation_space["1"] == spaces.Discrete(5)  # the previous action, binned
    env.reset(seed=0)
    assert env.unwrapped.__class__.__name__ == "PositionOnlyPendulumEasy"
    assert make_env("RepeatPreviousEasy", box_action_bins=5).action_space == spaces.Discrete(4)


def test_ppo_gru_runs_a_few_updates_on_repeat_previous(tmp_path: Path) -> None:
    pytest.importorskip("popgym")
    cfg = PPOConfig(network=SMALL, num_steps=64, chunk_len=16)
    _, history = train_run(tmp_path, "popgym:RepeatPreviousEasy", 4, cfg, 4 * 64 * 4)
    assert [h["step"] for h in history] == [256, 512, 768, 1024]
    # episodes last 51 steps: each env ends 5 in 256 steps, so 20 episodes in all
    assert sum(h["charts/episodes"] for h in history) == 20
    assert all(-1.0 <= r <= 1.0 for _, r in batch_mean_returns(history))
    assert all(math.isfinite(h["losses/value_loss"]) for h in history)
    assert -1.0 <= mmer(history) <= 1.0


def test_ppo_multidiscrete_actions_reach_battleship(tmp_path: Path) -> None:
    pytest.importorskip("popgym")
    cfg = PPOConfig(network=SMALL, num_steps=32, chunk_len=8, num_minibatches=2)
    _, history = train_run(tmp_path, "popgym:BattleshipEasy", 2, cfg, 2 * 32 * 2)
    assert len(history) == 2 and math.isfinite(history[-1]["losses/entropy"])
    # two independent branches of 8 start near uniform: entropy about 2 ln 8
    assert history[0]["losses/entropy"] == pytest.approx(2 * math.log(8), abs=0.05)


def test_import_marlgrid_does_not_import_popgym_memory_gym_or_pygame() -> None:
    code = (
        "import sys, marlgrid, marlgrid.agents, marlgrid.tasks.popgym_env; "
        "print([m in sys.modules for m in ('popgym', 'memory_gym', 'pygame')])"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[False, False, False]"


def test_preset_composes_with_the_train_schema() -> None:
    pytest.importorskip("hydra")
    from hydra import compose, initialize_config_dir
    from omegaconf import OmegaConf

    import experiments.train  # noqa: F401  (registers the schemas)
    from experiments.examples.popgym_sweep import DEFAULT_PRESET, load_agent_preset
    from marlgrid.agents.learner import config_from_dict

    with initialize_config_dir(str(ROOT / "conf"), version_base="1.3"):
        agent = OmegaConf.to_object(compose("train", overrides=["agent=ppo_popgym"])).agent
    ours = load_agent_preset(DEFAULT_PRESET)
    assert config_from_dict(dataclasses.asdict(agent)) == ours
    assert ours.network.hidden_size == 256 and ours.network.head_sizes == (128, 128)
    assert load_agent_preset(DEFAULT_PRESET, "lstm", ["lr=0.001"]).network.memory == "lstm"
    with pytest.raises(ValueError, match="nope"):
        load_agent_preset(DEFAULT_PRESET, None, ["nope=1"])


TINY = ["--set", "network.hidden_size=8", "network.trunk_sizes=[8]", "network.head_sizes=[8]",
        "num_steps=32", "chunk_len=8", "--num-envs", "2", "--steps", "128", "--quiet"]  # fmt: skip


def test_sweep_writes_the_table_and_resumes(tmp_path: Path, capsys: Any) -> None:
    pytest.importorskip("popgym")
    pytest.importorskip("omegaconf")
    from experiments.examples.popgym_sweep import cell_record, main

    args = ["--sweep", "--envs", "RepeatPreviousEasy", "--memories", "gru,none", "--seeds", "0,1"]
    assert main([*args, *TINY, "--out", str(tmp_path)]) == 0
    run = tmp_path / "RepeatPreviousEasy/gru/seed_1"  # a trainer run directory per cell
    assert (run / "checkpoints/ckpt_000000002.pt").is_file() and (run / "config.json").is_file()
    settings = json.loads((run / "popgym.json").read_text())["settings"]
    record = cell_record(settings, run)
    rows = read_metrics(run)
    assert [r["step"] for r in rows] == [64, 128]
    best = max(
        r["charts/episodic_return"] for r in rows if not math.isnan(r["charts/episodic_return"])
    )
    assert record["mmer"] == pytest.approx(best) and settings["batch_size"] == 64
    table = (tmp_path / "summary.md").read_text()
    assert "| RepeatPreviousEasy | none | 2 | 128 | 64 |" in table
    walls = [cell_record(settings, tmp_path / f"RepeatPreviousEasy/gru/seed_{k}")["wall_s"]
             for k in (0, 1)]  # fmt: skip
    speed = f"| gru | 2 | 256 | {sum(walls):,.0f} | {256 / sum(walls):,.0f} |"
    assert speed in table
    capsys.readouterr()
    assert main([*args, *TINY, "--out", str(tmp_path)]) == 0
    assert capsys.readouterr().out.count("(skipped)") == 4
    assert [r["step"] for r in read_metrics(run)] == [64, 128]  # nothing trained again
    with pytest.raises(SystemExit, match="steps differ"):
        main([*args, *TINY, "--steps", "192", "--out", str(tmp_path)])


def test_sweep_refuses_a_continuous_action_env_before_training(tmp_path: Path) -> None:
    pytest.importorskip("popgym")
    pytest.importorskip("omegaconf")
    from experiments.examples.popgym_sweep import main

    args = ["--sweep", "--envs", "RepeatPreviousEasy,PositionOnlyPendulumEasy", *TINY]
    with pytest.raises(SystemExit, match="--box-action-bins K"):
        main([*args, "--out", str(tmp_path)])
    assert not any(tmp_path.iterdir())  # nothing trained
    assert main([*args, "--box-action-bins", "3", "--out", str(tmp_path)]) == 0
    record = json.loads((tmp_path / "PositionOnlyPendulumEasy/gru/seed_0/popgym.json").read_text())
    assert record["settings"]["wrappers"]["box_action_bins"] == 3


def test_cli_names_an_unknown_env(tmp_path: Path) -> None:
    """Run as a script, the entry point imports the real popgym, not itself."""
    pytest.importorskip("popgym")
    cmd = [sys.executable, str(ROOT / "experiments/examples/popgym_sweep.py"), "--env", "Nope"]
    out = subprocess.run(cmd, capture_output=True, text=True, cwd=tmp_path, timeout=120)
    assert out.returncode == 1
    assert "error: unknown POPGym env 'Nope'; registered: " in out.stderr
    assert "RepeatPreviousEasy" in out.stderr and "Traceback" not in out.stderr


@pytest.mark.slow
def test_cli_single_run(tmp_path: Path) -> None:
    pytest.importorskip("popgym")
    pytest.importorskip("omegaconf")
    sweep = str(ROOT / "experiments/examples/popgym_sweep.py")
    cmd = [sys.executable, sweep, "--env", "RepeatPreviousEasy",
           "--memory", "gru", "--seed", "3", *TINY, "--out", str(tmp_path)]  # fmt: skip
    out = subprocess.run(cmd, capture_output=True, text=True, cwd=tmp_path, timeout=120)
    assert out.returncode == 0, out.stderr
    assert "batches of 64 env steps" in out.stdout
    assert (tmp_path / "RepeatPreviousEasy/gru/seed_3/metrics.csv").is_file()
