"""FLOPs per image, the device's peak, and model FLOPs utilisation (MFU).

Images/s alone cannot say whether a run is slow: 40 images/s may be excellent on a laptop CPU
and dismal on an H200. MFU = achieved FLOP/s / the chip's theoretical peak puts a run on an
absolute scale. FLOPs are *counted*, not estimated, with Lightning's `measure_flops` (torch's
FlopCounterMode) on whatever net the caller passes, through a twin of it on the meta device:
shapes propagate, no memory is allocated and nothing is computed, so counting costs a fraction
of a second on any machine. Nothing here knows which nets exist.

Spec-sheet peaks come from Lightning's table (`_CUDA_FLOPS`), read by our own name parser
because Lightning only recognises H200 names containing "sxm1"/"nvl1", while the driver reports
a plain "NVIDIA H200" (or "NVIDIA H200 NVL"). Lightning's H200 and H100 NVL rows are NVIDIA's
with-sparsity tensor-core figures (bf16 2.0e15 on an H200 SXM, 0.99e15 dense); training runs
dense, so DENSE_ROWS replaces those with the dense figures (half), and MFU is against them.
The achievable peak, measured on the machine itself (any device, the CPU included), is
segperf.perf.peak's; the run reports MFU against both.
"""

from __future__ import annotations

import copy
import itertools
import re
import warnings
from collections.abc import Sequence
from typing import Any

import torch
from lightning.fabric.utilities.throughput import _CUDA_FLOPS, get_available_flops, measure_flops
from torch import nn

# Lightning precision strings (and their short aliases) -> the dtype the matmuls run in.
PRECISION_DTYPES: dict[str, torch.dtype] = {
    "64-true": torch.float64,
    "64": torch.float64,
    "32-true": torch.float32,
    "32": torch.float32,
    "bf16-mixed": torch.bfloat16,
    "bf16-true": torch.bfloat16,
    "bf16": torch.bfloat16,
    "16-mixed": torch.float16,
    "16-true": torch.float16,
    "16": torch.float16,
}

# (regex on the lower-cased driver name, Lightning table key), first match wins; mirrors Lightning's
# get_available_flops parser, with word boundaries so "RTX A4000" is not taken for an A40.
_CHIP_RULES: tuple[tuple[str, str], ...] = (
    (r"\ba6000\b", "a6000"),
    (r"\ba100\b", "a100"),
    (r"\ba10g\b", "a10g"),
    (r"\ba40\b", "a40"),
    (r"quadro rtx 5000", "quadro rtx 5000"),
    (r"titan rtx", "titan rtx"),
    (r"\bv100-sxm", "v100 sxm"),
    (r"\bv100-pcie", "v100 pcie"),
    (r"\bv100s-pcie", "v100s pcie"),
    (r"\bt4\b", "t4"),
)
# Lightning rows that hold with-sparsity tensor-core figures, as dense ones (NVIDIA's datasheets mark the
# sparse figures with an asterisk; dense is half). H200 SXM: the H100 SXM's dense figures (same GH100
# compute); H200 NVL and H100 NVL (94 GB, per GPU): TF32 835*, BF16/FP16 1,671*, INT8 3,341* TFLOPS.
DENSE_ROWS: dict[str, dict[torch.dtype | str, float]] = {
    "h200 sxm1": {"tfloat32": 494.7e12, torch.bfloat16: 989.4e12, torch.float16: 989.4e12, torch.int8: 1978.9e12},
    "h200 nvl1": {"tfloat32": 417.5e12, torch.bfloat16: 835.5e12, torch.float16: 835.5e12, torch.int8: 1670.5e12},
    "h100 nvl": {
        torch.float64: 30e12,  # Lightning's fp32/fp64 here are a pair of GPUs'
        torch.float32: 60e12,
        "tfloat32": 417.5e12,
        torch.bfloat16: 835.5e12,
        torch.float16: 835.5e12,
        torch.int8: 1670.5e12,
    },
}

# Names we resolve to "no known peak" on purpose, which Lightning's parser would misread (an L40S as
# an L4): the fallback to get_available_flops must not undo that.
_NOT_IN_TABLE = re.compile(r"\bl40s\b|\bgh200\b")


