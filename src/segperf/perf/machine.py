"""What the run had to work with: CPU model and cores, RAM, GPUs (the summary's "Resources" header), and what
makes timings comparable across machines.

`cpu_available` (the process's CPU affinity) is reported next to the core count because containers and job schedulers
often hand a run fewer CPUs than the machine has, and "126% of 1,200%" only means something against what was usable.

`machine_info` also records what makes timings comparable across machines (host, GPUs, NVIDIA driver, CUDA/cuDNN,
library versions): the report compares only runs whose records agree (segperf.report.comparability).
"""

from __future__ import annotations

import os
import platform
import socket
from importlib import metadata
from typing import Any

import psutil

_MIB = 2**20
# distributions whose version changes timings (kernels, loaders, decoders); recorded as `versions`
LIBRARIES = ("torch", "lightning", "torchmetrics", "hydra-core", "numpy", "pillow", "albumentations")


def cpu_model() -> str:
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
        "cpu_model": cpu_model(),
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
