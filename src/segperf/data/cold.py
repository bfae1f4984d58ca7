"""`cold_cache=true`: read the data from disk, not from the OS page cache, as the seed study did.

The seed ran `sync; echo 1 | sudo tee /proc/sys/vm/drop_caches` before each run. That needs
root (and drops every file's cached pages, system-wide). Without root, segperf asks the kernel
to drop the cached pages of each data file with `posix_fadvise(POSIX_FADV_DONTNEED)`, which any
process that can open the file may do; it evicts clean pages only, which data files are.
Where neither works (not Linux, no fadvise) the run says so in one line and counts as warm.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

DROP_CACHES = Path("/proc/sys/vm/drop_caches")


@dataclass(frozen=True)
class PageCache:
    """What a run knows about its reads: `cold` (caches dropped) or `warm`, and how."""

    state: str  # "cold" | "warm"
    method: str | None  # "drop_caches" | "posix_fadvise" | None
    message: str


def warm(reason: str = "cold_cache=false") -> PageCache:
    return PageCache("warm", None, f"page cache: warm ({reason}).")


def _drop_caches() -> str | None:
    """None when done, else why not."""
    if not sys.platform.startswith("linux"):
        return f"not Linux ({sys.platform})"
    if os.geteuid() != 0:
        return "not root"
    try:
        os.sync()  # dirty pages cannot be dropped: write them first, as the seed's `sync` did
        DROP_CACHES.write_text("1")
    except OSError as error:
        return f"cannot write {DROP_CACHES} ({error.strerror or error})"
    return None


def _fadvise(paths: Iterable[Path]) -> tuple[int, list[str]]:
    done, errors = 0, []
    for path in paths:
        try:
            fd = os.open(path, os.O_RDONLY)
        except OSError as error:
            errors.append(f"{path}: {error.strerror}")
            continue
        try:
            os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
            done += 1
        except OSError as error:
            errors.append(f"{path}: {error.strerror}")
        finally:
            os.close(fd)
    return done, errors


def drop_page_cache(paths: Iterable[str | Path], allow_drop_caches: bool = True) -> PageCache:
    """Evict `paths` (the data files) from the page cache by the best method this process may use."""
    paths = [Path(p) for p in paths]
    why_not = _drop_caches() if allow_drop_caches else "skipped"
    if why_not is None:
        return PageCache("cold", "drop_caches", "page cache: cold (sync; echo 1 > /proc/sys/vm/drop_caches).")
    if not hasattr(os, "posix_fadvise"):
        return warm(f"could not drop it: {why_not} for /proc/sys/vm/drop_caches, and no posix_fadvise here")
    done, errors = _fadvise(paths)
    if errors and not done:
        return warm(f"could not drop it: {why_not}, and posix_fadvise failed: {errors[0]}")
    skipped = f", {len(errors)} could not be opened (first: {errors[0]})" if errors else ""
    return PageCache(
        "cold",
        "posix_fadvise",
        f"page cache: cold (posix_fadvise DONTNEED on {done} data files{skipped}; "
        f"/proc/sys/vm/drop_caches not used: {why_not}).",
    )
