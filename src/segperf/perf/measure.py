"""Everything a run measures, gathered into the sections of results.json.

`RunMeasurement` owns the pieces (the phase profiler and clock, the resource sampler) for one
run; `train.py` wraps the parts of the run it does itself (`span("define_model")`, ...) and
calls `finish()` once at the end, whatever happened.
"""

from __future__ import annotations

import os
import time
from collections import defaultdict
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import torch
from lightning.pytorch.loggers import TensorBoardLogger

from segperf.perf.device_memory import torch_memory
from segperf.perf.flops import throughput_summary
from segperf.perf.jitter import jitter_summary, log_histograms
from segperf.perf.machine import machine_info
from segperf.perf.peak import measured_peak
from segperf.perf.phases import PhaseClock, PhaseProfiler, account_phases, steady_state_batches
from segperf.perf.sampler import ResourceSampler
from segperf.perf.verdict import verdict

# what each phase row of results.json holds from the resource samples taken during it
PHASE_RESOURCES = ("cpu_mean_percent", "rss_peak_bytes", "gpu_util_mean_percent", "gpu_mem_peak_bytes")


class TimedTensorBoardLogger(TensorBoardLogger):
    """TensorBoardLogger whose metric writes show up as the `logging` phase (Lightning does
    not profile logger calls)."""

    def __init__(self, *args: Any, profiler: PhaseProfiler, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._phase_profiler = profiler

    def log_metrics(self, metrics: dict[str, float], step: int | None = None) -> None:
        with self._phase_profiler.profile("segperf.log_metrics"):
            super().log_metrics(metrics, step)


class RunMeasurement:
    def __init__(
        self,
        run_dir: Path,
        clock: PhaseClock,
        sample_interval_s: float = 0.05,
        enabled: bool = True,
        peak_probe: bool = True,
    ) -> None:
        """`clock`: the run's PhaseClock callback (the callbacks group). `enabled=False` keeps only
        what throughput needs (a few host timestamps per batch), so that a run with and without
        the measurement shows what the measurement costs. `peak_probe`: MFU against this machine's
        measured peak too (segperf.perf.peak: ~1 s once per machine and precision, then cached)."""
        self.enabled = enabled
        self.peak_probe = peak_probe
        self.profiler = PhaseProfiler(dirpath=str(run_dir), filename="lightning-profile") if enabled else None
        self.clock = clock
        gpu_index = sampled_gpu() if torch.cuda.is_available() else None
        self.sampler = ResourceSampler(interval_s=sample_interval_s, gpu_index=gpu_index) if enabled else None
        self.spans: dict[str, list[tuple[float, float]]] = defaultdict(list)
        self.run_start = time.perf_counter()
        if self.sampler is not None:
            if gpu_index is None:
                self.sampler.notes.append("GPU: none visible to torch; GPU utilization and memory not sampled")
            self.sampler.start()

    def hardware_notes(self) -> list[str]:
        """What the measurement cannot see on this machine (no GPU, no NVML, NVML 'not supported'),
        known once the sampler started; printed at the start and kept in results.json."""
        return [] if self.sampler is None else list(self.sampler.notes)

    def make_logger(self, run_dir: Path) -> TensorBoardLogger:
        options = dict(save_dir=run_dir, name="", version="", default_hp_metric=False)
        if self.profiler is None:
            return TensorBoardLogger(**options)
        return TimedTensorBoardLogger(**options, profiler=self.profiler)

    @contextmanager
    def span(self, phase: str):
        """Time a part of the run that no Lightning hook covers (model definition, set-up, ...)."""
        start = time.perf_counter()
        try:
            yield
        finally:
            self.spans[phase].append((start, time.perf_counter()))

    # -- the end of the run -----------------------------------------------------------------
    def finish(self, results: dict[str, Any], trainer=None, module=None) -> None:
        """Fill `phases`, `train`, `resources`, `jitter`, `throughput`, `verdict` and `machine`.
        Safe to call after a failure: sections whose inputs never came into being stay small."""
        run = (self.run_start, time.perf_counter())
        clock = self.clock
        results["machine"] = machine_info()  # always: the report refuses to mix machines silently
        if not self.enabled:
            validation_s = sum(end - start for start, end in clock.validation)
            results["train"] = train_section(clock, validation_s, run)
            results["measurement"] = "off"
            return
        self.sampler.stop()
        intervals = defaultdict(list, self.profiler.phase_intervals())
        for phase, spans in self.spans.items():
            intervals[phase].extend(spans)
        intervals["validation"].extend(clock.validation)
        marks = clock.marks
        if "fit_called" in marks:  # Trainer.fit up to the first batch, and from the last to its return
            setup_end = marks.get("train_start", marks.get("fit_returned", run[1]))
            intervals["setup"].append((marks["fit_called"], setup_end))
        if "train_end" in marks:
            intervals["teardown"].append((marks["train_end"], marks.get("fit_returned", run[1])))
        calls = {"warmup": min(clock.steps, clock.warmup_steps), "validation": len(clock.validation)}
        if "train_start" in clock.marks and clock.warmup_steps:
            warm_end = clock.marks.get("warmup_end", clock.marks.get("train_end", run[1]))
            intervals["warmup"].append((clock.marks["train_start"], warm_end))
        table = account_phases(dict(intervals), run, calls)
        for phase, row in table.phases.items():
            stats = self.sampler.window(*table.windows.get(phase, []))
            row.update({key: getattr(stats, key) for key in PHASE_RESOURCES})
        results["phases"] = table.phases
        results["accounted"] = {
            "wall_s": table.accounted_s,
            "fraction": table.accounted_fraction,
            "run_wall_s": table.wall_s,
        }
        results["train"] = train_section(clock, table.phases.get("validation", {}).get("wall_s", 0.0), run)
        results["resources"] = self._resources(trainer)
        batches = steady_state_batches(self.profiler, clock.warmup_steps)
        results["jitter"] = jitter_summary(batches["data_wait"], batches["train_step"])
        every = steady_state_batches(self.profiler, 0)  # every batch, warm-up included, for later analysis
        results["jitter"]["per_batch"] = {
            "warmup_steps": clock.warmup_steps,
            "data_wait_s": [round(x, 6) for x in every["data_wait"]],
            "train_step_s": [round(x, 6) for x in every["train_step"]],
            "forward_s": [round(x, 6) for x in clock.forward_s],
        }
        device_steps = clock.device_step_times()[clock.warmup_steps :]
        if device_steps:
            results["jitter"]["device_step"] = jitter_summary([0.0] * len(device_steps), device_steps)["train_step"]
        # FLOPs need the net and its input size: segperf's modules say both; a user's module has neither
        if (
            module is not None
            and trainer is not None
            and hasattr(module, "net")
            and hasattr(trainer.datamodule, "height")
        ):
            results["throughput"] = throughput_summary(
                results["train"]["images_per_s"],
                results["train"].get("val_images_per_s"),
                module.net,  # counted as it is: the U-Net, the CPU study's CNN, any other net
                net_input_shape(module, trainer),
                trainer.strategy.root_device,
                str(trainer.precision),
                self._measured_peak(results, trainer),
            )
        gpu_percent = results["resources"].get("gpu_util_mean_percent")
        results["verdict"] = verdict(
            table.phases,
            starved_fraction=results["jitter"]["starved"]["fraction"],
            gpu_util_mean=None if gpu_percent is None else gpu_percent / 100.0,
            device_type=trainer.strategy.root_device.type if trainer is not None else "cpu",
            settings=results.get("config"),  # advice the run does not already follow, for its workload
        )
        if trainer is not None:
            self._log_tensorboard(trainer, results, batches)

    def _measured_peak(self, results: dict[str, Any], trainer) -> dict[str, Any] | None:
        """This machine's achievable peak, after the run so that the probe is in none of its
        timings; on rank 0 only (it alone reports MFU; ranks probing at once would share the CPU)."""
        if not (self.peak_probe and results["train"]["images_per_s"] and trainer.is_global_zero):
            return None
        try:
            peak = measured_peak(trainer.strategy.root_device, str(trainer.precision))
        except Exception as error:  # a probe that fails costs the measured MFU, not the run's record
            results["notices"].append(f"peak probe failed ({type(error).__name__}: {error}); no measured MFU")
            return None
        if not peak["cached"]:
            rate = peak["flops_per_s"] / 1e12
            print(f"segperf: measured this machine's peak: {rate:,.3f} TFLOP/s ({peak['method']})")
        return peak

    def _resources(self, trainer) -> dict[str, Any]:
        overall = self.sampler.overall()
        device = trainer.strategy.root_device if trainer is not None else torch.device("cpu")
        return {
            "interval_s": self.sampler.interval_s,
            "samples": overall.samples,
            "cpu_mean_percent": overall.cpu_mean_percent,
            "rss_peak_bytes": overall.rss_peak_bytes,
            "gpu_util_mean_percent": overall.gpu_util_mean_percent,
            "gpu_util_p50": overall.gpu_util_p50,
            "gpu_util_p90": overall.gpu_util_p90,
            "gpu_util_max": overall.gpu_util_max,
            "gpu_mem_peak_bytes": overall.gpu_mem_peak_bytes,
            **torch_memory(device),
            "sampler_overhead_fraction": self.sampler.overhead_fraction(),
            "notes": list(self.sampler.notes),
        }

    def _log_tensorboard(self, trainer, results: dict[str, Any], batches: dict[str, list[float]]) -> None:
        for logger in trainer.loggers:
            if not isinstance(logger, TensorBoardLogger):
                continue
            writer = logger.experiment
            for phase, row in results["phases"].items():
                writer.add_scalar(f"phases/{phase}_s", row["wall_s"], trainer.global_step)
                writer.add_scalar(f"phases/{phase}_fraction", row["fraction"], trainer.global_step)
            for sample in self.sampler.samples[:: max(1, int(1.0 / self.sampler.interval_s))]:  # ~1/s
                step = int((sample.t - self.run_start) * 1000)  # milliseconds into the run
                writer.add_scalar("resources/cpu_percent", sample.cpu_percent, step)
                writer.add_scalar("resources/rss_mib", sample.rss_bytes / 2**20, step)
                if sample.gpu_util_percent is not None:
                    writer.add_scalar("resources/gpu_util_percent", sample.gpu_util_percent, step)
                if sample.gpu_mem_bytes is not None:
                    writer.add_scalar("resources/gpu_mem_mib", sample.gpu_mem_bytes / 2**20, step)
            log_histograms(writer, batches, trainer.global_step)
            writer.flush()


def sampled_gpu() -> int:
    """The GPU this process trains on. Under DDP the sampler starts before Lightning picks the
    rank's device, so read the rank: LOCAL_RANK (set for the ranks Lightning or torchrun start)
    or SLURM_LOCALID (srun); one process: torch's current device."""
    for key in ("LOCAL_RANK", "SLURM_LOCALID"):
        value = os.environ.get(key, "")
        if value.isdigit() and int(value) < torch.cuda.device_count():
            return int(value)
    return torch.cuda.current_device()


def net_input_shape(module, trainer) -> tuple[int, int, int]:
    """(channels, height, width) of one image as the net sees it: the channels its config was
    built with, the size the datamodule delivers."""
    datamodule = trainer.datamodule
    return module.net.config["in_channels"], datamodule.height, datamodule.width


def train_section(clock: PhaseClock, validation_s: float, run: tuple[float, float]) -> dict[str, Any]:
    """images/s after warm-up: images of the steps after warm-up over the training loop's time
    after warm-up, less the pauses for validation (and the checkpoint saved after it)."""
    start, end = clock.marks.get("train_start"), clock.marks.get("train_end", run[1])
    warm_end = clock.marks.get("warmup_end")
    section: dict[str, Any] = {
        "images": clock.images,
        "steps": clock.steps,
        "wall_s": None if start is None else end - start,
        "warmup_steps": clock.warmup_steps,
        "warmup_s": None if start is None or warm_end is None else warm_end - start,
        "validation_s": validation_s,
        "images_per_s": None,
        "warmup_excluded": False,
    }
    if start is None:
        return section
    if warm_end is not None and clock.steps > clock.warmup_steps:
        images, begin = clock.images - clock.warmup_images, warm_end
        section["warmup_excluded"] = True
    else:  # too few steps to leave warm-up out: say so rather than report nothing
        images, begin = clock.images, start
    paused = sum(max(0.0, min(e, end) - max(s, begin)) for s, e in clock.pauses)
    seconds = end - begin - paused
    section["images_per_s"] = images / seconds if seconds > 0 else None
    val_s = [e - s for s, e in clock.validation]
    skip = 1 if len(val_s) > 1 else 0  # the first validation compiles/warms up the eval path
    if val_s and sum(val_s[skip:]) > 0:
        section["val_images_per_s"] = sum(clock.validation_images[skip : len(val_s)]) / sum(val_s[skip:])
    return section
