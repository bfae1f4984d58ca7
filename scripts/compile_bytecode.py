"""Byte-compile, on every core at once, the installed modules that segperf's commands and tests
import: the folders listed in scripts/bytecode_dirs.txt, relative to the venv's site-packages.

Why by hand: a fresh venv has no bytecode (`make setup` installs with --no-compile: compiling all
of torch's 12,000 modules takes ~25 s on 2 cores, and a run imports about a tenth of them).
Python compiles each module the first time a process imports it, one file after another, and the
test suite's workers each did it at once for the same ~4,500 modules: ~35 s of a fresh clone's
`make test-fast`. Compiling only the folders those modules live in, split over the cores, takes
~6 s. `compileall -j` parallelizes only a folder walk, not a list of folders; pip and uv compile
whole packages. A folder the list names that is not installed is skipped; a module outside the
list is still compiled when first imported, so a stale list costs time, never correctness.

    python scripts/compile_bytecode.py           # compile the listed folders (make setup does this)
    python scripts/compile_bytecode.py --record  # rewrite the list from the bytecode in the venv now

To refresh the list after a dependency changes: a fresh clone, `make test`, then `--record`.
"""

from __future__ import annotations

import argparse
import compileall
import os
import sys
import sysconfig
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path

LIST = Path(__file__).with_name("bytecode_dirs.txt")
CACHE_TAG = sys.implementation.cache_tag  # e.g. cpython-311: only bytecode this Python can use counts
LEFT_OUT = {"pip", "uv"}  # set-up tools: the project's commands never import them


def site_packages() -> Path:
    return Path(sysconfig.get_paths()["purelib"])


def listed_folders(listing: Path) -> list[str]:
    lines = (line.strip() for line in listing.read_text().splitlines())
    return [line for line in lines if line and not line.startswith("#")]


def sources(root: Path, folders: list[str]) -> list[Path]:
    """The .py files directly inside each listed folder (not its subfolders: those are listed
    themselves when a run imports from them)."""
    found = []
    for folder in folders:
        path = root / folder
        if path.is_dir():
            found.extend(sorted(path.glob("*.py")))
    return found


def compile_files(files: list[Path]) -> int:
    """Compiles the files whose bytecode is missing or stale; returns how many failed (a file of a
    package that does not compile under this Python is left for its import to report)."""
    return sum(not compileall.compile_file(str(f), quiet=2) for f in files)


def compile_listed(root: Path, folders: list[str], workers: int) -> tuple[int, int]:
    files = sources(root, folders)
    shares = [files[i::workers] for i in range(workers)]
    with ProcessPoolExecutor(workers) as pool:
        failed = sum(pool.map(compile_files, shares))
    return len(files), failed


def folders_with_bytecode(root: Path) -> list[str]:
    """Every folder under `root` (site-packages) with bytecode of this Python next to its sources."""
    found = set()
    for cache in root.rglob("__pycache__"):
        folder = cache.parent.relative_to(root)
        if folder.parts and folder.parts[0].split("-")[0] in LEFT_OUT:
            continue
        if any(cache.glob(f"*.{CACHE_TAG}.pyc")):
            found.add(folder.as_posix() or ".")
    return sorted(found)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--record", action="store_true", help="rewrite the list from the venv's bytecode")
    parser.add_argument("--list", type=Path, default=LIST, help="the list of folders (default: %(default)s)")
    parser.add_argument("--workers", type=int, default=os.cpu_count() or 1)
    args = parser.parse_args(argv)
    root = site_packages()
    if args.record:
        folders = folders_with_bytecode(root)
        header = f"# folders of {root.name} whose modules segperf's commands and tests import ({CACHE_TAG})\n"
        tmp = args.list.with_suffix(".tmp")
        tmp.write_text(header + "\n".join(folders) + "\n")
        tmp.replace(args.list)
        print(f"{args.list}: {len(folders)} folders")
        return 0
    if not args.list.is_file():
        print(f"{args.list}: no such list; nothing compiled (run with --record to make one)", file=sys.stderr)
        return 0
    files, failed = compile_listed(root, listed_folders(args.list), max(1, args.workers))
    print(f"byte-compiled {files} modules of {root} in {max(1, args.workers)} processes ({failed} did not compile)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
