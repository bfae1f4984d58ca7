"""MfuMonitor: FLOPs per sample, counted on one real step, and MFU against two peaks.

FLOPs are counted with torch.utils.flop_counter (FlopCounterMode) around one training step (its
forward and backward) and one validation step of the run itself, divided by the samples of the
batch: whatever the model and whatever its batches, nothing has to describe its input. The
counted steps are the first ones, which warm-up keeps out of the throughput anyway (the counter
slows the step it watches). Lightning's ThroughputMonitor needs the user to supply
`flops_per_batch` and logs a rate per window; here the rate comes from the PhaseClock's
post-warm-up count (segperf.perf.train_rate) and MFU is reported against the spec sheet's dense
peak and against the peak measured on this machine (segperf.perf.peak), as segperf always has.
"""

from __future__ import annotations

from typing import Any

import lightning as L
import torch
from torch.utils.flop_counter import FlopCounterMode

from segperf.callbacks.batch_size import BatchSizeFn, batch_size
from segperf.perf.flops import throughput_section
from segperf.perf.peak import measured_peak


class MfuMonitor(L.Callback):
    def __init__(self, batch_size_fn: BatchSizeFn | None = None, peak_probe: bool = True) -> None:
        """`peak_probe`: MFU also against this machine's measured peak (~1 s once per machine and
        precision, after the run so that it is in none of its timings, then cached)."""
        self.batch_size = batch_size_fn or batch_size
        self.peak_probe = peak_probe
        self.flops_per_sample: dict[str, int | None] = {"train": None, "val": None}
        self._counting: tuple[str, FlopCounterMode, int] | None = None

    def _start(self, kind: str, batch: Any, trainer=None, pl_module=None) -> None:
        if self._counting is None and self.flops_per_sample[kind] is None:
            if pl_module is not None and _compiled(pl_module):
                # a dispatch mode around a compiled step changes what runs (dynamo would not compile
                # that frame, nor reach a failing compiler): count on the net's meta-device twin
                # where segperf's modules say its input, else leave the FLOPs unknown (0 -> n/a)
                self.flops_per_sample[kind] = _twin_flops(pl_module, trainer, training=kind == "train") or 0
                return
            counter = FlopCounterMode(display=False)
            counter.__enter__()
            self._counting = (kind, counter, self.batch_size(batch))

    def _stop(self, kind: str) -> None:
        if self._counting is not None and self._counting[0] == kind:
            _, counter, samples = self._counting
            self._counting = None
            counter.__exit__(None, None, None)
            self.flops_per_sample[kind] = counter.get_total_flops() // max(1, samples)

    def on_train_batch_start(self, trainer, pl_module, batch, batch_idx: int) -> None:
        self._start("train", batch, trainer, pl_module)

    def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx: int) -> None:
        self._stop("train")

    def on_validation_batch_start(self, trainer, pl_module, batch, batch_idx: int, dataloader_idx: int = 0) -> None:
        self._start("val", batch, trainer, pl_module)

    def on_validation_batch_end(self, trainer, pl_module, outputs, batch, batch_idx: int, dataloader_idx: int = 0):
        self._stop("val")

    def on_exception(self, trainer, pl_module, exception: BaseException) -> None:
        if self._counting is not None:  # leave no dispatch mode behind
            self._counting[1].__exit__(None, None, None)
            self._counting = None

    def record(self, results: dict[str, Any], trainer) -> None:
        """results.json's `throughput` section, from `train` (the rates) and the counted FLOPs."""
        train = results.get("train") or {}
        device, precision = trainer.strategy.root_device, str(trainer.precision)
        results["throughput"] = throughput_section(
            train.get("images_per_s"),
            train.get("val_images_per_s"),
            self.flops_per_sample["train"] or None,  # 0: ops the counter does not know (all elementwise)
            self.flops_per_sample["val"] or None,
            device,
            precision,
            self._measured_peak(results, trainer),
        )

    def _measured_peak(self, results: dict[str, Any], trainer) -> dict[str, Any] | None:
        """This machine's achievable peak, on rank 0 only (it alone reports MFU; ranks probing at
        once would share the CPU)."""
        if not (self.peak_probe and (results.get("train") or {}).get("images_per_s") and trainer.is_global_zero):
            return None
        try:
            peak = measured_peak(trainer.strategy.root_device, str(trainer.precision))
        except Exception as error:  # a probe that fails costs the measured MFU, not the run's record
            results.setdefault("notices", []).append(
                f"peak probe failed ({type(error).__name__}: {error}); no measured MFU"
            )
            return None
        if not peak["cached"]:
            rate = peak["flops_per_s"] / 1e12
            print(f"segperf: measured this machine's peak: {rate:,.3f} TFLOP/s ({peak['method']})")
        return peak


def _compiled(module: torch.nn.Module) -> bool:
    """torch.compile applied in place (nn.Module.compile) to the module or any part of it."""
    return any(getattr(m, "_compiled_call_impl", None) is not None for m in module.modules())


def _twin_flops(module: torch.nn.Module, trainer, training: bool) -> int | None:
    """FLOPs per image counted on the meta-device twin of segperf's net (its input: the net's
    channels, the data module's height and width); None for a module that does not say them."""
    from segperf.perf.flops import flops_per_image

    net, datamodule = getattr(module, "net", None), getattr(trainer, "datamodule", None)
    config = getattr(net, "config", None)
    if not isinstance(config, dict) or "in_channels" not in config or not hasattr(datamodule, "height"):
        return None
    return flops_per_image(net, (config["in_channels"], datamodule.height, datamodule.width), training=training)
