"""Chance levels of the next-view loss's cell accuracy: what two trivial predictors score.

    python experiments/results/view_chance.py runs/r3/social_aux/seed_* runs/r3/alone_aux/seed_* \
        runs/r3/social_autoencoder/seed_* --steps 10000 \
        --csv experiments/results/social_r3_view_chance.csv

The ``next_view`` term logs ``cell_accuracy``, the share of the view's cell ids (type, colour,
state of every cell) its decoder gets right (:mod:`marlgrid.agents.algorithms.next_view`). Read
alone it says little: most of a 7x7 view does not change in a step. Each run (a run directory or
an exported agent file) plays frozen, sampling its actions as in training, in its own env, and
its learner's view pairs ``(o_t, o_t+1)`` are scored for

- ``copy``: predict that the next view is the current one (for the autoencoder control, whose
  target is the current view, this predictor is exact: 1.0);
- ``constant``: predict for each cell and channel the id seen there most often in these
  targets (fitted on the same steps, so an upper bound for any fixed prediction).

Pairs are kept as the loss keeps them: both steps in play, no respawn in between; an episode's
last target is its stored final view. One row per run; with ``--merge`` the rows go into the
existing ``--csv``, keeping those of runs not measured now.
"""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

import numpy as np

from marlgrid.agents.bookkeeping.saved_run import SavedRun
from marlgrid.agents.training.env_sources import make_env_source
from marlgrid.agents.training.evaluation import acting_copies
from marlgrid.agents.training.rollout import MultiAgentRollout
from marlgrid.analysis import AnalysisError
from marlgrid.analysis.report import show_and_write_rows

NUM_ENVS = 16


class ViewPairs:
    """A step editor that keeps one agent's ``(view, next view)`` pairs and changes nothing."""

    def __init__(self, agent: str) -> None:
        self.agent = agent
        self.current: list[np.ndarray] = []
        self.following: list[np.ndarray] = []
        self._last: tuple[np.ndarray, np.ndarray] | None = None  # views and active, previous step

    def after_step(
        self, vec: Any, obs: dict[str, Any], infos: dict[str, Any]
    ) -> tuple[dict[str, Any], dict[str, Any]]:
        k = vec.possible_agents.index(self.agent)
        views = np.array(obs[self.agent]["image"])
        active = np.asarray(infos["active"])[:, k].copy()
        targets = views.copy()
        ended = np.asarray(infos.get("_final_obs", np.zeros(len(views), bool)))
        if ended.any():
            targets[ended] = np.asarray(infos["final_obs"][self.agent]["image"])[ended]
        if self._last is not None:
            before, was_active = self._last
            respawned = np.asarray(infos.get("respawned", np.zeros_like(infos["active"])))[:, k]
            keep = was_active & (active | ended) & ~respawned
            self.current.append(before[keep])
            self.following.append(targets[keep])
        self._last = (views, active)
        return obs, infos

    def scores(self) -> dict[str, float]:
        """Cell accuracy of the copy and constant predictors over the kept pairs."""
        now, nxt = np.concatenate(self.current), np.concatenate(self.following)
        constant = np.empty_like(nxt[0])
        for idx in np.ndindex(constant.shape):
            ids, counts = np.unique(nxt[(slice(None), *idx)], return_counts=True)
            constant[idx] = ids[counts.argmax()]
        return {
            "pairs": len(nxt),
            "copy": float((now == nxt).mean()),
            "constant": float((nxt == constant).mean()),
        }


def measure(run: Path, steps: int, seed: int) -> dict[str, object]:
    """The two predictors' accuracies on ``steps`` env steps of ``run`` playing sampled."""
    played = SavedRun(run).policies(greedy=False)
    vec = make_env_source(played.cfg.env.id, NUM_ENVS, played.settings)
    agent = vec.possible_agents[played.learner_columns[0]]
    pairs = ViewPairs(agent)
    rollout = MultiAgentRollout(
        vec, acting_copies(played.groups, None), played.scripted, seed=seed, editors=[pairs]
    )
    rollout.collect(max(1, steps // NUM_ENVS))
    return {"run": str(run), "agent": agent, **pairs.scores()}


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("runs", nargs="+", type=Path, help="run directories or exported agent files")
    ap.add_argument("--steps", type=int, default=20000, help="env steps per run (default 20000)")
    ap.add_argument("--seed", type=int, default=777)
    ap.add_argument("--csv", type=Path, help="write the rows here")
    ap.add_argument(
        "--merge", action="store_true", help="keep the --csv rows of runs not measured now"
    )
    args = ap.parse_args(argv)
    if args.steps < NUM_ENVS:
        ap.error(f"--steps {args.steps}: needs at least {NUM_ENVS} (one step of every env)")
    if args.merge and args.csv is None:
        ap.error("--merge needs --csv")
    rows = [measure(run, args.steps, args.seed) for run in args.runs]
    try:
        show_and_write_rows(rows, args.csv, "run" if args.merge else None)
    except AnalysisError as exc:
        raise SystemExit(f"error: {exc}") from None


if __name__ == "__main__":
    main()
