"""The PettingZoo ``ParallelEnv`` front door: a thin adapter over a batch of one."""

from __future__ import annotations

import dataclasses
import operator
from collections.abc import Mapping
from functools import partial
from typing import Any

import numpy as np
from gymnasium import spaces
from pettingzoo import ParallelEnv

from marlgrid.config import MAX_COUNT, MAX_SIDE, AgentConfig, ConfigError, build_agents, check_int
from marlgrid.constants import (
    ACTIONS,
    AGENT,
    EMPTY,
    IDX_TO_COLOR,
    IDX_TO_OBJECT,
    N_COLORS,
    N_STATES,
    N_TYPES,
)
from marlgrid.core import kernels as K
from marlgrid.core.engine import Engine
from marlgrid.core.layout import Layout
from marlgrid.core.rules import Rules

__all__ = ["ActionError", "MarlGridEnv", "Rules", "n_actions_for", "observation_space_for"]


class ActionError(ValueError):
    """An action dict that does not fit the live agents or their action spaces."""


def n_actions_for(cfg: AgentConfig) -> int:
    """How many actions an agent with settings ``cfg`` has (3 with ``restrict_actions``)."""
    return 3 if cfg.restrict_actions else len(ACTIONS)


def observation_space_for(cfg: AgentConfig, width: int, height: int) -> spaces.Space:
    """The observation space of an agent with settings ``cfg`` on a ``width x height`` map.

    With ``extras`` it is a ``Dict``: the view under ``image``, plus ``reward`` (``(1,)``
    float32), ``position`` (``(2,)`` int64 cell), ``direction`` (``Discrete(4)``) and ``action``
    (``Discrete(n_actions + 1)``, ``n_actions`` meaning no action yet) as listed.
    """
    v = cfg.view_size
    if cfg.observation == "symbolic":
        image: spaces.Space = spaces.Box(0, 255, (v, v, 3), np.uint8)
    elif cfg.observation == "onehot":
        image = spaces.Box(0, 1, (v, v, N_TYPES + N_COLORS + N_STATES), np.uint8)
    else:
        image = spaces.Box(0, 255, (v * cfg.tile_size, v * cfg.tile_size, 3), np.uint8)
    if not cfg.extras:
        return image
    entries: dict[str, spaces.Space] = {"image": image}
    for name in cfg.extras:
        if name == "reward":
            entries[name] = spaces.Box(-np.inf, np.inf, (1,), np.float32)
        elif name == "position":
            entries[name] = spaces.Box(
                np.zeros(2, np.int64), np.array([width - 1, height - 1], np.int64), (2,), np.int64
            )
        elif name == "action":
            entries[name] = spaces.Discrete(n_actions_for(cfg) + 1)
        else:
            entries[name] = spaces.Discrete(4)
    return spaces.Dict(entries)


