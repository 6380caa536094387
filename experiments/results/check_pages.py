"""Check that every number a result page quotes is in a CSV committed beside it.

    python experiments/results/check_pages.py                 # every page, exit 1 on a problem
    python experiments/results/check_pages.py social_refresh.md --sources

``tests/test_result_pages.py`` runs it over every page. The rules, which
``experiments/results/README.md`` states for page writers:

**Pages.** Every ``experiments/results/*.md`` except ``README.md``, and the ``README.md`` of
each study folder (``experiments/results/<study>/README.md``, the study's page). The pages under
``memory_models/`` are ``aggregate.py``'s own output (its table is its CSV) and are not checked.

**Sources.** The CSVs a page links or names, anywhere on the page (code blocks included), each
resolved against the page's folder, then the repository root, then (a bare file name) the one
file of that name under ``experiments/results/``:

- a ``.csv`` path (a Markdown link, inline code or a ``--csv`` argument) is that file;
- a figure or page (``social/refresh_return.png``, ``memory_default.md``, ``x.{png,md}``) or an
  ``aggregate.py --out`` stem names the CSVs of that stem: ``<stem>.csv`` and ``<stem>_*.csv``,
  except ``<stem>_curves.csv``, which counts only when named itself (its thousands of curve points
  would match almost any number).

Every number in a source's cells counts (a cell may hold several: ``0.451 -0.325``,
``12.8;14.2``); header cells do not. A link to a CSV that does not exist is a problem.

**What is checked.** Table rows (not the header row, not the first column, which labels the
row) and result lines: the page's short answer (from a paragraph opening ``**Short answer`` to
the next heading) and any paragraph or list item with a bold number (``**1.11**``). Code, and
sections whose heading (below the page title) opens with a setup word (:data:`SETUP_HEADINGS`:
Setup, Scale, Task(s), Command(s), Configuration, Wall time, Test(s)), are not checked.

**A number matches** a source value when it equals the value rounded to the decimals shown
(``0.06`` matches ``0.0552``; ``17.8`` matches ``17.76``; a value the CSV itself rounds may differ
by its own half-unit). ``72%`` matches 0.72 (or 72); ``58k`` matches 57,500-58,499 and ``1.5M``
1.45M-1.55M; ``6e-4`` and ``4,396`` read as numbers.

**Not numbers to check** (setup and labels, by rule): inline code and link targets; settings
written ``key=value`` (``agent.lr=0.0003``, a condition's label); dates
(``2026-12-01``) and times (``10:08``); version numbers (``1.2.2``); sizes and shapes (``7x7``,
``16 envs x 64 steps``, ``2 x 128``); ratios written ``5x`` or ``2.5-3x`` (derived from the
numbers beside them); words with digits (``e8_drqn``, ``S7``, ``v0``); seed lists and counts
(``seed 1``, ``seeds 0, 1, 2``, ``seeds 0-2``, ``3 seeds``); thresholds (``>= 0.9``, ``≤ 20``);
step budgets (``200k steps``, ``1.5M episodes``, ``40k-step``: a ``k``/``M`` number followed by
steps, episodes or updates); in result lines (not in tables) also whole numbers without a unit
(counts such as ``100 layouts``) and every ``k``/``M`` number.

**Marked numbers.** Text holding ``third-party`` (a figure from another project, e.g.
``(third-party: Virtue_RL replication)``) or ``no CSV`` (an own measurement with no committed
source, e.g. ``(no CSV: the runs were not kept)``), in any case, is not checked: the page says
where the number comes from, or that it has no source. The marker covers the sentence it is in
(result lines) or the table cell; in a row's first cell, the whole row; in the paragraph right
before a table (its caption), the whole table.

**Limits.** All of a page's sources are pooled, so a made-up number that happens to equal some
value of them at the precision shown passes; derived numbers (a ratio, a difference) need a CSV
of their own (``derived_tables.py``), and the checker cannot tell a number's meaning.
"""

from __future__ import annotations

import argparse
import csv
import re
import sys
from dataclasses import dataclass
from pathlib import Path

import numpy as np

