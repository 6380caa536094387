"""Run directories: their names, a lock per directory, and stop requests from signals.

- :func:`job_subdir` names a run's directory from the overrides that define it (Hydra's
  ``hydra.job.override_dirname``) plus its seed, so every override set of a sweep gets its own.
- :class:`RunLock` holds an exclusive ``fcntl.flock`` on ``<run_dir>/.lock`` while a process
  trains there; a second process fails at once naming the holder's PID. The kernel drops the lock
  when its holder dies, so a lock left by a killed process is taken over (and reported).
- :class:`StopRequest` turns SIGINT and SIGTERM (or a stopped sweep's marker,
  :mod:`.sweep_stop`) into a flag the trainer checks between iterations, so that it can write a
  consistent checkpoint before exiting.
- :func:`remove_fresh_dirs` removes the empty folders a failed start just created.
- :func:`replace_atomically` writes a run's files (checkpoints, ``config.json``,
  ``metrics.csv``) so that no reader ever sees one half written; :func:`remove_temp_files`
  removes the temporary files a killed writer left behind.

Nothing here imports Hydra or torch.
"""

from __future__ import annotations

import errno
import fcntl
import hashlib
import os
import re
import shutil
import signal
import tempfile
import threading
from collections.abc import Callable
from pathlib import Path
from types import FrameType, TracebackType
from typing import IO, Any

from marlgrid.agents.bookkeeping.sweep_stop import marked_signal

__all__ = [
    "LOCK_NAME",
    "RunLock",
    "RunLockedError",
    "StopRequest",
    "job_subdir",
    "remove_fresh_dirs",
    "remove_temp_files",
    "replace_atomically",
]

LOCK_NAME = ".lock"
#: longest directory name made from overrides (bytes; file systems allow 255)
MAX_NAME_CHARS = 120
#: the temporary files :func:`replace_atomically` writes: ``.<target stem>_<8 random>.tmp``
#: (:func:`tempfile.mkstemp`'s random part)
TEMP_NAME = re.compile(r"\..+_[a-z0-9_]{8}\.tmp")
#: this process's umask (read once, at import: reading it means setting it)
_UMASK = os.umask(0o022)
os.umask(_UMASK)


def replace_atomically(target: str | Path, write: Callable[[IO[bytes]], None]) -> Path:
    """Write ``target`` with ``write(file)`` through a temporary file in the same folder,
    flushed to disk and renamed over it: ``target`` is never left partly written. A process
    killed meanwhile leaves the temporary file (:data:`TEMP_NAME`; see
    :func:`remove_temp_files`)."""
    target = Path(target)
    target.parent.mkdir(parents=True, exist_ok=True)
    try:  # the file keeps its permissions; a new one gets open()'s (mkstemp's are 0600)
        mode = target.stat().st_mode & 0o777
    except FileNotFoundError:
        mode = 0o666 & ~_UMASK
    fd, tmp = tempfile.mkstemp(prefix=f".{target.stem}_", suffix=".tmp", dir=target.parent)
    try:
        with os.fdopen(fd, "wb") as f:
            os.fchmod(f.fileno(), mode)
            write(f)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, target)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    return target


def remove_temp_files(*folders: str | Path) -> list[Path]:
    """Remove the temporary files of :func:`replace_atomically` (:data:`TEMP_NAME`) in
    ``folders`` (not below them); returns the removed files. Only call it holding the folders'
    :class:`RunLock`: then no live writer's file is among them."""
    removed = []
    for folder in map(Path, folders):
        if not folder.is_dir():
            continue
        for path in sorted(folder.iterdir()):
            if TEMP_NAME.fullmatch(path.name) and path.is_file():
                path.unlink(missing_ok=True)
                removed.append(path)
    return removed


