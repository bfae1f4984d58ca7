"""docs/RELIABILITY.md is a promise: every row of its tables names a test, and every test it
names exists (a renamed or deleted test would silently orphan a row)."""

import ast
import re

from tests.conftest import REPO

DOC = REPO / "docs" / "RELIABILITY.md"


def defined_tests(path) -> set[str]:
    tree = ast.parse(path.read_text())
    return {node.name for node in ast.walk(tree) if isinstance(node, ast.FunctionDef) and node.name.startswith("test")}


def cited_tests() -> list[tuple[str, str]]:
    """(file, test) for every `file.py::name` and every following `::name` (same file)."""
    cited = []
    for row in DOC.read_text().splitlines():
        current = None
        for file, name in re.findall(r"`(?:(test_\w+\.py))?::(\w+)`", row):
            current = file or current
            assert current, f"`::{name}` without a file before it in: {row}"
            cited.append((current, name))
    return cited


def test_every_test_the_reliability_table_cites_exists():
    cited = cited_tests()
    assert len(cited) > 40
    missing = [f"{file}::{name}" for file, name in cited if name not in defined_tests(REPO / "tests" / file)]
    assert missing == []


def test_every_row_of_the_reliability_tables_names_a_test_or_refers_to_one():
    rows = [line for line in DOC.read_text().splitlines() if line.startswith("| ") and not line.startswith("| ---")]
    body = [row for row in rows if not row.startswith(("| failure ", "| setting ", "| concern "))]
    untested = [row for row in body if "::" not in row and "see above" not in row]
    assert untested == []
