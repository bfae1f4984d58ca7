"""Byte-compile, on every core at once, the installed modules that segperf's commands and tests
import: those listed in scripts/bytecode_modules.txt, by folder relative to the venv's site-packages.

Why by hand: a fresh venv has no bytecode (`make setup` installs with --no-compile: compiling all
of torch's 12,000 modules takes ~25 s on 2 cores, and a run imports about a tenth of them).
Python compiles each module the first time a process imports it, one file after another, and the
test suite's workers each did it at once for the same ~4,500 modules: ~35 s of a fresh clone's
`make test-fast`. Compiling only those modules, split over the cores, takes ~5 s (every module
of their folders: a quarter more source, ~30% longer). `compileall -j` parallelizes only a folder
walk, not a list of files; pip and uv compile whole packages. A listed module that is not
installed is skipped; a module outside the list is still compiled when first imported, so a
stale list costs time, never correctness.

    python scripts/compile_bytecode.py           # compile the listed modules (make setup does this)
    python scripts/compile_bytecode.py --package torch  # torch's only
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

LIST = Path(__file__).with_name("bytecode_modules.txt")
CACHE_TAG = sys.implementation.cache_tag  # e.g. cpython-311: only bytecode this Python can use counts
LEFT_OUT = {"pip", "uv"}  # set-up tools: the project's commands never import them


def site_packages() -> Path:
    return Path(sysconfig.get_paths()["purelib"])


def listed_modules(listing: Path) -> dict[str, list[str]]:
    """folder -> the names of its listed modules (a line: `folder: name name ...`; `.` is
    site-packages itself)."""
    found = {}
    for line in listing.read_text().splitlines():
        if line.strip() and not line.startswith("#"):
            folder, _, names = line.partition(":")
            found[folder.strip()] = names.split()
    return found


def sources(root: Path, modules: dict[str, list[str]]) -> list[Path]:
    """The listed modules' .py files that are installed under `root`."""
    files = (root / folder / f"{name}.py" for folder, names in modules.items() for name in names)
    return [path for path in files if path.is_file()]


def compile_files(files: list[Path]) -> int:
    """Compiles the files whose bytecode is missing or stale; returns how many failed (a file of a
    package that does not compile under this Python is left for its import to report)."""
    return sum(not compileall.compile_file(str(f), quiet=2) for f in files)


def compile_listed(root: Path, modules: dict[str, list[str]], workers: int) -> tuple[int, int]:
    files = sources(root, modules)
    shares = [files[i::workers] for i in range(workers)]
    with ProcessPoolExecutor(workers) as pool:
        failed = sum(pool.map(compile_files, shares))
    return len(files), failed


def modules_with_bytecode(root: Path) -> dict[str, list[str]]:
    """Every module under `root` (site-packages) with bytecode of this Python and its source, by
    folder (the installers' own left out)."""
    found: dict[str, list[str]] = {}
    for cache in sorted(root.rglob("__pycache__")):
        folder = cache.parent.relative_to(root)
        if folder.parts and folder.parts[0].split("-")[0] in LEFT_OUT:
            continue
        names = sorted(
            name
            for pyc in cache.glob(f"*.{CACHE_TAG}.pyc")
            if (cache.parent / f"{(name := pyc.name.split('.')[0])}.py").is_file()
        )
        if names:
            found[folder.as_posix() or "."] = names
    return found


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--record", action="store_true", help="rewrite the list from the venv's bytecode")
    parser.add_argument("--list", type=Path, default=LIST, help="the list of modules (default: %(default)s)")
    parser.add_argument("--workers", type=int, default=os.cpu_count() or 1)
    parser.add_argument(
        "--package",
        help="only the listed modules of this package (make setup compiles torch's while uv installs the rest)",
    )
    args = parser.parse_args(argv)
    root = site_packages()
    if args.record:
        modules = modules_with_bytecode(root)
        header = f"# the modules of {root.name} that segperf's commands and tests import ({CACHE_TAG}), by folder\n"
        lines = [f"{folder}: {' '.join(names)}" for folder, names in modules.items()]
        tmp = args.list.with_suffix(".tmp")
        tmp.write_text(header + "\n".join(lines) + "\n")
        tmp.replace(args.list)
        print(f"{args.list}: {sum(map(len, modules.values()))} modules in {len(modules)} folders")
        return 0
    if not args.list.is_file():
        print(f"{args.list}: no such list; nothing compiled (run with --record to make one)", file=sys.stderr)
        return 0
    modules = listed_modules(args.list)
    if args.package:
        modules = {folder: names for folder, names in modules.items() if folder.split("/")[0] == args.package}
    files, failed = compile_listed(root, modules, max(1, args.workers))
    print(f"byte-compiled {files} modules of {root} in {max(1, args.workers)} processes ({failed} did not compile)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
