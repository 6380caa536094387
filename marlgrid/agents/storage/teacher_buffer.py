"""Teachers' sequences for behaviour cloning: time-major ``(T, N, ...)`` tensors of one rollout.

The behaviour-cloning learner (:mod:`marlgrid.agents.algorithms.bc`) records here, each step,
what every teacher it imitates saw and did (from :attr:`Step.teachers
<marlgrid.agents.learner.Step.teachers>`), and trains on chunks of these sequences. Column
``k * B + b`` is teacher ``k`` (in the learner's ``teachers`` order) seen from the learner's slot
``b``: one sequence per teacher and env (``B`` learner slots, ``K`` teachers, ``N = K * B``).
"""

from __future__ import annotations

import torch
from gymnasium import spaces
from torch import Tensor

from marlgrid.agents.arrays import Obs, alloc_obs, obs_copy_

__all__ = ["TeacherBuffer"]


class TeacherBuffer:
    """``num_steps`` steps of ``num_columns`` teacher sequences.

    Per step ``t``: ``obs`` (the teacher's observation before its action), ``resets`` (``obs[t]``
    starts an episode), ``actions`` (action indices, the env's action minus the learner's
    ``action_start``) and ``valid`` (the teacher was in play: only those steps enter a loss).
    ``start_state`` is the memory state the learner's network carries into step 0 (the state
    after the previous rollout's last step, before step 0's reset); the learner replaces it after
    each update, so the sequences go on across rollouts.
    """

    def __init__(
        self,
        num_steps: int,
        num_columns: int,
        observation_space: spaces.Space,
        state_size: int,
        device: torch.device | str = "cpu",
    ) -> None:
        if num_steps < 1 or num_columns < 1:
            raise ValueError(
                f"a TeacherBuffer needs steps and columns, got {num_steps, num_columns}"
            )
        T, N = num_steps, num_columns
        self.num_steps, self.num_columns, self.device = T, N, torch.device(device)
        self.obs: Obs = alloc_obs(observation_space, (T, N), device)
        self.resets = torch.zeros(T, N, dtype=torch.bool, device=device)
        self.actions = torch.zeros(T, N, dtype=torch.long, device=device)
        self.valid = torch.zeros(T, N, dtype=torch.bool, device=device)
        self.start_state = torch.zeros(N, state_size, device=device)
        self.pos = 0

    @property
    def full(self) -> bool:
        """True once ``num_steps`` steps are stored."""
        return self.pos == self.num_steps

    def clear(self) -> None:
        """Start a new rollout (storage and ``start_state`` are kept)."""
        self.pos = 0

    def add(self, obs: Obs, resets: Tensor, actions: Tensor, valid: Tensor) -> None:
        """Store one step of every column (each ``(N, ...)``)."""
        if self.full:
            raise RuntimeError(f"the buffer holds {self.num_steps} steps already; clear it first")
        t = self.pos
        obs_copy_(self.obs, t, obs)
        self.resets[t] = resets
        self.actions[t] = actions
        self.valid[t] = valid
        self.pos += 1