RESULTS = Path(__file__).resolve().parent
ROOT = RESULTS.parents[1]
#: a section whose heading (below the title) opens with one of these holds setup, not results
SETUP_HEADINGS = re.compile(
    r"(setup|scale|tasks?|commands?|configuration|wall time|tests?)\b", re.IGNORECASE
)
#: a table row or sentence holding one of these is not checked
MARKERS = ("third-party", "no csv")

_NUMBER = re.compile(
    r"(?<![\w.\-−+])(?P<sign>[-−])?(?P<int>\d{1,3}(?:,\d{3})+(?!\d)|\d+)(?P<frac>\.\d+)?"
    r"(?:[eE](?P<exp>[-+]?\d+))?(?P<suffix>[kM%])?(?![\w])(?!\.\d)"
)
_STRIP = [  # (pattern, what it removes), applied in order before numbers are read
    (r"`[^`]*`", "inline code"),
    (r"!?\[([^\]]*)\]\([^)]*\)", "link targets (the link text is kept)"),
    (r"<!--.*?-->", "comments"),
    (r"https?://\S+", "addresses"),
    (
        r"\d+(?:\.\d+)?%\s*(?:CIs?|confidence|intervals?|t-|bootstrap|percentile|stratified)",
        "confidence levels",
    ),
    (r"\b[A-Za-z_][\w.]*=\S+", "settings (key=value)"),
    (r"\d{4}-\d{2}-\d{2}", "dates"),
    (r"(?:[≥≤]|[<>]=?)\s*\d+(?:\.\d+)?", "thresholds (>= 0.9, <= 20)"),
    (r"\b\d{1,2}:\d{2}\b", "times"),
    (r"\b\d+(?:\.\d+){2,}\b", "version numbers"),
    (r"\d+(?:\.\d+)?(?:\s+[a-z]+)?\s*[x×]\s*\d+(?:\.\d+)?", "sizes and shapes"),
    (r"(?:\d+(?:\.\d+)?\s*[-–]\s*)?\d+(?:\.\d+)?\s*[x×](?![\w])", "ratios"),
    (r"\b[A-Za-z_][\w.\-]*\d[\w\-]*|\b\d+[A-Za-z_]{2,}[\w\-]*", "words with digits"),
    (r"(?<![\w.])\d+(?:\.\d+)?[kM](?:\s*|-)(?:env\s+)?(?:steps?|episodes?|updates?)\b", "budgets"),
    (r"\bseeds?\s+\d+(?:\s*(?:,|-|–|and|to)\s*\d+)*", "seed lists"),
    (r"\b\d+\s+(?:more\s+)?seeds?\b", "seed counts"),
]
_STRIP_RE = [(re.compile(p, re.DOTALL), what) for p, what in _STRIP]
_BOLD_NUMBER = re.compile(r"\*\*[-−+]?\d[^*]*\*\*")
_SENTENCE_END = re.compile(r"(?<=[.;!?])\s+(?=[A-Z(*\[])")
_PATH = re.compile(r"[\w./=,-]*?[\w-]+\.(?:csv|png|md)\b|[\w./-]+\.\{[\w,]+\}")
_ARG_PATH = re.compile(r"--(?:out|csv)\s+(\S+)")
_LINK_CSV = re.compile(r"\]\(([^)]+\.csv)\)")


@dataclass(frozen=True)
class Claim:
    """A number a page quotes: where, as written, its value and how far a source may be off."""

    line: int
    text: str
    value: float
    tolerance: float
    percent: bool


@dataclass(frozen=True)
class Problem:
    """A number no source holds, or a linked CSV that does not exist."""

    page: Path
    line: int
    message: str

    def __str__(self) -> str:
        shown = self.page.relative_to(ROOT) if self.page.is_relative_to(ROOT) else self.page
        return f"{shown}:{self.line}: {self.message}"


def pages(folder: Path = RESULTS) -> list[Path]:
    """The result pages: every ``*.md`` in ``folder`` except its README, and each study
    folder's ``README.md``."""
    flat = [p for p in folder.glob("*.md") if p.name.lower() != "readme.md"]
    return sorted([*flat, *folder.glob("*/README.md")])


# -- sources -------------------------------------------------------------------------------------