def chip_name(device_name: str) -> str:
    """The `_CUDA_FLOPS` key for a `torch.cuda.get_device_name()` string, or the lower-cased name.

    "NVIDIA H200" -> "h200 sxm1" (the plain name is the SXM part), "NVIDIA H200 NVL" -> "h200 nvl1";
    the other rules follow Lightning's parser. An unknown name comes back lower-cased, so looking
    it up in the table misses and the caller says "no known peak".
    """
    chip = device_name.lower().strip()
    if re.search(r"\bh200\b", chip):  # not "gh200" (a Grace-Hopper superchip, not in the table)
        return "h200 nvl1" if "nvl" in chip else "h200 sxm1"
    if "h100" in chip:
        if "nvl" in chip:
            return "h100 nvl"
        if "hbm3" in chip or "sxm" in chip:  # "NVIDIA H100 80GB HBM3" is the SXM part
            return "h100 sxm"
        if "pcie" in chip or "hbm2e" in chip:
            return "h100 pcie"
        return chip
    if "l40s" in chip:
        return "l40s"  # twice an L40's tensor throughput; not in the table, and no L40 stand-in
    if "l40" in chip:
        return "l40"
    if re.search(r"\bl4\b", chip):
        return "l4"
    rtx = re.search(r"geforce rtx (\d{4})(?: (super|ti))?", chip)
    if rtx:
        return f"rtx {rtx.group(1)}" + (f" {rtx.group(2)}" if rtx.group(2) else "")
    for pattern, key in _CHIP_RULES:
        if re.search(pattern, chip):
            return key
    return chip


def peak_flops_for_name(device_name: str, precision: str, tf32: bool) -> float | None:
    """Theoretical dense peak FLOP/s of a CUDA device named `device_name` at a Lightning `precision`.

    `tf32` says float32 matmuls run on tensor cores (Ampere or later and
    `torch.get_float32_matmul_precision() != "highest"`); then "32-true" reports the tf32 peak, as
    Lightning does. None when the chip, the precision or the dtype on that chip is unknown: no
    peak is better than a wrong one. Pure and GPU-free, so it is testable anywhere.
    """
    dtype = PRECISION_DTYPES.get(str(precision))
    chip = chip_name(device_name)
    table = _CUDA_FLOPS.get(chip)
    if dtype is None or table is None:
        return None
    key: torch.dtype | str = dtype
    if dtype is torch.float32 and tf32 and "tfloat32" in table:
        key = "tfloat32"
    table = {**table, **DENSE_ROWS.get(chip, {})}
    return float(table[key]) if key in table else None


def peak_flops(device: torch.device | str, precision: str) -> float | None:
    """The peak FLOP/s of `device` at `precision`; None on a CPU (or MPS), where no table of peaks
    exists: a CPU's peak depends on cores, clocks and SIMD width, none of which torch reports.

    A CUDA name our parser does not know falls back to Lightning's `get_available_flops` (a newer
    Lightning may know it), with its "FLOPs not found" warning silenced: None says it already.
    """
    device = torch.device(device)
    if device.type != "cuda":
        return None
    from lightning.fabric.accelerators.cuda import _is_ampere_or_later

    name = torch.cuda.get_device_name(device)
    tf32 = _is_ampere_or_later(device) and torch.get_float32_matmul_precision() != "highest"
    peak = peak_flops_for_name(name, precision, tf32)
    dtype = PRECISION_DTYPES.get(str(precision))
    unparsed = chip_name(name) not in _CUDA_FLOPS and not _NOT_IN_TABLE.search(name.lower())
    if peak is None and dtype is not None and unparsed:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            found = get_available_flops(device, dtype)
        peak = None if found is None else float(found)
    return peak


def meta_twin(net: nn.Module) -> nn.Module:
    """A copy of `net` on the meta device: the same modules, shapes and forward, float32, no memory.

    Parameters and buffers are swapped for meta tensors while copying, so the net's own weights,
    gradients, device and dtype stay as they are and nothing is copied for real. A compiled net
    (`nn.Module.compile()` in place, or `torch.compile(net)`) is counted eagerly: the FLOPs are the
    net's, and compiling for the meta device would only cost time.
    """
    net = getattr(net, "_orig_mod", net)  # torch.compile(net) wraps the net
    memo: dict[int, Any] = {}
    for tensor in itertools.chain(net.parameters(), net.buffers()):
        dtype = torch.float32 if tensor.is_floating_point() else tensor.dtype
        meta = torch.empty_like(tensor, device="meta", dtype=dtype)
        memo[id(tensor)] = nn.Parameter(meta, tensor.requires_grad) if isinstance(tensor, nn.Parameter) else meta
    twin = copy.deepcopy(net, memo)
    for module in twin.modules():
        if getattr(module, "_compiled_call_impl", None) is not None:
            module._compiled_call_impl = None  # it would call the original net
    return twin


