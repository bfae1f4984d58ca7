"""Host memory of a training process tree, cheap enough to read every step, and what is left to it.

Why not the resource sampler's RSS (segperf.perf.sampler): it sums each process's whole RSS, and
RSS counts shared pages: segperf's `cache=memory` lives in shared memory that every DataLoader
worker maps, so a worker's RSS climbs through the first pass as it touches the cache, which is a
fill, not a leak. A leak (tensors kept across steps, a growing list) is private memory. Here each
process's /proc/<pid>/statm is read with one pread of a kept-open descriptor (the resident and
the shared page counts): `private = resident - shared` (anonymous pages) and `resident`.

The tree is this process and its descendants (DataLoader workers), minus the subtrees of the
children that already existed when training started (`exclude`): under Lightning's DDP on one
machine the other ranks are children of rank 0, and their memory is theirs, not rank 0's.

A forked worker starts with the parent's pages mapped copy-on-write, and statm counts them as the
worker's own: summed over the tree, a leak in the main process counts once more for each worker
started after it (non-persistent workers restart every epoch, each a copy of a bigger parent), and
the tree seems to grow faster than anything leaks. So `own` is the main process's private bytes
plus what each descendant added since it was first seen: what the tree itself allocates, each
page once; the plain sum stays as `private`.

Held, not resident (HeapHoles): glibc's malloc raises its mmap threshold to the largest block
freed so far, then serves a step's temporaries from its heap around the tensors a leak keeps; the
freed temporaries leave resident holes below the kept chunks, and a module keeping 300 KiB a step
grew its RSS 1.4-2.1 MiB a step (4.5-7x). mallinfo2() (glibc >= 2.33) says the free bytes inside
the heaps below their top chunks (`fordblks - keepcost`): resident holes; the creep trend reads
the main process's private bytes minus them. Measured on tests/fixtures/leak_*.py under the
default malloc: 300.6 KiB a step for 300.0 kept (RSS: 1,500-2,100), 307.6 for 307.2, 3,074.8
for 3,072.0, -1.3..0.1 without a leak. malloc's in-use bytes (`uordblks + hblkhd`) read the same
(300.4, 307.3, 3,072.9) on malloc'd leaks but are blind to Python's small objects (pymalloc's
arenas are mmap'd apart from malloc), so a list of floats or dicts growing would read flat; RSS
minus holes still counts those. Without mallinfo2 (musl, macOS, glibc < 2.33) nothing is
subtracted, and the record says so. A call walks every arena's free lists under its lock: 3-7 us
in a loop, 60-170 us a call inside a training step (cold caches, busy threads), so it is read
every few steps, not each.
"""

from __future__ import annotations

import ctypes
import os
import time
from pathlib import Path
from typing import NamedTuple

import psutil

_PAGE = os.sysconf("SC_PAGE_SIZE") if hasattr(os, "sysconf") else 4096
_GONE = (psutil.NoSuchProcess, psutil.AccessDenied, OSError)


def children(pid: int) -> list[int]:
    """The direct children of `pid` (Linux: /proc/<pid>/task/*/children; else psutil)."""
    task = f"/proc/{pid}/task"
    if not os.path.isdir(task):
        try:
            return [c.pid for c in psutil.Process(pid).children()]
        except _GONE:
            return []
    found: list[int] = []
    try:
        for tid in os.listdir(task):  # a child hangs off the thread that forked it
            try:
                with open(f"{task}/{tid}/children", "rb") as f:
                    found.extend(int(c) for c in f.read().split())
            except OSError:  # the thread exited meanwhile, or no CONFIG_PROC_CHILDREN
                pass
    except OSError:
        pass
    return found


class TreeReading(NamedTuple):
    resident: int  # RSS summed over the tree (shared pages once per process that maps them)
    private: int  # private (anonymous) bytes summed over the tree: a worker's copy-on-write pages included
    own: int  # the root's private bytes + each descendant's growth since first seen (module doc)


