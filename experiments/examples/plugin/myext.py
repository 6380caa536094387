"""A plugin: outside code that the command line loads with ``plugins=[myext]``.

It registers one of each: an env (``MyExt-Room-v0``), a scripted policy (``spinner``), a loss
term (``value_l2``) and a memory core (``leaky``). Train with all four (from the checkout, with
this folder on ``PYTHONPATH``)::

    PYTHONPATH=experiments/examples/plugin python experiments/train.py plugins=[myext] \\
        env.id=MyExt-Room-v0 roles=novice_with_expert roles.agent_0.policy=spinner \\
        agent.network.memory=leaky 'agent.aux_losses=[{name: value_l2, coef: 0.01}]' \\
        total_timesteps=2048 video=false

The run saves ``plugins: [myext]`` with its config, so ``evaluate.py`` and ``extend=true`` on it
import this module again (it must still be importable then).
"""

from __future__ import annotations

from typing import Any

import numpy as np
import torch
from torch import Tensor, nn

import marlgrid
from marlgrid.agents.algorithms.losses import register_loss_term
from marlgrid.agents.memory.base import MemoryCore, register_core
from marlgrid.base import MarlGridEnv
from marlgrid.core.engine import Engine
from marlgrid.core.layout import Layout
from marlgrid.policies import ScriptedPolicy, register_policy

# -- an env ------------------------------------------------------------------------------------


class RoomEnv(MarlGridEnv):
    """A walled room with a goal in its middle; entering it pays ``goal_reward``."""

    def __init__(self, size: int = 6, **kwargs: Any) -> None:
        kwargs.setdefault("max_steps", 4 * size * size)
        super().__init__(size, size, **kwargs)

    def generate(self, layout: Layout) -> None:
        layout.walls_border()
        layout.put(self.width // 2, self.height // 2, "goal")


marlgrid.register("MyExt-Room-v0", "myext:RoomEnv", size=6, n_agents=2)


# -- a scripted policy -------------------------------------------------------------------------


class SpinnerPolicy(ScriptedPolicy):
    """Turns left on every step (never an expert: it does not know any task)."""

    def _planned_actions(self, engine: Engine, k: int) -> np.ndarray:
        return np.zeros(engine.num_envs, dtype=np.int64)  # action 0: turn left


register_policy("spinner", SpinnerPolicy)


# -- a loss term -------------------------------------------------------------------------------


@register_loss_term("value_l2")
class ValueL2:
    """Pulls the value toward 0: the mean square of the value over the real steps."""

    def __init__(self, net: Any) -> None:
        pass

    def __call__(self, batch: Any, output: Any) -> tuple[Tensor, dict[str, Tensor]]:
        values = output.values[batch.mask]
        return values.square().mean(), {"mean_value": values.mean().detach()}


# -- a memory core -----------------------------------------------------------------------------


@register_core("leaky")
class LeakyCore(MemoryCore):
    """A leaky average of ``tanh(W x)``: ``h <- decay * h + (1 - decay) * tanh(W x)``."""

    def __init__(self, input_size: int, hidden_size: int, *, decay: float = 0.9) -> None:
        super().__init__(input_size, hidden_size)
        self.decay = decay
        self.linear = nn.Linear(input_size, hidden_size)

    @property
    def state_layout(self) -> dict[str, int]:
        return {"h": self.hidden_size}

    def unroll(self, x: Tensor, state: Tensor, resets: Tensor) -> tuple[Tensor, Tensor]:
        drive, posts = torch.tanh(self.linear(x)), []
        for t in range(x.shape[0]):
            state = self.decay * self.reset_state(state, resets[t]) + (1 - self.decay) * drive[t]
            posts.append(state)
        post = torch.stack(posts)
        return post, post

    def forward(self, x: Tensor, state: Tensor, resets: Tensor) -> tuple[Tensor, Tensor]:
        out, post = self.unroll(x, state, resets)
        return out, post[-1]
