"""The timed loops of `python -m segperf.bench data`: how many images per second the input
pipeline alone delivers.

No model: each configuration's loader is drained as fast as it goes. One run measures, side by
side, a grid of decode x cache x workers x pin, the device cache, and a naive reference loader
written the way the seed study's first version loaded (one process, one sample after another,
full PIL decode then resize); every rate is also given as a ratio to that reference. Like
nanoGPT's bench.py it warms up before timing: the first batches of each loader (worker
start-up, imports, first file reads) are drained untimed, workers are kept alive, and the timed
passes are repeated until at least `min_seconds` have passed. A cache's fill time is reported
in its row's note, not counted in its rate: the rate is the steady state of a training run.

`run()` prints the table (segperf.bench.table) and writes it as JSON, whose path is the last line
printed: a list of rows, each with its settings, `images_per_s` and `ratio_vs_naive` (the naive
reference and the memory-copy bound are rows too). The command line is segperf.bench.cli.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

import numpy as np
import torch
from torch.utils.data import DataLoader

from segperf.bench.schema import Settings
from segperf.bench.table import REFERENCE, closing_lines, label, table
from segperf.bench.workloads import LAYOUTS, CarvanaLayout
from segperf.config import available_cores
from segperf.data.cache import DeviceBatches, SampleCache
from segperf.data.cold import PageCache, drop_page_cache, warm
from segperf.data.seeding import seed_worker


# -- the loaders ------------------------------------------------------------------------------
class BatchList:
    """A batch sampler whose batches are swapped between passes. It is read in the main
    process, so one DataLoader with persistent workers serves the warm-up and the timed passes."""

    def __init__(self) -> None:
        self.batches: list[list[int]] = []

    def __iter__(self):
        return iter(self.batches)

    def __len__(self) -> int:
        return len(self.batches)


def batches_of(order: list[int], batch_size: int) -> list[list[int]]:
    return [order[i : i + batch_size] for i in range(0, len(order), batch_size)]


def drain(batches: Iterable) -> int:
    """Images in all batches; touching each batch is all the consumer does."""
    return sum(len(image) for image, _ in batches)


# -- the grid ---------------------------------------------------------------------------------
class Bench:
    """One benchmark run: its samples, order and settings, and the caches it filled (by decode)."""

    def __init__(self, s: Settings, root: Path, samples: list, layout=None) -> None:
        self.s = s
        self.root = root
        self.samples = samples
        self.layout = layout or CarvanaLayout()  # what differs between data.format=carvana|imagefolder
        self.size = (s.width, s.height)  # PIL's order
        order = torch.randperm(len(samples), generator=torch.Generator().manual_seed(s.seed)).tolist()
        self.order = (order * (s.images // len(order) + 1))[: s.images]
        self.files = self.layout.files(samples)
        self.device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
        self.caches: dict[str, SampleCache] = {}
        self.fill_seconds: dict[str, float] = {}
        self.rows: list[dict[str, Any]] = []

    def page_cache(self) -> PageCache:
        """Dropped right before each timed pass with cold_cache=true (the warm-up read some files)."""
        return drop_page_cache(self.files) if self.s.cold_cache else warm("cold_cache=false")

    def sync(self) -> None:
        if self.device.type == "cuda":
            torch.cuda.synchronize()  # queued device work belongs to the pass that queued it

    def timed(self, row: dict[str, Any], run_pass: Callable[[], int]) -> None:
        """Repeat `run_pass` until `min_seconds` have passed; record images/s in `row`."""
        row["page_cache"] = self.page_cache().state
        images, t0 = 0, time.perf_counter()
        while (seconds := time.perf_counter() - t0) < self.s.min_seconds or not images:
            images += run_pass()
            self.sync()
        row |= {"images": images, "seconds": round(seconds, 3), "images_per_s": images / seconds}
        self.rows.append(row)
        print(f"  {label(row):<50} {row['images_per_s']:>9.1f} images/s", flush=True)

    def settings(self, loader: str, decode: str | None, cache: str, workers: int = 0, pin: bool = False) -> dict:
        a = self.s
        augment = "off" if loader == REFERENCE else a.augment
        return {"loader": loader, "decode": decode, "cache": cache, "workers": workers, "pin": pin,
                "augment": augment, "height": a.height, "width": a.width, "batch_size": a.batch_size}  # fmt: skip

    def naive(self) -> None:
        a = self.s
        naive = self.layout.naive_batches
        drain(naive(self.samples, self.order[: a.batch_size], self.size, a.batch_size))  # warm-up
        row = self.settings(REFERENCE, "full", "off")
        row["note"] = "reference: the seed's first loader (1 process, sequential, full decode)"
        self.timed(row, lambda: drain(naive(self.samples, self.order, self.size, a.batch_size)))

    def cache_for(self, decode: str) -> SampleCache:
        """The decoded samples for `decode`, filled once per run (the fill is not timed as loading)."""
        if decode not in self.caches:
            s = self.s
            self.page_cache()  # a cold fill reads from disk
            t0 = time.perf_counter()
            self.caches[decode] = self.layout.fill(self.samples, self.root, s, decode, max(s.workers))
            self.fill_seconds[decode] = time.perf_counter() - t0
        return self.caches[decode]

    def data_loader(self, decode: str, cache: str, workers: int, pin: bool) -> None:
        a = self.s
        dataset = self.layout.dataset(self.samples, a, decode, augment=True)
        if cache == "memory":
            dataset.cache = self.cache_for(decode)
        batches = BatchList()
        loader = DataLoader(
            dataset,
            batch_sampler=batches,
            num_workers=workers,
            pin_memory=pin,
            persistent_workers=workers > 0,  # started once, by the warm-up
            worker_init_fn=seed_worker if workers else None,
        )
        batches.batches = batches_of(self.order[: a.batch_size * max(1, 2 * workers)], a.batch_size)
        drain(loader)  # warm-up: workers started and imported, first files read
        batches.batches = batches_of(self.order, a.batch_size)
        row = self.settings("DataLoader", decode, cache, workers, pin)
        row["note"] = self.note(row)
        self.timed(row, lambda: drain(loader))

    def device_cache(self, decode: str) -> None:
        host = self.cache_for(decode)
        cache = SampleCache(host.key, host.images.to(self.device), host.masks.to(self.device))
        augment = self.layout.device_augment(self.s, self.device) if self.s.augment == "basic" else None
        loader = DeviceBatches(cache, self.order, self.s.batch_size, augment)
        drain(loader)  # warm-up
        row = self.settings("device cache", decode, "device") | {"device": str(self.device)}
        row["note"] = self.note(row)
        self.timed(row, lambda: drain(loader))

    def run(self) -> list[dict[str, Any]]:
        """The naive reference first, then every configuration of the grid, in the order of its lists."""
        a = self.s
        self.naive()
        for decode in a.decode:
            for cache in a.cache:
                if cache == "device":  # no DataLoader: the workers and pin axes do not apply
                    self.device_cache(decode)
                    continue
                for workers in a.workers:
                    for pin in a.pin:
                        self.data_loader(decode, cache, workers, pin)
        if self.caches:
            self.copy_bound(next(iter(self.caches.values())))
        for row in self.rows:
            row["ratio_vs_naive"] = row["images_per_s"] / self.rows[0]["images_per_s"]
        return self.rows

    def copy_bound(self, cache: SampleCache) -> None:
        """The cached path's ceiling: gathering a batch out of the cache is a memory copy."""
        generator = torch.Generator().manual_seed(self.s.seed)
        index = torch.randint(0, len(cache), (self.s.batch_size,), generator=generator)

        def gather() -> int:
            for _ in range(20):
                cache.images.index_select(0, index), cache.masks.index_select(0, index)
            return 20 * len(index)

        row = self.settings("copy bound", None, "memory")
        row["note"] = "index_select of a batch out of the cache: the memory-copy rate the cached path can reach"
        self.timed(row, gather)
        row["page_cache"] = "n/a"
        row["bytes_per_s"] = row["images_per_s"] * cache.nbytes / len(cache)

    def note(self, row: dict[str, Any]) -> str:
        """Why a row is as fast or as slow as it is, where a reader would ask."""
        notes = []
        if row["cache"] == "off" and row["decode"] == "full" and row["workers"] == 0:
            notes.append("the naive loader's work through DataLoader: equal within noise")
        if row["pin"] and not torch.cuda.is_available():
            notes.append("no CUDA: pin_memory does nothing (= pin off)")
        if row["cache"] != "off":
            notes.append(f"cache filled in {self.fill_seconds[row['decode']]:.1f} s first, not timed")
        if row["cache"] == "memory" and row["workers"]:
            notes.append("workers add inter-process hand-offs to a memory copy")
        if row["cache"] == "device":
            notes.append(f"no DataLoader: batches indexed out of the cache on {self.device}")
        if row["augment"] == "basic":
            notes.append("augmented on the device" if row["cache"] == "device" else "augmented in the loader")
        return "; ".join(notes)


