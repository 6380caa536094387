"""``marlgrid.analysis.merge``: fresh rows merged into a committed CSV by one key column."""

from __future__ import annotations

import csv
from pathlib import Path

import pytest

from marlgrid.analysis import AnalysisError
from marlgrid.analysis.merge import merge_into, merged_rows


def rows(*pairs: tuple[str, str]) -> list[dict[str, str]]:
    return [{"run": run, "value": value} for run, value in pairs]


def write(path: Path, table: list[dict[str, str]], header=("run", "value")) -> None:
    with path.open("w", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=list(header))
        writer.writeheader()
        writer.writerows(table)


def test_fresh_keys_replace_theirs_in_place_the_others_stay_new_ones_follow() -> None:
    old = rows(("a", "1"), ("a", "2"), ("b", "3"), ("c", "4"))
    fresh = rows(("d", "9"), ("a", "7"), ("a", "8"))
    merged, kept = merged_rows(old, fresh, "run")
    assert merged == rows(("a", "7"), ("a", "8"), ("b", "3"), ("c", "4"), ("d", "9"))
    assert kept == ["b", "c"]
    assert merged_rows(old, old, "run") == (old, [])  # every key fresh: the fresh file


def test_merge_into_a_new_path_writes_the_fresh_rows(tmp_path) -> None:
    path = tmp_path / "eval.csv"
    assert merge_into(path, "run", lambda p: write(p, rows(("a", "1")))) == []
    assert path.read_bytes() == b"run,value\r\na,1\r\n"
    assert merge_into(path, "run", lambda p: write(p, rows(("b", "2")))) == ["a"]
    assert path.read_bytes() == b"run,value\r\na,1\r\nb,2\r\n"
    assert [p.name for p in tmp_path.iterdir()] == ["eval.csv"]  # no temporary file left


def test_other_columns_are_refused_and_the_old_file_stays(tmp_path) -> None:
    path = tmp_path / "eval.csv"
    write(path, rows(("a", "1")))
    before = path.read_bytes()
    fresh = [{"run": "b", "other": "2"}]
    with pytest.raises(AnalysisError, match=r"columns \['run', 'value'\] differ from the fresh"):
        merge_into(path, "run", lambda p: write(p, fresh, header=("run", "other")))
    with pytest.raises(AnalysisError, match="has no column 'seed' to merge by"):
        merge_into(path, "seed", lambda p: write(p, rows(("b", "2"))))
    assert path.read_bytes() == before
    assert [p.name for p in tmp_path.iterdir()] == ["eval.csv"]
