"""Every number a result page quotes is in a CSV committed beside it
(``experiments/results/check_pages.py``), and the checker catches one that is not."""

from __future__ import annotations

from pathlib import Path

import pytest

from experiments.results import check_pages

PAGES = check_pages.pages()

#: a CSV as aggregate.py writes it: two conditions of 3 seeds
RUNS_CSV = """condition,seed,run,final
a,0,runs/a/seed_0,0.21875
a,1,runs/a/seed_1,0.321875
a,2,runs/a/seed_2,0.309375
b,0,runs/b/seed_0,17.38125
b,1,runs/b/seed_1,58368
b,2,runs/b/seed_2,0.72
"""


def write_page(folder: Path, body: str, csv_text: str = RUNS_CSV) -> Path:
    (folder / "demo_runs.csv").write_text(csv_text)
    page = folder / "demo.md"
    page.write_text(body)
    return page


def flagged(page: Path) -> list[str]:
    """The numbers the checker flags, as written."""
    return [p.message.split(" is in none of")[0] for p in check_pages.check_page(page)]


def test_there_are_pages_to_check():
    assert len(PAGES) >= 11 and all(p.suffix == ".md" for p in PAGES)
    assert check_pages.RESULTS / "README.md" not in PAGES


@pytest.mark.parametrize("page", PAGES, ids=[p.name for p in PAGES])
def test_every_number_a_page_quotes_is_in_a_csv_beside_it(page):
    problems = check_pages.check_page(page)
    assert not problems, "\n".join(str(p) for p in problems)


def test_a_made_up_number_in_a_table_is_caught(tmp_path):
    table = """# Demo

![return](demo.png)

| condition | seed 0 | seed 1 | seed 2 | mean |
|---|---:|---:|---:|---:|
| a | 0.22 | 0.32 | 0.31 | 0.28 |
| b | 17.4 | 58.4k | 72% | 123.45 |
"""
    # 0.28 is no CSV value (the CSV has no mean), 123.45 is made up; 17.4 matches 17.38125 at
    # one decimal, 58.4k matches 58368 at 100 steps, 72% matches 0.72
    assert flagged(write_page(tmp_path, table)) == ["0.28", "123.45"]


def test_precision_and_rounding(tmp_path):
    table = "[runs](demo_runs.csv)\n\n| x | v |\n|---|---|\n"
    rows = ["0.219", "0.2188", "0.22", "0.2", "17.38", "17.39", "-0.31", "58k", "59k", "6e-4"]
    page = write_page(tmp_path, table + "".join(f"| r | {v} |\n" for v in rows))
    # 0.219 and 0.2188 round 0.21875; 0.2 is 0.21875 at one decimal; -0.31 has the wrong sign;
    # 17.39 is not 17.38125 at two decimals; 59k is not 58368; nothing is 6e-4
    assert flagged(page) == ["17.39", "-0.31", "59k", "6e-4"]


def test_setup_and_labels_are_not_numbers_to_check(tmp_path):
    body = """# Demo on a 13x13 map

**Short answer.** On 7x7 maps (16 envs x 64 steps, seeds 0, 1, 2, 3 seeds), run on
2026-12-01 at 10:08 with hydra 1.3.8 for 200k steps (`lr=0.0005`, `e8_drqn`), the novice
reaches >= 0.95 and ends at **0.22** ([runs](demo_runs.csv)), 2.5-3x faster, over 100 layouts.

## Setup

| | this page | full scale |
|---|---|---|
| budget | 200k env steps, 0.123 lr | 2M |

## Results

| condition | seed 0 | note |
|---|---|---|
| seed 1 (7.77) | 0.32 | 1.5M episodes, agent.lr=0.0003 |
"""
    assert flagged(write_page(tmp_path, body)) == []


def test_result_lines_are_checked_and_markers_exempt(tmp_path):
    body = """# Demo

**Short answer.** The novice ends at 0.22 ([runs](demo_runs.csv)) and at 0.44 later. The
original needed about 5e5 episodes (third-party: a replication's README). Its in-view share
was 0.55 (no CSV: the runs were not kept).

## Reading

Plain prose quotes 9.99 without being checked.

- A bold result, **0.32**, puts its whole item under the check, and 0.77 in it too.

Per-seed values (no CSV: read from the logs):

| seed | value |
|---|---|
| 0 | 8.88 |

| seed | value |
|---|---|
| 0 | 0.31 (no CSV: one cell) |
| 1 | 6.66 |
| no CSV: a label | 5.55 |
"""
    assert flagged(write_page(tmp_path, body)) == ["0.44", "0.77", "6.66"]


def test_sources_are_the_csvs_a_page_names(tmp_path):
    (tmp_path / "social").mkdir()
    (tmp_path / "social" / "x_runs.csv").write_text("condition,seed,final\na,0,1.25\n")
    (tmp_path / "social" / "x_curves.csv").write_text("condition,step,mean\na,1,3.75\n")
    (tmp_path / "other.csv").write_text("v\n2.5\n")
    body = """# Demo

```bash
python experiments/aggregate.py runs/x --out social/x
```

| condition | value |
|---|---|
| a | 1.25 |
| b | 3.75 |
| c | 2.5 |

See [the data](missing.csv).
"""
    page = write_page(tmp_path, body)
    found, problems = check_pages.sources(page)
    # the --out stem names x_runs.csv, not its curves; other.csv is not named
    assert found == [(tmp_path / "social" / "x_runs.csv").resolve()]
    assert [p.message for p in problems] == ["links missing.csv, which does not exist"]
    assert flagged(page) == ["3.75", "2.5", "links missing.csv, which does not exist"]


def test_the_command_line_exits_1_on_a_problem(tmp_path, capsys):
    page = write_page(tmp_path, "| x | v |\n|---|---|\n| a | 0.999 |\n")
    assert check_pages.main([str(page)]) == 1
    out = capsys.readouterr()
    assert f"{page}:3: 0.999 is in none of: no CSV" in out.out and "1 problem(s)" in out.err
    page.write_text("| x | v |\n|---|---|\n| a | 0.31 |\n\n[runs](demo_runs.csv)\n")
    assert check_pages.main([str(page)]) == 0
