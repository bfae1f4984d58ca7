"""The example summaries the README and the docs show are output segperf prints, not text that
drifts from it: each marked block was copied from `make demo`'s summary.txt, and every row of it
must be a row `format_run_summary` prints for that run's results.json (kept in
tests/fixtures/demo_run/). A row the code no longer prints (a renamed label, a changed column)
fails here until the example is copied again from a real run."""

from __future__ import annotations

import json
import re

from segperf.perf.summary import format_run_summary
from tests.conftest import REPO

RESULTS = REPO / "tests" / "fixtures" / "demo_run" / "results.json"
# The comment that marks a block as copied from that run's summary (shortened is fine: any rows)
MARKER = "<!-- summary example:"
# Words of the summary's section titles: a block showing them is a summary example and must be marked
SUMMARY_TITLES = ("Top-line statistics", "Per-phase statistics")


def pages() -> list[str]:
    docs = sorted(str(p.relative_to(REPO)) for p in (REPO / "docs").rglob("*.md"))
    return ["README.md", *docs]


def fenced_blocks(page: str) -> list[tuple[int, str, list[str]]]:
    """(line of the opening fence, the line before it, the block's lines) for each ``` block."""
    lines = (REPO / page).read_text().splitlines()
    blocks, start = [], None
    for number, line in enumerate(lines):
        if line.startswith("```"):
            if start is None:
                start = number
            else:
                before = lines[start - 1] if start > 0 else ""
                blocks.append((start + 1, before, lines[start + 1 : number]))
                start = None
    return blocks


def examples() -> list[tuple[str, int, list[str]]]:
    return [
        (page, line, rows)
        for page in pages()
        for line, before, rows in fenced_blocks(page)
        if before.startswith(MARKER)
    ]


def printed_rows() -> set[str]:
    return {row.rstrip() for row in format_run_summary(json.loads(RESULTS.read_text())).splitlines()}


def test_every_row_of_the_docs_example_summaries_is_a_row_the_code_prints():
    printed = printed_rows()
    stale = [f"{page}:{line}: {row}" for page, line, rows in examples() for row in rows if row.rstrip() not in printed]
    assert stale == [], "copy the example again from a real run's summary.txt:\n" + "\n".join(stale)


def test_the_readme_and_the_run_size_page_show_a_marked_example():
    """A guard for the reader above: the examples are found (a changed marker would check nothing)."""
    found = {page for page, _, _ in examples()}
    assert {"README.md", "docs/run-size.md"} <= found
    readme = next(rows for page, _, rows in examples() if page == "README.md")
    assert any(row.startswith("val_dice") for row in readme) and "Per-phase statistics" in readme


def test_every_block_showing_a_summary_is_marked_as_an_example():
    unmarked = [
        f"{page}:{line}"
        for page in pages()
        for line, before, rows in fenced_blocks(page)
        if any(title in rows for title in SUMMARY_TITLES) and not before.startswith(MARKER)
    ]
    assert unmarked == []


def test_a_row_the_code_no_longer_prints_is_caught():
    """The check can fail: the rows the README showed before the quality rows were renamed."""
    printed = printed_rows()
    assert "Val Dice                0.9740" not in printed
    assert not any(re.match(r"Val first -> last", row) for row in printed)
    assert "Trained on              320 images in 80 steps" in printed
