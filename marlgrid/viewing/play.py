"""Play a marlgrid environment by hand: ``marlgrid-play ENV_ID``.

The keyboard drives one agent; the others follow a scripted policy. Each key press is one env
step. Keys:

==================  ==========================================
left / right        turn left / right
up                  move forward
p or page up        pick up
d or page down      drop
space or t          toggle (open a door, open a box)
return or w         done (wait a step)
tab                 control the next agent
backspace           reset the episode
escape              quit (so does closing the window)
==================  ==========================================

Below the map a status bar shows the step, and for each agent its last reward, its return this
episode and its prestige. Rewards and episode returns are also printed. The key handling is
:meth:`Player.handle_key`, a plain function of the key name, so it is testable without a window;
``--keys up,up,left`` feeds keys without a keyboard.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from typing import Any

import numpy as np

from marlgrid.constants import ACTIONS, DONE, DROP, FORWARD, LEFT, PICKUP, RIGHT, TOGGLE

#: Key name (pygame's) -> action id or a command.
KEYMAP: dict[str, int | str] = {
    "left": LEFT,
    "right": RIGHT,
    "up": FORWARD,
    "p": PICKUP,
    "page up": PICKUP,
    "d": DROP,
    "page down": DROP,
    "space": TOGGLE,
    "t": TOGGLE,
    "return": DONE,
    "enter": DONE,
    "w": DONE,
    "tab": "next_agent",
    "backspace": "reset",
    "escape": "quit",
}

OTHER_POLICIES = ("random", "oracle", "discoverer", "idle")


def key_to_command(key: str) -> int | str | None:
    """The action id or command (``reset``, ``quit``, ``next_agent``) of a key; None if unbound."""
    return KEYMAP.get(key.lower())


class IdlePolicy:
    """Always ``done`` (the agent stays where it is); a scripted policy."""

    def scripted_actions(self, engine: Any, k: int) -> np.ndarray:
        return np.full(engine.num_envs, DONE, dtype=np.int64)


def make_other_policy(name: str, env: Any, seed: int | None = None) -> Any:
    """A scripted policy for the agents not under the keyboard; ``auto`` picks for the env."""
    from marlgrid.policies import make_policy

    if name == "auto":
        name = "oracle" if env.rules.n_goals >= 2 else "random"
    if name == "idle":
        return IdlePolicy()
    if name in ("oracle", "discoverer") and env.rules.n_goals < 2:
        raise SystemExit(f"policy {name!r} needs a goal-cycle env; use random or idle")
    return make_policy(name, seed)


class Player:
    """One human-controlled agent in a marlgrid env, the others on a scripted policy.

    Args:
        env: a PettingZoo marlgrid env (any render mode; frames come from
            :func:`marlgrid.viewing.rendering.render_frame`).
        agent: the agent the keyboard drives.
        policy: scripted policy name for the others (``random``, ``oracle``, ``discoverer``,
            ``idle``, or ``auto``: oracle on goal-cycle envs, else random).
        seed: seed of the first episode (later resets continue the env's generator).
        verbose: print rewards and episode returns.
        render_kwargs: options of :func:`marlgrid.viewing.rendering.render_frame`.
        title: window title.
    """

    def __init__(
        self,
        env: Any,
        agent: str = "agent_0",
        policy: str = "auto",
        seed: int | None = None,
        verbose: bool = True,
        render_kwargs: dict[str, Any] | None = None,
        title: str | None = None,
    ) -> None:
        if agent not in env.possible_agents:
            raise SystemExit(f"unknown agent {agent!r}; agents are {env.possible_agents}")
        self.env = env
        self.agent = agent
        self.others = make_other_policy(policy, env, seed)
        self.verbose = verbose
        self.render_kwargs = render_kwargs or {}
        self.title = title or type(env).__name__
        self.episode = 0
        self.seed = seed
        self.last_rewards: dict[str, float] = {}
        self.returns: dict[str, float] = {}
        self.message = ""
        self._obs: dict[str, Any] = {}
        self.reset(seed)

    # -- game logic ---------------------------------------------------------------------------

    def reset(self, seed: int | None = None) -> None:
        from marlgrid.episode import reset_joint

        self._obs, _ = self.env.reset(seed=seed)
        reset_joint({"others": self.others})
        self.episode += 1
        self.last_rewards = dict.fromkeys(self.env.possible_agents, 0.0)
        self.returns = dict.fromkeys(self.env.possible_agents, 0.0)

    def handle_key(self, key: str) -> bool:
        """Apply one key press; returns False when the player wants to quit."""
        cmd = key_to_command(key)
        self.message = ""
        if cmd is None:
            self.message = f"key {key!r} does nothing"
            return True
        if cmd == "quit":
            return False
        if cmd == "reset":
            self._end_episode("reset")
            self.reset()
        elif cmd == "next_agent":
            names = self.env.possible_agents
            self.agent = names[(names.index(self.agent) + 1) % len(names)]
            self.message = f"now controlling {self.agent}"
        else:
            self.step(int(cmd))
        return True

    def step(self, action: int) -> None:
        """One env step: ``action`` for the controlled agent, the policy for the others."""
        from marlgrid.episode import policy_actions

        env = self.env
        if action >= env.action_space(self.agent).n:
            self.message = f"{self.agent} cannot {ACTIONS[action]} (restricted actions)"
            return
        others = [name for name in env.agents if name != self.agent]
        actions = policy_actions(env, dict.fromkeys(others, self.others), self._obs, others)
        if self.agent in env.agents:
            actions[self.agent] = action
        else:
            self.message = f"{self.agent} is out of play; the others move"
        self._obs, rewards, _, _, _ = env.step(actions)
        for name in env.possible_agents:
            r = float(rewards.get(name, 0.0))
            self.last_rewards[name] = r
            self.returns[name] += r
            if r and self.verbose:
                print(
                    f"step {env.step_count}: {name} reward {r:+.2f} "
                    f"(prestige {env.prestige[name]:.2f})"
                )
        if not env.agents:
            self._end_episode("done")
            self.reset()

    def _end_episode(self, why: str) -> None:
        if self.verbose:
            rets = ", ".join(f"{a} {r:+.2f}" for a, r in self.returns.items())
            print(f"episode {self.episode} {why} after {self.env.step_count} steps: {rets}")

    # -- drawing ------------------------------------------------------------------------------

    def status_lines(self) -> list[str]:
        env = self.env
        lines = [f"step {env.step_count}/{env.max_steps}  episode {self.episode}  tab: switch"]
        prestige = env.prestige
        for name in env.possible_agents:
            mark = ">" if name == self.agent else " "
            state = "" if name in env.agents else "  (out)"
            lines.append(
                f"{mark}{name}  r {self.last_rewards[name]:+.2f}  "
                f"return {self.returns[name]:+.2f}  prestige {prestige[name]:.2f}{state}"
            )
        if self.message:
            lines.append(self.message)
        return lines

    def frame(self) -> np.ndarray:
        """The env's frame with the status bar below it."""
        from marlgrid.viewing.rendering import BACKGROUND, draw_text, render_frame, text_width

        top = render_frame(self.env, **self.render_kwargs)
        lines = self.status_lines()
        scale = 2 if top.shape[1] >= 2 * text_width(max(lines, key=len)) + 8 else 1
        line_h = 7 * scale
        bar = np.empty((len(lines) * line_h + 4 * scale, top.shape[1], 3), dtype=np.uint8)
        bar[:] = BACKGROUND
        for i, line in enumerate(lines):
            draw_text(bar, 2 * scale, 2 * scale + i * line_h, line, scale=scale)
        return np.concatenate([top, bar], axis=0)

    # -- the window loop ----------------------------------------------------------------------

    def run(self, viewer: Any = None, keys: Sequence[str] | None = None) -> None:
        """Show the game and process keys until quit: from the window, or ``keys`` if given."""
        from marlgrid.viewing.human import Viewer

        viewer = viewer or Viewer(f"marlgrid-play: {self.title}")
        try:
            viewer.show(self.frame(), pump=False)
            if keys is not None:
                for key in keys:
                    if not self.handle_key(key):
                        break
                    viewer.show(self.frame(), pump=False)
                return
            while not viewer.closed:
                for kind, name in viewer.events(timeout_ms=100):
                    if kind == "quit" or not self.handle_key(name):
                        return
                    viewer.show(self.frame(), pump=False)
        finally:
            viewer.close()


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="marlgrid-play",
        description="Play a registered marlgrid env: arrows turn and move, p/d pick up and drop, "
        "space toggles, return waits, tab switches agent, backspace resets, escape quits.",
    )
    p.add_argument("env_id", help="registered id, e.g. MarlGrid-GoalCycle-13x13-3Agents-v0")
    p.add_argument("--agent", default="agent_0", help="agent under the keyboard")
    p.add_argument(
        "--policy",
        default="auto",
        choices=("auto", *OTHER_POLICIES),
        help="scripted policy of the other agents (auto: oracle on goal cycle, else random)",
    )
    p.add_argument("--seed", type=int, default=None)
    p.add_argument("--tile-size", type=int, default=None, help="pixels per map cell")
    p.add_argument("--no-views", action="store_true", help="hide the column of agent views")
    p.add_argument(
        "--keys", default=None, help="comma-separated key names to play instead of the keyboard"
    )
    add_set_option(p)
    return p


