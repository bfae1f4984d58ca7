"""Config helpers shared by the entry points and the tests."""

from __future__ import annotations

import os
from pathlib import Path

from omegaconf import OmegaConf

CONFIG_DIR = Path(__file__).resolve().parents[2] / "conf"


def available_cores() -> int:
    """CPU cores this process may run on: its affinity mask (taskset, cgroups, SLURM), not the
    machine's core count, which over-subscribes a constrained job."""
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # not Linux
        return os.cpu_count() or 1


def half_available_cores() -> int:
    """Half of `available_cores()`, at least one (threads=half)."""
    return max(1, available_cores() // 2)


def register_resolvers() -> None:
    """`${available_cores:}` (workers=auto, threads=all) and `${half_available_cores:}` (threads=half)
    in the configs. Idempotent."""
    if not OmegaConf.has_resolver("available_cores"):
        OmegaConf.register_new_resolver("available_cores", available_cores)
    if not OmegaConf.has_resolver("half_available_cores"):
        OmegaConf.register_new_resolver("half_available_cores", half_available_cores)


def segperf_cache_dir() -> Path:
    """The configured cache folder (data.synthetic.cache_dir's default): $SEGPERF_CACHE or ~/.cache/segperf."""
    return Path(os.environ.get("SEGPERF_CACHE", "~/.cache/segperf")).expanduser()


# Libraries that write caches of their own, and the variable each reads for the folder.
TOOL_CACHES = {
    "TORCHINDUCTOR_CACHE_DIR": "torchinductor",  # torch.compile's generated C++/Triton code (default: /tmp)
    "TRITON_CACHE_DIR": "triton",  # compiled GPU kernels (default: ~/.triton)
    "MPLCONFIGDIR": "matplotlib",  # matplotlib's font cache (default: ~/.cache/matplotlib, ~/.config)
}


def route_tool_caches() -> None:
    """Keep what torch.compile, Triton and matplotlib cache inside segperf's cache folder, so a
    run writes only to its run folder, the cache folder and the data folder. Must run before
    those libraries read the variables (segperf's package import does it); a variable the user
    set wins."""
    base = segperf_cache_dir()
    for variable, folder in TOOL_CACHES.items():
        os.environ.setdefault(variable, str(base / folder))
