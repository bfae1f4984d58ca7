"""The shell commands the README and the docs pages show: every line of their ```bash blocks.

Tests read the docs through here, so that a command moved from one page to another stays
checked (tests/test_doc_commands.py checks that every one is run, composed or allow-listed)."""

from __future__ import annotations

import shlex
from dataclasses import dataclass
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]


@dataclass(frozen=True)
class DocCommand:
    page: str  # relative to the repository root, e.g. "docs/tuning.md"
    line: int  # of the command's first line in the page
    text: str  # as shown, continuation lines joined, the comment kept

    @property
    def argv(self) -> list[str]:
        """The words of the command without its comment (shlex: quotes as a shell reads them)."""
        return shlex.split(self.text, comments=True)

    def __str__(self) -> str:
        return f"{self.page}:{self.line}: {self.text}"


def doc_pages() -> list[str]:
    """README.md and every page of the site, as paths relative to the repository root."""
    pages = sorted(str(p.relative_to(REPO)) for p in (REPO / "docs").rglob("*.md"))
    return ["README.md", *pages]


def commands_in(page: str) -> list[DocCommand]:
    """Every command of the ```bash blocks of `page`: a line ending in a backslash continues on
    the next; blank lines and whole-line comments are not commands."""
    found: list[DocCommand] = []
    in_block = False
    pending: list[str] = []
    start = 0
    for number, line in enumerate((REPO / page).read_text().splitlines(), start=1):
        if line.startswith("```"):
            in_block = line.strip() == "```bash" and not in_block
            continue
        if not in_block:
            continue
        if not pending:
            start = number
        pending.append(line.rstrip())
        if line.rstrip().endswith("\\"):
            pending[-1] = pending[-1][:-1].rstrip()
            continue
        text = " ".join(part.strip() for part in pending)
        # a shell loop is one command, up to its last `done`
        if text.startswith(("for ", "while ")) and loop_depth(text) > 0:
            continue
        pending = []
        if text and not text.startswith("#"):
            found.append(DocCommand(page, start, text))
    return found


def loop_depth(text: str) -> int:
    """How many `for`/`while` loops `text` opens and does not close."""
    words = text.replace(";", " ; ").split()
    return sum(w in ("for", "while") for w in words) - sum(w == "done" for w in words)


def all_commands() -> list[DocCommand]:
    return [command for page in doc_pages() for command in commands_in(page)]


def segperf_commands(module: str, pages: list[str] | None = None) -> list[list[str]]:
    """The arguments after `python -m <module>` of every such command of `pages` (default: all)."""
    head = ["python", "-m", module]
    chosen = pages if pages is not None else doc_pages()
    return [c.argv[3:] for page in chosen for c in commands_in(page) if c.argv[:3] == head]
