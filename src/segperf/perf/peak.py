"""The achievable peak FLOP/s of this machine, measured once and cached: MFU on every device.

A spec-sheet peak exists only for the GPUs in Lightning's table, and a CPU has none (it depends
on cores, clocks and SIMD width, none of which torch reports). So segperf measures what a dense
matmul reaches on the run's device in the run's precision: square matrices grown until one
product takes a while, a warm-up product, then ~1 s of timed rounds, the best round's FLOP/s
(2·n³ per n×n product) being the peak. That is what a well-tuned kernel gets here, so MFU
against it says how much of the reachable compute the training step uses; on a GPU it sits
beside the spec-sheet MFU (segperf.perf.flops), which also counts what no kernel reaches.

The result is cached in segperf's cache folder (`peak_flops.json`), keyed by what it depends
on: CPU model, cores available, torch version, device name, precision and CPU threads, so later
runs on the same machine read it instead of measuring. On a CPU, a probe during which other
processes kept more than BUSY_CORES cores busy is used for this run but not cached (a busy
machine's reading would understate the peak, and every later MFU would read too high). Delete
the file to measure again.
"""

from __future__ import annotations

import json
import math
import time
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

import torch

from segperf.config import available_cores, segperf_cache_dir
from segperf.perf.flops import PRECISION_DTYPES
from segperf.perf.machine import cpu_model
from segperf.perf.machine_load import CpuClock, cpu_clock, others_since
from segperf.perf.results import write_json_atomic

CACHE_FILE = "peak_flops.json"
PROBE_SECONDS = 1.0  # timed rounds after warm-up
ROUND_SECONDS = 0.05  # one timed round: enough products that a clock read and a sync are noise
SIZES = {"cpu": (512, 2048), "cuda": (2048, 16384)}  # n of the n×n product: from, at most (doubling)
BUSY_CORES = 0.25  # other processes' CPU use during a CPU probe above which its reading is not cached
TORCH_DEFAULT_THREADS = torch.get_num_threads()  # torch's own choice, read before any run changes it


@dataclass
class PeakReading:
    flops_per_s: float
    method: str
    other_cores_busy: float | None = None  # cores other processes used during the probe (CPU only)


def device_name(device: torch.device) -> str:
    return torch.cuda.get_device_name(device) if device.type == "cuda" else device.type


def fingerprint(device: torch.device | str, precision: str) -> dict[str, Any]:
    """What the peak depends on; its JSON is the cache key."""
    device = torch.device(device)
    key = {
        "cpu_model": cpu_model(),
        "cores": available_cores(),
        "torch": torch.__version__,
        "device": device_name(device),
        "precision": str(precision),
    }
    if device.type == "cpu":
        key["threads"] = TORCH_DEFAULT_THREADS
    elif PRECISION_DTYPES.get(str(precision), torch.float32) is torch.float32:
        key["float32_matmul_precision"] = torch.get_float32_matmul_precision()  # "high": TF32 tensor cores
    return key


def measured_peak(
    device: torch.device | str,
    precision: str,
    probe: Callable[[torch.device, torch.dtype], PeakReading] | None = None,
) -> dict[str, Any]:
    """results.json's `throughput.measured_peak`: `{flops_per_s, method, cached, source: "measured",
    other_cores_busy, measured_at}`, plus `not_cached` (why) for a reading not kept. From the
    cache when this machine's peak is there, else by `probe` (the matmul probe; tests pass a
    stand-in)."""
    device = torch.device(device)
    key = json.dumps(fingerprint(device, precision), sort_keys=True)
    path = segperf_cache_dir() / CACHE_FILE
    entry = _read_cache(path).get(key)
    if _valid(entry):
        return {**entry, "cached": True, "source": "measured"}
    reading = (probe or matmul_peak)(device, PRECISION_DTYPES.get(str(precision), torch.float32))
    entry = {
        "flops_per_s": float(reading.flops_per_s),
        "method": reading.method,
        "other_cores_busy": reading.other_cores_busy,
        "measured_at": datetime.now(UTC).isoformat(timespec="seconds"),
    }
    busy = reading.other_cores_busy or 0.0
    if busy > BUSY_CORES:
        return {**entry, "cached": False, "source": "measured", "not_cached": f"{busy:g} cores busy with other work"}
    try:
        write_json_atomic(path, {**_read_cache(path), key: entry})  # read again: another run may have added to it
    except Exception as error:  # a read-only cache folder costs the reuse, not this run's reading
        return {**entry, "cached": False, "source": "measured", "not_cached": f"{path} not written ({error})"}
    return {**entry, "cached": False, "source": "measured"}


