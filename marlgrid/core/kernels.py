"""Compiled kernels: stepping and observation building over all agents of all envs.

Everything here is plain numba over arrays; the :class:`marlgrid.core.engine.Engine` owns the
arrays and documents their layout. Randomness inside a step comes from a per-env splitmix64
stream seeded from the env's numpy generator at reset, so the same seed and actions give the
same episode, bit for bit.
"""

from __future__ import annotations

from typing import NamedTuple

import numpy as np
from numba import njit

from marlgrid.constants import (
    AGENT,
    BOX,
    CAN_OVERLAP,
    CAN_PICKUP,
    CYCLE_TILE,
    DIR_TO_VEC,
    DOOR,
    DOOR_CLOSED,
    DOOR_LOCKED,
    DOOR_OPEN,
    DROP,
    EMPTY,
    FORWARD,
    GOAL,
    KEY,
    LAVA,
    LEFT,
    PICKUP,
    PRESTIGE_COLOR_BASE,
    PRESTIGE_LEVELS,
    RIGHT,
    SEE_BEHIND,
    TOGGLE,
    WALL,
)

# Agent status values. An absent agent is out of the env until its next reset: no cell, no
# action, no reward, no done flag, in no one's view (see :func:`remove_agents`).
WAITING, ACTIVE, FINISHED, ABSENT = 0, 1, 2, 3

# Columns of the integer rules ``rules_i`` (N, N_RULES_I): one row per env.
R_GHOST, R_RESPAWN, R_MAX_STEPS, R_DECAY, R_N_GOALS, R_INITIAL, R_RESET_MISTAKE = range(7)
R_PICKUP, R_SPAWN_DIR = 7, 8
N_RULES_I = 9
# Columns of the float rules ``rules_f`` (N, N_RULES_F): one row per env.
R_GOAL_REWARD, R_CYCLE_REWARD, R_PENALTY, R_STREAK_BONUS, R_LAVA_REWARD = range(5)
N_RULES_F = 5

# Columns of the per-agent integer config ``acfg_i``.
A_VIEW, A_OFFSET, A_COLOR, A_SPAWN_DELAY, A_SEE_THROUGH = range(5)
N_ACFG_I = 5
# Columns of the per-agent float config ``acfg_f``.
A_BETA, A_SCALE = range(2)
N_ACFG_F = 2

_U30 = np.uint64(30)
_U27 = np.uint64(27)
_U31 = np.uint64(31)
_GOLDEN = np.uint64(0x9E3779B97F4A7C15)
_MIX1 = np.uint64(0xBF58476D1CE4E5B9)
_MIX2 = np.uint64(0x94D049BB133111EB)


@njit(cache=True, inline="always")
def _rand(rng, n):
    """Next 64-bit value of env ``n``'s splitmix64 stream."""
    z = rng[n] + _GOLDEN
    rng[n] = z
    z = (z ^ (z >> _U30)) * _MIX1
    z = (z ^ (z >> _U27)) * _MIX2
    return z ^ (z >> _U31)


@njit(cache=True, inline="always")
def _rand_below(rng, n, bound):
    return np.int64(_rand(rng, n) % np.uint64(bound))


@njit(cache=True, inline="always")
def _passable(grid, n, x, y):
    if x < 0 or y < 0 or x >= grid.shape[1] or y >= grid.shape[2]:
        return False
    t = grid[n, x, y, 0]
    if t == DOOR:
        return grid[n, x, y, 2] == DOOR_OPEN
    return CAN_OVERLAP[t]


@njit(cache=True, inline="always")
def _opaque(t, s):
    if t == DOOR:
        return s != DOOR_OPEN
    return not SEE_BEHIND[t]


@njit(cache=True)
def prestige_color(p, scale):
    """Color id of an agent with prestige ``p``: red at 0, blue as ``tanh(p / scale)`` nears 1."""
    level = np.int64(np.round(np.tanh(max(p, 0.0) / scale) * (PRESTIGE_LEVELS - 1)))
    return PRESTIGE_COLOR_BASE + level


@njit(cache=True)
def agent_color(acfg_i, acfg_f, prestige, n, k):
    c = acfg_i[k, A_COLOR]
    if c >= 0:
        return c
    return prestige_color(prestige[n, k], acfg_f[k, A_SCALE])


