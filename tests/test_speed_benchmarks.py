"""The training-speed benchmarks' own arithmetic: phase accounting, the matrix-product census,
steady-state rates and sweep layouts (their figures live in experiments/benchmarks/README.md)."""

from __future__ import annotations

import argparse
import time

import pytest
import torch

from experiments.benchmarks import ledger, sweep_speed, versus_commit


def test_a_nested_phase_counts_for_itself_not_for_its_parent():
    timer = ledger.PhaseTimer()
    with timer.phase("update"):
        time.sleep(0.02)
        with timer.phase("backward"):
            time.sleep(0.03)
    seconds = timer.take()
    assert 0.03 <= seconds["backward"] < 0.045
    assert 0.02 <= seconds["update"] < 0.03  # the backward's 30 ms are not in it
    assert timer.take() == {}  # taking resets


def test_wrapped_methods_time_their_phase_and_patches_undo():
    timer = ledger.PhaseTimer()

    class Env:
        def step(self) -> int:
            time.sleep(0.01)
            return 7

    patches = ledger.Patches()
    patches.wrap(timer, Env, "step", "env")
    assert Env().step() == 7 and timer.take()["env"] >= 0.01
    patches.undo()
    Env().step()
    assert timer.take() == {}


def test_the_census_counts_every_matrix_product_by_phase_and_shape():
    timer = ledger.PhaseTimer()
    census = ledger.matmul_census(timer)
    layer, lstm = torch.nn.Linear(5, 3), torch.nn.LSTM(3, 4)
    x = torch.randn(6, 2, 5, requires_grad=True)
    with census:
        with timer.phase("update"):
            out, _ = lstm(layer(x))
        with timer.phase("backward"):
            out.sum().backward()
        with timer.phase("act"), torch.inference_mode():
            layer(torch.randn(2, 5))
    counts = {(phase, shape): n for (phase, (kind, shape)), n in census.counts.items()}
    assert counts[("update", (12, 5, 3))] == 1  # the linear layer on 6 x 2 rows
    assert counts[("update", (12, 3, 16))] == 1  # the LSTM's input projection, 4 gates x 4
    assert counts[("update", (2, 4, 16))] == 6  # one recurrent product per step
    assert counts[("backward", (12, 3, 16))] == 2 and counts[("backward", (2, 4, 16))] == 12
    assert counts[("act", (2, 5, 3))] == 1  # inference mode: linear is not decomposed
    seconds, flop = ledger.work_time_and_flop(("mm", (8, 8, 8)))
    assert seconds > 0 and flop == 2 * 8**3


def test_a_convolution_is_timed_as_itself_and_its_backward_as_two():
    timer = ledger.PhaseTimer()
    census = ledger.matmul_census(timer)
    conv = torch.nn.Conv2d(3, 4, 3, padding=1)
    x = torch.randn(2, 3, 5, 5)
    with census:
        with timer.phase("update"):
            y = conv(x)
        with timer.phase("backward"):
            y.sum().backward()
    ((phase, item), n), ((phase2, item2), n2) = sorted(census.counts.items())
    assert (phase, n, phase2, n2) == ("backward", 2, "update", 1) and item == item2
    assert item == ("conv", ((2, 3, 5, 5), (4, 3, 3, 3), (1, 1), (1, 1), (1, 1), 1))
    seconds, flop = ledger.work_time_and_flop(item)
    assert seconds > 0 and flop == 2 * (2 * 4 * 5 * 5) * (3 * 3 * 3)


def test_steady_rate_leaves_out_the_first_rows():
    # 1000 steps per row; the first row took 10 s (start-up), every later one 1 s
    times = [10.0 + k for k in range(6)]
    points = [(1000.0 * (k + 1), 1000.0 * (k + 1) / t) for k, t in enumerate(times)]
    assert versus_commit.steady_rate(points, 1) == pytest.approx(1000.0)
    assert versus_commit.steady_rate(points, 0) == pytest.approx(1000.0)
    with pytest.raises(ValueError, match="6 logged points"):
        versus_commit.steady_rate(points, 5)


def test_progress_lines_of_either_popgym_script_give_points():
    text = (
        "  RepeatPreviousEasy gru seed 0: step     4,096  batch return -0.500  1,165 steps/s\n"
        "  RepeatPreviousEasy/gru/seed_0: step     8,192  batch return -0.4  1,200.5 steps/s\n"
    )
    assert versus_commit.printed_points(text) == [(4096.0, 1165.0), (8192.0, 1200.5)]


def test_a_sweep_layout_is_lanes_by_threads():
    assert sweep_speed.parse_layout("2x1") == (2, 1)
    for bad in ("2", "0x1", "ax2"):
        with pytest.raises(argparse.ArgumentTypeError, match="LANESxTHREADS|>= 1"):
            sweep_speed.parse_layout(bad)
