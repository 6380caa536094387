"""One logger fanning metrics out to stdout, a CSV file and TensorBoard."""

from __future__ import annotations

import csv
import io
import math
from pathlib import Path
from typing import Any

from marlgrid.agents.bookkeeping.run_dir import replace_atomically
from marlgrid.analysis.curves import read_metrics


class Logger:
    """``log(metrics, step)`` writes to ``metrics.csv`` and TensorBoard events in ``run_dir``.

    A metric seen for the first time adds a CSV column (earlier rows leave it empty).
    TensorBoard is optional (``tensorboard`` package). A run resumed from a checkpoint at
    ``resume_step`` first drops what was logged after that step (CSV rows and TensorBoard
    events), so the logs read as one uninterrupted run. Rewrites of the CSV (a new column,
    rows dropped) replace the file atomically: a crash never loses the rows already written.
    """

    def __init__(
        self,
        run_dir: Path,
        csv_file: bool = True,
        tensorboard: bool = True,
        print_every: int = 0,
        resume_step: int | None = None,
    ) -> None:
        self.run_dir = Path(run_dir)
        self.run_dir.mkdir(parents=True, exist_ok=True)
        self.print_every = print_every
        self._rows = 0
        self._csv_path = self.run_dir / "metrics.csv" if csv_file else None
        self._fields: list[str] | None = None
        if self._csv_path is not None and self._csv_path.exists():
            with self._csv_path.open(newline="") as f:
                rows = list(csv.DictReader(f))
                self._fields = list(rows[0]) if rows else None
            if resume_step is not None and self._fields:  # 0: a fresh start drops every row
                kept = [r for r in rows if float(r["step"]) <= resume_step]
                self._rewrite_csv(kept)
        self._tb = None
        if tensorboard:
            from torch.utils.tensorboard import SummaryWriter

            purge = None if resume_step is None else resume_step + 1
            self._tb = SummaryWriter(log_dir=str(self.run_dir / "tensorboard"), purge_step=purge)

    def log(self, metrics: dict[str, Any], step: int) -> None:
        row = {"step": step, **{k: _scalar(v) for k, v in metrics.items()}}
        if self._csv_path is not None:
            self._write_csv(row)
        if self._tb is not None:
            for key, value in row.items():
                if key != "step" and isinstance(value, float) and not math.isnan(value):
                    self._tb.add_scalar(key, value, step)
            self._tb.flush()
        self._rows += 1
        if self.print_every and self._rows % self.print_every == 0:
            shown = {k: v for k, v in row.items() if k.startswith(("charts/", "losses/approx"))}
            text = ", ".join(f"{k.split('/')[-1]}={v:.4g}" for k, v in shown.items())
            print(f"[step {step}] {text}", flush=True)

    def _write_csv(self, row: dict[str, Any]) -> None:
        added = [k for k in row if k not in (self._fields or [])]
        if self._fields is None or added:
            # New columns (the first row, or a metric seen for the first time): rewrite the file.
            old = []
            if self._fields is not None:
                with self._csv_path.open(newline="") as f:
                    old = list(csv.DictReader(f))
            self._fields = [*(self._fields or []), *added]
            self._rewrite_csv(old)
        with self._csv_path.open("a", newline="") as f:
            csv.DictWriter(f, fieldnames=self._fields).writerow(row)

    def _rewrite_csv(self, rows: list[dict[str, Any]]) -> None:
        """Replace ``metrics.csv`` by the header of ``_fields`` and ``rows``, atomically: a
        process killed meanwhile leaves the old file whole (and a temporary file that the next
        start removes)."""
        text = io.StringIO(newline="")
        writer = csv.DictWriter(text, fieldnames=self._fields)
        writer.writeheader()
        writer.writerows(rows)
        data = text.getvalue().encode("utf-8")
        replace_atomically(self._csv_path, lambda f: f.write(data))

    def close(self) -> None:
        if self._tb is not None:
            self._tb.close()


def _scalar(value: Any) -> Any:
    try:
        return float(value)
    except (TypeError, ValueError):
        return value


def last_logged(run_dir: Path) -> dict[str, float]:
    """The last row of ``metrics.csv`` as floats (empty without one)."""
    path = run_dir / "metrics.csv"
    rows = read_metrics(path) if path.exists() else []
    return rows[-1] if rows else {}


def progress_bar(enabled: bool, name: str, total: int, initial: int) -> Any:
    """A tqdm bar over ``total`` updates starting at ``initial``; None if off or tqdm is missing."""
    if not enabled:
        return None
    try:
        from tqdm import tqdm
    except ImportError:
        return None
    return tqdm(total=total, initial=initial, unit="update", desc=f"train {name}")


def evaluation_bar(name: str, total: int, unit: str = "episode") -> Any:
    """A tqdm bar for a long evaluation, shown on a terminal only (None without tqdm): the
    evaluation scripts print nothing else until they end."""
    try:
        from tqdm import tqdm
    except ImportError:
        return None
    return tqdm(total=total, unit=unit, desc=name, leave=False, disable=None)


def show_progress(bar: Any, metrics: dict[str, float]) -> None:
    """Advance ``bar`` by one update, showing steps/s and the recent return."""
    if bar is None:
        return
    bar.update(1)
    shown = {"sps": f"{metrics['charts/SPS']:.0f}"}
    ret = metrics.get("charts/episodic_return", float("nan"))
    if not math.isnan(ret):
        shown["return"] = f"{ret:.2f}"
    bar.set_postfix(shown)