@njit(cache=True)
def place_agent(grid, spawn_ok, pos, dirs, status, rng, ghost, spawn_dir, n, k):
    """Put agent ``k`` of env ``n`` on a random free spawn cell facing ``spawn_dir`` (a random
    direction when it is negative).

    Free means: spawn allowed, the cell empty, and (blocking mode) no active agent on it.
    Returns False when no cell is free; the agent then stays out and retries next step.
    """
    width, height = grid.shape[1], grid.shape[2]
    count = 0
    for x in range(width):
        for y in range(height):
            if spawn_ok[n, x, y] and grid[n, x, y, 0] == EMPTY:
                if not ghost and _occupied(pos, status, n, x, y, -1):
                    continue
                count += 1
    if count == 0:
        return False
    pick = _rand_below(rng, n, count)
    for x in range(width):
        for y in range(height):
            if spawn_ok[n, x, y] and grid[n, x, y, 0] == EMPTY:
                if not ghost and _occupied(pos, status, n, x, y, -1):
                    continue
                if pick == 0:
                    pos[n, k, 0] = x
                    pos[n, k, 1] = y
                    dirs[n, k] = _rand_below(rng, n, 4) if spawn_dir < 0 else spawn_dir
                    status[n, k] = ACTIVE
                    return True
                pick -= 1
    return False


@njit(cache=True)
def spawn_initial(envs, grid, spawn_ok, pos, dirs, status, rng, acfg_i, ghost, spawn_dir):
    """Place the agents with no spawn delay in freshly reset ``envs``, in agent order (absent
    agents stay out)."""
    for n in envs:
        for k in range(status.shape[1]):
            if acfg_i[k, A_SPAWN_DELAY] == 0 and status[n, k] == WAITING:
                place_agent(grid, spawn_ok, pos, dirs, status, rng, ghost, spawn_dir, n, k)


@njit(cache=True, inline="always")
def _occupied(pos, status, n, x, y, skip):
    for m in range(pos.shape[1]):
        if m != skip and status[n, m] == ACTIVE and pos[n, m, 0] == x and pos[n, m, 1] == y:
            return True
    return False


@njit(cache=True)
def _resolve_blocking(n, moving, tx, ty, pos, status):
    """Simultaneous moves: contested cells and swaps fail, then moves into held cells fail."""
    n_agents = moving.shape[0]
    wanted = moving.copy()
    for k in range(n_agents):
        if not wanted[k]:
            continue
        for m in range(n_agents):
            if m == k or not wanted[m]:
                continue
            same_target = tx[m] == tx[k] and ty[m] == ty[k]
            swap = (
                tx[m] == pos[n, k, 0]
                and ty[m] == pos[n, k, 1]
                and tx[k] == pos[n, m, 0]
                and ty[k] == pos[n, m, 1]
            )
            if same_target or swap:
                moving[k] = False
                break
    changed = True
    while changed:
        changed = False
        for k in range(n_agents):
            if not moving[k]:
                continue
            for m in range(n_agents):
                if m == k or status[n, m] != ACTIVE or moving[m]:
                    continue
                if pos[n, m, 0] == tx[k] and pos[n, m, 1] == ty[k]:
                    moving[k] = False
                    changed = True
                    break


class StepArrays(NamedTuple):
    """What :func:`step_envs` reads and writes, by name (the engine's arrays; see
    :class:`marlgrid.core.engine.Engine` for their layouts)."""

    actions: np.ndarray
    grid: np.ndarray
    contents: np.ndarray
    cycle_id: np.ndarray
    spawn_ok: np.ndarray
    pos: np.ndarray
    dirs: np.ndarray
    carrying: np.ndarray
    carry_contents: np.ndarray
    status: np.ndarray
    prestige: np.ndarray
    cycle_last: np.ndarray
    streak: np.ndarray
    step_count: np.ndarray
    rng: np.ndarray
    acfg_i: np.ndarray
    acfg_f: np.ndarray
    rules_i: np.ndarray
    rules_f: np.ndarray
    rewards: np.ndarray
    terminated: np.ndarray
    truncated: np.ndarray
    scratch_b: np.ndarray
    scratch_i: np.ndarray
    last_reward: np.ndarray
    just_done: np.ndarray
    respawned: np.ndarray