def job_subdir(override_dirname: str, seed: Any) -> str:
    """``<overrides>/seed_<seed>`` (``seed_<seed>`` without overrides), one path level each.

    The overrides are written readably: each character other than letters, digits and
    ``._=,+-`` becomes ``-`` (quotes and braces dropped, so ``/`` in a path never adds levels),
    runs of them one ``-``. Where that changed the text, or it is longer than
    :data:`MAX_NAME_CHARS`, the name is cut and ends with ``~`` and a hash of the overrides as
    given, so distinct override sets always get distinct directories. The full overrides are
    in the run's ``.hydra/overrides.yaml`` and ``config.json``.
    """
    seed_dir = f"seed_{seed}"
    if not override_dirname:
        return seed_dir
    readable = re.sub(r"[\"'{}\[\]]", "", override_dirname)  # quotes and brackets dropped
    readable = re.sub(r"-{2,}", "-", re.sub(r"[^A-Za-z0-9._=,+-]", "-", readable))
    readable = re.sub(r"-?([=,])-?", r"\1", readable).strip("-.") or "overrides"
    if readable != override_dirname or len(readable) > MAX_NAME_CHARS:
        digest = hashlib.sha1(override_dirname.encode()).hexdigest()[:8]
        readable = f"{readable[: MAX_NAME_CHARS - 9].rstrip('-.')}~{digest}"
    return f"{readable}/{seed_dir}"


class DiskFullError(RuntimeError):
    """A run stopped because its disk is full: one line naming the disk's folder; what was
    written before stays whole (every file is replaced atomically), so the run resumes."""


#: what a failed write says when the disk is full (OSError's errno, torch.save's messages)
_DISK_FULL_ERRNOS = (errno.ENOSPC, errno.EDQUOT)
_DISK_FULL_TEXTS = ("No space left on device", "unexpected pos", "file write failed")


def is_disk_full(exc: BaseException) -> bool:
    """Whether ``exc`` (or what it was raised from) is a write that failed for want of space."""
    while exc is not None:
        if isinstance(exc, OSError) and exc.errno in _DISK_FULL_ERRNOS:
            return True
        if isinstance(exc, RuntimeError) and any(t in str(exc) for t in _DISK_FULL_TEXTS):
            return True
        exc = exc.__cause__ or exc.__context__
    return False


def disk_full_error(run_dir: Path, exc: BaseException) -> DiskFullError:
    """The one-line :class:`DiskFullError` of a run whose write failed with ``exc``."""
    try:
        free = f"{shutil.disk_usage(run_dir).free / 2**20:.0f} MiB free"
    except OSError:
        free = "free space unknown"
    return DiskFullError(
        f"the disk holding {run_dir} is full ({free}; {type(exc).__name__}: "
        f"{str(exc).splitlines()[0][:120] if str(exc) else exc!r}). Nothing was half-written: "
        "free some space and rerun the same command to resume from the newest checkpoint"
    )


class RunLockedError(RuntimeError):
    """The run directory is locked by another process that is still running."""


#: locks this process holds: resolved directory -> [file descriptor, depth]
_HELD: dict[Path, list[int]] = {}
_HELD_GUARD = threading.Lock()


class RunLock:
    """An exclusive lock on a run directory while this process trains in it.

    ``with RunLock(run_dir) as lock:`` creates ``run_dir`` if needed, takes ``flock`` on
    ``run_dir/.lock`` without waiting (:class:`RunLockedError` names the holder's PID if another
    process has it) and writes this PID into the file; leaving the block empties the file and
    releases the lock. Re-entrant within one process. ``lock.stale_pid`` is the PID found in the
    file of a holder that died without releasing it (killed), else ``None``. ``flock`` is local to
    one machine: it does not guard a directory shared over NFS by several machines.
    """

    def __init__(self, run_dir: str | Path) -> None:
        self.run_dir = Path(run_dir)
        self.path = self.run_dir / LOCK_NAME
        self.stale_pid: int | None = None
        self._key: Path | None = None

    def __enter__(self) -> RunLock:
        self.run_dir.mkdir(parents=True, exist_ok=True)
        key = self.run_dir.resolve()
        with _HELD_GUARD:
            if key in _HELD:
                _HELD[key][1] += 1
                self._key = key
                return self
            fd = os.open(self.path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o644)
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except OSError as exc:
                holder = _read_pid(fd)
                os.close(fd)
                if exc.errno not in (errno.EWOULDBLOCK, errno.EAGAIN, errno.EACCES):
                    raise
                who = f"process {holder}" if holder else "another process"
                raise RunLockedError(
                    f"run directory {self.run_dir} is in use: {who} is training in it (lock file "
                    f"{self.path}). Wait for it to finish or stop it, or train in another "
                    "directory (another name=..., other overrides or hydra.run.dir=...)"
                ) from None
            self.stale_pid = _read_pid(fd)
            os.ftruncate(fd, 0)
            os.pwrite(fd, f"{os.getpid()}\n".encode(), 0)
            _HELD[key] = [fd, 1]
            self._key = key
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        key, self._key = self._key, None
        if key is None:
            return
        with _HELD_GUARD:
            entry = _HELD[key]
            entry[1] -= 1
            if entry[1] == 0:
                del _HELD[key]
                os.ftruncate(entry[0], 0)  # a clean release leaves no PID behind
                os.close(entry[0])  # closing releases the flock


