"""Built-in data sets are written once into the cache folder, atomically: a reader (or a second
process racing to write the same set) sees the folder either absent or complete.

Two processes that need the same set at once (two sweeps started together, the ranks of a
data-parallel run on a shared cache folder) take turns on a lock file next to it: the first
builds, the second waits and then uses the first one's. Where the file system has no locks,
both build into their own hidden folder and the one that renames second uses the winner's.
A build that dies half-way leaves only its hidden folder, removed by the next build.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import time
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path

from segperf.errors import WriteError, os_error_in

try:
    import fcntl
except ImportError:  # pragma: no cover - not POSIX: the rename alone keeps the folder whole
    fcntl = None  # type: ignore[assignment]


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # someone else's process
        return True
    return True


def _remove_dead_builds(out: Path) -> None:
    """Hidden folders of builds whose process is gone (killed half-way)."""
    for tmp in out.parent.glob(f".{out.name}.tmp-*"):
        pid = tmp.name.removeprefix(f".{out.name}.tmp-").split("-", 1)[0]
        if pid.isdigit() and int(pid) != os.getpid() and not _alive(int(pid)):
            shutil.rmtree(tmp, ignore_errors=True)


def build_folder(out: str | Path, fill: Callable[[Path], None]) -> Path:
    """`fill` a hidden sibling folder, then rename it to `out` (which must be absent or empty).
    A write that fails (a full disk) raises WriteError naming the folder; nothing is left."""
    out = Path(out).expanduser()
    if out.exists() and any(out.iterdir()):
        raise FileExistsError(f"{out} already exists and is not empty; delete it or pick another path")
    tmp = out.parent / f".{out.name}.tmp-{os.getpid()}-{uuid.uuid4().hex[:8]}"
    try:
        out.parent.mkdir(parents=True, exist_ok=True)
        _remove_dead_builds(out)
        tmp.mkdir()
        fill(tmp)
        try:  # atomic: replaces only an empty `out` and fails if another writer got there first
            os.rename(tmp, out)
        except OSError as error:
            raise FileExistsError(f"{out} was created by someone else while generating") from error
    except FileExistsError:
        raise
    except Exception as error:
        cause = os_error_in(error)
        if cause is None or isinstance(error, WriteError):
            raise
        raise WriteError(out, cause, setting="SEGPERF_CACHE") from error
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return out


@contextlib.contextmanager
def _turn(path: Path) -> Iterator[None]:
    """Hold the lock of `path` (a hidden `.<name>.lock` beside it, removed when done) while the
    block runs; say so when another process holds it. No lock where the file system has none."""
    if fcntl is None:
        yield
        return
    lock_path = path.parent / f".{path.name}.lock"
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
    except OSError as error:
        raise WriteError(lock_path, error, setting="SEGPERF_CACHE") from error
    said = False
    while True:
        try:
            lock = open(lock_path, "a+b")  # noqa: SIM115 - held until the block ends
        except OSError as error:
            raise WriteError(lock_path, error, setting="SEGPERF_CACHE") from error
        try:
            try:
                fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                if not said:
                    print(f"segperf: waiting for another process preparing {path} ...", flush=True)
                    said = True
                fcntl.flock(lock, fcntl.LOCK_EX)
        except OSError:  # no locks here (some network file systems): the rename still keeps it whole
            lock.close()
            yield
            return
        try:  # the holder before us removes the file when done: a lock on a removed file is no lock
            same = os.stat(lock_path).st_ino == os.fstat(lock.fileno()).st_ino
        except FileNotFoundError:
            same = False
        if same:
            break
        lock.close()
    try:
        yield
    finally:
        Path(lock_path).unlink(missing_ok=True)  # still held: a process waiting on it retries
        lock.close()


def ensure_folder(path: Path, complete: Path, build: Callable[[], object], doing: str) -> Path:
    """Run `build` (which writes `path` with build_folder) unless `complete`, a file or folder in
    it, exists: the rename is atomic, so a present one means a complete set. One process at a
    time builds (see the module doc); a process that finished the same set first wins."""
    if complete.exists():
        return path
    with _turn(path):
        if complete.exists():  # built by the process we waited for
            return path
        start = time.perf_counter()
        print(f"segperf: {doing} into {path} ...", end="", flush=True)
        try:
            build()
        except FileExistsError:
            if not complete.exists():
                raise
        print(f" done in {time.perf_counter() - start:.1f} s", flush=True)
    return path
