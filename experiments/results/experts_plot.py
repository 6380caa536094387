"""The figures of ``experts.md``: return, correct entries, penalties and the curriculum's penalty
against env steps, from the committed curve CSVs alone.

    python experiments/results/experts_plot.py  # experts_curves.png, experts_part<N>_curves.png

Part 1 (``experts_curves.png``) draws recipe beside control from
``experts_train_<metric>_curves.csv``; part 2 (``experts_part2_curves.png``) the canonical 13x13
task beside 4 tiles from ``experts_part2_<metric>_curves.csv``; part 3
(``experts_part3_curves.png``) the gated 4-tile runs beside part 2's 4-tile run (``aggregate.py``'s
output: the mean over seeds with its Student-t 95% band, none at one seed); part 4
(``experts_part4_curves.png``) the memory probes beside part 3's gated runs; part 5
(``experts_part5_curves.png``) the gated 13x13 run beside part 2's; part 6
(``experts_part6_curves.png``) the 4-tile run gated at 5 beside part 3's; part 7
(``experts_part7_curves.png``) part 5's seed trained on to 16M steps; parts 8 and 9
(``experts_part8_curves.png``, ``experts_part9_curves.png``) 13x13 started from the 7x7 library
expert beside part 5; part 10 (``experts_part10_curves.png``) 4 tiles started from the 3-tile
library expert beside part 3; part 11 (``experts_part11_curves.png``) part 9's seed trained on to
16M steps beside part 7; part 12 (``experts_part12_curves.png``) part 10's seeds trained on
to 6M steps; part 13 (``experts_part13_curves.png``) part 10's start with a 6M-step budget
beside part 10; part 14 (``experts_part14_curves.png``) part 9's start with a 16M-step budget
beside parts 7 and 9; part 15 (``experts_part15_curves.png``) part 10 with 64-step BPTT
chunks beside part 10; part 16 (``experts_part16_curves.png``) the 4-tile stage with an LSTM of
256 units beside part 10's 128; part 17 (``experts_part17_curves.png``) the 4-tile stage with
the learners seeing their cell and facing beside part 10; part 18 (``experts_part18_curves.png``)
part 10 plus the reward-prediction loss beside part 10; part 19 (``experts_part19_curves.png``)
part 18 with a 6M-step budget beside part 18; part 20 (``experts_part20_curves.png``) part 18's
control, penalty 1.5 from the first step, beside part 18; part 21
(``experts_part21_curves.png``) the 4-tile preset at full scale (13x13) from the 13x13 3-tile
expert; part 22 (``experts_part22_curves.png``) the same from the 7x7 4-tile expert beside
part 21; part 24 (``experts_part24_curves.png``) two schedules for it without the loss. The
return panel
carries the scripted baselines of each arm's setup (every agent scripted, penalty 1.5).
"""

from __future__ import annotations

import argparse
import csv
from pathlib import Path
from typing import NamedTuple

from marlgrid.analysis.report import CurveSet, read_curves_csv

RESULTS = Path(__file__).resolve().parent
#: metric stem -> panel title
PANELS = {
    "episodic_return": "return per agent-episode",
    "rewards": "correct entries per agent-episode",
    "penalties": "penalised entries per agent-episode (0 while the penalty is 0)",
    "penalty": "penalty of a wrong tile (curriculum)",
}
BASELINES = ("discoverer", "reward_blind", "play_safe", "random")


class Arm(NamedTuple):
    """A condition of the curve CSVs: its legend label and its baselines' setup."""

    label: str
    baselines: str = "goal_cycle_baselines.csv"
    setup: tuple[str, str, str] = ("7", "100", "3")  # size, max_steps, n_goals
    policies: tuple[str, ...] = BASELINES
    prefix: str | None = None  # its curve CSVs' prefix, when not the figure's


def canonical_arm(label: str) -> Arm:
    """An arm on the canonical 13x13 / 250-step task, with the discoverer and cycler there."""
    return Arm(label, setup=("13", "250", "3"), policies=("discoverer", "reward_blind"))


def four_tile_arm(label: str) -> Arm:
    """An arm on 7x7 / 100 steps with 4 tiles, with the 4-tile discoverer and cycler."""
    return Arm(
        label, "goal_cycle_baselines_4tiles.csv", ("7", "100", "4"), ("discoverer", "reward_blind")
    )


