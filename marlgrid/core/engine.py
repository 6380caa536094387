"""The batched engine: the state of N envs x K agents in arrays, stepped by compiled kernels.

Array layout (``N`` envs, ``K`` agents, map ``W x H``, indexed ``[x, y]`` as in MiniGrid):

================  =====================  ====================================================
name              shape, dtype           meaning
================  =====================  ====================================================
grid              (N, W, H, 3) uint8     cells as (type, color, state)
contents          (N, W, H, 3) uint8     what a box holds (type 0 = nothing)
cycle_id          (N, W, H) int16        goal-cycle tile id, -1 elsewhere
spawn_ok          (N, W, H) bool         cells where agents may (re)spawn
pos               (N, K, 2) int64        agent cell (x, y)
dirs              (N, K) int64           agent direction (0 east, 1 south, 2 west, 3 north)
carrying          (N, K, 3) uint8        carried object (type 0 = nothing)
status            (N, K) int8            0 waiting to spawn, 1 in play, 2 finished, 3 absent
absent_at_reset   (N, K) bool            agents each reset of that env starts absent (kept)
prestige          (N, K) float64         prestige value
cycle_last        (N, K) int64           last correct goal-cycle tile, -1 before the first
streak            (N, K) int64           consecutive correct goal-cycle entries
step_count        (N,) int64             steps taken this episode
rng               (N,) uint64            per-env splitmix64 state for in-step randomness
started           (N,) bool              the env holds a world (its last reset completed)
rules_i           (N, N_RULES_I) int64   each env's integer episode rules (Rules.to_arrays)
rules_f           (N, N_RULES_F) float   each env's float episode rules (float64)
================  =====================  ====================================================

Until an env is reset its arrays hold no world: :meth:`Engine.require_started` raises then.

Absent agents (status 3, :data:`marlgrid.core.kernels.ABSENT`) are out of their env until its next
reset: they occupy no cell, their actions are ignored, they get no reward and no done flag, no
view shows them (their own view is blank) and :attr:`Engine.status` ``== ACTIVE`` (what the
social metrics and scripted policies read) is False for them. :meth:`Engine.remove_agents`
takes agents out in the middle of an episode; :meth:`Engine.set_absent_at_reset` marks agents
that every later episode of an env starts without (a standing setting, kept across resets until
cleared). An env whose agents are all finished or absent has ended.

Rules per env: :attr:`Engine.episode_rules` holds the rules of each env's current episode and
:attr:`Engine.next_rules` those its next episode starts with; :meth:`Engine.reset` moves the
next rules into the episode and rewrites that env's rows of ``rules_i`` / ``rules_f`` in place
(the kernels' arguments stay the same arrays). A running episode never changes its rules.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import numpy as np

from marlgrid.config import AgentConfig
from marlgrid.constants import (
    COLOR_TO_IDX,
    DIR_TO_VEC,
    EMPTY,
    N_COLORS,
    N_STATES,
    N_TYPES,
    OBJECT_TO_IDX,
)
from marlgrid.core import kernels as K
from marlgrid.core.layout import Layout
from marlgrid.core.rules import Rules

Generator = Callable[[Layout], None]


class Engine:
    """State and stepping of ``num_envs`` copies of one environment configuration."""

    def __init__(
        self,
        width: int,
        height: int,
        agents: Sequence[AgentConfig],
        rules: Rules,
        generate: Generator,
        num_envs: int = 1,
    ) -> None:
        self.width, self.height = width, height
        self.agents = [a.with_default_color(i) for i, a in enumerate(agents)]
        self.generate = generate
        self.episode_rules: list[Rules] = [rules] * num_envs
        self.next_rules: list[Rules] = [rules] * num_envs
        #: while ``generate`` writes an env's world: the rules of the episode it starts
        self.generating_rules: Rules | None = None
        self.num_envs = n = num_envs
        k = self.num_agents = len(self.agents)
        self.grid = np.zeros((n, width, height, 3), dtype=np.uint8)
        self.contents = np.zeros_like(self.grid)
        self.cycle_id = np.full((n, width, height), -1, dtype=np.int16)
        self.spawn_ok = np.zeros((n, width, height), dtype=np.bool_)
        self.pos = np.zeros((n, k, 2), dtype=np.int64)
        self.dirs = np.zeros((n, k), dtype=np.int64)
        self.carrying = np.zeros((n, k, 3), dtype=np.uint8)
        self.carry_contents = np.zeros((n, k, 3), dtype=np.uint8)
        self.status = np.zeros((n, k), dtype=np.int8)
        self.absent_at_reset = np.zeros((n, k), dtype=np.bool_)
        self.prestige = np.zeros((n, k), dtype=np.float64)
        self.cycle_last = np.full((n, k), -1, dtype=np.int64)
        self.streak = np.zeros((n, k), dtype=np.int64)
        self.step_count = np.zeros(n, dtype=np.int64)
        self.rng = np.zeros(n, dtype=np.uint64)
        self.started = np.zeros(n, dtype=np.bool_)
        self.np_random = [np.random.default_rng() for _ in range(n)]
        # Outputs, overwritten by every step.
        self.rewards = np.zeros((n, k), dtype=np.float32)
        self.last_reward = np.zeros((n, k), dtype=np.float32)  # the ``reward`` extra
        self.terminated = np.zeros((n, k), dtype=np.bool_)
        self.truncated = np.zeros((n, k), dtype=np.bool_)
        self.colors = np.zeros((n, k), dtype=np.int64)
        # Per-agent settings as arrays for the kernels.
        self.acfg_i = np.array(
            [
                (
                    a.view_size,
                    a.view_offset,
                    -1 if a.color == "prestige" else COLOR_TO_IDX[a.color],
                    a.spawn_delay,
                    int(a.see_through_walls),
                )
                for a in self.agents
            ],
            dtype=np.int64,
        )
        self.acfg_f = np.array(
            [(a.prestige_beta, a.prestige_scale) for a in self.agents], dtype=np.float64
        )
        self.hide = np.zeros((k, N_TYPES), dtype=np.bool_)
        for i, a in enumerate(self.agents):
            for name in a.hide:
                self.hide[i, OBJECT_TO_IDX[name]] = True
        rules_i, rules_f = rules.to_arrays()
        self.rules_i, self.rules_f = np.tile(rules_i, (n, 1)), np.tile(rules_f, (n, 1))
        vmax = max(a.view_size for a in self.agents)
        self.sym = np.zeros((n, k, vmax, vmax, 3), dtype=np.uint8)
        self.vis = np.zeros((n, k, vmax, vmax), dtype=np.bool_)
        self.all_envs = np.arange(n)
        self._converted = [i for i, a in enumerate(self.agents) if a.observation != "symbolic"]
        self.actions = np.zeros((n, k), dtype=np.int64)
        self._scratch_b = np.zeros((4, k), dtype=np.bool_)
        self._scratch_i = np.zeros((5, k), dtype=np.int64)
        self._opaque = np.zeros((vmax, vmax), dtype=np.bool_)
        # Agents that finished in the last step: they keep their final view for that step.
        self.just_done = np.zeros((n, k), dtype=np.bool_)
        # Agents that finished under the respawn rule in the last step (a new life follows).
        self.respawned = np.zeros((n, k), dtype=np.bool_)
        self._own_views = {
            i: self._make_view_buffer(i) for i in self._converted
        }  # one-hot and pixel buffers
        self._cleared_on_reset = [
            (self.grid, 0),
            (self.contents, 0),
            (self.cycle_id, -1),
            (self.carrying, 0),
            (self.carry_contents, 0),
            (self.status, K.WAITING),
            (self.prestige, 0.0),
            (self.cycle_last, -1),
            (self.streak, 0),
            (self.step_count, 0),
            (self.last_reward, 0.0),
            (self.pos, 0),
            (self.dirs, 0),
            (self.just_done, False),
        ]
        self._bind()

    def _bind(self) -> None:
        """Derived views and the kernels' argument tuples (rebuilt after unpickling)."""
        self._views = [
            self._own_views[i] if i in self._own_views else self.sym[:, i, :v, :v]
            for i, v in enumerate(a.view_size for a in self.agents)
        ]
        self._step_arrays = world = K.StepArrays(
            actions=self.actions,
            grid=self.grid,
            contents=self.contents,
            cycle_id=self.cycle_id,
            spawn_ok=self.spawn_ok,
            pos=self.pos,
            dirs=self.dirs,
            carrying=self.carrying,
            carry_contents=self.carry_contents,
            status=self.status,
            prestige=self.prestige,
            cycle_last=self.cycle_last,
            streak=self.streak,
            step_count=self.step_count,
            rng=self.rng,
            acfg_i=self.acfg_i,
            acfg_f=self.acfg_f,
            rules_i=self.rules_i,
            rules_f=self.rules_f,
            rewards=self.rewards,
            terminated=self.terminated,
            truncated=self.truncated,
            scratch_b=self._scratch_b,
            scratch_i=self._scratch_i,
            last_reward=self.last_reward,
            just_done=self.just_done,
            respawned=self.respawned,
        )
        self._view_arrays = view = K.ViewArrays(
            envs=self.all_envs,
            grid=self.grid,
            pos=self.pos,
            dirs=self.dirs,
            carrying=self.carrying,
            status=self.status,
            prestige=self.prestige,
            acfg_i=self.acfg_i,
            acfg_f=self.acfg_f,
            hide=self.hide,
            out=self.sym,
            vis=self.vis,
            opaque=self._opaque,
            just_done=self.just_done,
        )
        if self.num_envs < 8:
            # Few envs: one fused call saves numba's per-call overhead (each array passed once).
            views = K.ViewOutputs(view.envs, view.hide, view.out, view.vis, view.opaque)
            fused = _compiled_entry(K.step_and_observe, (world, views))
            self._step_kernel = lambda: fused(world, views)
        else:
            # Many envs: the two loops compiled apart run faster than the fused one.
            step = _compiled_entry(K.step_envs, (world,))
            observe = _compiled_entry(K.observe, (view,))

            def step_kernel() -> None:
                step(world)
                observe(view)

            self._step_kernel = step_kernel

    def __getstate__(self) -> dict:
        state = self.__dict__.copy()
        del state["_views"], state["_step_arrays"], state["_view_arrays"], state["_step_kernel"]
        return state

    def __setstate__(self, state: dict) -> None:
        for added in ("respawned", "absent_at_reset"):  # engines pickled before these existed
            state.setdefault(added, np.zeros_like(state["just_done"]))
        self.__dict__.update(state)
        self._bind()

    # -- observations -------------------------------------------------------------------------

    def _make_view_buffer(self, k: int) -> np.ndarray:
        a = self.agents[k]
        v = a.view_size
        if a.observation == "onehot":
            return np.zeros((self.num_envs, v, v, N_TYPES + N_COLORS + N_STATES), dtype=np.uint8)
        ts = a.tile_size
        return np.zeros((self.num_envs, v * ts, v * ts, 3), dtype=np.uint8)

    def views(self) -> list[np.ndarray]:
        """Each agent's view array ``(N, ...)``; buffers are reused by the next step."""
        return self._views

    def observe(self, envs: np.ndarray | None = None) -> None:
        """Rebuild the views of ``envs`` (all by default) from the current state."""
        envs = self.all_envs if envs is None else np.asarray(envs, dtype=np.int64)
        K.observe(self._view_arrays._replace(envs=envs))
        if self._converted:
            self._convert(envs)

    def _convert(self, envs: np.ndarray) -> None:
        """Turn the symbolic views of agents that see one-hot or pixels into their own buffers."""
        for k in self._converted:
            a = self.agents[k]
            if a.observation == "onehot":
                K.to_onehot(envs, self.sym, k, a.view_size, N_TYPES, N_COLORS, self._views[k])
            elif a.observation == "rgb":
                from marlgrid.core.atlas import get_atlas

                atlas = get_atlas(a.tile_size)
                self.update_colors()
                K.to_rgb(
                    envs,
                    self.sym,
                    k,
                    a.view_size,
                    a.view_size - 1 - a.view_offset,
                    self.dirs,
                    self.colors,
                    atlas.tiles,
                    atlas.agent_up_mask,
                    atlas.palette,
                    self._views[k],
                )

    def update_colors(self) -> np.ndarray:
        """Refresh and return :attr:`colors`: each agent's color id ``(N, K)`` as views show it
        (its own, or its prestige level), -1 where it is not shown."""
        K.agent_colors(
            self.acfg_i, self.acfg_f, self.prestige, self.status, self.just_done, self.colors
        )
        return self.colors

    def visible_cells(self, n: int, k: int) -> np.ndarray:
        """Map cells agent ``k`` of env ``n`` sees, as a ``(W, H)`` bool mask."""
        out = np.zeros((self.width, self.height), dtype=np.bool_)
        if self.status[n, k] != K.ACTIVE:
            return out
        cfg = self.agents[k]
        v = cfg.view_size
        i, j = np.nonzero(self.vis[n, k, :v, :v])
        ahead = (v - 1 - cfg.view_offset) - j
        right = i - v // 2
        fwd, side = DIR_TO_VEC[self.dirs[n, k]], DIR_TO_VEC[(self.dirs[n, k] + 1) % 4]
        x = self.pos[n, k, 0] + ahead * fwd[0] + right * side[0]
        y = self.pos[n, k, 1] + ahead * fwd[1] + right * side[1]
        inside = (x >= 0) & (y >= 0) & (x < self.width) & (y < self.height)
        out[x[inside], y[inside]] = True
        return out

    # -- rules --------------------------------------------------------------------------------

    @property
    def rules(self) -> Rules:
        """The rules every env's current episode plays under (ValueError when they differ)."""
        first = self.episode_rules[0]
        if any(r != first for r in self.episode_rules):
            raise ValueError(
                "the envs of this batch play under different rules (a change reaches each env "
                "at its next reset): read episode_rules[n] for env n"
            )
        return first

    def set_next_rules(self, envs: Sequence[int] | np.ndarray, rules: Sequence[Rules]) -> None:
        """Env ``envs[i]`` starts its next episode with ``rules[i]`` (already checked)."""
        for n, r in zip(envs, rules, strict=True):
            self.next_rules[int(n)] = r

    # -- absent agents ------------------------------------------------------------------------

    def remove_agents(self, mask: np.ndarray) -> None:
        """Take the agents where ``mask`` ``(N, K)`` is True out of their envs until each env's
        next reset, and rebuild those envs' views.

        What an agent in play carries is dropped on its cell when that cell is empty floor with
        no other agent in play on it; otherwise it leaves with the agent (gone for the episode).
        """
        mask = np.asarray(mask, dtype=np.bool_)
        if mask.shape != self.status.shape:
            raise ValueError(f"mask must have shape {self.status.shape}, got {mask.shape}")
        envs = np.flatnonzero(mask.any(axis=1))
        if not len(envs):
            return
        for n in envs:
            self.require_started("remove_agents()", int(n))
        K.remove_agents(
            mask,
            self.grid,
            self.contents,
            self.pos,
            self.status,
            self.carrying,
            self.carry_contents,
            self.just_done,
        )
        self.observe(envs)

    def set_absent_at_reset(self, mask: np.ndarray, absent: bool = True) -> None:
        """Agents where ``mask`` ``(N, K)`` is True start every later episode of their env
        absent (``absent=False`` lets them play again from the next reset on)."""
        mask = np.asarray(mask, dtype=np.bool_)
        if mask.shape != self.status.shape:
            raise ValueError(f"mask must have shape {self.status.shape}, got {mask.shape}")
        self.absent_at_reset[mask] = absent

    @property
    def absent(self) -> np.ndarray:
        """``(N, K)`` bool: agents out of their env until its next reset (a new array)."""
        return self.status == K.ABSENT

    # -- reset and step -----------------------------------------------------------------------

    def require_started(self, what: str, envs: int | None = None) -> None:
        """Raise ``RuntimeError`` naming ``what`` unless env ``envs`` (all if None) was reset."""
        ok = self.started.all() if envs is None else self.started[envs]
        if not ok:
            raise RuntimeError(f"{what} before reset(): call reset() first")

    def reset(self, envs: Sequence[int] | np.ndarray, seeds: Sequence[int | None] | None = None):
        """Start new episodes in ``envs``; a seed re-seeds that env's generator."""
        envs = np.asarray(envs, dtype=np.int64)
        self.started[envs] = False  # until the new world is fully generated
        for arr, value in self._cleared_on_reset:
            arr[envs] = value
        self.grid[envs, ..., 0] = EMPTY
        self.spawn_ok[envs] = True
        if self.absent_at_reset.any():
            self.status[envs] = np.where(self.absent_at_reset[envs], K.ABSENT, K.WAITING)
        for i, n in enumerate(envs):
            rules = self.episode_rules[n] = self.next_rules[n]
            self.rules_i[n], self.rules_f[n] = rules.to_arrays()
            seed = None if seeds is None else seeds[i]
            if seed is not None:
                self.np_random[n] = np.random.default_rng(seed)
            rng = self.np_random[n]
            self.generating_rules = rules
            try:
                self.generate(
                    Layout(self.grid[n], self.contents[n], self.cycle_id[n], self.spawn_ok[n], rng)
                )
            finally:
                self.generating_rules = None
            self.rng[n] = np.uint64(rng.integers(0, 2**63))
        # Spawning reads two rules: one call per distinct pair (each env draws from its own rng).
        spawn_rules = self.rules_i[envs][:, [K.R_GHOST, K.R_SPAWN_DIR]]
        for ghost, spawn_dir in np.unique(spawn_rules, axis=0):
            K.spawn_initial(
                envs[(spawn_rules == (ghost, spawn_dir)).all(axis=1)],
                self.grid,
                self.spawn_ok,
                self.pos,
                self.dirs,
                self.status,
                self.rng,
                self.acfg_i,
                bool(ghost),
                spawn_dir,
            )
        self.started[envs] = True

    def step(self, actions: np.ndarray | None = None) -> None:
        """Advance every env one step and rebuild all views.

        ``actions`` is ``(N, K)`` int64, already validated; ``None`` steps with whatever the
        caller wrote into :attr:`actions`.
        """
        if actions is not None:
            np.copyto(self.actions, actions)
        self._step_kernel()
        if self._converted:
            self._convert(self.all_envs)


def _compiled_entry(kernel, args: tuple) -> Callable:
    """The compiled entry point of ``kernel`` for exactly these argument types.

    Calling it skips numba's per-call type dispatch (about 30 ns per argument). The engine always
    passes the same arrays, so the types never change; any failure falls back to the dispatcher.
    """
    try:
        sig = tuple(kernel.typeof_pyval(a) for a in args)
        if sig not in kernel.overloads:
            kernel.compile(sig)
        return kernel.overloads[sig].entry_point
    except Exception:  # pragma: no cover - numba internals changed: keep the plain dispatcher
        return kernel