class ViewArrays(NamedTuple):
    """What :func:`observe` reads and writes, by name: the envs to observe, the engine's arrays
    it reads, and ``out`` / ``vis`` / ``opaque`` (the views, their masks, work space)."""

    envs: np.ndarray
    grid: np.ndarray
    pos: np.ndarray
    dirs: np.ndarray
    carrying: np.ndarray
    status: np.ndarray
    prestige: np.ndarray
    acfg_i: np.ndarray
    acfg_f: np.ndarray
    hide: np.ndarray
    out: np.ndarray
    vis: np.ndarray
    opaque: np.ndarray
    just_done: np.ndarray


@njit(cache=True)
def step_envs(world):
    """Advance every env one step from its pre-step state; write rewards and done flags.

    Env ``n`` plays under its own rules, rows ``rules_i[n]`` and ``rules_f[n]``.
    ``scratch_b`` (4, K) bool and ``scratch_i`` (5, K) int64 are work space. ``last_reward``
    gets a copy of the rewards (the ``reward`` extra), ``just_done`` marks agents that
    finished in this step (they keep their last view) and ``respawned`` those that finished under
    the respawn rule in this step (their next view, once placed, is of a new life).
    """
    actions = world.actions
    grid = world.grid
    contents = world.contents
    cycle_id = world.cycle_id
    spawn_ok = world.spawn_ok
    pos = world.pos
    dirs = world.dirs
    carrying = world.carrying
    carry_contents = world.carry_contents
    status = world.status
    prestige = world.prestige
    cycle_last = world.cycle_last
    streak = world.streak
    step_count = world.step_count
    rng = world.rng
    acfg_i = world.acfg_i
    acfg_f = world.acfg_f
    rules_i = world.rules_i
    rules_f = world.rules_f
    rewards = world.rewards
    terminated = world.terminated
    truncated = world.truncated
    scratch_b = world.scratch_b
    scratch_i = world.scratch_i
    last_reward = world.last_reward
    just_done = world.just_done
    respawned = world.respawned
    n_envs, n_agents = actions.shape
    # Per-agent scratch rows (no allocation per call): see SCRATCH_ROWS.
    moving, moved, acts, finishing = scratch_b[0], scratch_b[1], scratch_b[2], scratch_b[3]
    tx, ty, fx, fy, prio = scratch_i[0], scratch_i[1], scratch_i[2], scratch_i[3], scratch_i[4]
    for n in range(n_envs):
        ghost = rules_i[n, R_GHOST] != 0  # each env's own episode rules
        respawn = rules_i[n, R_RESPAWN] != 0
        max_steps = rules_i[n, R_MAX_STEPS]
        n_goals = rules_i[n, R_N_GOALS]
        can_pickup = rules_i[n, R_PICKUP] != 0
        spawn_dir = rules_i[n, R_SPAWN_DIR]
        step_count[n] += 1
        t = step_count[n]
        for k in range(n_agents):
            respawned[n, k] = False
        decay = 1.0 - 0.9 * t / max_steps if rules_i[n, R_DECAY] != 0 else 1.0
        for k in range(n_agents):
            rewards[n, k] = 0.0
            terminated[n, k] = False
            truncated[n, k] = False
            moving[k] = False
            moved[k] = False
            acts[k] = False
            finishing[k] = False

        # 1. Turns and intended moves, all from the pre-step state.
        for k in range(n_agents):
            if status[n, k] != ACTIVE:
                continue
            a = actions[n, k]
            d = dirs[n, k]
            fx[k] = pos[n, k, 0] + DIR_TO_VEC[d, 0]
            fy[k] = pos[n, k, 1] + DIR_TO_VEC[d, 1]
            if a == LEFT:
                dirs[n, k] = (d + 3) % 4
            elif a == RIGHT:
                dirs[n, k] = (d + 1) % 4
            elif a == FORWARD:
                if _passable(grid, n, fx[k], fy[k]):
                    moving[k] = True
                    tx[k] = fx[k]
                    ty[k] = fy[k]
            elif a == PICKUP or a == DROP or a == TOGGLE:
                inside = 0 <= fx[k] < grid.shape[1] and 0 <= fy[k] < grid.shape[2]
                acts[k] = inside
                prio[k] = np.int64(_rand(rng, n) >> np.uint64(1))
        if not ghost:
            _resolve_blocking(n, moving, tx, ty, pos, status)

        # 2. Moves.
        for k in range(n_agents):
            if moving[k]:
                pos[n, k, 0] = tx[k]
                pos[n, k, 1] = ty[k]
                moved[k] = True

        # 3. Object interactions; one random winner per contested cell.
        for k in range(n_agents):
            if not acts[k]:
                continue
            winner = True
            for m in range(n_agents):
                if m != k and acts[m] and fx[m] == fx[k] and fy[m] == fy[k]:
                    if prio[m] > prio[k] or (prio[m] == prio[k] and m < k):
                        winner = False
                        break
            if not winner:
                continue
            x, y = fx[k], fy[k]
            a = actions[n, k]
            typ = grid[n, x, y, 0]
            if a == PICKUP:
                if can_pickup and carrying[n, k, 0] == 0 and CAN_PICKUP[typ]:
                    for c in range(3):
                        carrying[n, k, c] = grid[n, x, y, c]
                        carry_contents[n, k, c] = contents[n, x, y, c]
                        contents[n, x, y, c] = 0
                    grid[n, x, y, 0] = EMPTY
                    grid[n, x, y, 1] = 0
                    grid[n, x, y, 2] = 0
            elif a == DROP:
                if (
                    carrying[n, k, 0] != 0
                    and typ == EMPTY
                    and not _occupied(pos, status, n, x, y, -1)
                ):
                    for c in range(3):
                        grid[n, x, y, c] = carrying[n, k, c]
                        contents[n, x, y, c] = carry_contents[n, k, c]
                        carrying[n, k, c] = 0
                        carry_contents[n, k, c] = 0
            else:  # toggle
                if typ == DOOR:
                    state = grid[n, x, y, 2]
                    if state == DOOR_LOCKED:
                        if carrying[n, k, 0] == KEY and carrying[n, k, 1] == grid[n, x, y, 1]:
                            grid[n, x, y, 2] = DOOR_OPEN
                    elif state == DOOR_CLOSED:
                        grid[n, x, y, 2] = DOOR_OPEN
                    elif not _occupied(pos, status, n, x, y, -1):
                        grid[n, x, y, 2] = DOOR_CLOSED
                elif typ == BOX:
                    if contents[n, x, y, 0] == 0:
                        grid[n, x, y, 0] = EMPTY
                        grid[n, x, y, 1] = 0
                        grid[n, x, y, 2] = 0
                    else:
                        for c in range(3):
                            grid[n, x, y, c] = contents[n, x, y, c]
                            contents[n, x, y, c] = 0

        # 4. Rewards for entering cells, then prestige.
        for k in range(n_agents):
            if status[n, k] != ACTIVE:
                continue
            r = 0.0
            if moved[k]:
                x, y = pos[n, k, 0], pos[n, k, 1]
                typ = grid[n, x, y, 0]
                if typ == GOAL:
                    r = rules_f[n, R_GOAL_REWARD] * decay
                    finishing[k] = True
                elif typ == LAVA:
                    r = rules_f[n, R_LAVA_REWARD]
                    finishing[k] = True
                elif typ == CYCLE_TILE:
                    tile = cycle_id[n, x, y]
                    last = cycle_last[n, k]
                    if last < 0:
                        if rules_i[n, R_INITIAL] != 0:
                            r = rules_f[n, R_CYCLE_REWARD] * decay
                        cycle_last[n, k] = tile
                        streak[n, k] = 0
                    elif tile == (last + 1) % n_goals:
                        streak[n, k] += 1
                        r = (
                            rules_f[n, R_CYCLE_REWARD] + rules_f[n, R_STREAK_BONUS] * streak[n, k]
                        ) * decay
                        cycle_last[n, k] = tile
                    else:
                        r = -abs(rules_f[n, R_PENALTY])
                        streak[n, k] = 0
                        if rules_i[n, R_RESET_MISTAKE] != 0:
                            cycle_last[n, k] = tile
            rewards[n, k] = r
            p = prestige[n, k] * acfg_f[k, A_BETA]
            prestige[n, k] = 0.0 if r < 0 else p + r

        # 5. Finishing agents respawn or leave; waiting agents enter.
        for k in range(n_agents):
            if finishing[k]:
                if respawn:
                    status[n, k] = WAITING
                    respawned[n, k] = True  # its life ended: placed now or when a cell frees
                    if not place_agent(
                        grid, spawn_ok, pos, dirs, status, rng, ghost, spawn_dir, n, k
                    ):
                        status[n, k] = WAITING
                else:
                    status[n, k] = FINISHED
                    terminated[n, k] = True
        for k in range(n_agents):
            if status[n, k] == WAITING and t >= acfg_i[k, A_SPAWN_DELAY]:
                place_agent(grid, spawn_ok, pos, dirs, status, rng, ghost, spawn_dir, n, k)

        # 6. Time limit. Agents that were in play keep their last view for this step; absent
        # agents stay absent (no flag).
        for k in range(n_agents):
            just_done[n, k] = terminated[n, k]
            last_reward[n, k] = rewards[n, k]
        if t >= max_steps:
            for k in range(n_agents):
                if status[n, k] < FINISHED:
                    just_done[n, k] = status[n, k] == ACTIVE
                    status[n, k] = FINISHED
                    truncated[n, k] = True