def _read_cache(path) -> dict[str, Any]:
    """The cache's entries; {} for a missing, unreadable or corrupt file (it is rewritten whole)."""
    try:
        data = json.loads(path.read_text())
    except (OSError, ValueError):
        return {}
    return data if isinstance(data, dict) else {}


def _valid(entry: Any) -> bool:
    if not isinstance(entry, dict) or not isinstance(entry.get("method"), str):
        return False
    flops = entry.get("flops_per_s")
    return isinstance(flops, (int, float)) and math.isfinite(flops) and flops > 0


def matmul_peak(
    device: torch.device,
    dtype: torch.dtype,
    seconds: float = PROBE_SECONDS,
    clock: Callable[[], float] = time.perf_counter,
) -> PeakReading:
    """The best FLOP/s of dense n×n matmuls in `dtype` on `device` over `seconds` of timed rounds.

    n doubles from SIZES' first value until one product takes a fifth of a round (or n reaches
    the cap), so a slow path (bf16 emulated on a CPU without AVX-512 BF16) stays small and quick.
    On a CPU the probe runs with torch's default threads (the machine's peak, whatever `threads`
    the run chose) and measures what other processes used meanwhile.
    """
    smallest, largest = SIZES.get(device.type, SIZES["cpu"])
    threads = torch.get_num_threads()
    if device.type == "cpu":
        torch.set_num_threads(TORCH_DEFAULT_THREADS)
    before = cpu_clock() if device.type == "cpu" else None
    try:
        n = smallest
        while True:
            a = torch.randn(n, n, device=device).to(dtype)
            b = torch.randn(n, n, device=device).to(dtype)
            torch.matmul(a, b)  # warm-up: kernel selection, allocator, caches
            one = min(_timed(a, b, 1, clock) for _ in range(2))  # one hiccup is not slow
            if one >= ROUND_SECONDS / 5 or n >= largest:
                break
            n *= 2
        per_round = max(1, round(ROUND_SECONDS / one))
        best, rounds, begin = 0.0, 0, clock()
        while rounds == 0 or clock() - begin < seconds:
            best = max(best, per_round * 2 * n**3 / _timed(a, b, per_round, clock))
            rounds += 1
    finally:
        torch.set_num_threads(threads)
    others = None if before is None else _others_busy(before)
    where = f"{device}, {TORCH_DEFAULT_THREADS} threads" if device.type == "cpu" else str(device)
    method = (
        f"torch.matmul {n}x{n} {str(dtype).removeprefix('torch.')} on {where}: best of {rounds} rounds "
        f"of {per_round} over {seconds:g} s after warm-up"
    )
    return PeakReading(best, method, others)


def _timed(a: torch.Tensor, b: torch.Tensor, times: int, clock: Callable[[], float]) -> float:
    """Seconds for `times` products a @ b, the device synchronized before the clock is read."""
    start = clock()
    for _ in range(times):
        torch.matmul(a, b)
    if a.is_cuda:
        torch.cuda.synchronize(a.device)  # kernels run asynchronously: the host clock alone would time the launches
    return max(clock() - start, 1e-9)


def _others_busy(before: CpuClock | None) -> float | None:
    """Cores other processes kept busy since `before`, VM steal included (both took CPU the probe wanted)."""
    load = others_since(before)
    return None if load["others_cores"] is None else round(load["others_cores"] + load["steal_cores"], 2)
