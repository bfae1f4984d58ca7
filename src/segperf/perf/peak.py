"""The achievable peak FLOP/s of this machine, measured once and cached: MFU on every device.

A spec-sheet peak exists only for the GPUs in Lightning's table, and a CPU has none (it depends
on cores, clocks and SIMD width, none of which torch reports). So segperf measures what the kinds
of work a training step does reach on the run's device, in each dtype the run's precision
computes in (its own; float32 too for a mixed precision): a dense matmul, and a 3x3
convolution's forward + backward in both memory formats, each grown until one call takes a
while, warmed up, then timed in rounds; the best round of the best kernel is the peak. Why more
than a matmul: on a CPU without native bf16 torch emulates a bf16 matmul slowly while the run's
convolutions take oneDNN's faster path, and a run beat its matmul "peak" (MFU 112%, 187%). On a
GPU it sits beside the spec-sheet MFU (segperf.perf.flops), which also counts what no kernel
reaches. A run that still beats the probe gets no measured MFU (segperf.perf.flops.mfu_or_reason).

The result is cached in segperf's cache folder (`peak_flops.json`), keyed by what it depends
on: CPU model, cores available, torch version, device name, precision, CPU threads and the
probe's kernels, so later runs on the same machine read it instead of measuring. On a CPU, a
probe during which other processes kept more than BUSY_CORES cores busy is used for this run but
not cached (a busy machine's reading would understate the peak, and every later MFU would read
too high). Delete the file to measure again.
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
CONV_SHAPE = {"cpu": (8, 64), "cuda": (32, 128)}  # batch, channels (in = out) of the probe's convolution
CONV_SIDES = {"cpu": (16, 256), "cuda": (32, 512)}  # its square image's side: from, at most (doubling)
CONV_FORMATS = (torch.contiguous_format, torch.channels_last)  # what memory_format=baseline and =channels_last run
PROBE_KERNELS = "matmul+conv2d"  # in the cache key: a peak measured by another set of kernels is measured again
BUSY_CORES = 0.25  # other processes' CPU use during a CPU probe above which its reading is not cached
TORCH_DEFAULT_THREADS = torch.get_num_threads()  # torch's own choice, read before any run changes it


@dataclass
class PeakReading:
    flops_per_s: float
    method: str
    other_cores_busy: float | None = None  # cores other processes used during the probe (CPU only)
    kernel: str = "matmul"  # which kind of work reached it: "matmul" or "conv2d"


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
        "kernels": PROBE_KERNELS,
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
    cache when this machine's peak is there, else the best of `probe` (kernel_peak; tests pass a
    stand-in) in each dtype the precision computes in (usable_dtypes)."""
    device = torch.device(device)
    key = json.dumps(fingerprint(device, precision), sort_keys=True)
    path = segperf_cache_dir() / CACHE_FILE
    entry = _read_cache(path).get(key)
    if _valid(entry):
        return {**entry, "cached": True, "source": "measured"}
    readings = [(probe or kernel_peak)(device, dtype) for dtype in usable_dtypes(precision)]
    reading = max(readings, key=lambda r: r.flops_per_s)
    busy_cores = [r.other_cores_busy for r in readings if r.other_cores_busy is not None]
    entry = {
        "flops_per_s": float(reading.flops_per_s),
        "method": reading.method,
        "other_cores_busy": max(busy_cores, default=None),
        "measured_at": datetime.now(UTC).isoformat(timespec="seconds"),
    }
    busy = entry["other_cores_busy"] or 0.0
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


def usable_dtypes(precision: str) -> list[torch.dtype]:
    """The dtypes a run at `precision` computes in: its own, and float32 too for a mixed precision
    (autocast leaves the ops it does not lower, and any op where float32 is faster, in float32)."""
    dtype = PRECISION_DTYPES.get(str(precision), torch.float32)
    mixed = str(precision).endswith("-mixed") and dtype is not torch.float32
    return [dtype, torch.float32] if mixed else [dtype]


def kernel_peak(device: torch.device, dtype: torch.dtype, seconds: float = PROBE_SECONDS) -> PeakReading:
    """The best of the kernels a training step spends its FLOPs in, in `dtype` on `device`: a dense
    matmul, and a 3x3 convolution's forward + backward in both memory formats. Why not the matmul
    alone: on a CPU without native bf16 (AVX2 only) torch emulates a bf16 matmul slowly while
    oneDNN's convolutions take a faster path, so a matmul-only peak was beaten by the run it was
    meant to bound (MFU 112% and 187%). `seconds` is shared among the kernels."""
    each = seconds / (1 + len(CONV_FORMATS))
    readings = [matmul_peak(device, dtype, each)]
    readings += [conv_peak(device, dtype, each, memory_format=fmt) for fmt in CONV_FORMATS]
    best = max(readings, key=lambda r: r.flops_per_s)
    others = [r.other_cores_busy for r in readings if r.other_cores_busy is not None]
    labels = ["matmul"] + [f"conv2d {str(fmt).removeprefix('torch.')}" for fmt in CONV_FORMATS]
    rates = zip(labels, readings, strict=True)
    beaten = "; ".join(f"{label} {r.flops_per_s / 1e9:,.1f} GFLOP/s" for label, r in rates if r is not best)
    return PeakReading(best.flops_per_s, f"{best.method} (best of: {beaten})", max(others, default=None), best.kernel)