@njit(cache=True)
def remove_agents(mask, grid, contents, pos, status, carrying, carry_contents, just_done):
    """Make the agents where ``mask`` ``(N, K)`` is set absent until their env's next reset.

    An agent in play drops what it carries on its own cell when that cell is empty floor with
    no other agent in play on it; otherwise the object leaves with it (gone until the reset).
    Views are not rebuilt here (the engine's ``observe`` does that).
    """
    for n in range(mask.shape[0]):
        for k in range(mask.shape[1]):
            if not mask[n, k] or status[n, k] == ABSENT:
                continue
            was_active = status[n, k] == ACTIVE
            status[n, k] = ABSENT
            just_done[n, k] = False
            if was_active and carrying[n, k, 0] != 0:
                x, y = pos[n, k, 0], pos[n, k, 1]
                if grid[n, x, y, 0] == EMPTY and not _occupied(pos, status, n, x, y, -1):
                    for c in range(3):
                        grid[n, x, y, c] = carrying[n, k, c]
                        contents[n, x, y, c] = carry_contents[n, k, c]
            for c in range(3):
                carrying[n, k, c] = 0
                carry_contents[n, k, c] = 0


@njit(cache=True)
def observe(view):
    """Write every agent's egocentric symbolic view and visibility mask.

    ``out`` is ``(n_envs, n_agents, vmax, vmax, 3)`` uint8 indexed ``[.., x, y, channel]`` with the
    agent at ``(view // 2, view - 1 - view_offset)`` facing up; ``vis`` is the matching bool mask.
    Cells past an agent's own view size, and all cells of agents out of play, are zero, except
    that an agent that finished in this very step (``just_done``) still gets its last view.
    ``opaque`` is a ``(vmax, vmax)`` bool work space.
    """
    envs = view.envs
    grid = view.grid
    pos = view.pos
    dirs = view.dirs
    carrying = view.carrying
    status = view.status
    prestige = view.prestige
    acfg_i = view.acfg_i
    acfg_f = view.acfg_f
    hide = view.hide
    out = view.out
    vis = view.vis
    opaque = view.opaque
    just_done = view.just_done
    n_agents = status.shape[1]
    width, height = grid.shape[1], grid.shape[2]
    for n in envs:
        for k in range(n_agents):
            o = out[n, k]
            mask = vis[n, k]
            mask[:] = False
            if status[n, k] != ACTIVE and not just_done[n, k]:
                o[:] = 0
                continue
            v = acfg_i[k, A_VIEW]
            ar = v - 1 - acfg_i[k, A_OFFSET]
            ac = v // 2
            px, py = pos[n, k, 0], pos[n, k, 1]
            d = dirs[n, k]
            fdx, fdy = DIR_TO_VEC[d, 0], DIR_TO_VEC[d, 1]
            rdx, rdy = DIR_TO_VEC[(d + 1) % 4, 0], DIR_TO_VEC[(d + 1) % 4, 1]
            # View cell (i, j) is map cell (x0 + i * rdx + j * jdx, y0 + i * rdy + j * jdy).
            x0, y0 = px + ar * fdx - ac * rdx, py + ar * fdy - ac * rdy
            # 1. Opacity (cells beyond the map are grey walls, as in MiniGrid).
            for j in range(v):
                for i in range(v):
                    wx = x0 + i * rdx - j * fdx
                    wy = y0 + i * rdy - j * fdy
                    if wx < 0 or wy < 0 or wx >= width or wy >= height:
                        opaque[i, j] = True
                    else:
                        opaque[i, j] = _opaque(grid[n, wx, wy, 0], grid[n, wx, wy, 2])
            # 2. Visibility.
            if acfg_i[k, A_SEE_THROUGH] != 0:
                for i in range(v):
                    for j in range(v):
                        mask[i, j] = True
            else:
                _sweep(opaque, mask, v, ac, ar)
            # 3. Cells: visible ones as they are (hidden types read as empty), others unseen.
            for j in range(v):
                for i in range(v):
                    if not mask[i, j]:
                        o[i, j, 0] = 0
                        o[i, j, 1] = 0
                        o[i, j, 2] = 0
                        continue
                    wx = x0 + i * rdx - j * fdx
                    wy = y0 + i * rdy - j * fdy
                    if wx < 0 or wy < 0 or wx >= width or wy >= height:
                        t, c, st = WALL, 5, 0
                    else:
                        t, c, st = grid[n, wx, wy, 0], grid[n, wx, wy, 1], grid[n, wx, wy, 2]
                    if hide[k, t]:
                        t, c, st = EMPTY, 0, 0
                    o[i, j, 0] = t
                    o[i, j, 1] = c
                    o[i, j, 2] = st
            # 4. Other agents in view, the lowest index on top.
            if not hide[k, AGENT]:
                for m in range(n_agents - 1, -1, -1):
                    if m == k or status[n, m] != ACTIVE:
                        continue
                    dx = pos[n, m, 0] - px
                    dy = pos[n, m, 1] - py
                    j = ar - (dx * fdx + dy * fdy)
                    i = ac + (dx * rdx + dy * rdy)
                    if 0 <= i < v and 0 <= j < v and mask[i, j] and not (i == ac and j == ar):
                        o[i, j, 0] = AGENT
                        o[i, j, 1] = agent_color(acfg_i, acfg_f, prestige, n, m)
                        o[i, j, 2] = dirs[n, m]
            # 5. The agent's own cell shows what it carries.
            t = carrying[n, k, 0]
            if t == 0 or hide[k, t]:
                o[ac, ar, 0], o[ac, ar, 1], o[ac, ar, 2] = EMPTY, 0, 0
            else:
                o[ac, ar, 0], o[ac, ar, 1], o[ac, ar, 2] = t, carrying[n, k, 1], carrying[n, k, 2]