def canonical_four_tile_arm(label: str) -> Arm:
    """An arm on 13x13 / 250 steps with 4 tiles, with the 4-tile discoverer and cycler there."""
    return Arm(
        label, "goal_cycle_baselines_4tiles.csv", ("13", "250", "4"), ("discoverer", "reward_blind")
    )


class Figure(NamedTuple):
    prefix: str  # the curve CSVs are <prefix>_<metric stem>_curves.csv (unless an arm says)
    arms: dict[str, Arm]  # condition label in the curve CSVs -> arm
    title: str
    out: str


FIGURES = (
    Figure(
        "experts_train",
        {
            "name=goal_cycle_expert": Arm("recipe: penalty annealed 0 -> 1.5"),
            "name=goal_cycle_expert_fixed_penalty": Arm(
                "control: penalty 1.5 throughout", policies=()
            ),
        },
        "Goal-cycle experts, 7x7 / 100 steps: mean over seeds, 95% Student-t band",
        "experts_curves.png",
    ),
    Figure(
        "experts_part2",
        {
            "name=goal_cycle_expert,scale=full": canonical_arm(
                "13x13 / 250 steps / 3 tiles (1 seed)"
            ),
            "name=goal_cycle_expert,scale=small": four_tile_arm(
                "7x7 / 100 steps / 4 tiles (1 seed)"
            ),
            "name=goal_cycle_expert_tile_curriculum,scale=small": Arm(
                "7x7, 3 tiles then 4 from 2M (probe, 1 seed)", policies=()
            ),
        },
        "The recipe on the canonical task and with 4 tiles: mean over seeds, 95% Student-t band",
        "experts_part2_curves.png",
    ),
    Figure(
        "experts_part3",
        {
            "name=goal_cycle_expert_gated,scale=small": four_tile_arm(
                "4 tiles, penalty gated on the return"
            ),
            "name=goal_cycle_expert,scale=small": Arm(
                "4 tiles, fixed anneal (part 2, 1 seed)", policies=(), prefix="experts_part2"
            ),
        },
        "4-tile experts, 7x7 / 100 steps: mean over seeds, 95% Student-t band",
        "experts_part3_curves.png",
    ),
    Figure(
        "experts_part4",
        {
            "name=goal_cycle_expert_gated_chunk64,scale=small": four_tile_arm(
                "4 tiles, gated, 64-step BPTT chunks (1 seed)"
            ),
            "name=goal_cycle_expert_gated,scale=small": Arm(
                "4 tiles, gated, 16-step chunks (part 3, 2 seeds)",
                policies=(),
                prefix="experts_part3",
            ),
        },
        "4-tile experts, memory probes, 7x7 / 100 steps: mean over seeds, 95% Student-t band",
        "experts_part4_curves.png",
    ),
    Figure(
        "experts_part5",
        {
            "name=goal_cycle_expert_13x13_gated,scale=full": canonical_arm(
                "13x13, penalty gated on the return (1 seed)"
            ),
            "name=goal_cycle_expert,scale=full": Arm(
                "13x13, fixed anneal (part 2, 1 seed, stopped at 4.87M)",
                policies=(),
                prefix="experts_part2",
            ),
        },
        "Goal-cycle experts, 13x13 / 250 steps / 3 tiles: one seed per arm",
        "experts_part5_curves.png",
    ),
    Figure(
        "experts_part6",
        {
            "name=goal_cycle_expert_gate5,scale=small": four_tile_arm(
                "4 tiles, gate at 5, 6M steps (1 seed)"
            ),
            "name=goal_cycle_expert_gated,scale=small": Arm(
                "4 tiles, gate at 8, 3M steps (part 3, 2 seeds)",
                policies=(),
                prefix="experts_part3",
            ),
        },
        "4-tile experts, a lower gate and a longer budget, 7x7 / 100 steps",
        "experts_part6_curves.png",
    ),
    Figure(
        "experts_part7",
        {
            "name=goal_cycle_expert_13x13_gated_16m,scale=full": canonical_arm(
                "13x13, gated, trained on to 16M (part 5's seed; 8M-16M is part 7)"
            ),
        },
        "Goal-cycle expert, 13x13 / 250 steps / 3 tiles: part 5's seed trained on to 16M steps",
        "experts_part7_curves.png",
    ),
    Figure(
        "experts_part8",
        {
            "name=goal_cycle_expert_13x13_warm,scale=full": canonical_arm(
                "13x13, gated, started from the 7x7 library expert (1 seed)"
            ),
            "name=goal_cycle_expert_13x13_gated,scale=full": Arm(
                "13x13, gated, from scratch (part 5, 1 seed)", policies=(), prefix="experts_part5"
            ),
        },
        "Goal-cycle expert, 13x13 / 250 steps / 3 tiles: a size curriculum (7x7 expert -> 13x13)",
        "experts_part8_curves.png",
    ),
    Figure(
        "experts_part9",
        {
            "name=goal_cycle_expert_13x13_warm_8m,scale=full": canonical_arm(
                "13x13, gated, from the 7x7 library expert, 8M steps (1 seed)"
            ),
            "name=goal_cycle_expert_13x13_warm,scale=full": Arm(
                "the same start, 4M steps (part 8)", policies=(), prefix="experts_part8"
            ),
            "name=goal_cycle_expert_13x13_gated,scale=full": Arm(
                "13x13, gated, from scratch (part 5)", policies=(), prefix="experts_part5"
            ),
        },
        "Goal-cycle expert, 13x13 / 250 steps / 3 tiles: the size curriculum with part 5's budget",
        "experts_part9_curves.png",
    ),
    Figure(
        "experts_part10",
        {
            "name=goal_cycle_expert_4tiles_warm,scale=small": four_tile_arm(
                "4 tiles, gate at 8, started from the 3-tile library expert (2 seeds)"
            ),
            "name=goal_cycle_expert_gated,scale=small": Arm(
                "4 tiles, gate at 8, from scratch (part 3, 2 seeds)",
                policies=(),
                prefix="experts_part3",
            ),
        },
        "4-tile experts started from a 3-tile expert (a tile curriculum), 7x7 / 100 steps",
        "experts_part10_curves.png",
    ),
    Figure(
        "experts_part11",
        {
            "name=goal_cycle_expert_13x13_warm_16m,scale=full": canonical_arm(
                "13x13 from the 7x7 expert, trained on to 16M (part 9's seed; 8M-16M is part 11)"
            ),
            "name=goal_cycle_expert_13x13_gated_16m,scale=full": Arm(
                "13x13 from scratch, trained on to 16M (part 7)",
                policies=(),
                prefix="experts_part7",
            ),
        },
        "Goal-cycle expert, 13x13 / 250 steps / 3 tiles: the size curriculum trained on to 16M",
        "experts_part11_curves.png",
    ),
    Figure(
        "experts_part12",
        {
            "name=goal_cycle_expert_4tiles_warm_6m,scale=small": four_tile_arm(
                "4 tiles from the 3-tile expert, trained on to 6M (3M-6M is part 12)"
            ),
        },
        "4-tile experts started from a 3-tile expert, trained on to 6M steps, 7x7 / 100 steps",
        "experts_part12_curves.png",
    ),
    Figure(
        "experts_part13",
        {
            "name=goal_cycle_expert_4tiles_warm_long,scale=small": four_tile_arm(
                "4 tiles from the 3-tile expert, 6M-step budget (2 seeds)"
            ),
            "name=goal_cycle_expert_4tiles_warm,scale=small": Arm(
                "the same start, 3M-step budget (part 10, 2 seeds)",
                policies=(),
                prefix="experts_part10",
            ),
        },
        "4-tile experts started from a 3-tile expert, a 6M-step budget, 7x7 / 100 steps",
        "experts_part13_curves.png",
    ),
    Figure(
        "experts_part14",
        {
            "name=goal_cycle_expert_13x13_warm_long,scale=full": canonical_arm(
                "13x13 from the 7x7 expert, a 16M-step budget (1 seed)"
            ),
            "name=goal_cycle_expert_13x13_warm_8m,scale=full": Arm(
                "the same start, 8M-step budget (part 9)", policies=(), prefix="experts_part9"
            ),
            "name=goal_cycle_expert_13x13_gated_16m,scale=full": Arm(
                "13x13 from scratch, trained on to 16M (part 7)",
                policies=(),
                prefix="experts_part7",
            ),
        },
        "Goal-cycle expert, 13x13 / 250 steps / 3 tiles: the size curriculum, a 16M-step budget",
        "experts_part14_curves.png",
    ),
    Figure(
        "experts_part15",
        {
            "name=goal_cycle_expert_4tiles_warm_chunk64,scale=small": four_tile_arm(
                "4 tiles from the 3-tile expert, 64-step BPTT chunks (2 seeds)"
            ),
            "name=goal_cycle_expert_4tiles_warm,scale=small": Arm(
                "the same start, 16-step chunks (part 10, 2 seeds)",
                policies=(),
                prefix="experts_part10",
            ),
        },
        "4-tile experts started from a 3-tile expert, 64-step BPTT chunks, 7x7 / 100 steps",
        "experts_part15_curves.png",
    ),
    Figure(
        "experts_part16",
        {
            "name=goal_cycle_expert_4tiles_warm_lstm256,scale=small": four_tile_arm(
                "4 tiles from a 3-tile expert, LSTM 256 (2 seeds)"
            ),
            "name=goal_cycle_expert_4tiles_warm,scale=small": Arm(
                "4 tiles from a 3-tile expert, LSTM 128 (part 10, 2 seeds)",
                policies=(),
                prefix="experts_part10",
            ),
        },
        "4-tile experts started from a 3-tile expert, a wider core (LSTM 256), 7x7 / 100 steps",
        "experts_part16_curves.png",
    ),
    Figure(
        "experts_part17",
        {
            "name=goal_cycle_expert_4tiles_warm_position,scale=small": four_tile_arm(
                "4 tiles from a 3-tile expert, seeing cell and facing (2 seeds)"
            ),
            "name=goal_cycle_expert_4tiles_warm,scale=small": Arm(
                "4 tiles from the 3-tile library expert (part 10, 2 seeds)",
                policies=(),
                prefix="experts_part10",
            ),
        },
        "4-tile experts started from a 3-tile expert, cell and facing as inputs, 7x7 / 100 steps",
        "experts_part17_curves.png",
    ),
    Figure(
        "experts_part18",
        {
            "name=goal_cycle_expert_4tiles_warm_next_reward,scale=small": four_tile_arm(
                "4 tiles from the 3-tile expert, reward-prediction loss (3 seeds)"
            ),
            "name=goal_cycle_expert_4tiles_warm,scale=small": Arm(
                "the same start without the loss (part 10, 2 seeds)",
                policies=(),
                prefix="experts_part10",
            ),
        },
        "4-tile experts started from a 3-tile expert, a reward-prediction loss, 7x7 / 100 steps",
        "experts_part18_curves.png",
    ),
    Figure(
        "experts_part19",
        {
            "name=goal_cycle_expert_4tiles_warm_next_reward_6m,scale=small": four_tile_arm(
                "4 tiles, reward-prediction loss, 6M steps (2 seeds)"
            ),
            "name=goal_cycle_expert_4tiles_warm_next_reward,scale=small": Arm(
                "the same with 3M steps (part 18, 3 seeds)",
                policies=(),
                prefix="experts_part18",
            ),
        },
        "4-tile experts with the reward-prediction loss, a 6M-step budget, 7x7 / 100 steps",
        "experts_part19_curves.png",
    ),
    Figure(
        "experts_part20",
        {
            "name=goal_cycle_expert_4tiles_warm_next_reward_fixed,scale=small": four_tile_arm(
                "control: penalty 1.5 from the first 4-tile step (3 seeds)"
            ),
            "name=goal_cycle_expert_4tiles_warm_next_reward,scale=small": Arm(
                "the recipe: gated penalty stages (part 18, 3 seeds)",
                policies=(),
                prefix="experts_part18",
            ),
        },
        "The 4-tile recipe and its control, 7x7 / 100 steps",
        "experts_part20_curves.png",
    ),
    Figure(
        "experts_part21",
        {
            "name=goal_cycle_expert_4tiles_13x13,scale=full": canonical_four_tile_arm(
                "4 tiles on 13x13 from the 13x13 3-tile expert (seed 1)"
            ),
        },
        "The 4-tile recipe at full scale from a 3-tile expert, 13x13 / 250 steps",
        "experts_part21_curves.png",
    ),
    Figure(
        "experts_part22",
        {
            "name=goal_cycle_expert_4tiles_13x13_from_7x7,scale=full": canonical_four_tile_arm(
                "4 tiles on 13x13 from the 7x7 4-tile expert (seed 1)"
            ),
            "name=goal_cycle_expert_4tiles_13x13,scale=full": Arm(
                "from the 13x13 3-tile expert (part 21, seed 1)",
                policies=(),
                prefix="experts_part21",
            ),
        },
        "The 4-tile recipe at full scale from the small scale's 4-tile expert, 13x13 / 250 steps",
        "experts_part22_curves.png",
    ),
    Figure(
        "experts_part24",
        {
            "name=goal_cycle_expert_4tiles_13x13_fine": canonical_four_tile_arm(
                "penalty stages of 0.05, gate 10 (seed 1)"
            ),
            "name=goal_cycle_expert_4tiles_13x13_gate18": Arm(
                "penalty stages of 0.25, gate 18 (seed 1)", policies=()
            ),
        },
        "Two schedules for the 4-tile full scale, no reward-prediction loss, 13x13 / 250 steps",
        "experts_part24_curves.png",
    ),
)


