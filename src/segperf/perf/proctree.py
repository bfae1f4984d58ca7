"""CPU time and RSS of a process and all its descendants (DataLoader workers), read from /proc.

Written by hand because psutil's `children(recursive=True)` lists every process on the host at each
call (~30 us each) and re-reads /proc/<pid>/stat through several files; the sampler reads the tree
every 50 ms, so its cost is part of the run's.
"""

from __future__ import annotations

import os
import time

import psutil

_PROC_GONE = (psutil.NoSuchProcess, psutil.AccessDenied, OSError)  # psutil.ZombieProcess is a NoSuchProcess
_CLK_TCK = os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 100
_PAGE = os.sysconf("SC_PAGE_SIZE") if hasattr(os, "sysconf") else 4096
_FAST_CHILDREN = os.path.exists(f"/proc/{os.getpid()}/task/{os.getpid()}/children")  # Linux, CONFIG_PROC_CHILDREN


class _Proc:
    """user+system CPU seconds and RSS bytes of one process. On Linux a kept-open /proc/<pid>/stat is re-read with
    one pread: the same numbers psutil reads, at ~1/4 of psutil's cost per tick here (0.1 vs 0.4 ms, cold caches).
    After the pid is reaped the read fails (ESRCH), so a reused pid is never mistaken for the old process."""

    __slots__ = ("fd", "ps", "cpu")

    def __init__(self, pid: int) -> None:
        self.fd, self.ps, self.cpu = None, None, 0.0
        try:
            self.fd = os.open(f"/proc/{pid}/stat", os.O_RDONLY)
        except FileNotFoundError:  # no /proc (or the process is gone: psutil then raises NoSuchProcess)
            self.ps = psutil.Process(pid)

    def read(self) -> tuple[float, int]:
        if self.fd is None:
            times = self.ps.cpu_times()
            return times.user + times.system, self.ps.memory_info().rss
        stat = os.pread(self.fd, 4096, 0)
        fields = stat[stat.rfind(b")") + 2 :].split()  # after "pid (comm) ": state, ppid, ... (proc(5) fields 3..)
        return (int(fields[11]) + int(fields[12])) / _CLK_TCK, int(fields[21]) * _PAGE

    def close(self) -> None:
        if self.fd is not None:
            os.close(self.fd)
            self.fd = None


def tree_pids(root: int) -> list[int]:
    """root and all its descendants, root first."""
    if not _FAST_CHILDREN:  # psutil lists every process on the host
        return [root] + [c.pid for c in psutil.Process(root).children(recursive=True)]
    pids, i = [root], 0
    while i < len(pids):
        try:
            for tid in os.listdir(f"/proc/{pids[i]}/task"):  # a child hangs off the thread that forked it
                try:
                    with open(f"/proc/{pids[i]}/task/{tid}/children", "rb") as f:
                        pids.extend(int(c) for c in f.read().split())
                except OSError:  # thread exited meanwhile
                    pass
        except OSError:  # process exited meanwhile
            pass
        i += 1
    return pids


class ProcessTree:
    """CPU time and RSS of a process (default: this one) and all its descendants, e.g. DataLoader workers.

    One reader per pid, kept across reads. The tree is re-listed at most every `refresh_s`, from
    /proc/<pid>/task/*/children (psutil's children() lists every process on the host: ~30 us each). Processes there
    at the first listing are baselined; one found later is counted from its birth, so its CPU shows up to
    `refresh_s` late but is not lost. The CPU a child uses in its last read interval before it is reaped is lost.
    RSS is summed, so pages shared by forked workers count once per process (an over-estimate)."""

    def __init__(self, refresh_s: float = 0.5, root: int | None = None) -> None:
        self.refresh_s, self.root = refresh_s, root if root is not None else os.getpid()
        self._procs: dict[int, _Proc] = {}
        self.children_cpu_s = 0.0
        self._refresh(first=True)

    def _refresh(self, first: bool = False) -> None:
        old, self._procs = self._procs, {}
        for pid in tree_pids(self.root):
            proc = old.pop(pid, None)
            try:
                if proc is None:
                    proc = _Proc(pid)
                    proc.cpu = proc.read()[0] if first or pid == self.root else 0.0
                self._procs[pid] = proc
            except _PROC_GONE:
                if proc is not None:
                    proc.close()
        for proc in old.values():
            proc.close()
        self._next_refresh = time.perf_counter() + self.refresh_s

    def read(self) -> tuple[float, int]:
        """(user+system CPU seconds the tree used since the previous read, its summed RSS bytes now);
        `children_cpu_s` holds the descendants' part of those seconds."""
        if time.perf_counter() >= self._next_refresh:
            self._refresh()
        cpu_s, rss, own_s = 0.0, 0, 0.0
        for pid, proc in list(self._procs.items()):
            try:
                now, rss_p = proc.read()
            except _PROC_GONE:
                self._procs.pop(pid).close()
                continue
            if pid == self.root:
                own_s = now - proc.cpu
            cpu_s, proc.cpu, rss = cpu_s + now - proc.cpu, now, rss + rss_p
        self.children_cpu_s = cpu_s - own_s  # the descendants' part (DataLoader workers): see `read`
        return cpu_s, rss

    def close(self) -> None:
        for proc in self._procs.values():
            proc.close()
