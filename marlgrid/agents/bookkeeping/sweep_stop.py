"""A stop request shared by every job of a sweep, whatever process runs the job.

A signal to a sweep's parent process (``kill <pid>``, or SIGINT) does not reach jobs that a
launcher runs in other processes (joblib's workers, Ray's, submitit's). :class:`SweepStop`, held
by the parent around the sweep, turns SIGINT and SIGTERM into a marker file whose path it puts in
the environment (:data:`ENV`), which the job processes inherit. Every job's
:class:`~marlgrid.agents.bookkeeping.run_dir.StopRequest` reads the marker between iterations as if
it had been signalled itself (checkpoint, then stop), a job that has not started yet does not
start, and a job that stops by a signal of its own writes the marker too, so the rest of the
sweep stops with it. The parent waits for the jobs, then exits with the signal's code.

Nothing here imports Hydra or torch.
"""

from __future__ import annotations

import os
import signal
import tempfile
import threading
from pathlib import Path
from types import FrameType, TracebackType
from typing import Any

__all__ = ["ENV", "SweepStop", "mark", "marked_signal"]

#: the environment variable naming the marker file of the running sweep
ENV = "MARLGRID_SWEEP_STOP"
SIGNALS = (signal.SIGINT, signal.SIGTERM)


def marked_signal() -> int | None:
    """The signal the sweep this process belongs to was stopped by, or None (no sweep, or
    not stopped)."""
    path = os.environ.get(ENV)
    if not path:
        return None
    try:
        text = Path(path).read_text(encoding="utf-8").strip()
    except OSError:  # not stopped (no file yet)
        return None
    return int(text) if text.isdigit() else int(signal.SIGTERM)


def mark(signum: int) -> None:
    """Stop the rest of the sweep this process belongs to (nothing outside a sweep)."""
    path = os.environ.get(ENV)
    if path and marked_signal() is None:
        tmp = f"{path}.{os.getpid()}.tmp"
        Path(tmp).write_text(str(int(signum)), encoding="utf-8")
        os.replace(tmp, path)


class SweepStop:
    """Held by a sweep's parent: SIGINT and SIGTERM mark the sweep stopped (see the module
    docstring) instead of killing the parent while its jobs run elsewhere. A second signal
    raises ``KeyboardInterrupt`` at once. :attr:`signum` is the signal that stopped the sweep
    (read from the marker, so a job's own signal counts), None if none did."""

    def __init__(self) -> None:
        self.signum: int | None = None
        self._previous: dict[int, Any] = {}
        self._path: Path | None = None
        self._owner = False

    def __enter__(self) -> SweepStop:
        if os.environ.get(ENV):  # inside another sweep's job: that sweep's marker serves
            return self
        fd, name = tempfile.mkstemp(prefix="marlgrid-sweep-", suffix=".stop")
        os.close(fd)
        os.unlink(name)  # only its name: the file appears when the sweep is stopped
        self._path, self._owner = Path(name), True
        os.environ[ENV] = name
        if threading.current_thread() is threading.main_thread():
            for sig in SIGNALS:
                self._previous[sig] = signal.signal(sig, self._handle)
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType
    ) -> None:
        if not self._owner:
            return
        for sig, handler in self._previous.items():
            signal.signal(sig, handler)
        self._previous.clear()
        self.signum = marked_signal()
        os.environ.pop(ENV, None)
        assert self._path is not None
        self._path.unlink(missing_ok=True)

    def _handle(self, signum: int, frame: FrameType | None) -> None:
        if marked_signal() is not None:
            raise KeyboardInterrupt
        mark(signum)
        print(
            f"\n{signal.Signals(signum).name}: the sweep's jobs checkpoint and stop; rerun the "
            "same command to resume them (a second signal stops at once)",
            flush=True,
        )
