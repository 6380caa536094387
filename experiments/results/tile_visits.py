"""Goal-cycle tile entries of trained runs and scripted policies, before and after the first
reward of each episode (the table of social_high_penalty.md).

    python experiments/results/tile_visits.py runs/multirun/solo_novice/scale=small/seed_* \
        --scripted random discoverer --episodes 200 \
        --csv experiments/results/social_high_penalty_visits.csv

Every run plays ``--episodes`` fresh layouts of its own env (its config, its curriculum's stage)
with sampled actions (``--greedy``: the likeliest); scripted policies play the env of the first
run (``--rule NAME=VALUE`` sets a rule of the runs' envs: ``--rule penalty=1.5``). An entry
is a step whose reward is not 0 for agent_0 (a correct tile pays +1, a wrong one costs the
penalty).

Wrong entries are split by what the agent's own entries of the episode had shown before each
one (:class:`marlgrid.policies.CycleKnowledge`, the discoverer's bookkeeping):
``wrong_ruled_out`` entered a tile those entries had already ruled out as the next one (a
mistake an agent that remembered its episode would not make), ``wrong_exploring`` one they had
not. The ideal discoverer makes only the second kind, except where its path crosses a tile.
"""

from __future__ import annotations

import argparse
from collections.abc import Callable
from pathlib import Path
from typing import NamedTuple

import numpy as np

import marlgrid
from experiments.evaluate import rule_override
from marlgrid.agents.bookkeeping.saved_run import SavedRun
from marlgrid.agents.training.evaluation import GroupPolicy
from marlgrid.analysis.report import show_and_write_rows
from marlgrid.policies import CycleKnowledge, make_policy, scripted_action

AGENT = "agent_0"


class Entry(NamedTuple):
    """One tile entry of agent_0: its reward and whether its episode had ruled the tile out."""

    reward: float
    ruled_out: bool


def label_entries(
    entries: list[tuple[int, float]], n_goals: int, reset_on_mistake: bool = False
) -> list[Entry]:
    """The paid ones (reward not 0) of one episode's tile entries ``(tile, reward)``, in order,
    each wrong one marked when the entries before it had ruled its tile out as the next one
    (an unpaid entry, such as a first tile that pays nothing, still counts as seen)."""
    knowledge, out = CycleKnowledge(n_goals), []
    for tile, reward in entries:
        if reward != 0.0:
            out.append(Entry(reward, bool(reward < 0 and tile not in knowledge.candidates())))
        knowledge.learn(tile, reward, reset_on_mistake)
    return out


class Played(NamedTuple):
    """One episode of agent_0's tile entries ``(step, tile, reward)`` and its cycle's rules."""

    entries: list[tuple[int, int, float]]
    n_goals: int
    reset_on_mistake: bool


def play_episode(
    env, players, scripted, seed: int, observe: Callable[[int], None] | None = None
) -> Played:
    """Play one episode; ``observe(step)`` is called once the step's actions are chosen (the
    trained groups' memory then holds what they read at that step)."""
    obs, _ = env.reset(seed=seed)
    engine, k = env.engine, env.possible_agents.index(AGENT)
    rules = engine.episode_rules[0]
    if players is not None:
        players.reset(obs)
    for policy in scripted.values():
        if hasattr(policy, "reset"):
            policy.reset()
    ended: dict[str, bool] = {}
    entries, step = [], 0
    while env.agents:
        actions = players.actions(obs, ended) if players is not None else {}
        for agent, policy in scripted.items():
            actions[agent] = scripted_action(policy, env, agent)
        if observe is not None:
            observe(step)
        before = engine.pos[0, k].copy()
        obs, rewards, terms, truncs, _ = env.step({a: actions[a] for a in env.agents})
        x, y = engine.pos[0, k]
        tile = int(engine.cycle_id[0, x, y])
        if tile >= 0 and (x, y) != tuple(before):  # agent_0 stepped onto a tile: an entry
            entries.append((step, tile, float(rewards.get(AGENT, 0.0))))
        ended = {a: terms.get(a, False) or truncs.get(a, False) for a in env.possible_agents}
        step += 1
    return Played(entries, rules.n_goals, rules.reset_on_mistake)


def episode_entries(env, players, scripted, seed: int) -> list[Entry]:
    """agent_0's paid tile entries of one episode, labelled by :func:`label_entries`."""
    played = play_episode(env, players, scripted, seed)
    pairs = [(tile, reward) for _, tile, reward in played.entries]
    return label_entries(pairs, played.n_goals, played.reset_on_mistake)


def summarize(name: str, episodes: list[list[Entry]]) -> dict[str, float | str]:
    """Per-episode means: rewards, penalties (split into ruled-out and exploring), entries
    after the first reward, return."""
    ruled_out = np.array([sum(e.ruled_out for e in ep) for ep in episodes], float)
    episodes = [[e.reward for e in ep] for ep in episodes]
    rewards = np.array([sum(r > 0 for r in e) for e in episodes], float)
    penalties = np.array([sum(r < 0 for r in e) for e in episodes], float)
    after = []
    for e in episodes:
        first = next((i for i, r in enumerate(e) if r > 0), None)
        after.append(0 if first is None else len(e) - first - 1)
    after = np.array(after, float)
    got = rewards > 0
    returns = np.array([sum(e) for e in episodes])
    return {
        "policy": name,
        "episodes": len(episodes),
        "return": returns.mean(),
        "rewards": rewards.mean(),
        "penalties": penalties.mean(),
        "with_a_reward": got.mean(),
        "entries_after_first_reward": after.mean(),
        "no_entry_after_first_reward": ((after == 0) & (rewards > 0)).sum()
        / max(1, (rewards > 0).sum()),
        "wrong_ruled_out": ruled_out.mean(),
        "wrong_exploring": (penalties - ruled_out).mean(),
    }


def _cell(key: str, value: object) -> str:
    return f"{key}={value:.3f}" if isinstance(value, float) else f"{key}={value}"


def run_players(run_dir: Path, greedy: bool, rules: dict[str, object] | None = None):
    """The run's env (under its curriculum's stage, ``rules`` on top) and its trained groups
    acting in it."""
    run = SavedRun(run_dir).policies(greedy, rules)
    env = marlgrid.make(run.cfg.env.id, **run.settings)
    players = GroupPolicy(run.groups, env)
    for g in players.groups:  # acting copies are greedy unless told otherwise
        g.explore = not greedy
    return env, players, run.scripted


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("runs", type=Path, nargs="+")
    parser.add_argument("--scripted", nargs="*", default=[], help="scripted policies to compare")
    parser.add_argument("--episodes", type=int, default=200)
    parser.add_argument("--greedy", action="store_true")
    parser.add_argument(
        "--rule", type=rule_override, action="append", default=[], metavar="NAME=VALUE",
        help="a rule the runs play under (repeatable)",
    )  # fmt: skip
    parser.add_argument("--seed", type=int, default=50_000, help="first layout seed")
    parser.add_argument("--csv", type=Path)
    args = parser.parse_args(argv)
    seeds = range(args.seed, args.seed + args.episodes)
    rows = []
    env = None
    for run in args.runs:
        env, players, scripted = run_players(run, args.greedy, dict(args.rule))
        rows.append(
            summarize(str(run), [episode_entries(env, players, scripted, s) for s in seeds])
        )
    for name in args.scripted:
        policies = {a: make_policy(name, 7) for a in env.possible_agents}
        rows.append(summarize(name, [episode_entries(env, None, policies, s) for s in seeds]))
    show_and_write_rows(rows, args.csv)


if __name__ == "__main__":
    main()
