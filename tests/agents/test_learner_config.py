"""Learner registry: configs rebuilt from their saved form, learners built by algorithm name."""

from __future__ import annotations

import json
from dataclasses import asdict, replace

import numpy as np
import pytest
import torch
from gymnasium import spaces

from marlgrid.agents.algorithms.ppo import PPO, PPOConfig
from marlgrid.agents.learner import LEARNERS, build_learner, config_from_dict
from marlgrid.agents.networks.models import NetworkConfig

OBS = spaces.Box(-1, 1, (3,), np.float32)
ACT = spaces.Discrete(2)
NET = NetworkConfig(
    memory="gru",
    hidden_size=16,
    trunk_sizes=(32, 16),
    head_sizes=(),
    conv_channels=(8,),
    symbolic_vocab=(20, 40, 10),
)
CFG = PPOConfig(network=NET, num_steps=16, chunk_len=4, kl_target=None, ent_coef_final=0.0)


def _params(learner: PPO) -> list[torch.Tensor]:
    return [p.detach().clone() for p in learner.net.parameters()]


def test_config_round_trip_restores_nested_config_and_tuples() -> None:
    cfg = replace(CFG, network=replace(NET, memory_kwargs={"num_layers": 2}))
    assert config_from_dict(asdict(cfg)) == cfg
    # a checkpoint written as JSON (or YAML) holds lists: they come back as tuples
    data = json.loads(json.dumps(asdict(cfg)))
    assert data["network"]["trunk_sizes"] == [32, 16]
    restored = config_from_dict(data)
    assert restored == cfg and isinstance(restored.network, NetworkConfig)
    for name in ("trunk_sizes", "head_sizes", "conv_channels", "symbolic_vocab"):
        assert type(getattr(restored.network, name)) is tuple, name
    assert restored.network.memory_kwargs == {"num_layers": 2}
    # missing entries take their defaults, in the nested config too
    partial = config_from_dict({"algo": "ppo", "lr": 1e-3, "network": {"memory": "none"}})
    assert partial == PPOConfig(lr=1e-3, network=NetworkConfig(memory="none"))


def test_config_from_dict_unknown_or_missing_keys() -> None:
    with pytest.raises(ValueError, match=r"PPOConfig has no fields \['hidden_size'\]"):
        config_from_dict({**asdict(CFG), "hidden_size": 16})  # a field that moved to network
    bad_net = {**asdict(CFG), "network": {**asdict(NET), "bogus": 1}}
    with pytest.raises(ValueError, match=r"NetworkConfig has no fields \['bogus'\]"):
        config_from_dict(bad_net)
    no_algo = asdict(CFG)
    del no_algo["algo"]
    with pytest.raises(ValueError, match="needs an 'algo' entry"):
        config_from_dict(no_algo)


def test_unknown_algo_names_the_registered_ones() -> None:
    assert "ppo" in LEARNERS and LEARNERS["ppo"].config is PPOConfig
    for cfg in ({"algo": "nope"}, replace(CFG, algo="nope")):
        with pytest.raises(ValueError, match="unknown learner algorithm 'nope'") as err:
            build_learner(cfg, OBS, ACT)
        assert f"registered: {sorted(LEARNERS)}" in str(err.value)
    with pytest.raises(ValueError, match="registered: .*'ppo'"):
        config_from_dict({"algo": "nope"})


def test_build_learner_from_config_or_its_dict_is_seeded() -> None:
    learner = build_learner(CFG, OBS, ACT, seed=3)
    assert isinstance(learner, PPO) and learner.cfg == CFG
    assert learner.net.state_size == 16  # the nested network config was used (GRU, 16 wide)
    same = build_learner(asdict(CFG), OBS, ACT, seed=3)
    assert same.cfg == CFG
    direct = PPO(OBS, ACT, CFG, seed=3)
    other = build_learner(CFG, OBS, ACT, seed=4)
    for a, b, c in zip(_params(learner), _params(same), _params(direct), strict=True):
        assert torch.equal(a, b) and torch.equal(a, c)
    assert any(not torch.equal(a, b) for a, b in zip(_params(learner), _params(other), strict=True))


@pytest.mark.parametrize(
    ("field", "value", "match"),
    [
        ("gamma", 1.5, r"agent\.gamma must be in \[0, 1\], got 1.5"),
        ("burn_in", 40, r"agent\.burn_in must be <= 39, got 40"),
        ("exploration", "greedy", r"agent\.exploration must be one of"),
        ("tau", 0.0, r"agent\.tau must be in \(0, 1\]"),
        ("dueling", "yes", r"agent\.dueling must be"),
    ],
)
def test_drqn_config_bad_values_name_the_field(field, value, match) -> None:
    import dataclasses

    from marlgrid.agents.algorithms.drqn import DRQNConfig
    from marlgrid.config import ConfigError

    with pytest.raises(ConfigError, match=match):
        dataclasses.replace(DRQNConfig(), **{field: value}).validate("agent")


def test_drqn_buffer_must_hold_two_sequence_windows_per_slot() -> None:
    from marlgrid.agents.algorithms.drqn import DRQNConfig
    from marlgrid.config import ConfigError

    # 16 slots * 2 * (seq_len 40 + n_step 3) rows: what SequenceReplay needs
    DRQNConfig(buffer_size=1376, seq_len=40).validate("agent", num_slots=16)
    with pytest.raises(ConfigError, match=r"agent\.buffer_size must hold two sequence windows"):
        DRQNConfig(buffer_size=1375, seq_len=40).validate("agent", num_slots=16)