class TreeMemory:
    """Resident and private bytes of a process tree, per read; the tree re-listed every `refresh_s`."""

    def __init__(self, root: int | None = None, exclude: set[int] | None = None, refresh_s: float = 0.5) -> None:
        self.root = os.getpid() if root is None else root
        self.exclude = set(exclude or ())
        self.refresh_s = refresh_s
        self._fds: dict[int, int | psutil.Process] = {}
        self._first: dict[int, int] = {}  # a descendant's private bytes when first read
        self._next_refresh = 0.0

    def _pids(self) -> list[int]:
        pids, i = [self.root], 0
        while i < len(pids):
            pids.extend(c for c in children(pids[i]) if c not in self.exclude)
            i += 1
        return pids

    def _refresh(self) -> None:
        wanted = set(self._pids())
        for pid in [p for p in self._fds if p not in wanted]:
            self._close(pid)
        for pid in wanted - self._fds.keys():
            try:
                self._fds[pid] = os.open(f"/proc/{pid}/statm", os.O_RDONLY)
            except FileNotFoundError:  # no /proc (macOS): psutil, slower
                try:
                    self._fds[pid] = psutil.Process(pid)
                except _GONE:
                    pass
            except OSError:  # gone meanwhile
                pass
        self._next_refresh = time.perf_counter() + self.refresh_s

    def read(self) -> TreeReading:
        """The tree's memory now (TreeReading)."""
        if time.perf_counter() >= self._next_refresh:
            self._refresh()
        resident = private = own = 0
        for pid, fd in list(self._fds.items()):
            try:
                if isinstance(fd, int):
                    fields = os.pread(fd, 256, 0).split()  # size resident shared text lib data dt (pages)
                    rss, shared = int(fields[1]) * _PAGE, int(fields[2]) * _PAGE
                else:
                    info = fd.memory_info()
                    rss, shared = info.rss, getattr(info, "shared", 0)
            except (*_GONE, IndexError, ValueError):  # a worker gone between two listings
                self._close(pid)
                continue
            resident += rss
            private += rss - shared
            own += rss - shared if pid == self.root else rss - shared - self._first.setdefault(pid, rss - shared)
        return TreeReading(resident, private, own)

    def _close(self, pid: int) -> None:
        self._first.pop(pid, None)
        fd = self._fds.pop(pid, None)
        if isinstance(fd, int):
            os.close(fd)

    def close(self) -> None:
        for pid in list(self._fds):
            self._close(pid)


class _MallInfo2(ctypes.Structure):
    _fields_ = [  # glibc's struct mallinfo2: every field a size_t, summed over every arena
        (name, ctypes.c_size_t)
        for name in (
            "arena",
            "ordblks",
            "smblks",
            "hblks",
            "hblkhd",
            "usmblks",
            "fsmblks",
            "uordblks",
            "fordblks",
            "keepcost",
        )
    ]


def _mallinfo2():
    try:
        call = ctypes.CDLL(None).mallinfo2  # the C library this process already runs on
    except (OSError, AttributeError, TypeError):  # musl, macOS, glibc < 2.33, Windows
        return None
    call.restype, call.argtypes = _MallInfo2, []
    return call


class HeapHoles:
    """This process's malloc heap bytes that are free but resident (module doc); 0 where unknown."""

    def __init__(self, mallinfo2=_mallinfo2) -> None:
        self._call = mallinfo2()
        self.calls, self.cost_s = 0, 0.0

    @property
    def available(self) -> bool:
        return self._call is not None

    def read(self) -> int:
        if self._call is None:
            return 0
        entered = time.perf_counter()
        info = self._call()
        self.cost_s += time.perf_counter() - entered
        self.calls += 1
        return max(0, int(info.fordblks) - int(info.keepcost))  # the top chunk's tail is mostly untouched


def _cgroup_dir() -> Path | None:
    """This process's cgroup folder (v2 unified, else v1's memory controller)."""
    try:
        lines = Path("/proc/self/cgroup").read_text().splitlines()
    except OSError:
        return None
    for line in lines:
        _, controllers, path = line.split(":", 2)
        if controllers == "":  # v2
            folder = Path("/sys/fs/cgroup") / path.lstrip("/")
            return folder if (folder / "memory.max").exists() else Path("/sys/fs/cgroup")
        if "memory" in controllers.split(","):
            folder = Path("/sys/fs/cgroup/memory") / path.lstrip("/")
            return folder if folder.exists() else Path("/sys/fs/cgroup/memory")
    return None


def _read_int(path: Path) -> int | None:
    try:
        text = path.read_text().strip()
    except OSError:
        return None
    return int(text) if text.isdigit() else None  # "max": no limit


def cgroup_memory() -> tuple[int, int] | None:
    """(limit, usage) bytes of this process's memory cgroup, None without a limit."""
    folder = _cgroup_dir()
    if folder is None:
        return None
    for limit_file, usage_file in (
        ("memory.max", "memory.current"),
        ("memory.limit_in_bytes", "memory.usage_in_bytes"),
    ):
        limit, usage = _read_int(folder / limit_file), _read_int(folder / usage_file)
        # v1 says "no limit" with a huge number (PAGE_COUNTER_MAX pages)
        if limit is not None and usage is not None and limit < psutil.virtual_memory().total * 4:
            return limit, usage
    return None


def host_room() -> dict[str, int | str]:
    """What the process tree may still grow into: the cgroup's limit minus its usage, or the host's
    available RAM, whichever is smaller; and the capacity it is judged against."""
    ram = psutil.virtual_memory()
    room = {"available_bytes": int(ram.available), "capacity_bytes": int(ram.total), "limited_by": "available RAM"}
    group = cgroup_memory()
    if group is not None:
        limit, usage = group
        room["capacity_bytes"] = min(limit, int(ram.total))
        if limit - usage < ram.available:
            room.update(available_bytes=max(0, limit - usage), limited_by="cgroup memory limit")
    return room
