"""Decoded samples kept in memory, the `cache` axis: decode each image once, not once per epoch.

Serves any workload whose samples are an image and a target (`Target`: Carvana's masks, an image
folder's labels); each workload keys its cache by the files its samples read (`cache_key`).

- `memory`: every sample of a split decoded and resized once, up front (a progress line, then
  its size in memory), into one uint8 tensor of images [N, H, W, 3] and one of targets in
  shared memory. DataLoader workers, forked or spawned, map that same memory: nothing is
  copied per worker. Filling up front (with the run's DataLoader workers) rather than on the
  first pass makes the first pass fast too and keeps fill time out of the data wait; it shows
  in the run's `setup` phase.
- `device`: the same tensors on the accelerator, and batches assembled there by indexing them
  with the sampler's indices (`DeviceBatches`): no DataLoader, no worker, no host-to-device copy
  in the hot path. Refused with a clear message when it would take more than half the device's
  free memory (the rest is for the model).

~0.4 MB per sample at 256x384 (H * W * 4 bytes: 3 image channels + 1 mask byte per pixel);
the real data's 4,064 training images take 1.6 GB.

A cache is found again by its key: the resolved data root, the size, the decode mode and each
file with its size and modification time, so a cache is never used for other settings or for
files that changed. Sweep jobs run in one process: the last two caches (a
job's train and val) are kept for the next job and reused when its key matches.
"""

from __future__ import annotations

import hashlib
import json
import math
import shutil
import sys
import time
from collections import OrderedDict
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path

import psutil
import torch
from torch.utils.data import DataLoader, Dataset, Sampler

DEVICE_SHARE = 0.5  # at most this fraction of a device's free memory goes to the cache
_KEEP = 2  # caches kept across sweep jobs in one process: one job's train and val
_caches: OrderedDict[str, SampleCache] = OrderedDict()


def bytes_per_sample(height: int, width: int) -> int:
    return height * width * 4  # RGB image + 1-byte mask


def cache_key(
    root: str | Path, height: int, width: int, decode: str, files: Iterable[Path], extra: object = None
) -> str:
    """A digest of everything the cached bytes depend on: the resolved data root, the size, the
    decode mode, each file's name, size and modification time (a changed file is never served),
    and `extra`, what else a workload's samples carry (an image folder's labels)."""
    root = Path(root)
    entries = [
        [(p.relative_to(root) if p.is_relative_to(root) else p).as_posix(), st.st_size, st.st_mtime_ns]
        for p in files
        for st in (p.stat(),)
    ]
    text = json.dumps([str(root.resolve()), height, width, decode, entries, extra])
    return hashlib.sha256(text.encode()).hexdigest()[:16]


@dataclass
class SampleCache:
    key: str
    images: torch.Tensor  # uint8 [N, H, W, 3]
    masks: torch.Tensor  # the targets: Carvana's masks uint8 [N, H, W], an image folder's labels int64 [N]

    def __len__(self) -> int:
        return self.images.shape[0]

    @property
    def nbytes(self) -> int:
        return self.images.nbytes + self.masks.nbytes

    def sample(self, index: int) -> tuple[torch.Tensor, torch.Tensor]:
        return self.images[index], self.masks[index]


def _gb(n: float) -> str:
    return f"{n / 1e9:.2f} GB" if n >= 1e8 else f"{n / 1e6:.1f} MB"


def check_fits(mode: str, n: int, height: int, width: int, device: torch.device) -> None:
    """Raise a one-line ValueError when `n` samples will not fit where `mode` keeps them."""
    need = n * bytes_per_sample(height, width)
    what = f"data.cache={mode}: the {n:,} samples at {height}x{width} need {_gb(need)}"
    if mode == "memory":
        free = psutil.virtual_memory().available
        if need > 0.8 * free:
            raise ValueError(f"{what}, more than 80% of the {_gb(free)} of RAM available: use a smaller size")
        shm = Path("/dev/shm")
        if shm.is_dir() and need > shutil.disk_usage(shm).free:
            raise ValueError(
                f"{what} of shared memory, /dev/shm has {_gb(shutil.disk_usage(shm).free)} free "
                "(in Docker: --shm-size): enlarge it or use a smaller size"
            )
        return
    if device.type == "cuda":
        free = torch.cuda.mem_get_info(device)[0]
    elif device.type == "cpu":
        free = psutil.virtual_memory().available
    else:  # no free-memory query (e.g. MPS): try, the allocation itself will tell
        return
    if need > DEVICE_SHARE * free:
        raise ValueError(
            f"{what} on {device}, more than half of its {_gb(free)} free (the rest is for the model): "
            "use cache=memory or a smaller data.height/data.width"
        )