def flops_per_image(net: nn.Module, input_shape: Sequence[int], training: bool = True) -> int:
    """FLOPs for `net` to process one image of `input_shape` (channels, height, width).

    Any module: it is counted on a meta-device twin (`meta_twin`) with Lightning's `measure_flops`,
    so the net itself is not run or changed, and counting takes well under a second anywhere.
    training=True counts forward + backward (about 3x forward: backward computes gradients for both
    inputs and weights), in training mode; False counts the forward only, in eval mode, as in
    validation. A multiply-add counts as 2 FLOPs. A size the net cannot take raises the net's own
    error (the U-Net's ValueError when it is not divisible by 16).
    """
    twin = meta_twin(net).train(training)
    x = torch.empty(1, *(int(n) for n in input_shape), device="meta")
    if training:
        return int(measure_flops(twin, lambda: twin(x), loss_fn=lambda y: y.sum()))
    with torch.no_grad():
        return int(measure_flops(twin, lambda: twin(x)))


def mfu(images_per_s: float | None, flops_per_image: int | None, peak: float | None) -> float | None:
    """Model FLOPs utilisation, images_per_s * flops_per_image / peak; None when any is missing or 0."""
    if not images_per_s or not flops_per_image or not peak:
        return None
    return float(images_per_s) * float(flops_per_image) / float(peak)


def mfu_or_reason(
    achieved_flops_per_s: float | None, peak: float | None, peak_name: str
) -> tuple[float | None, str | None]:
    """MFU = achieved / peak, or (None, why) when the run achieved more than `peak`: a peak the run
    beats is not a peak (a probe that missed the run's fast path, a spec sheet for another number
    format), and an MFU over 100% would mislead. (None, None) when either is missing."""
    if not achieved_flops_per_s or not peak:
        return None, None
    if achieved_flops_per_s > peak:
        achieved, beaten = _flops_rate(achieved_flops_per_s), _flops_rate(peak)
        return None, f"the {peak_name} was not representative: the run achieved {achieved} > {peak_name} {beaten}"
    return achieved_flops_per_s / peak, None


def _flops_rate(flops_per_s: float) -> str:
    """'12.3 GFLOP/s' below a TFLOP/s (a CPU), '412.5 TFLOP/s' above (a GPU)."""
    return f"{flops_per_s / 1e12:,.1f} TFLOP/s" if flops_per_s >= 1e12 else f"{flops_per_s / 1e9:,.1f} GFLOP/s"


def throughput_summary(
    train_images_per_s: float | None,
    val_images_per_s: float | None,
    net: nn.Module,
    input_shape: Sequence[int],
    device: torch.device | str,
    precision: str,
    measured_peak: dict[str, Any] | None = None,
) -> dict[str, Any]:
    """The `throughput` section for `net` counted on one image of `input_shape` (channels, height,
    width) on its meta twin; see `throughput_section`."""
    train_flops = flops_per_image(net, input_shape, training=True)
    val_flops = flops_per_image(net, input_shape, training=False)
    return throughput_section(
        train_images_per_s, val_images_per_s, train_flops, val_flops, device, precision, measured_peak
    )


def throughput_section(
    train_images_per_s: float | None,
    val_images_per_s: float | None,
    train_flops: int | None,
    val_flops: int | None,
    device: torch.device | str,
    precision: str,
    measured_peak: dict[str, Any] | None = None,
) -> dict[str, Any]:
    """The `throughput` section of results.json: rates, FLOPs per image, achieved FLOP/s, peaks, MFU.

    `train_flops`/`val_flops` are per image (sample): forward + backward in training, the forward
    in validation. MFU is computed on training, against two peaks: the spec sheet's
    (`peak_flops_per_s`, `mfu`; None on a CPU and on a GPU not in the table) and the one measured
    on this machine (`measured_peak`, segperf.perf.peak; `measured_mfu`). Each MFU is None
    whenever the train rate, its FLOPs or its peak is missing, and None with its reason (`mfu_reason`,
    `measured_mfu_reason`) when the run achieved more than that peak: never above 100%.
    """
    peak = peak_flops(device, precision)
    measured = (measured_peak or {}).get("flops_per_s")
    achieved = None if train_images_per_s is None or not train_flops else float(train_images_per_s) * train_flops
    spec_mfu, spec_reason = mfu_or_reason(achieved, peak, "spec-sheet peak")
    measured_mfu, measured_reason = mfu_or_reason(achieved, measured, "peak probe")
    return {
        "train_images_per_s": None if train_images_per_s is None else float(train_images_per_s),
        "val_images_per_s": None if val_images_per_s is None else float(val_images_per_s),
        "train_flops_per_image": train_flops,
        "val_flops_per_image": val_flops,
        "achieved_train_flops_per_s": achieved,
        "peak_flops_per_s": peak,
        "mfu": spec_mfu,
        "mfu_reason": spec_reason,
        "measured_peak": measured_peak,
        "measured_mfu": measured_mfu,
        "measured_mfu_reason": measured_reason,
    }