def matmul_peak(
    device: torch.device,
    dtype: torch.dtype,
    seconds: float = PROBE_SECONDS,
    clock: Callable[[], float] = time.perf_counter,
) -> PeakReading:
    """The best FLOP/s of dense n×n matmuls in `dtype` on `device` over `seconds` of timed rounds
    (2·n³ per product); n doubles from SIZES' first value until one product takes a fifth of a
    round (or n reaches the cap), so a slow path (bf16 emulated on a CPU without AVX-512 BF16)
    stays small and quick."""

    def make(n: int) -> tuple[Callable[[], Any], float, str]:
        a = torch.randn(n, n, device=device).to(dtype)
        b = torch.randn(n, n, device=device).to(dtype)
        return (lambda: torch.matmul(a, b)), 2.0 * n**3, f"torch.matmul {n}x{n}"

    return _kernel_peak("matmul", make, SIZES, device, dtype, seconds, clock)


def conv_peak(
    device: torch.device,
    dtype: torch.dtype,
    seconds: float = PROBE_SECONDS,
    clock: Callable[[], float] = time.perf_counter,
    memory_format: torch.memory_format = torch.channels_last,
) -> PeakReading:
    """The best FLOP/s of a 3x3 convolution's forward and backward (the gradients of input and
    weight: 3x the forward's 2·N·C_out·H·W·C_in·9), as a U-Net layer runs in training, in `dtype`
    and `memory_format` on `device`; the image side doubles as matmul_peak's n does."""
    batch, channels = CONV_SHAPE.get(device.type, CONV_SHAPE["cpu"])

    def make(side: int) -> tuple[Callable[[], Any], float, str]:
        x = torch.randn(batch, channels, side, side, device=device).to(dtype, memory_format=memory_format)
        w = torch.randn(channels, channels, 3, 3, device=device).to(dtype, memory_format=memory_format)
        x.requires_grad_(True)
        w.requires_grad_(True)
        grad = torch.ones(batch, channels, side, side, device=device).to(dtype, memory_format=memory_format)

        def step() -> Any:
            out = torch.nn.functional.conv2d(x, w, padding=1)
            return torch.autograd.grad(out, (x, w), grad)

        flops = 3 * 2.0 * batch * channels * side * side * channels * 9
        layout = "channels_last" if memory_format is torch.channels_last else "contiguous"
        return step, flops, f"conv2d 3x3 forward+backward {batch}x{channels}x{side}x{side} {layout}"

    return _kernel_peak("conv2d", make, CONV_SIDES, device, dtype, seconds, clock)


def _kernel_peak(
    kernel: str,
    make: Callable[[int], tuple[Callable[[], Any], float, str]],
    sizes: dict[str, tuple[int, int]],
    device: torch.device,
    dtype: torch.dtype,
    seconds: float,
    clock: Callable[[], float],
) -> PeakReading:
    """Grow the kernel's size until one call takes a fifth of a round, then the best FLOP/s over
    `seconds` of timed rounds after warm-up. On a CPU it runs with torch's default threads (the
    machine's peak, whatever `threads` the run chose) and measures what other processes used
    meanwhile."""
    smallest, largest = sizes.get(device.type, sizes["cpu"])
    threads = torch.get_num_threads()
    if device.type == "cpu":
        torch.set_num_threads(TORCH_DEFAULT_THREADS)
    before = cpu_clock() if device.type == "cpu" else None
    try:
        size = smallest
        while True:
            call, flops, shape = make(size)
            call()  # warm-up: kernel selection, allocator, caches
            one = min(_timed(call, 1, device, clock) for _ in range(2))  # one hiccup is not slow
            if one >= ROUND_SECONDS / 5 or size >= largest:
                break
            size *= 2
        per_round = max(1, round(ROUND_SECONDS / one))
        best, rounds, begin = 0.0, 0, clock()
        while rounds == 0 or clock() - begin < seconds:
            best = max(best, per_round * flops / _timed(call, per_round, device, clock))
            rounds += 1
    finally:
        torch.set_num_threads(threads)
    others = None if before is None else _others_busy(before)
    where = f"{device}, {TORCH_DEFAULT_THREADS} threads" if device.type == "cpu" else str(device)
    method = (
        f"{shape} {str(dtype).removeprefix('torch.')} on {where}: best of {rounds} rounds "
        f"of {per_round} over {seconds:g} s after warm-up"
    )
    return PeakReading(best, method, others, kernel)


def _timed(call: Callable[[], Any], times: int, device: torch.device, clock: Callable[[], float]) -> float:
    """Seconds for `times` calls, the device synchronized before the clock is read."""
    start = clock()
    for _ in range(times):
        call()
    if device.type == "cuda":
        torch.cuda.synchronize(device)  # kernels run asynchronously: the host clock alone would time the launches
    return max(clock() - start, 1e-9)


def _others_busy(before: CpuClock | None) -> float | None:
    """Cores other processes kept busy since `before`, VM steal included (both took CPU the probe wanted)."""
    load = others_since(before)
    return None if load["others_cores"] is None else round(load["others_cores"] + load["steal_cores"], 2)