def baselines(
    path: Path, setup: tuple[str, str, str] = ("7", "100", "3"), policies=BASELINES
) -> dict[str, float]:
    """The scripted policies' mean return in ``setup`` (size, max_steps, n_goals), penalty 1.5,
    every agent scripted."""
    with path.open(newline="", encoding="utf-8") as f:
        return {
            r["policy"]: float(r["return_mean"])
            for r in csv.DictReader(f)
            if (r["size"], r["max_steps"], r["n_goals"], r["condition"]) == (*setup, "all_agents")
            and float(r["penalty"]) == 1.5
            and r["policy"] in policies
        }


def arm_curves(results: Path, figure: Figure, stem: str) -> dict[str, CurveSet]:
    """The figure's arms' curves of one metric stem, each from its own prefix's CSV (an arm
    whose CSV or condition is missing is left out)."""
    out = {}
    for condition, arm in figure.arms.items():
        path = results / f"{arm.prefix or figure.prefix}_{stem}_curves.csv"
        found = {c.label: c for c in read_curves_csv(path)} if path.exists() else {}
        if condition in found:
            out[condition] = found[condition]
    return out


def plot(results: Path, figure: Figure, out: Path) -> Path:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(2, 2, figsize=(11, 7.5), sharex=True)
    for ax, (stem, title) in zip(axes.flat, PANELS.items(), strict=True):
        colours = {condition: f"C{i}" for i, condition in enumerate(figure.arms)}
        for condition, curve in arm_curves(results, figure, stem).items():
            arm = figure.arms[condition]  # an arm keeps its colour where another has no curve
            band = curve.bands
            (line,) = ax.plot(curve.grid, band.mean, label=arm.label, color=colours[condition])
            ax.fill_between(
                curve.grid, band.mean_low, band.mean_high, color=line.get_color(), alpha=0.2
            )
            if stem != "episodic_return":
                continue
            scripted = baselines(results / arm.baselines, arm.setup, arm.policies)
            for policy, value in scripted.items():
                ax.axhline(value, ls=":", lw=1, color=line.get_color())
                ax.annotate(policy, (0, value), fontsize=7, color=line.get_color(), va="bottom")
        ax.set_title(title, fontsize=10)
        ax.grid(alpha=0.3)
    for ax in axes[1]:
        ax.set_xlabel("env steps")
    axes[0, 0].legend(fontsize=8, loc="lower right")
    fig.suptitle(figure.title)
    fig.tight_layout()
    fig.savefig(out, dpi=110)
    plt.close(fig)
    return out


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--results", type=Path, default=RESULTS, help="where the CSVs lie")
    parser.add_argument("--out-dir", type=Path, default=RESULTS)
    args = parser.parse_args(argv)
    for figure in FIGURES:
        if not (args.results / f"{figure.prefix}_episodic_return_curves.csv").exists():
            print(f"skipped {figure.out}: no {figure.prefix}_*_curves.csv yet")
            continue
        print(f"wrote {plot(args.results, figure, args.out_dir / figure.out)}")


if __name__ == "__main__":
    main()
