"""The timed loops of `python -m segperf.bench data`: how many images per second the input
pipeline alone delivers.

No model: each configuration's loader is drained as fast as it goes. The loaders are the
training DataModule's own (segperf.bench.workload builds it from training's data config), one
train loader per point of the grid decode x cache x workers x pin (cache=device: one per decode,
no DataLoader), measured side by side with a naive reference loader written the way the seed
study's first version loaded (one process, one sample after another, full PIL decode then
resize); every rate is also given as a ratio to that reference. Like nanoGPT's bench.py it warms
up before timing: the first batches of each loader (worker start-up, imports, first file reads)
are drained untimed, workers are kept alive, and the timed passes are repeated until at least
`min_seconds` have passed. A cache's fill time is reported in its row's note, not counted in its
rate: the rate is the steady state of a training run.

`run()` prints the table (segperf.bench.table) and writes it as JSON, whose path is the last line
printed: a list of rows, each with its settings, `images_per_s` and `ratio_vs_naive` (the naive
reference and the memory-copy bound are rows too). The command line is segperf.bench.cli.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Iterable
from itertools import islice
from pathlib import Path
from typing import Any

import numpy as np
import torch

from segperf.bench import workload
from segperf.bench.schema import Settings
from segperf.bench.table import REFERENCE, closing_lines, label, table
from segperf.config import available_cores
from segperf.data.base import RunDataModule
from segperf.data.cache import SampleCache
from segperf.data.cold import PageCache, drop_page_cache, warm
from segperf.data.filechecks import write_bad_files


def drain(batches: Iterable) -> int:
    """Images in all batches; touching each batch is all the consumer does."""
    return sum(len(image) for image, _ in batches)


def warm_up(loader: Iterable, batches: int) -> None:
    """The first `batches` of a pass, untimed (worker start-up, imports, first file reads); the pass
    is then closed, and the loader's persistent workers serve the timed passes."""
    passing = iter(loader)
    drain(islice(passing, batches))
    getattr(passing, "close", lambda: None)()