def input_difference(samples: list, size: tuple[int, int], count: int = 16, layout=None) -> dict[str, float]:
    """How far `reduced` decode moves the inputs from `full` decode, in levels of 255."""
    decoded = (layout or CarvanaLayout()).decoded
    diffs, maxima = [], []
    for sample in samples[:count]:
        full = decoded(sample, size, "full").astype(np.int16)
        reduced = decoded(sample, size, "reduced").astype(np.int16)
        diffs.append(np.abs(full - reduced).mean())
        maxima.append(np.abs(full - reduced).max())
    return {"images": len(diffs), "mean_abs_diff": float(np.mean(diffs)), "max_abs_diff": float(np.max(maxima))}


# -- one run ------------------------------------------------------------------------------------
def run(s: Settings, run_dir: Path) -> Path:
    """Measure the grid, print the table, write it as JSON (`out`, or loader.json in `run_dir`)
    and print that path as the last line; return it."""
    layout = LAYOUTS[s.format]
    root = layout.root(s)  # data.root, or the built-in data set (made once, in segperf's cache folder)
    if s.num_threads is not None:
        torch.set_num_threads(s.num_threads)
    bench = Bench(s, root, layout.samples(root)[: s.images], layout)
    cuda = "CUDA" if torch.cuda.is_available() else "no CUDA"
    print(
        f"Loader benchmark: {len(bench.samples)} samples of {root}, {s.images} images per timed pass, "
        f"{s.height}x{s.width}, batch {s.batch_size}, {available_cores()} cores, {cuda}, "
        f"{torch.get_num_threads()} torch thread(s) in this process.",
        flush=True,
    )
    if s.cold_cache:
        print(f"segperf.bench: before each timed pass: {bench.page_cache().message}")
    rows = bench.run()
    quality = input_difference(bench.samples, bench.size, layout=layout) if "reduced" in s.decode else None
    for row in rows:
        if quality and row["decode"] == "reduced":
            row["mean_abs_diff_vs_full"] = quality["mean_abs_diff"]

    print()
    print(table(rows))
    for line in closing_lines(rows, quality, s.height, s.width, masks=s.format == "carvana"):
        print(line)
    out = s.out or run_dir / "loader.json"
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(rows, indent=1) + "\n")
    print(out)
    return out
