"""The map is true: docs/architecture.md's layout names every package and top-level module of
src/segperf (and the Hydra plugins), each file it names exists where it says, and no comment or
docstring in the code cites a file of the repository that is not there."""

from __future__ import annotations

import re

from tests.conftest import REPO

SRC = REPO / "src" / "segperf"
DOC = REPO / "docs" / "architecture.md"


def layout_block() -> str:
    text = DOC.read_text()
    start = text.index("## Layout")
    fence = text.index("```", start)
    return text[fence + 3 : text.index("```", fence + 3)]


def sections() -> dict[str, str]:
    """The layout's entries under src/segperf/: each package folder (`  data/`) and what its
    lines say, until the next entry."""
    found: dict[str, str] = {}
    current = None
    for line in layout_block().splitlines():
        entry = re.match(r"^  ([a-z_]+)/\s", line)
        if entry:
            current = entry[1]
            found[current] = ""
        elif re.match(r"^\S", line):
            current = None
        if current:
            found[current] += line + "\n"
    return found


def test_every_package_of_segperf_is_on_the_map_and_every_package_on_it_exists():
    packages = {p.name for p in SRC.iterdir() if p.is_dir() and (p / "__init__.py").is_file()}
    assert set(sections()) == packages


def test_every_top_level_module_is_on_the_map():
    block = layout_block()
    modules = {p.name for p in SRC.glob("*.py") if p.name != "__init__.py"}
    assert {m for m in modules if m not in block} == set()
    assert len(modules) <= 7  # what every part shares, and the two commands' modules


def test_every_file_the_map_names_in_a_package_exists_there():
    missing = []
    for package, text in sections().items():
        for name in re.findall(r"\b([a-z_]+\.py)\b", text):
            if not any((SRC / package).rglob(name)):
                missing.append(f"{package}/{name}")
        for sub in re.findall(r"\b([a-z_]+)/(?=[\s,)])", text):
            if sub != package and not (SRC / package / sub).is_dir() and not (REPO / "conf" / sub).is_dir():
                missing.append(f"{package}/{sub}/")
    assert missing == []


# a repository file a comment may cite: docs/*.md, scripts/*, conf/*, tests/*, examples/*
CITED = re.compile(r"\b((?:docs|scripts|conf|tests|examples)/[\w./-]+\.(?:md|py|sh|yaml|ipynb))")


def test_no_comment_cites_a_file_that_does_not_exist():
    # the tests also run other projects' suites (lightning-hydra-template's tests/test_train.py):
    # there only segperf's own folders count
    ours = ("docs/", "scripts/", "conf/", "examples/")
    cited = {
        (str(path.relative_to(REPO)), name.rstrip("."))
        for root in (REPO / "src", REPO / "tests", REPO / "scripts")
        for path in root.rglob("*.py")
        if "fixtures" not in path.parts  # projects of others, vendored: their paths are their own
        for name in CITED.findall(path.read_text())
        if root != REPO / "tests" or name.startswith(ours)
    }
    assert sorted((where, name) for where, name in cited if not (REPO / name).exists()) == []
