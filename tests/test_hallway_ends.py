"""The memory test's scripted baselines (marlgrid/policies/hallway_ends.py): the cue-reading oracle
succeeds in every episode, the memoryless cue-blind walker in the half whose cue names the top
end, and both refuse an env without the memory test's task cells."""

from __future__ import annotations

import numpy as np
import pytest

import marlgrid
from marlgrid.episode import run_episode
from marlgrid.policies import make_policy


def _returns(env_id: str, policy: str, episodes: int) -> np.ndarray:
    env = marlgrid.make(env_id)
    return np.array(
        [
            run_episode(
                env, {a: make_policy(policy, s) for a in env.possible_agents}, seed=s
            ).returns["agent_0"]
            for s in range(episodes)
        ]
    )


@pytest.mark.parametrize("env_id", ["MarlGrid-MemoryS7TMaze-v0", "MarlGrid-MemoryS13Random-v0"])
def test_the_cue_reader_succeeds_and_the_cue_blind_walker_half_the_time(env_id):
    reader, blind = _returns(env_id, "cue_reader", 100), _returns(env_id, "cue_blind", 100)
    assert (reader > 0.9).all()  # the decayed reward of a short walk, every episode
    successes = int((blind > 0).sum())
    assert 35 <= successes <= 65, successes  # Binomial(100, 1/2): outside has chance < 0.4%
    paid = blind[blind > 0]
    assert np.allclose(paid, reader[blind > 0], atol=0.05)  # the same walk, mirrored


def test_the_cue_blind_walker_goes_to_the_top_end_whatever_the_cue():
    env = marlgrid.make("MarlGrid-MemoryS7TMaze-v0")  # the key is always on top here
    for seed in range(20):
        episode = run_episode(env, {"agent_0": make_policy("cue_blind", seed)}, seed=seed)
        cue = env.engine.grid[0, 1, 2, 0]  # the cue's cell (1, size // 2 - 1)
        top = env.engine.grid[0, 5, 1, 0]  # the object at the top end
        assert (episode.returns["agent_0"] > 0) == (cue == top)


@pytest.mark.parametrize("policy", ["cue_reader", "cue_blind"])
def test_an_env_without_the_memory_tests_cells_is_refused(policy):
    env = marlgrid.make("MarlGrid-Empty-5x5-v0")
    with pytest.raises(ValueError, match=f"the {policy} policy needs the memory test's"):
        run_episode(env, {"agent_0": make_policy(policy, 0)}, seed=0)
