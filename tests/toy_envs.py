"""Tiny batched numpy tasks for testing learners (no marlgrid dependency).

They follow :class:`marlgrid.agents.training.rollout.BatchedEnv`: batch-first arrays and
same-step autoreset with ``infos["final_obs"]`` / ``infos["_final_obs"]``.
"""

from __future__ import annotations

from typing import Any

import numpy as np
from gymnasium import spaces


class CueMemoryEnv:
    """Remember a cue over a few blank steps, then report it.

    Description: at the first step of an episode the observation shows a cue ``c`` in {0, 1};
    then ``delay`` blank steps follow (``delay`` drawn uniformly from ``[min_delay, max_delay]``
    per episode, so slots drift apart); then a query step. Actions before the query do nothing.

    Observation: ``float32 (3,)``: ``[c == 0, c == 1, 0]`` at the cue step, zeros on blank steps,
    ``[0, 0, 1]`` at the query step.

    Action space: ``Discrete(2)``.

    Rewards: at the query step, ``+1`` for the action equal to the cue, else ``0``. A memoryless
    policy cannot beat a mean return of 0.5.

    Termination: right after the query step (episode length ``delay + 2``). No truncation.
    """

    def __init__(self, num_envs: int, min_delay: int = 2, max_delay: int = 4) -> None:
        self.num_envs = num_envs
        self.min_delay, self.max_delay = min_delay, max_delay
        self.single_observation_space = spaces.Box(0.0, 1.0, (3,), np.float32)
        self.single_action_space = spaces.Discrete(2)
        self.rng = np.random.default_rng()
        self.cue = np.zeros(num_envs, dtype=np.int64)
        self.delay = np.zeros(num_envs, dtype=np.int64)
        self.t = np.zeros(num_envs, dtype=np.int64)

    def _new_episodes(self, mask: np.ndarray) -> None:
        n = int(mask.sum())
        self.cue[mask] = self.rng.integers(0, 2, n)
        self.delay[mask] = self.rng.integers(self.min_delay, self.max_delay + 1, n)
        self.t[mask] = 0

    def _obs(self) -> np.ndarray:
        obs = np.zeros((self.num_envs, 3), dtype=np.float32)
        first = self.t == 0
        obs[first, self.cue[first]] = 1.0
        obs[self.t == self.delay + 1, 2] = 1.0
        return obs

    def reset(self, seed: int | None = None) -> np.ndarray:
        if seed is not None:
            self.rng = np.random.default_rng(seed)
        self._new_episodes(np.ones(self.num_envs, dtype=bool))
        return self._obs()

    def step(
        self, actions: np.ndarray
    ) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray, dict[str, Any]]:
        actions = np.asarray(actions)
        query = self.t == self.delay + 1
        rewards = (query & (actions == self.cue)).astype(np.float32)
        terminations = query.copy()
        truncations = np.zeros(self.num_envs, dtype=bool)
        self.t += 1
        final_obs = self._obs()
        self._new_episodes(terminations)
        infos = {"final_obs": final_obs, "_final_obs": terminations.copy()}
        return self._obs(), rewards, terminations, truncations, infos


class RandomEpisodesEnv:
    """Random observations from any space, random rewards, random episode ends.

    For plumbing tests (buffers, resets, truncation bootstrapping, Dict observations), not for
    learning. Each step, a slot terminates with probability ``p_term`` or else truncates with
    probability ``p_trunc``; ``infos["final_obs"]`` holds the true last observation of those slots.
    """

    def __init__(
        self,
        num_envs: int,
        observation_space: spaces.Space,
        num_actions: int = 3,
        p_term: float = 0.1,
        p_trunc: float = 0.1,
    ) -> None:
        self.num_envs = num_envs
        self.single_observation_space = observation_space
        self.single_action_space = spaces.Discrete(num_actions)
        self.p_term, self.p_trunc = p_term, p_trunc
        self.rng = np.random.default_rng()

    def _sample(self) -> Any:
        batch = [self.single_observation_space.sample() for _ in range(self.num_envs)]
        if isinstance(self.single_observation_space, spaces.Dict):
            return {k: np.stack([b[k] for b in batch]) for k in self.single_observation_space}
        return np.stack(batch)

    def reset(self, seed: int | None = None) -> Any:
        if seed is not None:
            self.rng = np.random.default_rng(seed)
            self.single_observation_space.seed(seed)
        return self._sample()

    def step(self, actions: np.ndarray) -> tuple[Any, np.ndarray, np.ndarray, np.ndarray, dict]:
        assert np.shape(actions) == (self.num_envs,)
        rewards = self.rng.normal(size=self.num_envs).astype(np.float32)
        u = self.rng.random(self.num_envs)
        terminations = u < self.p_term
        truncations = (u >= self.p_term) & (u < self.p_term + self.p_trunc)
        final_obs = self._sample()
        done = terminations | truncations
        infos = {"final_obs": final_obs, "_final_obs": done}
        obs = self._sample()
        return obs, rewards, terminations, truncations, infos