class MarlGridEnv(ParallelEnv):
    """Base of every marlgrid environment: subclasses describe a layout in :meth:`generate`.

    Agents act simultaneously; each gets its own egocentric view (see
    :class:`marlgrid.config.AgentConfig`). Agents are named ``agent_0 ... agent_{K-1}``.
    ``agent`` holds settings shared by all agents and ``agents`` a list of per-agent overrides
    (its length sets the number of agents, else ``n_agents``) or a mapping from agent ids to
    the overrides of those agents (:func:`marlgrid.config.build_agents`). ``max_cycles`` is an
    alias of ``max_steps`` for PettingZoo's test utilities.

    The task rules (:class:`Rules`: penalty, rewards, ``max_steps``, ...) are data that may
    change between episodes: :meth:`set_rules` replaces them from the next :meth:`reset` on,
    while a running episode keeps its own; :attr:`rules` are the current episode's. Map size and
    agents fix the array shapes and stay as built.
    """

    metadata: dict[str, Any] = {
        "name": "marlgrid",
        "render_modes": ["rgb_array", "human"],
        "render_fps": 8,
        "is_parallelizable": True,
    }
    #: Object types that no agent of this env ever sees (added to every agent's ``hide``).
    hidden_types: tuple[str, ...] = ()
    #: Scripted policies (names in :data:`marlgrid.policies.POLICIES`) that know this env's
    #: task: its oracle first, then the baselines a learner is read against.
    task_policies: tuple[str, ...] = ()

    def __init__(
        self,
        width: int,
        height: int,
        *,
        n_agents: int = 1,
        agent: dict[str, Any] | AgentConfig | None = None,
        agents: list[dict[str, Any] | AgentConfig] | Mapping[str, Any] | None = None,
        max_cycles: int | None = None,
        render_mode: str | None = None,
        **rules: Any,
    ) -> None:
        width = check_int("width", width, low=3, high=MAX_SIDE)
        height = check_int("height", height, low=3, high=MAX_SIDE)
        if render_mode is not None and (
            not isinstance(render_mode, str) or render_mode not in self.metadata["render_modes"]
        ):
            raise ConfigError(
                f"render_mode must be one of {self.metadata['render_modes']} or None, "
                f"got {render_mode!r}"
            )
        if max_cycles is not None:
            rules["max_steps"] = check_int("max_cycles", max_cycles, low=1, high=MAX_COUNT)
        unknown = sorted(set(rules) - set(Rules.__dataclass_fields__))
        if unknown:
            raise ConfigError(
                f"unknown setting(s) {unknown} for {type(self).__name__}; allowed: "
                f"{sorted(Rules.__dataclass_fields__)} plus width, height, n_agents, agent, "
                "agents, max_cycles, render_mode"
            )
        self.width, self.height = width, height
        self.render_mode = render_mode
        self.agent_configs = build_agents(n_agents, agent, agents)
        if self.hidden_types:
            self.agent_configs = [
                dataclasses.replace(a, hide=tuple(dict.fromkeys((*a.hide, *self.hidden_types))))
                for a in self.agent_configs
            ]
        self._built_rules = Rules(**rules)  # the rules until the engine exists
        self._layout_rules: Rules | None = None  # set while a layout is generated
        self._check_spawn_delays(self._built_rules.max_steps)
        self.possible_agents = [f"agent_{i}" for i in range(len(self.agent_configs))]
        self.agents: list[str] = []
        self._index = {name: i for i, name in enumerate(self.possible_agents)}
        self._n_actions = [n_actions_for(a) for a in self.agent_configs]
        self.observation_spaces = {
            name: observation_space_for(cfg, width, height)
            for name, cfg in zip(self.possible_agents, self.agent_configs, strict=True)
        }
        self.action_spaces = {
            name: spaces.Discrete(n)
            for name, n in zip(self.possible_agents, self._n_actions, strict=True)
        }
        self._engine = self.make_engine(1)
        vmax = max(a.view_size for a in self.agent_configs)
        self._plain_symbolic = all(
            a.observation == "symbolic" and a.view_size == vmax and not a.extras
            for a in self.agent_configs
        )
        self._has_extras = any(a.extras for a in self.agent_configs)
        #: each agent's last action in play (the ``action`` extra); ``n_actions`` = none yet
        self._no_action = np.array(self._n_actions, dtype=np.int64)
        self._last_action = self._no_action.copy()
        self._tracks_actions = any("action" in a.extras for a in self.agent_configs)
        self._all_live = False
        self._bind_rows()
        self._viewer = None

    @property
    def engine(self) -> Engine:
        """The batched engine (a batch of one) holding this env's state; read-only."""
        return self._engine

    def _bind_rows(self) -> None:
        """Row views of the engine's buffers for the one env (rebuilt after unpickling)."""
        engine = self._engine
        self._act_row = engine.actions[0]
        self._rew_row, self._term_row = engine.rewards[0], engine.terminated[0]
        self._trunc_row, self._sym_row = engine.truncated[0], engine.sym[0]

    def __getstate__(self) -> dict:
        state = self.__dict__.copy()
        for name in ("_act_row", "_rew_row", "_term_row", "_trunc_row", "_sym_row"):
            del state[name]
        state["_viewer"] = None
        return state

    def __setstate__(self, state: dict) -> None:
        self.__dict__.update(state)
        self._bind_rows()

    # -- rules --------------------------------------------------------------------------------

    @property
    def rules(self) -> Rules:
        """The rules of the current episode (before the first reset: of the first one); while
        :meth:`generate` writes a layout, those of the episode the layout starts."""
        if self._layout_rules is not None:
            return self._layout_rules
        engine = self.__dict__.get("_engine")
        return self._built_rules if engine is None else engine.episode_rules[0]

    @property
    def next_rules(self) -> Rules:
        """The rules the next :meth:`reset` starts an episode with."""
        return self._engine.next_rules[0]

    @property
    def max_steps(self) -> int:
        """Episode length under the current rules."""
        return self.rules.max_steps

    def set_rules(self, **changes: Any) -> Rules:
        """Change rules from the next episode on, e.g. ``env.set_rules(penalty=1.0)``.

        Any :class:`Rules` field may change (checked by ``Rules`` and :meth:`check_rules`); an
        episode in progress keeps its rules. Changes add up until the next reset. Returns the
        rules the next episode starts with.
        """
        new = self.next_rules.replace(**changes)
        self.check_rules(new)
        self._engine.set_next_rules([0], [new])
        return new

    def check_rules(self, rules: Rules) -> None:
        """Raise :class:`ConfigError` if this env cannot play under ``rules``.

        Some agent must spawn before ``max_steps``; a changed ``n_goals`` must fit the layout:
        one layout is generated under ``rules`` and must hold at least ``n_goals`` goal-cycle
        tiles (envs that place ``n_goals`` tiles must find room for them).
        """
        self._check_spawn_delays(rules.max_steps)
        if rules.n_goals == self._built_rules.n_goals:
            return  # as built: checked when the env was made
        tiles = self._trial_layout_tiles(rules)
        if rules.n_goals > tiles:
            raise ConfigError(
                f"n_goals={rules.n_goals} is more than the {tiles} goal-cycle tile(s) the layout "
                f"of {type(self).__name__} holds; allowed: n_goals <= {tiles}"
            )

    def _check_spawn_delays(self, max_steps: int) -> None:
        delays = [a.spawn_delay for a in self.agent_configs]
        if min(delays) >= max_steps:
            raise ConfigError(
                f"spawn_delay of every agent ({delays}) is >= max_steps ({max_steps}): no "
                "agent would ever play; give at least one agent a spawn_delay < max_steps"
            )

    def _trial_layout_tiles(self, rules: Rules) -> int:
        """Goal-cycle tile ids in one layout generated under ``rules`` (on scratch arrays)."""
        grid = np.zeros((self.width, self.height, 3), dtype=np.uint8)
        grid[..., 0] = EMPTY
        cycle_id = np.full((self.width, self.height), -1, dtype=np.int16)
        spawn_ok = np.ones((self.width, self.height), dtype=np.bool_)
        layout = Layout(grid, np.zeros_like(grid), cycle_id, spawn_ok, np.random.default_rng(0))
        self._layout_rules = rules
        try:
            self.generate(layout)
        except ConfigError as exc:
            name = type(self).__name__
            raise ConfigError(
                f"n_goals={rules.n_goals} does not fit {name}'s layout: {exc}"
            ) from None
        finally:
            self._layout_rules = None
        return len(np.unique(cycle_id[cycle_id >= 0]))

    def _generate_episode(self, engine: Engine, layout: Layout) -> None:
        """:meth:`generate` with :attr:`rules` reading the rules of the episode it starts."""
        self._layout_rules = engine.generating_rules
        try:
            self.generate(layout)
        finally:
            self._layout_rules = None

    # -- what subclasses provide --------------------------------------------------------------

    def generate(self, layout: Layout) -> None:
        """Write a new episode's world into ``layout`` (walls, objects, goals, spawn cells);
        :attr:`rules` are that episode's."""
        raise NotImplementedError

    # -- engine access ------------------------------------------------------------------------

    def make_engine(self, num_envs: int) -> Engine:
        """A batched engine of ``num_envs`` copies of this environment, under its current rules."""
        engine = Engine(
            self.width, self.height, self.agent_configs, self.rules, self.generate, num_envs
        )
        engine.generate = partial(self._generate_episode, engine)
        return engine

    def observation_space(self, agent: str) -> spaces.Space:
        return self.observation_spaces[self._check_agent(agent)]

    def action_space(self, agent: str) -> spaces.Space:
        return self.action_spaces[self._check_agent(agent)]

    def _check_agent(self, agent: str) -> str:
        if agent not in self._index:
            raise KeyError(f"unknown agent {agent!r}; agents are {self.possible_agents}")
        return agent

    # -- PettingZoo API -----------------------------------------------------------------------

    def reset(
        self, seed: int | None = None, options: dict[str, Any] | None = None
    ) -> tuple[dict[str, Any], dict[str, dict]]:
        if seed is not None:
            check_int("seed", seed, low=0)
        self.agents = []  # until the new episode exists (a failed reset leaves none)
        self._all_live = False
        self._engine.reset([0], [seed])
        self._engine.observe()
        self._last_action[:] = self._no_action
        self.agents = self.possible_agents[:]
        self._all_live = True
        views = self._snapshot()
        obs = {name: self._observation(k, views[k]) for k, name in enumerate(self.agents)}
        if self.render_mode == "human":
            self.render()
        return obs, {name: {} for name in self.agents}

    def step(self, actions: dict[str, Any]):
        agents = self.agents
        if type(actions) is not dict and not isinstance(actions, Mapping):
            raise ActionError(
                "actions must be a dict mapping each live agent id to an int action, got "
                f"{type(actions).__name__} {actions!r:.60}; live agents are {agents}"
            )
        if len(actions) != len(agents) or not agents:
            self._raise_bad_keys(actions)
        act, limits, index = self._act_row, self._n_actions, self._index
        try:
            for name in agents:
                a = actions[name]
                k = index[name]
                if type(a) is not int:
                    a = self._as_int(name, a)
                if not 0 <= a < limits[k]:
                    raise ActionError(
                        f"action for {name} must be an integer in [0, {limits[k]}), got {a}"
                    )
                act[k] = a
        except KeyError:
            self._raise_bad_keys(actions)
        if self._tracks_actions:
            in_play = self._engine.status[0] == K.ACTIVE  # actions of others are ignored
            self._engine.step()
            np.copyto(self._last_action, act, where=in_play)
        else:
            self._engine.step()
        views = self._snapshot()
        rew = self._rew_row.tolist()
        term = self._term_row.tolist()
        trunc = self._trunc_row.tolist()
        infos = {name: {} for name in agents}
        if self._all_live and not self._has_extras:
            # Every agent live: names line up with array rows (equal lengths; `strict` is slow).
            obs = dict(zip(agents, views))  # noqa: B905
            rewards = dict(zip(agents, rew))  # noqa: B905
            terminations = dict(zip(agents, term))  # noqa: B905
            truncations = dict(zip(agents, trunc))  # noqa: B905
        else:
            rows = [index[name] for name in agents]
            obs = {
                name: self._observation(k, views[k]) for name, k in zip(agents, rows, strict=True)
            }
            rewards = {name: rew[k] for name, k in zip(agents, rows, strict=True)}
            terminations = {name: term[k] for name, k in zip(agents, rows, strict=True)}
            truncations = {name: trunc[k] for name, k in zip(agents, rows, strict=True)}
        if True in term or True in trunc:
            self.agents = [n for n in agents if not (terminations[n] or truncations[n])]
            self._all_live = False
        if self.render_mode == "human":
            self.render()
        return obs, rewards, terminations, truncations, infos

    @staticmethod
    def _as_int(name: str, a: Any) -> int:
        """``a`` as a Python int (numpy integers too); anything else raises ``ActionError``."""
        try:
            if isinstance(a, bool | np.bool_):
                raise TypeError
            return operator.index(a)
        except TypeError:
            raise ActionError(f"action for {name} must be an integer, got {a!r}") from None

    def _raise_bad_keys(self, actions: dict[str, Any]) -> None:
        if not self._engine.started[0]:
            raise ActionError("step() before reset(): call reset() first")
        if not self.agents:
            raise ActionError("the episode is over (no live agents); call reset() first")
        live = set(self.agents)
        keys = set(actions)
        missing = sorted(live - keys)
        finished = sorted(k for k in keys - live if k in self._index)
        unknown = sorted(map(repr, keys - live - set(finished)))
        parts = []
        if missing:
            parts.append(f"missing actions for {missing}")
        if finished:
            parts.append(f"actions for finished agents {finished}")
        if unknown:
            parts.append(f"unknown agent keys {unknown}")
        raise ActionError("; ".join(parts) + f"; live agents are {self.agents}")

    def _snapshot(self) -> list[np.ndarray] | np.ndarray:
        """Fresh copies of every agent's view (indexable by agent number)."""
        if self._plain_symbolic:
            return self._sym_row.copy()
        return [view[0].copy() for view in self._engine.views()]

    def _observation(self, k: int, image: np.ndarray) -> Any:
        cfg = self.agent_configs[k]
        if not cfg.extras:
            return image
        engine = self._engine
        out: dict[str, Any] = {"image": image}
        for name in cfg.extras:
            if name == "reward":
                out[name] = engine.last_reward[0, k : k + 1].copy()
            elif name == "position":
                out[name] = engine.pos[0, k].copy()
            elif name == "action":
                out[name] = int(self._last_action[k])
            else:
                out[name] = int(engine.dirs[0, k])
        return out

    # -- state access -------------------------------------------------------------------------

    @property
    def step_count(self) -> int:
        return int(self._engine.step_count[0])

    @property
    def np_random(self) -> np.random.Generator:
        """The env's seeded generator (layouts are drawn from it at reset)."""
        return self._engine.np_random[0]

    def grid_encoding(self, with_agents: bool = True) -> np.ndarray:
        """The full map as ``(W, H, 3)`` uint8 cells; agents in play as ``(10, color, dir)``."""
        engine = self._engine
        engine.require_started("grid_encoding()", 0)
        grid = engine.grid[0].copy()
        if with_agents:
            colors = engine.update_colors()
            for k in range(len(self.possible_agents) - 1, -1, -1):
                if engine.status[0, k] == K.ACTIVE:
                    x, y = engine.pos[0, k]
                    grid[x, y] = (AGENT, colors[0, k], engine.dirs[0, k])
        return grid

    def state(self) -> np.ndarray:
        """PettingZoo's global state: the full map encoding with agents."""
        self._engine.require_started("state()", 0)
        return self.grid_encoding()

    @property
    def agent_positions(self) -> dict[str, tuple[int, int] | None]:
        """Cell ``(x, y)`` of each agent in play (``None`` for agents out of play)."""
        engine = self._engine
        engine.require_started("agent_positions", 0)
        return {
            name: tuple(int(c) for c in engine.pos[0, k])
            if engine.status[0, k] == K.ACTIVE
            else None
            for k, name in enumerate(self.possible_agents)
        }

    @property
    def agent_directions(self) -> dict[str, int]:
        self._engine.require_started("agent_directions", 0)
        return {name: int(self._engine.dirs[0, k]) for k, name in enumerate(self.possible_agents)}

    @property
    def prestige(self) -> dict[str, float]:
        return {
            name: float(self._engine.prestige[0, k]) for k, name in enumerate(self.possible_agents)
        }

    def visibility(self, agent: str) -> np.ndarray:
        """``agent``'s visibility mask over its own view, ``(view, view)`` bool indexed [x, y]."""
        k = self._index[self._check_agent(agent)]
        self._engine.require_started("visibility()", 0)
        v = self.agent_configs[k].view_size
        return self._engine.vis[0, k, :v, :v].copy()

    def visible_cells(self, agent: str) -> np.ndarray:
        """Map cells ``agent`` sees, as a ``(W, H)`` bool mask."""
        self._engine.require_started("visible_cells()", 0)
        return self._engine.visible_cells(0, self._index[self._check_agent(agent)])

    def pprint(self) -> str:
        """The map as text: two characters per cell, agents as arrows."""
        self._engine.require_started("pprint()", 0)
        grid = self.grid_encoding()
        arrows = ">v<^"
        rows = []
        for y in range(self.height):
            row = []
            for x in range(self.width):
                t, c, s = (int(v) for v in grid[x, y])
                if t == AGENT:
                    row.append(arrows[s] + IDX_TO_COLOR.get(c, "p")[0].upper())
                elif t == 1:
                    row.append("  ")
                else:
                    name = IDX_TO_OBJECT[t]
                    row.append(
                        {"wall": "WG", "cycle_tile": "C" + str(self._cycle_id(x, y))}.get(
                            name, name[0].upper() + IDX_TO_COLOR[c][0]
                        )
                    )
            rows.append("".join(row))
        return "\n".join(rows)

    def _cycle_id(self, x: int, y: int) -> str:
        tile = int(self._engine.cycle_id[0, x, y])
        return str(tile) if tile < 10 else "+"

    # -- rendering ----------------------------------------------------------------------------

    def render(self) -> np.ndarray | None:
        if self.render_mode is None:
            return None
        from marlgrid.viewing.rendering import render_frame

        frame = render_frame(self)
        if self.render_mode == "human":
            from marlgrid.viewing.human import show

            self._viewer = show(self._viewer, frame, self.metadata["render_fps"])
            return None
        return frame

    def close(self) -> None:
        if self._viewer is not None:
            self._viewer.close()
            self._viewer = None
