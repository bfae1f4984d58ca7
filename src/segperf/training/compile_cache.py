"""torch.compile's on-disk cache, shared by runs that overlap without their corrupting it.

Inductor keeps what it compiled (FX graphs, generated C++/Triton code, built libraries) in
TORCHINDUCTOR_CACHE_DIR, which segperf's commands route to `~/.cache/segperf/torchinductor` at their
entry (segperf.config.route_tool_caches; importing segperf routes nothing). That
folder is not safe for processes compiling into it at once: a process that looks up a graph reads
every file of the graph's folder, the half-written temp file of another process's write included,
and fails on a truncated pickle (pytorch#172144); parallel test workers once left the folder so
broken that every later compiled run crashed. Runs overlap whenever there is more than one process:
a sweep under a parallel launcher, two shells, the ranks of a DDP job, a tuner's probes.

So no process compiles into the shared folder. `use_private_copy()`, called by a run that compiles
(segperf.training.run, segperf.inference.run), gives this process a copy of its own:

- **seed**: the shared folder's entries are copied into `torchinductor-runs/<host>-<pid>/` beside it,
  and TORCHINDUCTOR_CACHE_DIR points there (the shared folder is remembered in
  SEGPERF_SHARED_COMPILE_CACHE, so that a DDP rank or any process started from this one makes a
  copy of its own instead of sharing this one's);
- **publish**: when the process exits, each file it compiled that the shared folder lacks is copied
  to a temp name outside Inductor's folders and renamed into place (a reader never sees half a
  file); an entry already there is kept (Inductor names entries by a hash of what they hold). Then
  the copy is removed; one left by a killed process is removed by the next run on that host.

Seeding holds `torchinductor-runs/publish.lock` shared (fcntl.flock) and publishing holds it
exclusively, so a copy is never taken from a half-published cache. Neither holds it while compiling.

Why not the other ways: a folder per process alone would recompile in every run (the tiny CNN of
the tests: 37 s of warm-up cold, 5 s warm, on 2 cores; the U-Net's 2 minutes); a lock held while
compiling would run concurrent runs' compiles one after another, and Inductor compiles lazily,
inside the first steps and at every recompile, where no lock can wrap it; reusing a finished
cache read-only needs one run to finish it before the others start. The cost of the copy: the
tiny U-Net's cache, 11 MB in 148 files, is seeded in 0.06-0.09 s and checked for new entries at
exit in 0.005 s (shutil.copy2 on a 2-core VM's disk, three runs), against 2 minutes of compiling.

A variable the user set wins as before (segperf.config.route_tool_caches): their folder is then the
shared one. A script of the user's own (PerfMonitor in their Trainer) keeps torch's own cache
folder and writes it directly; `use_private_copy()` is public for it.
"""

from __future__ import annotations

import atexit
import fcntl
import os
import shutil
import socket
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

VARIABLE = "TORCHINDUCTOR_CACHE_DIR"
SHARED = "SEGPERF_SHARED_COMPILE_CACHE"  # the shared folder, once a process works in a copy
LOCK = "publish.lock"
SKIPPED = ("locks",)  # Inductor's own lock files: per folder, never shared
_in_use: dict[int, Path | None] = {}  # pid -> this process's copy (None: a temp folder, no reuse)


def runs_folder(shared: Path) -> Path:
    """Where the copies of `shared` live: beside it, on the same disk (a rename publishes)."""
    return shared.with_name(f"{shared.name}-runs")


def private_folder(shared: Path, pid: int | None = None) -> Path:
    return runs_folder(shared) / f"{socket.gethostname()}-{pid or os.getpid()}"


@contextmanager
def locked(shared: Path, exclusive: bool) -> Iterator[None]:
    """flock on the copies' lock file: shared while seeding, exclusive while publishing."""
    folder = runs_folder(shared)
    folder.mkdir(parents=True, exist_ok=True)
    with open(folder / LOCK, "a") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX if exclusive else fcntl.LOCK_SH)
        try:
            yield
        finally:
            fcntl.flock(lock, fcntl.LOCK_UN)