@njit(cache=True, inline="always")
def _sweep(opaque, mask, v, ac, ar):
    """MiniGrid's ``Grid.process_vis`` from the agent row forward, then mirrored behind it."""
    mask[ac, ar] = True
    for j in range(ar, -1, -1):
        for i in range(0, v - 1):
            if mask[i, j] and not opaque[i, j]:
                mask[i + 1, j] = True
                if j > 0:
                    mask[i + 1, j - 1] = True
                    mask[i, j - 1] = True
        for i in range(v - 1, 0, -1):
            if mask[i, j] and not opaque[i, j]:
                mask[i - 1, j] = True
                if j > 0:
                    mask[i - 1, j - 1] = True
                    mask[i, j - 1] = True
    for j in range(ar, v - 1):
        for i in range(0, v - 1):
            if mask[i, j] and not opaque[i, j]:
                mask[i + 1, j] = True
                mask[i + 1, j + 1] = True
                mask[i, j + 1] = True
        for i in range(v - 1, 0, -1):
            if mask[i, j] and not opaque[i, j]:
                mask[i - 1, j] = True
                mask[i - 1, j + 1] = True
                mask[i, j + 1] = True


@njit(cache=True)
def process_vis(opaque, ac, ar):
    """Visibility mask of one view: ``opaque`` is ``(v, v)`` bool indexed ``[x, y]``."""
    v = opaque.shape[0]
    mask = np.zeros((v, v), dtype=np.bool_)
    _sweep(opaque, mask, v, ac, ar)
    return mask


