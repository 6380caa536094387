"""The README's training-speed claims stand on the committed quiet-machine ledger, and say what
the ledger's floor leaves out (an earlier text credited the gap above it to small ops)."""

from __future__ import annotations

import csv
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def test_the_readme_speed_claims_match_the_quiet_ledger_and_name_what_the_floor_leaves_out():
    readme = (ROOT / "README.md").read_text()
    with (ROOT / "experiments/results/ledger_quiet_1207.csv").open(newline="") as f:
        rows = [r for r in csv.DictReader(f) if r["loop"] == "canonical"]
    speeds = [int(r["agent_steps_per_s"]) for r in rows]
    low, high = (
        float(x) * 1000
        for x in re.search(r"runs at ([\d.]+)k-([\d.]+)k agent-steps/s", readme).groups()
    )
    assert low - 50 <= min(speeds) and max(speeds) <= high + 50, (speeds, low, high)
    assert "many small ops" not in readme
    assert "floor counts matrix products only" in readme