def _resolve(ref: str, page: Path) -> Path | None:
    """``ref`` as a file that exists or, for a figure, page or stem, one whose stem has CSVs."""
    ref = ref.strip("`'\"(),")
    candidates = [page.parent / ref, ROOT / ref]
    if "/" not in ref:
        found = sorted(RESULTS.rglob(ref))
        candidates += found if len(found) == 1 else []
    for path in candidates:
        if path.is_file() or (path.suffix != ".csv" and _stem_csvs(path.with_suffix(""))):
            return path.resolve()
    return None


def _stem_csvs(stem: Path) -> list[Path]:
    named = [stem.with_name(stem.name + ".csv"), *sorted(stem.parent.glob(stem.name + "_*.csv"))]
    return [p for p in named if p.is_file() and not p.name.endswith("_curves.csv")]


def sources(page: Path, text: str | None = None) -> tuple[list[Path], list[Problem]]:
    """The CSVs ``page`` links or names (see the module docstring), and a problem for each linked
    CSV that does not exist."""
    text = page.read_text(encoding="utf-8") if text is None else text
    refs = [m.group(0) for m in _PATH.finditer(text)]
    refs += [f"{stem}.png" for stem in _ARG_PATH.findall(text) if not stem.endswith(".csv")]
    found: list[Path] = []
    for ref in refs:
        braces = re.fullmatch(r"(.*)\.\{([\w,]+)\}", ref)
        names = (
            [f"{braces.group(1)}.{ext}" for ext in braces.group(2).split(",")] if braces else [ref]
        )
        for name in names:
            path = _resolve(name, page)
            if path is None:
                continue
            if path.suffix == ".csv":
                found += [path] if path.is_file() else []
            else:  # a figure, page or --out stem: the CSVs of that stem
                found += _stem_csvs(path.with_suffix(""))
    problems = []
    for line_no, line in enumerate(text.splitlines(), 1):
        for target in _LINK_CSV.findall(line):
            path = _resolve(target, page)
            if path is None or not path.is_file():
                problems.append(Problem(page, line_no, f"links {target}, which does not exist"))
    return sorted(set(found)), problems


def csv_values(paths: list[Path]) -> tuple[np.ndarray, np.ndarray]:
    """Every number in the data cells of ``paths``, sorted, with the half-unit each is rounded to
    (0 for whole numbers and values written with more than 6 decimals)."""
    values, halves = [], []
    for path in paths:
        with path.open(newline="", encoding="utf-8") as f:
            rows = list(csv.reader(f))
        for row in rows[1:]:
            for cell in row:
                for token in re.split(r"[;\s/]+", cell.strip()):
                    number = re.fullmatch(r"[-+]?(\d+)(?:\.(\d*))?(?:[eE][-+]?\d+)?", token)
                    if number is None:
                        continue
                    decimals = len(number.group(2) or "")
                    rounded = "e" not in token.lower() and 1 <= decimals <= 6
                    values.append(float(token))
                    halves.append(0.5 * 10.0**-decimals if rounded else 0.0)
    order = np.argsort(values)
    return np.asarray(values, dtype=float)[order], np.asarray(halves, dtype=float)[order]


# -- what a page claims --------------------------------------------------------------------------


def _marked(text: str) -> bool:
    lower = text.lower()
    return any(marker in lower for marker in MARKERS)


def numbers(text: str, line: int, *, in_table: bool) -> list[Claim]:
    """The numbers to check in ``text`` (a table cell or a sentence of a result line)."""
    for pattern, _ in _STRIP_RE:
        text = pattern.sub(" ", text)
    text = text.replace("*", "")
    out = []
    for m in _NUMBER.finditer(text):
        suffix, frac, exp = m.group("suffix"), m.group("frac"), m.group("exp")
        if not in_table and (suffix in ("k", "M") or (not frac and not exp and not suffix)):
            continue  # step budgets and counts in prose
        digits = m.group("int").replace(",", "")
        value = float(f"{digits}{frac or ''}")
        decimals = len(frac) - 1 if frac else 0
        unit = {"k": 1e3, "M": 1e6}.get(suffix or "", 1.0) * (10.0 ** int(exp) if exp else 1.0)
        sign = -1.0 if m.group("sign") else 1.0
        out.append(Claim(line, m.group(0), sign * value * unit, 0.5 * 10.0**-decimals * unit,
                         suffix == "%"))  # fmt: skip
    return out


