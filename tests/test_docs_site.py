"""The README is a front page that fits a screen, and docs/ a site that builds without a broken
link: `mkdocs build --strict` (mkdocs.yml checks links, anchors and that every page is in the
nav), and the README's own links into docs/ (which mkdocs does not read) checked here the way
GitHub resolves them."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from segperf.axes import training_axis_keys
from tests.conftest import REPO
from tests.extras import needs_extra

README = REPO / "README.md"
# Link targets in Markdown: [text](target) and ![alt](target)
LINK = re.compile(r"!?\[[^\]]*\]\(([^)\s]+)\)")
# Pages kept as they were written (their tables are records other tests read row by row):
# the wall-of-text rule below is for the front page and the pages written as prose.
TABLES_KEPT = {"docs/RELIABILITY.md", "docs/GPU.md", "docs/BENCHMARKS.md"}


def github_anchors(page: Path) -> set[str]:
    """The anchors GitHub (and the site: mkdocs.yml's toc slugify is the same) gives the
    headings of `page`: lower case, punctuation dropped, each space a hyphen."""
    needs_extra("docs")  # pymdownx: the site's own slugify
    from pymdownx.slugs import slugify

    slug = slugify(case="lower")
    anchors: set[str] = set()
    in_code = False
    for line in page.read_text().splitlines():
        if line.startswith("```"):
            in_code = not in_code
        elif not in_code and (heading := re.match(r"#{1,6} (.+)", line)):
            anchors.add(slug(heading.group(1).replace("`", ""), "-"))
    return anchors


@pytest.mark.slow  # mkdocs builds the whole site (~1 s, more on a busy machine)
def test_the_site_builds_with_strict_checks(tmp_path):
    """`make docs` as CI has it: a broken link or anchor between pages, a page missing from the
    nav, or a missing image stops the build."""
    needs_extra("docs")
    site = tmp_path / "site"
    env = {**os.environ, "NO_MKDOCS_2_WARNING": "1"}
    done = subprocess.run(
        [sys.executable, "-m", "mkdocs", "build", "--strict", "--site-dir", str(site)],
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, "mkdocs build --strict (pip install -e '.[docs]' if it is missing):\n" + done.stderr
    assert (site / "index.html").is_file() and (site / "tuning" / "index.html").is_file()
    assert (site / "cpu-ladder" / "training_throughput.png").is_file()  # the reports' charts travel


def readme_links() -> list[str]:
    text = re.sub(r"```.*?```", "", README.read_text(), flags=re.S)
    return LINK.findall(text)


def test_the_readmes_links_into_docs_reach_a_file_and_its_heading():
    """Relative links, so that they work on GitHub and in a clone; `page.md#anchor` needs that
    heading in that page."""
    links = [link for link in readme_links() if not link.startswith(("http://", "https://"))]
    assert len(links) >= 10
    broken = []
    for link in links:
        path, _, anchor = link.partition("#")
        target = REPO / path
        if not target.exists():
            broken.append(f"{link}: no such file")
        elif anchor and anchor not in github_anchors(target):
            broken.append(f"{link}: no heading with that anchor in {path}")
    assert broken == []


def test_a_link_to_a_missing_heading_is_found():
    """The anchor check can fail: a heading that is not there has no anchor."""
    anchors = github_anchors(REPO / "docs" / "troubleshooting.md")
    assert "settings-this-machine-cannot-honour" in anchors
    assert "settings-this-machine-can-honour" not in anchors


# A page cited in a comment or docstring of src/ or conf/, with the section quoted after it if any:
# `docs/tuning.md, "How it searches"`, `README, "Run size"`, `the README's "Run size"`
CITATION = re.compile(r"(README|docs/[\w/.-]+\.md)(?:,\s*|'s\s+)?(?:\"([^\"\n]+)\")?")


def code_citations() -> list[tuple[str, str, str | None]]:
    """(file, page, section or None) for every page cited in src/ and conf/."""
    files = sorted((REPO / "src").rglob("*.py")) + sorted((REPO / "conf").rglob("*.yaml"))
    return [
        (str(file.relative_to(REPO)), page, section)
        for file in files
        for page, section in CITATION.findall(file.read_text())
    ]


def test_the_pages_and_sections_cited_in_the_code_exist():
    """The README was cut to a front page and its sections moved to docs/: a comment that sends
    the reader to a page or a section that is not there any more is a broken link too."""
    citations = code_citations()
    assert any(page.startswith("docs/") and section for _, page, section in citations)  # the pattern finds them
    broken = []
    for file, page, section in citations:
        target = README if page == "README" else REPO / page
        if not target.is_file():
            broken.append(f"{file}: {page}: no such file")
        elif section and not any(h.lower().startswith(section.lower()) for h in headings(target)):
            broken.append(f'{file}: {page}, "{section}": no heading begins so')  # cited by its first words
    assert broken == []


def headings(page: Path) -> list[str]:
    """The headings of a Markdown page, as written (code spans unquoted), fenced code left out."""
    text = re.sub(r"^```.*?^```", "", page.read_text(), flags=re.S | re.M)
    return [h.replace("`", "") for h in re.findall(r"^#{1,6} (.+)$", text, flags=re.M)]


def test_the_readme_fits_a_screen_and_points_to_every_page():
    lines = README.read_text().splitlines()
    assert len(lines) <= 300
    linked = {link.partition("#")[0] for link in readme_links()}
    pages = {f"docs/{p.relative_to(REPO / 'docs')}" for p in (REPO / "docs").glob("*.md")}
    pages |= {f"docs/studies/{p.name}" for p in (REPO / "docs" / "studies").glob("*.md")}
    assert sorted(pages - linked) == []


def prose_pages() -> list[str]:
    """The README and the pages written as prose: not TABLES_KEPT, nor the generated reports of
    docs/<report folder>/ (they print what the report writes)."""
    written = [*(REPO / "docs").glob("*.md"), *(REPO / "docs" / "studies").glob("*.md")]
    pages = [str(p.relative_to(REPO)) for p in written]
    return ["README.md", *sorted(p for p in pages if p not in TABLES_KEPT)]


@pytest.mark.parametrize("page", prose_pages())
def test_no_table_row_is_a_wall_of_text(page):
    """A row of hundreds of characters reads as a paragraph squeezed into a cell: such text is
    prose or a list."""
    long = [row[:80] for row in (REPO / page).read_text().splitlines() if row.startswith("|") and len(row) > 300]
    assert long == []


def readme_axes_table() -> dict[str, list[str]]:
    """group -> options, from the README's table of the optimization axes."""
    section = README.read_text().split("## The optimization axes", 1)[1].split("\n## ", 1)[0]
    rows = [row for row in section.splitlines() if row.startswith("| `")]
    table = {}
    for row in rows:
        group, options = (cell.strip() for cell in row.strip("|").split("|")[:2])
        table[group.strip("`")] = [o.strip().strip("`") for o in options.split(",")]
    return table


def test_the_readmes_axes_table_has_every_axis_group_with_exactly_its_options():
    """One line per axis: every config group of a training axis, each with the options its
    folder in conf/ holds (a new option file shows up as a missing option here)."""
    conf = REPO / "conf"
    groups = sorted(g for g in training_axis_keys() if (conf / g).is_dir())
    table = readme_axes_table()
    assert sorted(table) == groups
    for group, options in table.items():
        assert sorted(options) == sorted(p.stem for p in (conf / group).glob("*.yaml")), group
