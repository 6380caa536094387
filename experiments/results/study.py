"""What the study folders' analyses share (``experiments/results/<study>/analyse.py``).

A study's runs live under ``runs/<study>/<arm>/seed_<k>`` and may not survive the session, so
an analysis **keeps** what its page needs of each finished run in the study folder
(:func:`keep`: the config, the curve columns of its metrics thinned, the end of its log, and
where asked the exported policy), pools only runs whose configs differ in nothing but the seed
and bookkeeping (:func:`check_poolable`), and calls the project's scripts as subprocesses
(:func:`run`).
"""

from __future__ import annotations

import csv
import json
import subprocess
import sys
from collections.abc import Iterable, Sequence
from pathlib import Path

from marlgrid.analysis.report import write_csv
from marlgrid.analysis.runs import COMPLETE, config_differences, find_runs

ROOT = Path(__file__).resolve().parents[2]
#: a kept run's metrics: every KEEP_EVERY-th row and the last KEEP_LAST; its log's last lines
KEEP_EVERY, KEEP_LAST, LOG_TAIL = 10, 100, 20


def run(cmd: list[str]) -> None:
    """Run ``cmd`` from the repository root (printed first); a failure stops the analysis."""
    print(" ".join(cmd), flush=True)
    subprocess.run(cmd, check=True, cwd=ROOT)


def shown(path: Path) -> str:
    """``path`` relative to the repository where it lies inside it (evaluation rows' key)."""
    path = path.resolve()
    return str(path.relative_to(ROOT)) if path.is_relative_to(ROOT) else str(path)


def finished(runs: Sequence[Path]) -> list[Path]:
    """The runs whose training ended."""
    return [r.path for r in find_runs(runs).runs if r.status == COMPLETE] if runs else []


def check_poolable(runs: Sequence[Path], allowed: Sequence[str] = ()) -> None:
    """Exit naming the keys where the configs of one arm's runs differ beyond the seed,
    bookkeeping and the ``allowed`` keys (an arm's per-seed settings, e.g. an ``init_from``
    that names the seed's own start) (:func:`marlgrid.analysis.runs.config_differences`)."""
    configs = [json.loads((r / "config.json").read_text()) for r in runs]
    differ = config_differences(configs, allowed)
    if differ:
        sys.exit(f"refusing to pool {[str(r) for r in runs]}: their configs differ in {differ}")


def keep(run_dir: Path, kept: Path, columns: Iterable[str], export_note: str | None = None) -> None:
    """Copy into ``kept`` what a page needs of the finished run ``run_dir``: its config, the
    last :data:`LOG_TAIL` lines of its log, the ``columns`` of its metrics (every
    :data:`KEEP_EVERY`-th row and the last :data:`KEEP_LAST`), and with ``export_note`` its
    final policy (``agent.pt``, once)."""
    kept.mkdir(parents=True, exist_ok=True)
    (kept / "config.json").write_text((run_dir / "config.json").read_text())
    log = run_dir / "train.log"
    lines = log.read_text(errors="replace").splitlines()[-LOG_TAIL:] if log.is_file() else []
    (kept / "train.log").write_text("".join(f"{line}\n" for line in lines))
    with (run_dir / "metrics.csv").open(newline="") as f:
        rows = list(csv.DictReader(f))
    names = ["step", *[c for c in columns if rows and c in rows[0]]]
    chosen = [r for i, r in enumerate(rows) if i % KEEP_EVERY == 0 or i >= len(rows) - KEEP_LAST]
    write_csv(kept / "metrics.csv", names, [[r[c] for c in names] for r in chosen])
    if export_note is not None and not (kept / "agent.pt").exists():
        run([sys.executable, "experiments/export_expert.py", str(run_dir),
             str(kept / "agent.pt"), "--note", export_note])  # fmt: skip
