"""What the up-front checks of every image workload share (Carvana's segperf.data.carvana.checks,
the image folder's segperf.data.imagefolder.checks): the error a bad data set raises, the read
of a file's last bytes that finds its end marker (a download cut short has none), and the
thread pool that checks thousands of files in seconds.

Nothing is decoded: a checker opens each file lazily with PIL for its header and reads its tail.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import TypeVar

from segperf.errors import SegperfError

TAIL_BYTES = 64
PADDING = b"\x00 \t\r\n"  # some writers pad a file after its end marker

Item = TypeVar("Item")
Found = TypeVar("Found")


class BadDataError(SegperfError, ValueError):
    """Samples that cannot be read; the message names them and the ways out."""


def tail(path: Path, size: int) -> bytes:
    """The last bytes of a file of `size` bytes, without trailing padding: where its end marker is."""
    with open(path, "rb") as f:
        f.seek(max(0, size - TAIL_BYTES))
        return f.read().rstrip(PADDING)


def check_each(check: Callable[[Item], Found], items: Iterable[Item], workers: int = 1) -> list[Found]:
    """`check` of every item, in order; with `workers` > 1 in that many threads (the reads wait on
    the disk, not on the interpreter)."""
    items = list(items)
    if workers > 1 and len(items) > 1:
        with ThreadPoolExecutor(max_workers=workers, thread_name_prefix="segperf-check") as pool:
            return list(pool.map(check, items))
    return [check(item) for item in items]
