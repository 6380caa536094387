"""The memory a training run may use, and the check that refuses a run that cannot fit it
(:func:`check_memory`, called by the trainer right after :meth:`TrainConfig.validate`, on
:func:`~marlgrid.agents.bookkeeping.resources.estimate_memory`'s estimate).

The limit is :data:`MARGIN` of the memory available now (``MemAvailable`` of
``/proc/meminfo``, or the cgroup's limit when lower; ``sysconf`` elsewhere). The environment
variable :data:`MEMORY_LIMIT_ENV` replaces it: a size such as ``8G``, ``512M`` or a byte count
(taken as is, no margin), or ``off`` to skip the check.
"""

from __future__ import annotations

import contextlib
import os
import re
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from marlgrid.agents.bookkeeping.resources import Growth, Need, estimate_memory
from marlgrid.agents.training.train_config import TrainConfig
from marlgrid.config import ConfigError

__all__ = ["MARGIN", "MEMORY_LIMIT_ENV", "check_memory", "memory_limit"]

#: environment variable replacing the memory limit: a size (``8G``, ``512M``, bytes) or ``off``
MEMORY_LIMIT_ENV = "MARLGRID_MEMORY_LIMIT"
#: share of the available memory a run may plan to use
MARGIN = 0.85

_UNITS = {"": 1, "K": 2**10, "M": 2**20, "G": 2**30, "T": 2**40}


def memory_limit() -> tuple[float | None, str]:
    """``(bytes a run may use, where that comes from)``; ``None`` when the check is off or
    nothing tells the memory available."""
    text = os.environ.get(MEMORY_LIMIT_ENV, "").strip()
    if text:
        if text.lower() == "off":
            return None, f"{MEMORY_LIMIT_ENV}=off"
        found = re.fullmatch(r"(\d+(?:\.\d+)?)\s*([KMGT]?)(?:I?B)?", text.upper())
        if found is None:
            raise ConfigError(
                f"{MEMORY_LIMIT_ENV} must be a size such as 8G, 512M or a byte count, or off; "
                f"got {text!r}"
            )
        return float(found[1]) * _UNITS[found[2]], f"{MEMORY_LIMIT_ENV}={text}"
    available = _available_bytes()
    if available is None:
        return None, "the available memory is unknown"
    return available * MARGIN, (
        f"{MARGIN:.0%} of the {_size(available)} available; {MEMORY_LIMIT_ENV} sets another limit"
    )


def _available_bytes() -> float | None:
    """Memory available now: ``MemAvailable``, or the cgroup's room when smaller."""
    found: list[float] = []
    try:
        for line in Path("/proc/meminfo").read_text().splitlines():
            if line.startswith("MemAvailable:"):
                found.append(float(line.split()[1]) * 1024)
    except OSError:
        with contextlib.suppress(ValueError, OSError, AttributeError):  # not every OS has them
            found.append(float(os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_AVPHYS_PAGES")))
    cgroup = Path("/sys/fs/cgroup")
    for limit, usage in (
        ("memory.max", "memory.current"),  # cgroup v2
        ("memory/memory.limit_in_bytes", "memory/memory.usage_in_bytes"),  # cgroup v1
    ):
        try:
            room = float((cgroup / limit).read_text()) - float((cgroup / usage).read_text())
        except (OSError, ValueError):  # absent, or "max"
            continue
        found.append(max(room, 0.0))
    return min(found) if found else None


def _size(nbytes: float) -> str:
    """``nbytes`` for a reader: ``1.5 GB`` (powers of 1024), ``3.2e+10 PB`` past petabytes."""
    for unit, scale in (("PB", 2**50), ("TB", 2**40), ("GB", 2**30), ("MB", 2**20)):
        if nbytes >= scale:
            value = f"{nbytes / scale:.3g}" if unit == "PB" else f"{nbytes / scale:.1f}"
            return f"{value} {unit}"
    return f"{nbytes / 2**10:.1f} KB"


def check_memory(
    cfg: TrainConfig, configs: Mapping[str, Any] | None = None, limit: float | None = None
) -> list[Need]:
    """Refuse ``cfg`` with a :class:`ConfigError` when :func:`estimate_memory` exceeds
    ``limit`` bytes (default :func:`memory_limit`), naming the setting that dominates, the
    estimate, the limit and the most of that setting that fits; returns the estimate."""
    source = "the limit given to check_memory"
    if limit is None:
        limit, source = memory_limit()
        if limit is None:
            return []
    needs = estimate_memory(cfg, configs)
    total = sum(n.nbytes for n in needs)
    if total <= limit:
        return needs
    raise ConfigError(_refusal(needs, total, limit, source))


def _most_that_fits(needs: list[Need], setting: str, room: float) -> int:
    """The largest value of ``setting`` at which ``needs`` (each growing with it as its
    :class:`Growth` says) take at most ``room`` bytes; 0 when none does."""
    grown = [(n.nbytes, next(g for g in n.grows if g.setting == setting)) for n in needs]
    value = grown[0][1].value

    def at(x: int) -> float:
        return sum(b * (x / g.value) ** g.power for b, g in grown)

    low, high = 0, value  # at(high) > room
    while high - low > 1:
        mid = (low + high) // 2
        low, high = (mid, high) if at(mid) <= room * (1 - 1e-9) else (low, mid)
    return low


def _refusal(needs: list[Need], total: float, limit: float, source: str) -> str:
    """The one-line message of a run that does not fit (see :func:`check_memory`)."""
    groups: dict[str, list[Need]] = {}
    growths: dict[str, Growth] = {}
    for need in needs:
        for g in need.grows:
            groups.setdefault(g.setting, []).append(need)
            growths[g.setting] = g
    size = {s: sum(n.nbytes for n in ns) for s, ns in groups.items()}
    top = max(size.values())
    near = [s for s in size if size[s] >= top / 2]  # of those, the one furthest above default
    setting = max(near, key=lambda s: (growths[s].value / max(growths[s].default, 1), size[s]))
    g, part = growths[setting], size[setting]
    biggest = max(groups[setting], key=lambda n: n.nbytes)
    rest = total - part
    most = _most_that_fits(groups[setting], setting, limit - rest)
    if rest >= limit:
        fits = f"; the rest of the run alone needs ~{_size(rest)}"
    else:
        fits = f"; at most ~{most} fits" if most >= 1 else "; no value of it fits"
    return (
        f"{g.setting}={g.value}: {biggest.what} would need ~{_size(biggest.nbytes)} and the run "
        f"~{_size(total)} in all, more than the {_size(limit)} allowed ({source}){fits}"
    )