# -- the grid ---------------------------------------------------------------------------------
class Bench:
    """One benchmark run: the set-up DataModule whose loaders it times, its settings, and the
    cache fill times it saw."""

    def __init__(self, s: Settings, datamodule: RunDataModule) -> None:
        self.s = s
        self.datamodule = datamodule
        self.samples = datamodule.split.train
        self.size = (s.width, s.height)  # PIL's order
        self.device = datamodule.standalone_device  # where cache=device keeps the data
        self.fill_seconds: dict[tuple[str, str], float] = {}
        self.host_cache: SampleCache | None = None  # the first cache=memory one, for the copy bound
        self.rows: list[dict[str, Any]] = []

    def page_cache(self) -> PageCache:
        """Dropped right before each timed pass with cold_cache=true (the warm-up read some files)."""
        return drop_page_cache(self.datamodule.train_files()) if self.s.cold_cache else warm("cold_cache=false")

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
        order = list(self.datamodule.train_sampler(range(len(self.samples))))  # the train loader's order

        def naive_pass(order: list[int]) -> int:
            return drain(workload.naive_batches(a.format, self.samples, order, self.size, a.batch_size))

        naive_pass(order[: a.batch_size])  # warm-up
        row = self.settings(REFERENCE, "full", "off")
        row["note"] = "reference: the seed's first loader (1 process, sequential, full decode)"
        self.timed(row, lambda: naive_pass(order))

    def train_loader(self, decode: str, cache: str, workers: int = 0, pin: bool = False) -> Any:
        """The DataModule's own train loader for one grid point; a cache it fills first is timed
        apart (its fill is set-up, as in a training run), once per decode and place."""
        self.page_cache()  # a cold fill reads from disk
        t0 = time.perf_counter()
        workload.configure(self.datamodule, decode=decode, cache=cache, num_workers=workers, pin_memory=pin)
        loader = self.datamodule.train_dataloader()
        if cache != "off":
            self.fill_seconds.setdefault((decode, cache), time.perf_counter() - t0)
        if cache == "memory" and self.host_cache is None:
            self.host_cache = workload.cache_of(loader)
        return loader

    def data_loader(self, decode: str, cache: str, workers: int, pin: bool) -> None:
        loader = self.train_loader(decode, cache, workers, pin)
        warm_up(loader, max(1, 2 * workers))
        row = self.settings("DataLoader", decode, cache, workers, pin)
        row["note"] = self.note(row)
        self.timed(row, lambda: drain(loader))

    def device_cache(self, decode: str) -> None:
        loader = self.train_loader(decode, "device")
        warm_up(loader, 1)
        row = self.settings("device cache", decode, "device") | {"device": str(self.device)}
        row["note"] = self.note(row)
        self.timed(row, lambda: drain(loader))

    def run(self) -> list[dict[str, Any]]:
        """The naive reference first, then every configuration of the grid, in the order of its lists."""
        a = self.s
        self.naive()
        device_cache = None
        for decode in a.decode:
            for cache in a.cache:
                if cache == "device":  # no DataLoader: the workers and pin axes do not apply
                    self.device_cache(decode)
                    continue
                for workers in a.workers:
                    for pin in a.pin:
                        self.data_loader(decode, cache, workers, pin)
        if self.host_cache is None and "device" in a.cache:  # only device rows: gather where they run
            device_cache = workload.cache_of(self.train_loader(a.decode[0], "device"))
        if self.host_cache is not None or device_cache is not None:
            self.copy_bound(self.host_cache if self.host_cache is not None else device_cache)
        for row in self.rows:
            row["ratio_vs_naive"] = row["images_per_s"] / self.rows[0]["images_per_s"]
        return self.rows

    def copy_bound(self, cache: SampleCache) -> None:
        """The cached path's ceiling: gathering a batch out of the cache is a memory copy."""
        generator = torch.Generator().manual_seed(self.s.seed)
        index = torch.randint(0, len(cache), (self.s.batch_size,), generator=generator).to(cache.images.device)

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
            notes.append(f"cache filled in {self.fill_seconds[(row['decode'], row['cache'])]:.1f} s first, not timed")
        if row["cache"] == "memory" and row["workers"]:
            notes.append("workers add inter-process hand-offs to a memory copy")
        if row["cache"] == "device":
            notes.append(f"no DataLoader: batches indexed out of the cache on {self.device}")
        if row["augment"] == "basic":
            notes.append("augmented on the device" if row["cache"] == "device" else "augmented in the loader")
        return "; ".join(notes)


def input_difference(datamodule: RunDataModule, count: int = 16) -> dict[str, float] | None:
    """How far `reduced` decode moves the inputs from `full` decode, in levels of 255, on up to
    `count` validation images as the DataModule serves them (None: the split holds none out)."""
    if not datamodule.split.val:
        return None
    full = workload.validation_images(datamodule, "full", count).to(torch.int16)
    reduced = workload.validation_images(datamodule, "reduced", count).to(torch.int16)
    diff = (full - reduced).abs().flatten(1).float()
    return {
        "images": len(diff),
        "mean_abs_diff": float(np.mean(diff.mean(dim=1).numpy())),
        "max_abs_diff": float(diff.max()),
    }


# -- one run ------------------------------------------------------------------------------------
def run(s: Settings, run_dir: Path) -> Path:
    """Measure the grid, print the table, write it as JSON (`out`, or loader.json in `run_dir`)
    and print that path as the last line; return it."""
    if s.num_threads is not None:
        torch.set_num_threads(s.num_threads)
    # data.root, or the built-in data set (made once, in segperf's cache folder), checked and split
    datamodule = workload.build(s)
    if (skips := getattr(datamodule, "skips", None)) is not None:  # data.on_bad_sample=skip: what it left out
        write_bad_files(run_dir, skips.summary())
    bench = Bench(s, datamodule)
    cuda = "CUDA" if torch.cuda.is_available() else "no CUDA"
    print(
        f"Loader benchmark: {len(bench.samples)} training samples of {datamodule.resolved_root}, {s.images} images "
        f"per timed pass, {s.height}x{s.width}, batch {s.batch_size}, {available_cores()} cores, {cuda}, "
        f"{torch.get_num_threads()} torch thread(s) in this process.",
        flush=True,
    )
    if s.cold_cache:
        print(f"segperf.bench: before each timed pass: {bench.page_cache().message}")
    rows = bench.run()
    quality = input_difference(datamodule) if "reduced" in s.decode else None
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