def _read_pid(fd: int) -> int | None:
    try:
        text = os.pread(fd, 64, 0).decode(errors="ignore").strip()
    except OSError:
        return None
    return int(text) if text.isdigit() else None


class StopRequest:
    """SIGINT and SIGTERM as a request to stop at the next safe point.

    Inside ``with stop:`` (main thread only; elsewhere signals keep their handlers) the first
    signal sets :attr:`signum` and returns; the trainer sees :attr:`requested` between env steps,
    finishes or abandons the iteration, checkpoints and raises. A second signal, or one while
    :attr:`deferring` is false (nothing left to save), raises ``KeyboardInterrupt`` at once.
    Re-entrant: nested blocks keep the outer handlers.
    """

    SIGNALS = (signal.SIGINT, signal.SIGTERM)

    def __init__(self) -> None:
        self.signum: int | None = None
        self.deferring = True
        self._depth = 0
        self._previous: dict[int, Any] = {}

    @property
    def requested(self) -> bool:
        """A signal came, or the sweep this process runs a job of was stopped
        (:mod:`.sweep_stop`)."""
        if self.signum is None:
            self.signum = marked_signal()
        return self.signum is not None

    @property
    def name(self) -> str:
        return signal.Signals(self.signum).name if self.signum else "interrupt"

    @property
    def exit_code(self) -> int:
        """The shell's code for death by the signal: 130 for SIGINT, 143 for SIGTERM."""
        return 128 + (self.signum or signal.SIGINT)

    def __enter__(self) -> StopRequest:
        if self._depth == 0 and threading.current_thread() is threading.main_thread():
            for sig in self.SIGNALS:
                self._previous[sig] = signal.signal(sig, self._handle)
        self._depth += 1
        return self

    def __exit__(self, *exc: Any) -> None:
        self._depth -= 1
        if self._depth == 0:
            for sig, handler in self._previous.items():
                signal.signal(sig, handler)
            self._previous.clear()

    def _handle(self, signum: int, frame: FrameType | None) -> None:
        first = self.signum is None
        if first:
            self.signum = signum
        if not first or not self.deferring:
            raise KeyboardInterrupt


def remove_fresh_dirs(path: str | Path, since: float, stop_at: str | Path) -> list[Path]:
    """Remove the folders a failed start just made: ``path`` if it is an empty directory last
    changed at or after ``since`` (a Unix time), then its parents below ``stop_at`` while they
    are empty. A folder with anything in it, ``stop_at`` and folders outside it are never
    removed; neither is ``path`` if it is older than ``since``. Returns the removed folders.
    """
    removed: list[Path] = []
    path, stop = Path(path).absolute(), Path(stop_at).absolute()
    try:
        if not path.is_dir() or any(path.iterdir()) or path.stat().st_mtime < since:
            return removed
    except OSError:
        return removed
    while path != stop and (not removed or stop in path.parents):
        try:
            if any(path.iterdir()):
                break
            path.rmdir()
        except OSError:
            break
        removed.append(path)
        path = path.parent
    return removed
