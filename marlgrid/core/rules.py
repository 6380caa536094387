"""Task rules of an episode (replaceable between episodes), and their kernel vectors."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any

import numpy as np

from marlgrid.config import (
    MAX_COUNT,
    MAX_REWARD,
    ConfigError,
    check_bool,
    check_float,
    check_int,
)
from marlgrid.core import kernels as K

_BOOLS = (
    "ghost_mode",
    "respawn",
    "reward_decay",
    "initial_reward",
    "reset_on_mistake",
    "allow_pickup",
)
_FLOATS = ("goal_reward", "lava_reward", "cycle_reward", "penalty", "streak_bonus")


@dataclass(frozen=True)
class Rules:
    """Task rules of an episode; each env of a batch has its own (see ``set_rules``).

    Attributes:
        max_steps: episode length; every agent still in play is truncated at this step.
        ghost_mode: agents may share cells (default); otherwise moves are resolved as blocking.
        respawn: an agent that reaches a goal (or lava) is placed again at once instead of leaving.
        reward_decay: MiniGrid's ``1 - 0.9 * step / max_steps`` factor on positive rewards.
        goal_reward: reward for entering a goal.
        lava_reward: reward for entering lava (it ends the agent's episode like a goal).
        n_goals: number of goal-cycle tiles (0 = none).
        cycle_reward: reward for entering the next tile of the cycle.
        penalty: entering a wrong tile pays ``-abs(penalty)``.
        initial_reward: whether the first tile of an episode pays ``cycle_reward``.
        reset_on_mistake: a wrong tile restarts the cycle from that tile.
        streak_bonus: extra ``streak_bonus * streak`` for consecutive correct tiles.
        allow_pickup: the pickup action picks objects up; with False it does nothing.
        spawn_direction: direction agents face when placed (0 east .. 3 north); -1 = random.

    Booleans must be ``bool``, counts ints and rewards finite numbers within float32's range
    (rewards are float32); values are stored as Python ``bool`` / ``int`` / ``float``.
    """

    max_steps: int = 100
    ghost_mode: bool = True
    respawn: bool = False
    reward_decay: bool = False
    goal_reward: float = 1.0
    lava_reward: float = 0.0
    n_goals: int = 0
    cycle_reward: float = 1.0
    penalty: float = 0.0
    initial_reward: bool = True
    reset_on_mistake: bool = False
    streak_bonus: float = 0.0
    allow_pickup: bool = True
    spawn_direction: int = -1

    def __post_init__(self) -> None:
        def put(name: str, value: object) -> None:
            object.__setattr__(self, name, value)

        put("max_steps", check_int("max_steps", self.max_steps, low=1, high=MAX_COUNT))
        put("n_goals", check_int("n_goals", self.n_goals, low=0, high=MAX_COUNT))
        put("spawn_direction", check_int("spawn_direction", self.spawn_direction, -1, 3))
        for name in _FLOATS:
            put(name, check_float(name, getattr(self, name), -MAX_REWARD, MAX_REWARD))
        for name in _BOOLS:
            put(name, check_bool(name, getattr(self, name)))

    def to_arrays(self) -> tuple[np.ndarray, np.ndarray]:
        """The rules as the kernels' integer and float vectors."""
        rules_i = np.zeros(K.N_RULES_I, dtype=np.int64)
        rules_i[K.R_GHOST] = self.ghost_mode
        rules_i[K.R_RESPAWN] = self.respawn
        rules_i[K.R_MAX_STEPS] = self.max_steps
        rules_i[K.R_DECAY] = self.reward_decay
        rules_i[K.R_N_GOALS] = max(self.n_goals, 1)
        rules_i[K.R_INITIAL] = self.initial_reward
        rules_i[K.R_RESET_MISTAKE] = self.reset_on_mistake
        rules_i[K.R_PICKUP] = self.allow_pickup
        rules_i[K.R_SPAWN_DIR] = self.spawn_direction
        rules_f = np.zeros(K.N_RULES_F, dtype=np.float64)
        rules_f[K.R_GOAL_REWARD] = self.goal_reward
        rules_f[K.R_CYCLE_REWARD] = self.cycle_reward
        rules_f[K.R_PENALTY] = self.penalty
        rules_f[K.R_STREAK_BONUS] = self.streak_bonus
        rules_f[K.R_LAVA_REWARD] = self.lava_reward
        return rules_i, rules_f

    def replace(self, **changes: Any) -> Rules:
        """These rules with ``changes`` (field name -> value), checked as the constructor checks
        its arguments; a name that is not a rule raises :class:`ConfigError` naming what is."""
        unknown = sorted(set(changes) - set(RULE_FIELDS))
        if unknown:
            shaped = sorted(set(unknown) & set(SHAPE_SETTINGS))
            why = (
                f"; {shaped} fix the env's array shapes: build a new env to change them"
                if shaped
                else ""
            )
            raise ConfigError(f"unknown rule(s) {unknown}{why}; rules are {list(RULE_FIELDS)}")
        return dataclasses.replace(self, **changes)


#: Names of the rule fields, in declaration order.
RULE_FIELDS = tuple(f.name for f in dataclasses.fields(Rules))
#: Env settings that fix array shapes (map, agents, views): not rules, fixed for an env's life.
SHAPE_SETTINGS = ("width", "height", "size", "n_agents", "agent", "agents")
