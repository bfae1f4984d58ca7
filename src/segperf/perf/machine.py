"""The machine side of the resource report: what the run had to work with (CPU model and cores, RAM, GPUs; the
report's "Resources" header), the CPU time and RSS of the run's process tree (ProcessTree, read by the resource
sampler), and the number formats the tables share.

`cpu_available` (the process's CPU affinity) is reported next to the core count because containers and job schedulers
often hand a run fewer CPUs than the machine has, and "126% of 1,200%" only means something against what was usable.

`machine_info` also records what makes timings comparable across machines (host, GPUs, NVIDIA driver, CUDA/cuDNN,
library versions): the report compares only runs whose records agree (segperf.sweep.machine_differences).
"""

from __future__ import annotations

import os
import platform
import socket
import time
from importlib import metadata
from typing import Any

import psutil

_MIB = 2**20
_PROC_GONE = (psutil.NoSuchProcess, psutil.AccessDenied, OSError)  # psutil.ZombieProcess is a NoSuchProcess
_CLK_TCK = os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 100
_PAGE = os.sysconf("SC_PAGE_SIZE") if hasattr(os, "sysconf") else 4096
# distributions whose version changes timings (kernels, loaders, decoders); recorded as `versions`
LIBRARIES = ("torch", "lightning", "torchmetrics", "hydra-core", "numpy", "pillow", "albumentations")
_FAST_CHILDREN = os.path.exists(f"/proc/{os.getpid()}/task/{os.getpid()}/children")  # Linux, CONFIG_PROC_CHILDREN


def _cpu_model() -> str:
    try:
        with open("/proc/cpuinfo", encoding="utf-8", errors="replace") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine() or "unknown CPU"


def _gpus() -> list[dict[str, Any]]:
    """GPUs torch can use (indices are torch's, i.e. after CUDA_VISIBLE_DEVICES); [] without CUDA."""
    try:
        import torch

        if not torch.cuda.is_available():
            return []
        return [
            {
                "name": torch.cuda.get_device_name(i),
                "memory_mib": torch.cuda.get_device_properties(i).total_memory // _MIB,
                "index": i,
            }
            for i in range(torch.cuda.device_count())
        ]
    except Exception:  # a broken driver must not stop the run; the header then says n/a
        return []


def nvidia_driver() -> str | None:
    """The NVIDIA driver version ("570.124.06") through NVML; None without NVML or a driver (no GPU, a CPU box)."""
    try:
        import pynvml as nvml
    except ImportError:
        return None
    try:
        nvml.nvmlInit()
    except Exception:  # NVMLError_LibraryNotFound, DriverNotLoaded: no NVIDIA driver here
        return None
    try:
        version = nvml.nvmlSystemGetDriverVersion()
        return version.decode() if isinstance(version, bytes) else str(version)
    except Exception:
        return None
    finally:
        try:
            nvml.nvmlShutdown()
        except Exception:
            pass


def _cuda_versions() -> tuple[str | None, int | None]:
    """(CUDA version torch was built with, cuDNN version it loads); None where this torch has none (CPU build)."""
    try:
        import torch

        cudnn = torch.backends.cudnn.version() if torch.backends.cudnn.is_available() else None
        return torch.version.cuda, cudnn
    except Exception:
        return None, None


def library_versions() -> dict[str, str | None]:
    """Installed versions of python and LIBRARIES; None for one that is not installed."""
    versions: dict[str, str | None] = {"python": platform.python_version()}
    for name in LIBRARIES:
        try:
            versions[name] = metadata.version(name)
        except metadata.PackageNotFoundError:
            versions[name] = None
    return versions


def machine_info() -> dict[str, Any]:
    threads = psutil.cpu_count(logical=True) or os.cpu_count() or 1
    try:
        available = len(os.sched_getaffinity(0))
    except AttributeError:  # not Linux
        available = threads
    try:
        import torch

        torch_version = torch.__version__
    except ImportError:
        torch_version = None
    gpus = _gpus()
    cuda, cudnn = _cuda_versions()
    return {
        "cpu_model": _cpu_model(),
        "cpu_cores": psutil.cpu_count(logical=False) or threads,
        "cpu_threads": threads,
        "cpu_available": available,
        "ram_mib": psutil.virtual_memory().total // _MIB,
        "gpus": gpus,
        "gpu_count": len(gpus),
        "nvidia_driver": nvidia_driver() if gpus else None,
        "cuda": cuda,
        "cudnn": cudnn,
        "torch": torch_version,
        "python": platform.python_version(),
        "versions": library_versions(),
        "hostname": socket.gethostname(),
        "platform": platform.platform(),
    }


def format_header(info: dict[str, Any]) -> str:
    """The report's "Resources" lines:

    CPU       AMD EPYC (2 cores / 2 threads, 2 available to this run)
    RAM       24,000 MiB
    GPU       n/a
    """
    cpu = (
        f"{info['cpu_model']} ({info['cpu_cores']} cores / {info['cpu_threads']} threads, "
        f"{info['cpu_available']} available to this run)"
    )
    gpus = info.get("gpus") or []
    gpu = "; ".join(f"{g['name']} ({g['memory_mib']:,} MiB)" for g in gpus) or "n/a"
    return "\n".join(
        f"{label:<10}{value}" for label, value in (("CPU", cpu), ("RAM", f"{info['ram_mib']:,} MiB"), ("GPU", gpu))
    )


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


def _tree_pids(root: int) -> list[int]:
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
        self._refresh(first=True)

    def _refresh(self, first: bool = False) -> None:
        old, self._procs = self._procs, {}
        for pid in _tree_pids(self.root):
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
        """(user+system CPU seconds the tree used since the previous read, its summed RSS bytes now)."""
        if time.perf_counter() >= self._next_refresh:
            self._refresh()
        cpu_s, rss = 0.0, 0
        for pid, proc in list(self._procs.items()):
            try:
                now, rss_p = proc.read()
            except _PROC_GONE:
                self._procs.pop(pid).close()
                continue
            cpu_s, proc.cpu, rss = cpu_s + now - proc.cpu, now, rss + rss_p
        return cpu_s, rss

    def close(self) -> None:
        for proc in self._procs.values():
            proc.close()


def format_percent_of_cores(cpu_percent: float | None, cores: int) -> str:
    """126, 12 -> '126% of 1,200% (1.3 of 12 cores busy)'."""
    if cpu_percent is None:
        return "n/a"
    return f"{cpu_percent:,.0f}% of {cores * 100:,}% ({cpu_percent / 100:.1f} of {cores} cores busy)"


def format_mib(num_bytes: float | None, unit: bool = True) -> str:
    """1_988_100_096 -> '1,896 MiB' ('1,896' with unit=False); None -> 'n/a'."""
    if num_bytes is None:
        return "n/a"
    return f"{num_bytes / _MIB:,.0f}" + (" MiB" if unit else "")


def format_usage(used_bytes: float | None, total_bytes: float | None) -> str:
    """'1,896 / 15,932 MiB (12%)', as in the seed's peak RSS and peak GPU memory lines; 'n/a' without data."""
    if used_bytes is None or not total_bytes:
        return "n/a"
    return f"{format_mib(used_bytes, False)} / {format_mib(total_bytes)} ({100 * used_bytes / total_bytes:.0f}%)"
