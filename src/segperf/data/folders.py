"""Built-in data sets are written once into the cache folder, atomically: a reader (or a second
process racing to write the same set) sees the folder either absent or complete."""

from __future__ import annotations

import os
import shutil
import time
import uuid
from collections.abc import Callable
from pathlib import Path


def build_folder(out: str | Path, fill: Callable[[Path], None]) -> Path:
    """`fill` a hidden sibling folder, then rename it to `out` (which must be absent or empty)."""
    out = Path(out).expanduser()
    if out.exists() and any(out.iterdir()):
        raise FileExistsError(f"{out} already exists and is not empty; delete it or pick another path")
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = out.parent / f".{out.name}.tmp-{os.getpid()}-{uuid.uuid4().hex[:8]}"
    try:
        tmp.mkdir()
        fill(tmp)
        try:  # atomic: replaces only an empty `out` and fails if another writer got there first
            os.rename(tmp, out)
        except OSError as error:
            raise FileExistsError(f"{out} was created by someone else while generating") from error
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return out


def ensure_folder(path: Path, complete: Path, build: Callable[[], object], doing: str) -> Path:
    """Run `build` (which writes `path` with build_folder) unless `complete`, a file or folder in
    it, exists: the rename is atomic, so a present one means a complete set. A process that
    finished the same set first wins the race."""
    if not complete.exists():
        start = time.perf_counter()
        print(f"segperf: {doing} into {path} ...", end="", flush=True)
        try:
            build()
        except FileExistsError:
            if not complete.exists():
                raise
        print(f" done in {time.perf_counter() - start:.1f} s", flush=True)
    return path