def _entries(folder: Path) -> Iterator[Path]:
    """The cache's files, relative to `folder`: no temp files (a leading dot), no lock folders."""
    for parent, dirs, files in os.walk(folder):
        dirs[:] = [d for d in dirs if not d.startswith(".") and d not in SKIPPED]
        for name in files:
            if not name.startswith("."):
                yield (Path(parent) / name).relative_to(folder)


def seed(shared: Path, private: Path) -> int:
    """Copy the shared cache's entries into `private`; how many files."""
    private.mkdir(parents=True, exist_ok=True)
    if not shared.is_dir():
        return 0
    copied = 0
    with locked(shared, exclusive=False):
        for entry in _entries(shared):
            (private / entry).parent.mkdir(parents=True, exist_ok=True)
            try:
                shutil.copy2(shared / entry, private / entry)
                copied += 1
            except OSError:  # gone meanwhile (removed by hand): a cache miss, nothing worse
                pass
    return copied


def publish(private: Path, shared: Path) -> int:
    """Copy the entries of `private` that `shared` lacks into it, each renamed into place from a
    temp file outside Inductor's folders; how many files."""
    if not private.is_dir():
        return 0
    published = 0
    with locked(shared, exclusive=True):
        staging = Path(tempfile.mkdtemp(prefix=".publishing-", dir=runs_folder(shared)))
        try:
            for entry in _entries(private):
                target = shared / entry
                if target.exists():
                    continue
                temp = staging / f"{published}.tmp"
                shutil.copy2(private / entry, temp)
                target.parent.mkdir(parents=True, exist_ok=True)
                os.replace(temp, target)
                published += 1
        finally:
            shutil.rmtree(staging, ignore_errors=True)
    return published


def _remove_stale(shared: Path) -> None:
    """Copies left by processes of this host that are gone (killed before their exit hook)."""
    host = socket.gethostname()
    for folder in runs_folder(shared).glob(f"{host}-*"):
        pid = folder.name.rsplit("-", 1)[-1]
        if not pid.isdigit() or int(pid) == os.getpid():
            continue
        try:
            os.kill(int(pid), 0)
        except ProcessLookupError:
            shutil.rmtree(folder, ignore_errors=True)
        except PermissionError:  # alive, another user's
            pass


def _finish(private: Path, shared: Path, owner: int) -> None:
    """At exit: publish, then remove the copy; a cache that cannot be written costs only speed."""
    if os.getpid() != owner:  # a forked child that ran the parent's exit hooks: not its copy
        return
    try:
        publish(private, shared)
    except OSError:
        pass
    shutil.rmtree(private, ignore_errors=True)


def use_private_copy() -> Path | None:
    """Point this process's torch.compile cache at a private copy of the shared one (seeded now,
    published at exit); the copy's folder, or None when the cache folder cannot be written (then
    the run compiles without reuse into a temp folder, never into the shared one). Once per
    process: later calls (a sweep's next job) keep the copy."""
    if os.getpid() in _in_use:
        return _in_use[os.getpid()]
    shared_text = os.environ.get(SHARED) or os.environ.get(VARIABLE)
    if not shared_text:  # nothing routed (a user's own script, before torch set it): torch's own default
        from torch._inductor.runtime.cache_dir_utils import default_cache_dir

        shared_text = default_cache_dir()
    shared = Path(shared_text).expanduser().absolute()
    private = private_folder(shared)
    os.environ[SHARED] = str(shared)
    try:
        _remove_stale(shared)
        seed(shared, private)
    except OSError:  # a read-only or full cache folder
        os.environ[VARIABLE] = temp = tempfile.mkdtemp(prefix="segperf-torchinductor-")
        atexit.register(shutil.rmtree, temp, True)
        _in_use[os.getpid()] = None
        return None
    os.environ[VARIABLE] = str(private)
    atexit.register(_finish, private, shared, os.getpid())
    _in_use[os.getpid()] = private
    return private
