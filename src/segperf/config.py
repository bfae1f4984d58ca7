"""Config helpers shared by the entry points and the tests."""

from __future__ import annotations

import hashlib
import os
from collections.abc import Sequence
from importlib import resources
from pathlib import Path
from typing import Any

from omegaconf import OmegaConf

# segperf's configs, package data: src/segperf/conf is a link to the repository's conf/, which the
# wheel carries as the files themselves (pyproject.toml), so an editable install and an installed
# wheel both find them here. A real folder either way, as Hydra's config_path needs.
CONFIG_DIR = Path(str(resources.files("segperf") / "conf")).resolve()


def available_cores() -> int:
    """CPU cores this process may run on: its affinity mask (taskset, cgroups, SLURM), not the
    machine's core count, which over-subscribes a constrained job."""
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # not Linux
        return os.cpu_count() or 1


def device_count(devices: Any) -> int:
    """How many devices `trainer.devices` asks for on this node: an int, a list of ids, "0,1",
    or "auto"/-1 (every GPU, or 1 on a CPU). Not Lightning's device parser: that one checks the
    GPUs are present, and the SLURM request is composed on a login node, which has none."""
    if isinstance(devices, bool):
        return 1
    if isinstance(devices, int) and devices > 0:
        return devices
    if isinstance(devices, str) and devices.strip() not in ("auto", "-1", ""):
        parts = [p for p in devices.split(",") if p.strip()]
        return int(parts[0]) if len(parts) == 1 and parts[0].strip().isdigit() else max(1, len(parts))
    if isinstance(devices, Sequence) and not isinstance(devices, str):
        return max(1, len(devices))
    import torch  # "auto" / -1: what Lightning would take

    return max(1, torch.cuda.device_count())


