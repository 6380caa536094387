"""Merging fresh result rows into a committed CSV, so that rerunning a page's analysis after some
of its run directories are gone keeps those runs' rows instead of dropping them.

Rows are grouped by one key column (a run or a condition): the keys computed now replace their
old rows where those stood, the other old rows stay as they were, and new keys follow at the end.
With every run present the merged file is the fresh one.
"""

from __future__ import annotations

import csv
import os
from collections.abc import Callable, Sequence
from pathlib import Path

from marlgrid.analysis.curves import AnalysisError

Row = dict[str, str]


def _by_key(rows: Sequence[Row], key: str) -> dict[str, list[Row]]:
    grouped: dict[str, list[Row]] = {}
    for row in rows:
        grouped.setdefault(row[key], []).append(row)
    return grouped


def merged_rows(old: Sequence[Row], fresh: Sequence[Row], key: str) -> tuple[list[Row], list[str]]:
    """``old`` with each key of ``fresh`` replaced in place by its fresh rows and new keys
    appended; also the keys kept from ``old`` (in file order)."""
    fresh_by_key = _by_key(fresh, key)
    out: list[Row] = []
    kept: list[str] = []
    for name, rows in _by_key(old, key).items():
        if name in fresh_by_key:
            out += fresh_by_key.pop(name)
        else:
            out += rows
            kept.append(name)
    for rows in fresh_by_key.values():
        out += rows
    return out, kept


def _read(path: Path, key: str) -> tuple[list[str], list[Row]]:
    with path.open(newline="", encoding="utf-8") as f:
        reader = csv.DictReader(f)
        header, rows = list(reader.fieldnames or []), list(reader)
    if key not in header:
        raise AnalysisError(f"{path} has no column {key!r} to merge by (columns: {header})")
    return header, rows


def merge_into(path: Path, key: str, write: Callable[[Path], None]) -> list[str]:
    """Call ``write(tmp)`` to write the fresh CSV, merge its rows into the CSV at ``path`` by
    column ``key`` (:func:`merged_rows`) and replace ``path`` atomically; returns the keys kept
    from the old file. A header that differs from the old file's raises :class:`AnalysisError`
    and leaves ``path`` as it was."""
    path = Path(path)
    tmp = path.with_name(f".{path.name}.fresh")
    try:
        write(tmp)
        kept: list[str] = []
        if path.is_file():
            header, fresh = _read(tmp, key)
            old_header, old = _read(path, key)
            if old_header != header:
                raise AnalysisError(
                    f"cannot merge into {path}: its columns {old_header} differ from the fresh "
                    f"ones {header}; write to a new file instead"
                )
            rows, kept = merged_rows(old, fresh, key)
            with tmp.open("w", newline="", encoding="utf-8") as f:
                writer = csv.DictWriter(f, fieldnames=header)
                writer.writeheader()
                writer.writerows(rows)
        os.replace(tmp, path)
    finally:
        tmp.unlink(missing_ok=True)
    return kept


def borrow_rows(source: Path, path: Path, key: str, value: str) -> int:
    """Merge the rows of ``source`` whose column ``key`` is ``value`` into the CSV at ``path``
    (:func:`merge_into`: they replace that key's rows there); returns how many. A value the
    source lacks raises :class:`AnalysisError` naming the ones it has."""
    header, rows = _read(Path(source), key)
    chosen = [row for row in rows if row[key] == value]
    if not chosen:
        found = sorted({row[key] for row in rows})
        raise AnalysisError(f"{source} has no {key} {value!r}; it has {found}")

    def write(target: Path) -> None:
        with target.open("w", newline="", encoding="utf-8") as f:
            writer = csv.DictWriter(f, fieldnames=header)
            writer.writeheader()
            writer.writerows(chosen)

    merge_into(Path(path), key, write)
    return len(chosen)