@njit(cache=True)
def to_onehot(envs, sym, k, v, n_types, n_colors, out):
    """One-hot encode agent ``k``'s symbolic views into ``out`` (n_envs, v, v, channels)."""
    for n in envs:
        o = out[n]
        o[:] = 0
        for i in range(v):
            for j in range(v):
                o[i, j, sym[n, k, i, j, 0]] = 1
                o[i, j, n_types + sym[n, k, i, j, 1]] = 1
                o[i, j, n_types + n_colors + sym[n, k, i, j, 2]] = 1


@njit(cache=True)
def to_rgb(envs, sym, k, v, ar, dirs, own_color, atlas, tri_mask, palette, out):
    """Render agent ``k``'s symbolic views to pixels with one atlas gather per cell.

    ``atlas[type, color, state]`` is a ``(ts, ts, 3)`` tile; other agents are drawn pointing in
    their direction relative to the viewer; the viewer is drawn at its own cell pointing up over
    what it carries (``own_color[n, k]`` < 0 marks an agent out of play, drawn as all unseen).
    ``ar`` is the viewer's row. ``out`` is ``(n_envs, v * ts, v * ts, 3)``, ``[row, column]``.
    """
    ts = atlas.shape[3]
    for n in envs:
        vd = dirs[n, k]
        ac = v // 2
        for i in range(v):
            for j in range(v):
                t = sym[n, k, i, j, 0]
                c = sym[n, k, i, j, 1]
                s = sym[n, k, i, j, 2]
                if t == AGENT:
                    s = (s - vd + 7) % 4
                tile = atlas[t, c, s]
                for yy in range(ts):
                    for xx in range(ts):
                        for ch in range(3):
                            out[n, j * ts + yy, i * ts + xx, ch] = tile[yy, xx, ch]
        # The viewer itself, when it is in play.
        oc = own_color[n, k]
        if oc >= 0:
            for yy in range(ts):
                for xx in range(ts):
                    if tri_mask[yy, xx]:
                        for ch in range(3):
                            out[n, ar * ts + yy, ac * ts + xx, ch] = palette[oc, ch]