def cores_per_rank(devices: Any = 1) -> int:
    """The cores one training process may use (workers=auto, threads=all). Under SLURM, srun gives
    every task its own CPUs (SLURM_CPUS_PER_TASK). Otherwise the processes of this node share
    this process's affinity mask: with trainer=ddp, Lightning starts `devices` of them, and each
    taking every core would oversubscribe the node `devices` times."""
    slurm = os.environ.get("SLURM_CPUS_PER_TASK", "")
    if slurm.isdigit() and int(slurm) > 0:
        return min(available_cores(), int(slurm))
    return max(1, available_cores() // device_count(devices))


def half_cores_per_rank(devices: Any = 1) -> int:
    """Half of `cores_per_rank()`, at least one (threads=half)."""
    return half_of(cores_per_rank(devices))


def half_of(cores: int) -> int:
    return max(1, cores // 2)


# The resolvers that count cores, as what they give where one rank may use `cores` cores: how the
# tuner reads an option's `${cores_per_rank:...}` for the machine it tunes (segperf.tune.space).
CORE_RESOLVERS = {"cores_per_rank": lambda cores: cores, "half_cores_per_rank": half_of}


def _positive_ints(*values: Any) -> bool:
    return all(isinstance(v, int) and not isinstance(v, bool) and v > 0 for v in values)


def whole_batches(images: Any, batch_size: Any) -> Any:
    """`${whole_batches:${val_every_images},${batch_size}}`: training batches between validations,
    `images` rounded to whole batches (at least one). Values the schema will refuse pass through
    untouched, so that check_settings names the setting instead of this resolver failing."""
    if not _positive_ints(images, batch_size):
        return images
    return max(1, round(images / batch_size))


# the training loss and learning rate reach the logger this many times a run (TensorBoard's curves),
# at most every LOG_EVERY_MAX steps (Lightning's default) and at least every LOG_EVERY_MIN
LOG_POINTS, LOG_EVERY_MIN, LOG_EVERY_MAX = 20, 5, 50


def log_interval(images: Any, batch_size: Any) -> Any:
    """`${log_interval:${train_images},${batch_size}}`: trainer.log_every_n_steps, so that a run
    logs about LOG_POINTS times, every 5 to 50 steps. A logged step costs ~1.3 ms of Python on a
    2-core CPU (Lightning's `self.log` and logger connector, the logger's write), 0.27 ms a step
    at every 5 steps: 1.1% of the MNIST CNN's 24 ms step; a curve needs no more points than this
    (docs/BENCHMARKS.md, "Framework efficiency"). Values the schema will refuse pass through."""
    if not _positive_ints(images, batch_size):
        return LOG_EVERY_MIN
    steps = -(-images // batch_size)
    return min(LOG_EVERY_MAX, max(LOG_EVERY_MIN, steps // LOG_POINTS))


# bytes of a sweep job's folder name: most file systems take 255 (NAME_MAX); a little room kept
MAX_JOB_DIRNAME = 250


def job_dirname(num: Any, overrides: str) -> str:
    """A sweep job's folder, `<num>_<overrides>` (hydra.sweep.subdir), cut where it would pass
    MAX_JOB_DIRNAME bytes and ended with `~` and a hash of the whole list, so that two jobs stay
    apart: with many overrides Hydra's own name stopped a sweep with "OSError: [Errno 36] File name
    too long". The report reads a cut name's overrides from the job's .hydra/hydra.yaml."""
    name = f"{num}_{overrides}"
    if len(name.encode()) <= MAX_JOB_DIRNAME:
        return name
    digest = hashlib.sha1(overrides.encode()).hexdigest()[:8]
    cut = name.encode()[: MAX_JOB_DIRNAME - len(digest) - 1].decode(errors="ignore")
    return f"{cut}~{digest}"


def register_resolvers() -> None:
    """`${cores_per_rank:${trainer.devices}}` (workers=auto, threads=all),
    `${half_cores_per_rank:${trainer.devices}}` (threads=half), `${device_count:...}` and
    `${segperf_cache_dir:}` (the built-in data's folder) and `${imagefolder_classes:...}` in the
    configs. Idempotent."""
    if not OmegaConf.has_resolver("cores_per_rank"):
        OmegaConf.register_new_resolver("cores_per_rank", cores_per_rank)
    if not OmegaConf.has_resolver("half_cores_per_rank"):
        OmegaConf.register_new_resolver("half_cores_per_rank", half_cores_per_rank)
    if not OmegaConf.has_resolver("whole_batches"):  # trainer.val_check_interval from the run size
        OmegaConf.register_new_resolver("whole_batches", whole_batches)
    if not OmegaConf.has_resolver("log_interval"):  # trainer.log_every_n_steps from the run size
        OmegaConf.register_new_resolver("log_interval", log_interval)
    if not OmegaConf.has_resolver("device_count"):  # hydra/launcher=slurm: GPUs per node from trainer.devices
        OmegaConf.register_new_resolver("device_count", device_count)
    if not OmegaConf.has_resolver("segperf_cache_dir"):  # `${segperf_cache_dir:}`: the built-in data's folder
        OmegaConf.register_new_resolver("segperf_cache_dir", lambda: str(segperf_cache_dir()))
    if not OmegaConf.has_resolver("imagefolder_classes"):  # data.num_classes: the net's head from the folder
        OmegaConf.register_new_resolver("imagefolder_classes", imagefolder_classes)
    if not OmegaConf.has_resolver("job_dirname"):  # hydra.sweep.subdir, cut to a length file systems take
        OmegaConf.register_new_resolver("job_dirname", job_dirname)


def imagefolder_classes(root: str | None, builtin_classes: int) -> int:
    """`${imagefolder_classes:${data.root},${data.builtin.classes}}`: the class folders of the
    image folder, counted when the config resolves, so that the classifier's head is sized before
    the net is built and nobody types how many classes their folder has. The data code is imported
    here, when a config with it resolves, not when segperf is: the report imports no data code."""
    from segperf.data.imagefolder.layout import count_classes

    return count_classes(root, builtin_classes)


def plain_config(cfg: Any) -> dict[str, Any]:
    """A composed config as plain Python (resolved; the schema's enums as their names): what
    results.json records and what the run reads once the schema has done its job."""
    return OmegaConf.to_container(cfg, resolve=True, enum_to_str=True)


def segperf_cache_dir() -> Path:
    """segperf's cache folder, the one place that says where it is: $SEGPERF_CACHE or
    ~/.cache/segperf. The configs read it as `${segperf_cache_dir:}` (data.synthetic.cache_dir,
    data.builtin.cache_dir), the DataModules when given no folder, and the tools' caches go under it."""
    return Path(os.environ.get("SEGPERF_CACHE", "~/.cache/segperf")).expanduser()


# Libraries that write caches of their own, and the variable each reads for the folder.
TOOL_CACHES = {
    "TORCHINDUCTOR_CACHE_DIR": "torchinductor",  # torch.compile's generated C++/Triton code (default: /tmp)
    "TRITON_CACHE_DIR": "triton",  # compiled GPU kernels (default: ~/.triton)
    "MPLCONFIGDIR": "matplotlib",  # matplotlib's font cache (default: ~/.cache/matplotlib, ~/.config)
}


def set_up_environment() -> None:
    """What every segperf command needs before the libraries are imported (each command's entry
    calls it, segperf.command_line.set_up_command; importing segperf does not, so a library
    user's process keeps its environment): albumentations must not call the network on import,
    and the tools' caches go into segperf's cache folder."""
    os.environ.setdefault("NO_ALBUMENTATIONS_UPDATE", "1")
    route_tool_caches()


def route_tool_caches() -> None:
    """Keep what torch.compile, Triton and matplotlib cache inside segperf's cache folder, so a
    run writes only to its run folder, the cache folder and the data folder. Must run before
    those libraries read the variables (importing Lightning sets TORCHINDUCTOR_CACHE_DIR to
    torch's own default; matplotlib reads MPLCONFIGDIR on import); a variable the user set wins."""
    base = segperf_cache_dir()
    for variable, folder in TOOL_CACHES.items():
        os.environ.setdefault(variable, str(base / folder))