def add_set_option(parser: argparse.ArgumentParser) -> None:
    """The ``--set NAME=VALUE`` env-override option (read back with :func:`parse_overrides`)."""
    parser.add_argument(
        "--set",
        action="append",
        default=[],
        metavar="NAME=VALUE",
        help="env setting override (Python literal), e.g. --set max_steps=50",
    )


def parse_overrides(items: Sequence[str]) -> dict[str, Any]:
    """``["max_steps=50", "respawn=False"]`` -> ``{"max_steps": 50, "respawn": False}``."""
    import ast

    out: dict[str, Any] = {}
    for item in items:
        name, sep, value = item.partition("=")
        if not sep:
            raise SystemExit(f"--set expects NAME=VALUE, got {item!r}")
        try:
            out[name.strip()] = ast.literal_eval(value)
        except (ValueError, SyntaxError):
            out[name.strip()] = value
    return out


def main(argv: Sequence[str] | None = None) -> int:
    """Console entry point of ``marlgrid-play``."""
    import marlgrid

    args = build_parser().parse_args(argv)
    env = marlgrid.make(args.env_id, **parse_overrides(args.set))
    render_kwargs: dict[str, Any] = {}
    if args.tile_size is not None:
        render_kwargs["tile_size"] = args.tile_size
    if args.no_views:
        render_kwargs["agent_views"] = False
    player = Player(
        env, args.agent, args.policy, args.seed, render_kwargs=render_kwargs, title=args.env_id
    )
    keys = [k.strip() for k in args.keys.split(",") if k.strip()] if args.keys else None
    player.run(keys=keys)
    positions = ", ".join(f"{a} {p}" for a, p in env.agent_positions.items())
    print(f"final: step {env.step_count}, positions {positions}")
    env.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