def claims(text: str) -> list[Claim]:
    """Every number the page's tables and result lines quote (see the module docstring)."""
    out: list[Claim] = []
    lines = text.splitlines()
    setup = in_code = short_answer = table_marked = False
    block: list[tuple[int, str]] = []
    caption = [""]  # the paragraph before a table: a marker there marks the whole table

    def flush() -> None:
        joined = " ".join(t for _, t in block)
        if block:
            caption[0] = joined
        if block and (short_answer or _BOLD_NUMBER.search(joined)):
            first = block[0][0]
            for sentence in _SENTENCE_END.split(joined):
                if not _marked(sentence):
                    line = next((n for n, t in block if sentence[:20] in t), first)
                    out.extend(numbers(sentence, line, in_table=False))
        block.clear()

    for i, raw in enumerate(lines):
        line_no, line = i + 1, raw.strip()
        if line.startswith("```"):
            flush()
            in_code = not in_code
            continue
        if in_code:
            continue
        if line.startswith("#"):
            flush()
            caption[0] = ""
            level = len(line) - len(line.lstrip("#"))
            setup = level > 1 and SETUP_HEADINGS.match(line.lstrip("#").strip()) is not None
            short_answer = False
            continue
        if setup:
            continue
        if line.startswith("|"):
            flush()
            if i == 0 or not lines[i - 1].strip().startswith("|"):
                table_marked = _marked(caption[0])
            caption[0] = ""  # the next table needs a caption of its own
            is_rule = re.fullmatch(r"\|[\s:|-]*\|", line) is not None
            next_line = lines[i + 1].strip() if i + 1 < len(lines) else ""
            is_header = re.fullmatch(r"\|[\s:|-]*\|", next_line) is not None
            cells = line.strip("|").split("|")
            if not (is_rule or is_header or table_marked or _marked(cells[0])):
                for cell in cells[1:]:
                    if not _marked(cell):
                        out.extend(numbers(cell, line_no, in_table=True))
            continue
        if not line or re.match(r"([-*+]|\d+\.)\s", line):
            flush()
        if line.startswith("**Short answer"):
            short_answer = True
        if line:
            block.append((line_no, line.lstrip("> ")))
    flush()
    return out


def _matches(claim: Claim, values: np.ndarray, halves: np.ndarray) -> bool:
    targets = [claim.value / 100.0, claim.value] if claim.percent else [claim.value]
    for target, scale in zip(targets, [100.0, 1.0] if claim.percent else [1.0], strict=True):
        widest = claim.tolerance / scale + (halves.max() if len(halves) else 0.0)
        lo, hi = np.searchsorted(values, [target - widest, target + widest + 1e-12])
        near = slice(lo, hi)
        if np.any(np.abs(values[near] - target) <= claim.tolerance / scale + halves[near] + 1e-9):
            return True
    return False


def _shown(path: Path, folder: Path) -> str:
    return str(path.relative_to(folder)) if path.is_relative_to(folder) else str(path)


def check_page(page: Path) -> list[Problem]:
    """The problems of one page: numbers no source holds, and links to missing CSVs."""
    text = page.read_text(encoding="utf-8")
    found, problems = sources(page, text)
    values, halves = csv_values(found)
    names = ", ".join(_shown(p, page.parent) for p in found) or "no CSV"
    for claim in claims(text):
        if not _matches(claim, values, halves):
            problems.append(Problem(page, claim.line, f"{claim.text} is in none of: {names}"))
    return sorted(problems, key=lambda p: p.line)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("pages", nargs="*", type=Path, help="pages (default: every page)")
    parser.add_argument("--sources", action="store_true", help="list each page's sources")
    args = parser.parse_args(argv)
    chosen = [p if p.is_file() else RESULTS / p for p in args.pages] or pages()
    total = 0
    for page in chosen:
        problems = check_page(page)
        total += len(problems)
        if args.sources:
            found, _ = sources(page)
            print(f"{page.name}: " + ", ".join(_shown(p, RESULTS) for p in found))
        for problem in problems:
            print(problem)
    print(f"{len(chosen)} page(s), {total} problem(s)", file=sys.stderr)
    return 1 if total else 0


if __name__ == "__main__":
    sys.exit(main())
