"""What the up-front checks of every image workload share (Carvana's segperf.data.carvana.checks,
the image folder's segperf.data.imagefolder.checks): the error a bad data set raises, the read
of a file's last bytes that finds its end marker (a download cut short has none), the thread
pool that checks thousands of files in seconds, and the whole list of the bad files.

Nothing is decoded: a checker opens each file lazily with PIL for its header and reads its tail.

The whole list. An error (and the console) names only the first few files of each kind: a folder
with 46 bad files must not bury the headline under 46 lines. Every bad file is kept instead, with
its kind and reason, in results.json's `dataset.bad_files` (a program's list, under either
data.on_bad_sample policy) and, one path a line, in the run folder's `bad_files.txt` (a person's:
`xargs rm < bad_files.txt`, `rsync --exclude-from`); a cut list in a message says so (`WHOLE_LIST`).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any, TypeVar

from segperf.errors import SegperfError, chain
from segperf.perf.results import write_text_atomic

TAIL_BYTES = 64
BAD_FILES = "bad_files.txt"  # in the run folder: every bad file's path, one a line
# where a message that names only the first few bad files of a kind sends the reader for all of them
WHOLE_LIST = f"every bad file is in {BAD_FILES} in the run folder, and in results.json (dataset.bad_files)"
PADDING = b"\x00 \t\r\n"  # some writers pad a file after its end marker

Item = TypeVar("Item")
Found = TypeVar("Found")


class BadDataError(SegperfError, ValueError):
    """Samples that cannot be read; the message names them (the first few of each kind) and the
    ways out, `bad_files` every one as `{"path", "kind", "reason"}`."""

    def __init__(self, message: str, bad_files: list[dict[str, Any]] | None = None) -> None:
        super().__init__(message)
        self.bad_files = list(bad_files or [])


def bad_files_in(error: BaseException | None) -> list[dict[str, Any]] | None:
    """The whole list of bad files of a BadDataError behind `error`, None without one."""
    found = [e for e in chain(error) if isinstance(e, BadDataError) and e.bad_files] if error is not None else []
    return found[0].bad_files if found else None


def write_bad_files(folder: str | Path, dataset: dict[str, Any], error: BaseException | None = None) -> Path | None:
    """Complete a run's `dataset` section with the bad files of the check that stopped it (`error`),
    and write `bad_files.txt` (each path once, in the list's order) into `folder`, atomically;
    none when no file is bad (an earlier run's is removed). Returns the file written."""
    if "bad_files" not in dataset and (listed := bad_files_in(error)) is not None:
        dataset["bad_files"] = listed
    paths = list(dict.fromkeys(entry["path"] for entry in dataset.get("bad_files", [])))
    if not paths:  # none (any more): no earlier run's list left in a resumed run's folder
        (Path(folder) / BAD_FILES).unlink(missing_ok=True)
        return None
    return write_text_atomic(Path(folder) / BAD_FILES, "".join(f"{p}\n" for p in paths))


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
