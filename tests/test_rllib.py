"""The RLlib adapter: env checker, episodes, float observations, policies, PPO-LSTM training.

Needs the extra ``ray`` (``pip install -e ".[ray,test]"``; run with ``-m ray``); skipped without
it, except the checks that ``import marlgrid`` stays free of Ray and that a missing extra is
explained. The Ray instance is local, bound to loopback, with 2 CPUs, and shut down at the end.
"""

from __future__ import annotations

import importlib.util
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import numpy as np
import pytest

from marlgrid.base import ActionError

ROOT = Path(__file__).resolve().parents[1]
GOAL_CYCLE_3 = "MarlGrid-GoalCycle-13x13-3Agents-v0"
LOOPBACK = {
    "RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER": "0",
    "RAY_AUTH_MODE": "disabled",
    "RAY_USAGE_STATS_ENABLED": "0",
}


def _has_rllib() -> bool:
    """Whether ray and ray.rllib are installed, without importing ray (Ray reads its loopback
    switch when first imported, so the fixture below must be the first to import it)."""
    spec = importlib.util.find_spec("ray")
    return spec is not None and any(
        (Path(p) / "rllib" / "__init__.py").is_file() for p in spec.submodule_search_locations or ()
    )


needs_rllib = pytest.mark.skipif(
    not _has_rllib(), reason="needs the extra ray: pip install -e '.[ray]'"
)


# -- without the extra -------------------------------------------------------------------------