@dataclass(frozen=True)
class Target:
    """What a cache's second tensor holds for each sample, beside its uint8 image [H, W, 3]:
    `shape` is one sample's (None: the image's height and width), `dtype` its type. Carvana's
    masks are MASK; an image folder's class labels are `Target((), torch.int64)`."""

    shape: tuple[int, ...] | None
    dtype: torch.dtype


MASK = Target(None, torch.uint8)


def fill_cache(
    dataset: Dataset,
    key: str,
    device: torch.device,
    num_workers: int,
    label: str,
    shared: bool = True,
    target: Target = MASK,
) -> SampleCache:
    """Decode every sample of `dataset` (pairs of image uint8 [H, W, 3] and `target`) once, with
    `num_workers` DataLoader workers, into new tensors on `device` (in shared memory when
    `shared` and on the CPU, for worker processes to map rather than copy)."""
    n, (width, height) = len(dataset), dataset.size
    images = torch.empty((n, height, width, 3), dtype=torch.uint8, device=device)
    per_sample = target.shape if target.shape is not None else (height, width)
    targets = torch.empty((n, *per_sample), dtype=target.dtype, device=device)
    shared = shared and device.type == "cpu"
    if shared:
        # worker processes, forked or spawned, map these pages instead of copying them
        images.share_memory_()
        targets.share_memory_()
    t0, done, live = time.perf_counter(), 0, sys.stderr.isatty()
    for image, truth in DataLoader(dataset, batch_size=16, num_workers=num_workers):
        images[done : done + len(image)].copy_(image, non_blocking=True)
        targets[done : done + len(truth)].copy_(truth, non_blocking=True)
        done += len(image)
        if live:
            print(f"\rsegperf: filling the {label} cache: {done:,}/{n:,} samples", end="", file=sys.stderr, flush=True)
    if live:
        print(file=sys.stderr, flush=True)
    cache = SampleCache(key, images, targets)
    where = "shared host memory" if shared else str(device)
    print(
        f"segperf: cached {n:,} {label} samples in {where}: {_gb(cache.nbytes)} "
        f"({cache.nbytes / max(n, 1) / 1e6:.2f} MB per sample), filled in {time.perf_counter() - t0:.1f} s."
    )
    return cache


def get_cache(
    mode: str, dataset: Dataset, key: str, device: torch.device, num_workers: int, label: str, target: Target = MASK
) -> SampleCache:
    """The cache for `key`: on `device` for mode `device`, in shared host memory for `memory`;
    reused if this process still holds it (a sweep's next job with the same data), else checked
    for room and filled."""
    where = device if mode == "device" else torch.device("cpu")
    full_key = f"{key}@{where}" if mode == "device" else key
    if full_key in _caches:
        _caches.move_to_end(full_key)
        print(f"segperf: reusing the {label} cache ({_gb(_caches[full_key].nbytes)}, same key {key}).")
        return _caches[full_key]
    width, height = dataset.size
    check_fits(mode, len(dataset), height, width, where)  # counts 4 bytes a pixel: labels fit in that
    while len(_caches) >= _KEEP:  # drop the oldest before allocating, not after
        _caches.popitem(last=False)
    print(f"segperf: data.cache={mode}: decoding the {len(dataset):,} {label} samples once ...", flush=True)
    _caches[full_key] = fill_cache(dataset, key, where, num_workers, label, shared=mode == "memory", target=target)
    return _caches[full_key]


class DeviceBatches:
    """Training or validation batches for `cache=device`, made where the cache lives.

    Iterates like a DataLoader over `sampler` (same order, same batch boundaries, `len()` in
    batches), but each batch is one `index_select` on the cached tensors, plus the device-side
    augmentation for training."""

    def __init__(
        self, cache: SampleCache, sampler: Sampler[int], batch_size: int, augment=None, dataset: Dataset | None = None
    ) -> None:
        self.cache = cache
        self.dataset = dataset  # the samples the cache was filled from (len() and names, as a DataLoader's)
        self.sampler = sampler
        self.batch_size = batch_size
        self.augment = augment
        # read like a DataLoader's by the measurement and by Lightning's checks (no workers, the
        # sampler decides the order, no batch sampler)
        self.num_workers = 0
        self.pin_memory = False
        self.batch_sampler = None

    def __len__(self) -> int:
        return math.ceil(len(self.sampler) / self.batch_size)

    def __iter__(self) -> Iterator[tuple[torch.Tensor, torch.Tensor]]:
        device = self.cache.images.device
        order = torch.as_tensor(list(self.sampler), dtype=torch.long).to(device, non_blocking=True)
        for start in range(0, len(order), self.batch_size):
            index = order[start : start + self.batch_size]
            image, mask = self.cache.images.index_select(0, index), self.cache.masks.index_select(0, index)
            if self.augment is not None:
                image, mask = self.augment(image, mask)
            yield image, mask
