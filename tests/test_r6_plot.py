"""``experiments/results/r6_plot.py``: R6's figure takes the primary condition's rows and refuses
a table that lacks one of its agents."""

from __future__ import annotations

import pytest

from tests.conftest import results_script

r6_plot = results_script("r6_plot")


def rows(skip: str = "") -> list[dict[str, str]]:
    out = []
    for i, agent in enumerate(r6_plot.AGENTS):
        for setting in r6_plot.SETTINGS:
            if agent != skip:
                out.append({"agent": agent, "condition": setting, "mean": str(i),
                            "t_low": str(i - 1), "t_high": str(i + 1)})  # fmt: skip
    out.append(
        {"agent": "r5_bc", "condition": "maze/alone", "mean": "9", "t_low": "", "t_high": ""}
    )
    return out


def test_bars_keep_the_primary_condition_only() -> None:
    found = r6_plot.bars(rows())
    assert set(found) == set(r6_plot.SETTINGS)
    assert all(found[s]["r5_bc"] == (4.0, 3.0, 5.0) for s in r6_plot.SETTINGS)  # not the maze's


def test_a_missing_agent_is_named() -> None:
    with pytest.raises(r6_plot.PlotError, match="r3_alone_aux"):
        r6_plot.bars(rows(skip="r3_alone_aux"))


def test_the_figure_is_written(tmp_path) -> None:
    table, baselines = tmp_path / "t.csv", tmp_path / "b.csv"
    header = "agent,condition,mean,t_low,t_high\n"
    table.write_text(header + "".join(
        f"{r['agent']},{r['condition']},{r['mean']},{r['t_low']},{r['t_high']}\n" for r in rows()
    ))  # fmt: skip
    setting = next(iter(r6_plot.SETTINGS))
    baselines.write_text(f"condition,policy,return\n{setting},play_safe,1.0\n")
    out = r6_plot.plot(table, baselines, tmp_path / "r6.png")
    assert out.stat().st_size > 1000