def test_import_marlgrid_does_not_import_ray():
    code = (
        "import sys, marlgrid; marlgrid.make('MarlGrid-Empty-8x8-v0'); print('ray' in sys.modules)"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"


def test_missing_extra_names_the_install_command():
    code = (
        "import sys; sys.modules['ray'] = None\n"
        "try:\n    import marlgrid.adapters.rllib\n"
        "except ModuleNotFoundError as e:\n    print(e)\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert "pip install 'marlgrid[ray]'" in out.stdout, out.stdout + out.stderr


# -- with the extra ----------------------------------------------------------------------------


@pytest.fixture(scope="module")
def mr():
    """``marlgrid.adapters.rllib`` with a local loopback Ray of 2 CPUs running (module scope)."""
    if not _has_rllib():
        pytest.skip("needs the extra ray: pip install -e '.[ray]'")
    temp = tempfile.mkdtemp(prefix="mgrl", dir="/tmp")
    with pytest.MonkeyPatch.context() as mp:
        for key, value in LOOPBACK.items():
            mp.setenv(key, value)  # read by Ray when imported and started, so set them first
        import ray
        import torch

        import marlgrid.adapters.rllib as module

        torch.set_num_threads(1)
        ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False, _temp_dir=temp)
        try:
            assert ray.util.get_node_ip_address() == "127.0.0.1"
            yield module
        finally:
            ray.shutdown()
            shutil.rmtree(temp, ignore_errors=True)


@pytest.mark.ray
@needs_rllib
@pytest.mark.parametrize(
    "env_id,settings",
    [
        (GOAL_CYCLE_3, {}),
        (GOAL_CYCLE_3, {"agent": {"observation": "onehot"}}),
        ("MarlGrid-GoalCycle-7x7-v0", {"agent": {"observation": "rgb", "tile_size": 4}}),
        ("MarlGrid-DoorKey-8x8-2Agents-v0", {"agent": {"extras": ["reward", "direction"]}}),
    ],
)
def test_rllib_env_checker_passes(mr, env_id, settings):
    from ray.rllib.utils.pre_checks.env import check_multiagent_environments

    env = mr.MarlGridMultiAgentEnv({"id": env_id, "settings": settings})
    check_multiagent_environments(env)
    obs, _ = env.reset(seed=1)
    for agent, o in obs.items():
        space = env.observation_spaces[agent]
        assert space.contains(o), (agent, space)
        image = o["image"] if isinstance(o, dict) else o
        assert image.dtype == np.float32
        if settings.get("agent", {}).get("observation") == "rgb":
            assert image.min() >= 0.0 and image.max() <= 1.0 and space.high.max() == 1.0


@pytest.mark.ray
@needs_rllib
def test_every_registered_id_makes_an_rllib_env(mr):
    from ray.tune.registry import ENV_CREATOR, _global_registry

    import marlgrid

    for env_id in marlgrid.REGISTRY:
        env = _global_registry.get(ENV_CREATOR, env_id)({})
        assert env.possible_agents == marlgrid.make(env_id).possible_agents


@pytest.mark.ray
@needs_rllib
def test_episode_ends_once_with_all_agents_done(mr):
    env = mr.MarlGridMultiAgentEnv({"id": GOAL_CYCLE_3, "seed": 3})
    rng = np.random.default_rng(0)
    for _ in range(2):
        obs, _ = env.reset()
        assert sorted(obs) == env.possible_agents
        steps = 0
        while True:
            acts = {a: int(rng.integers(7)) for a in env.agents}
            obs, rew, term, trunc, _ = env.step(acts)
            steps += 1
            assert set(obs) == set(rew) == set(acts)
            if term["__all__"] or trunc["__all__"]:
                break
            assert env.agents
        assert steps == 250 and trunc["__all__"] and not term["__all__"] and not env.agents
    with pytest.raises(ActionError, match="reset"):
        env.step({})
    a, b = (mr.MarlGridMultiAgentEnv({"id": GOAL_CYCLE_3, "seed": 5}) for _ in range(2))
    assert all(np.array_equal(a.reset()[0][k], b.reset()[0][k]) for k in a.possible_agents)


@pytest.mark.ray
@needs_rllib
def test_conv_filters_reduce_small_views(mr):
    def out_size(view, rows):
        for _, kernel, stride, _ in rows:
            view = (view - kernel) // stride + 1
        return view

    assert out_size(7, mr.conv_filters(7)) == 3
    assert out_size(5, mr.conv_filters(5)) == 1
    assert out_size(3, mr.conv_filters(3)) == 1
    assert out_size(21, mr.conv_filters(21)) == 3
    assert 1 <= out_size(56, mr.conv_filters(56)) <= 3


@pytest.mark.ray
@needs_rllib
def test_policy_spec_shared_independent_and_groups(mr):
    agents = ["agent_0", "agent_1", "agent_2"]
    shared = mr.policy_spec(agents, shared=True)
    assert shared["policies"] == {"shared"}
    assert {shared["policy_mapping_fn"](a, None) for a in agents} == {"shared"}
    indep = mr.policy_spec(agents, shared=False)
    assert indep["policies"] == set(agents)
    assert [indep["policy_mapping_fn"](a, None) for a in agents] == agents
    groups = mr.policy_spec(agents, groups={"expert": ["agent_0"], "novice": agents[1:]})
    assert [groups["policy_mapping_fn"](a, None) for a in agents] == ["expert", "novice", "novice"]
    with pytest.raises(ValueError, match="exactly once"):
        mr.policy_spec(agents, groups={"x": ["agent_0"]})


@pytest.mark.ray
@needs_rllib
@pytest.mark.parametrize("shared", [True, False], ids=["shared", "independent"])
def test_ppo_lstm_trains(mr, shared):
    config = mr.ppo_config(
        GOAL_CYCLE_3,
        shared=shared,
        settings={"agent": {"observation": "onehot"}},
        cell_size=16,
        max_seq_len=8,
        train_batch_size=64,
        minibatch_size=64,
        num_epochs=1,
        seed=0,
    )
    algo = config.build_algo()
    try:
        policies = ["shared"] if shared else ["agent_0", "agent_1", "agent_2"]
        module = algo.get_module(policies[0])
        assert module.is_stateful(), "the module has no LSTM state"
        before = {p: {k: v.clone() for k, v in algo.get_module(p).state_dict().items()}
                  for p in policies}  # fmt: skip
        for _ in range(2):
            result = algo.train()
        assert result["num_env_steps_sampled_lifetime"] >= 128
        assert set(policies) <= set(result["learners"])
        for p in policies:
            after = algo.get_module(p).state_dict()
            assert any(not np.allclose(before[p][k], after[k]) for k in after), p
    finally:
        algo.stop()


@pytest.mark.ray
@needs_rllib
def test_example_script_runs(mr, capsys, monkeypatch):
    for key, value in LOOPBACK.items():
        monkeypatch.setenv(key, value)  # main() sets them too; restored after the test
    from experiments.examples import rllib_ppo

    argv = ["--iterations", "1", "--batch", "64", "--minibatch", "64", "--epochs", "1"]
    assert rllib_ppo.main([*argv, "--cell", "16", "--seq-len", "8", "--independent"]) == 0
    out = capsys.readouterr().out
    assert "independent policies" in out and "iter    1" in out