@njit(cache=True)
def agent_colors(acfg_i, acfg_f, prestige, status, just_done, out):
    """Color id of every agent in play or just finished (fixed or from prestige); -1 otherwise."""
    for n in range(status.shape[0]):
        for k in range(status.shape[1]):
            shown = status[n, k] == ACTIVE or just_done[n, k]
            out[n, k] = agent_color(acfg_i, acfg_f, prestige, n, k) if shown else -1


class ViewOutputs(NamedTuple):
    """What :func:`step_and_observe` adds to a :class:`StepArrays` for its :func:`observe`: the
    envs to observe, the hiding table, the views, their masks and work space (the other arrays
    observe reads are the step's own, passed once)."""

    envs: np.ndarray
    hide: np.ndarray
    out: np.ndarray
    vis: np.ndarray
    opaque: np.ndarray


@njit(cache=True)
def step_and_observe(world, views):
    """:func:`step_envs` then :func:`observe`, in one call from Python (``views`` a
    :class:`ViewOutputs`)."""
    step_envs(world)
    observe(
        ViewArrays(
            envs=views.envs,
            grid=world.grid,
            pos=world.pos,
            dirs=world.dirs,
            carrying=world.carrying,
            status=world.status,
            prestige=world.prestige,
            acfg_i=world.acfg_i,
            acfg_f=world.acfg_f,
            hide=views.hide,
            out=views.out,
            vis=views.vis,
            opaque=views.opaque,
            just_done=world.just_done,
        )
    )
