"""PerfMonitor: segperf's measurement as one callback, for any Lightning Trainer.

    trainer = L.Trainer(callbacks=[PerfMonitor()])   # a user's own script, nothing else changed

It is the set of measuring callbacks, each owning its part as Lightning's ThroughputMonitor and
DeviceStatsMonitor do (set up in `setup`, recording in the batch hooks, writing its own section
at the end): PhaseClock (phases, jitter, the train_step split, the sample rate), ResourceMonitor
(CPU, RSS, GPU) and MfuMonitor (FLOPs per sample, MFU). PerfMonitor passes Lightning's hooks on
to them and, at the end of `fit`, gathers their sections with the verdict into results.json and
summary.txt in the trainer's log dir (or `dirpath`), prints the summary, and logs its scalars
through the trainer's own loggers.

It needs no profiler of its own: the phase timings come from a tap on whatever profiler the
Trainer has (segperf.callbacks.profiler_tap), so a user keeps theirs, or none.

segperf's own runs use it too (conf/callbacks/default.yaml) with `write_files=False`: there the
run's record (segperf.training.record) writes the files once the run is over (after a last
validation, whatever happened), calling `record(results)` as it does for every callback that
has one, and `span(phase)` times what the recipe does outside the Trainer.
"""

from __future__ import annotations

import time
from collections import defaultdict
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import lightning as L
import torch
from lightning.pytorch.loggers import TensorBoardLogger
from torch.utils.data import DataLoader

from segperf.callbacks.batch_size import BatchSizeFn
from segperf.callbacks.mfu_monitor import MfuMonitor
from segperf.callbacks.phase_clock import PhaseClock
from segperf.callbacks.resource_monitor import ResourceMonitor
from segperf.config import available_cores
from segperf.perf.jitter import jitter_summary, log_histograms
from segperf.perf.machine import machine_info
from segperf.perf.machine_load import load_at_end, load_at_start
from segperf.perf.phases import (
    STEP_ACTION,
    account_phases,
    phase_of_action,
    split_rows,
    split_steps,
    steady_state_batches,
)
from segperf.perf.results import write_json_atomic, write_text_atomic
from segperf.perf.summary import format_run_summary
from segperf.perf.train_rate import train_section
from segperf.perf.verdict import verdict

# hooks PerfMonitor passes on to its parts unchanged
FORWARDED_HOOKS = (
    "on_train_end",
    "on_train_batch_start",
    "on_before_backward",
    "on_after_backward",
    "on_train_batch_end",
    "on_validation_start",
    "on_validation_batch_start",
    "on_validation_batch_end",
    "on_validation_end",
)


class PerfMonitor(L.Callback):
    def __init__(
        self,
        dirpath: str | Path | None = None,
        warmup_steps: int = 2,
        batch_size_fn: BatchSizeFn | None = None,
        sample_interval_s: float = 0.05,
        measure: bool = True,
        peak_probe: bool = True,
        write_files: bool = True,
    ) -> None:
        """
        Args:
            dirpath: where results.json and summary.txt go; default the trainer's log dir.
            warmup_steps: the first training steps (compilation, caches), kept out of throughput.
            batch_size_fn: samples in a batch; default the leading dimension of its first tensor.
            sample_interval_s: resource sampling period (CPU, RSS, GPU utilization and memory).
            measure: False keeps only the sample rate (a few host timestamps per batch), to
                measure what measuring costs side by side.
            peak_probe: MFU also against this machine's measured peak (~1 s once, then cached).
            write_files: False when something else writes the record (segperf's own runs).
        """
        self.dirpath = None if dirpath is None else Path(dirpath)
        self.measure, self.write_files = measure, write_files
        self.clock = PhaseClock(warmup_steps, record_phases=measure, batch_size_fn=batch_size_fn)
        self.resources = ResourceMonitor(sample_interval_s) if measure else None
        self.mfu = MfuMonitor(batch_size_fn, peak_probe) if measure else None
        self.parts: list[L.Callback] = [p for p in (self.clock, self.resources, self.mfu) if p is not None]
        # per forwarded hook, the parts that implement it, bound once: Lightning calls the per-step
        # ones a few times a step, and most parts have nothing to do in most of them
        self._forwards: dict[str, tuple] = {
            name: tuple(getattr(p, name) for p in self.parts if overrides(p, name)) for name in FORWARDED_HOOKS
        }
        self.spans: dict[str, list[tuple[float, float]]] = defaultdict(list)
        self.run_start: float | None = None
        self.trainer: L.Trainer | None = None
        self.loader: dict[str, Any] = {}
        self.hooks_s = 0.0  # wall time inside PerfMonitor's own hooks (its parts' included)
        # how busy the machine was around the run (results.json's machine_load), for a run whose
        # record nothing else keeps (a user's script); segperf's own record measures its whole run
        self._load_start: tuple[dict[str, Any], Any] | None = None

    # -- the run around the Trainer -------------------------------------------------------------
    def begin(self) -> None:
        """The run starts: at the first `span` or at `setup`, whichever comes first."""
        if self.run_start is None:
            self.run_start = time.perf_counter()
            self._load_start = load_at_start()
            if self.resources is not None:
                self.resources.start()

    @contextmanager
    def span(self, phase: str) -> Iterator[None]:
        """Time a part of the run that no Lightning hook covers (model definition, a last validation)."""
        self.begin()
        start = time.perf_counter()
        try:
            yield
        finally:
            self.spans[phase].append((start, time.perf_counter()))

    def extend_warmup(self, steps: int) -> None:
        """`steps` more warm-up steps before throughput is timed (segperf.callbacks.share_cores)."""
        self.clock.extend_warmup(steps)

    # -- Lightning's hooks ----------------------------------------------------------------------
    def setup(self, trainer, pl_module, stage: str) -> None:
        self.clock.marks.setdefault("fit_called", time.perf_counter())  # before the sampler thread starts
        self.begin()
        self.trainer = trainer
        for part in self.parts:
            part.setup(trainer, pl_module, stage)

    def on_train_start(self, trainer, pl_module) -> None:
        self.loader = loader_settings(trainer)  # the loaders exist from here on
        for part in self.parts:
            part.on_train_start(trainer, pl_module)

    def teardown(self, trainer, pl_module, stage: str) -> None:
        for part in self.parts:
            part.teardown(trainer, pl_module, stage)
        if stage == "fit" and self.write_files:
            self.write({"status": "completed"})

    def on_exception(self, trainer, pl_module, exception: BaseException) -> None:
        for part in self.parts:
            part.on_exception(trainer, pl_module, exception)
        if self.write_files:
            interrupted = isinstance(exception, KeyboardInterrupt)
            self.write(
                {
                    "status": "interrupted" if interrupted else "failed",
                    "error": f"{type(exception).__name__}: {exception}".strip().rstrip(":"),
                }
            )

    # -- the end of the run ---------------------------------------------------------------------
    def record(self, results: dict[str, Any]) -> None:
        """Fill `machine`, `train`, `phases`, `accounted`, `resources`, `jitter`, `throughput` and
        `verdict`. Safe after a failure: sections whose inputs never came into being stay small."""
        # the run ends with its last measured part: the fit's return or the last span after it, not
        # here (stopping the sampler thread, which can wait out an interval, is not the run's time)
        ends = [e for spans in self.spans.values() for _, e in spans] + [self.clock.marks.get("fit_returned")]
        end = max((t for t in ends if t is not None), default=time.perf_counter())
        run = (self.run_start or end, end)
        clock, trainer = self.clock, self.trainer
        results.setdefault("notices", [])
        if "machine_load" not in results and self._load_start is not None:
            results["machine_load"] = load_at_end(*self._load_start)
        results["machine"] = machine_info()  # always: the report refuses to mix machines silently
        if trainer is not None:
            results.setdefault("device", str(trainer.strategy.root_device))
            results.setdefault("precision", str(trainer.precision))
        results.setdefault("torch_threads", torch.get_num_threads())
        if not self.measure:
            results["train"] = train_section(clock, sum(e - s for s, e in clock.validation), run)
            results["measurement"] = "off"
            return
        actions = clock.intervals()
        table = account_phases(self._phase_intervals(actions, run), run, self._calls())
        results["phases"] = table.phases
        if "train_step" in table.phases:
            split = split_steps(actions.get(STEP_ACTION, []), clock.backward, clock.warmup_steps)
            if split["steps"]:
                table.phases["train_step"]["split"] = split_rows(split, table.wall_s)
            device_split = clock.device_split(clock.warmup_steps)
            if device_split:
                table.phases["train_step"]["device_split_s"] = device_split
        results["accounted"] = {
            "wall_s": table.accounted_s,
            "fraction": table.accounted_fraction,
            "run_wall_s": table.wall_s,
        }
        results["train"] = train_section(clock, table.phases.get("validation", {}).get("wall_s", 0.0), run)
        device = trainer.strategy.root_device if trainer is not None else torch.device("cpu")
        self.resources.record(results, table.windows, device)
        batches = steady_state_batches(actions, clock.warmup_steps)
        results["jitter"] = self._jitter(actions, batches)
        if trainer is not None:
            self.mfu.record(results, trainer)
        results["verdict"] = self._verdict(results, device)
        results["measurement_cost"] = self._cost(table.wall_s)
        if trainer is not None and trainer.is_global_zero:
            self._log(trainer, results, batches)

    def _phase_intervals(self, actions: dict[str, list], run: tuple[float, float]) -> dict[str, list]:
        """Every phase's (start, end) records: the profiled actions, the spans, the clock's edges."""
        clock, intervals = self.clock, defaultdict(list)
        for action, spans in actions.items():
            intervals[phase_of_action(action)].extend(spans)
        for phase, spans in self.spans.items():
            intervals[phase].extend(spans)
        intervals["validation"].extend(clock.validation)
        marks = clock.marks
        if "fit_called" in marks:  # Trainer.fit up to the first batch, and from the last to its return
            setup_end = marks.get("train_start", marks.get("fit_returned", run[1]))
            intervals["setup"].append((marks["fit_called"], setup_end))
        if "train_end" in marks:
            intervals["teardown"].append((marks["train_end"], marks.get("fit_returned", run[1])))
        if "train_start" in marks:  # the loop's time no other phase holds (lowest priority within it)
            intervals["framework"].append((marks["train_start"], marks.get("train_end", run[1])))
        if "train_start" in marks and clock.warmup_steps:
            intervals["warmup"].append((marks["train_start"], marks.get("warmup_end", marks.get("train_end", run[1]))))
        return dict(intervals)

    def _cost(self, run_s: float) -> dict[str, Any]:
        """What measuring took, measured directly rather than as a difference of two noisy
        throughputs: the training thread's time inside PerfMonitor's per-batch hooks and the
        profiler tap's bookkeeping, and the sampler thread's own CPU time. Their sum over the
        run's wall time is the share of a core the measurement used; on a machine whose every core
        trains, about what it takes from training. Not counted: a preempted intra-op thread's wait
        when the sampler wakes (the side-by-side throughput with perf.measure=false is the check
        on that), nor the one step FLOPs are counted on running slower under the counter: it is a
        warm-up step, which throughput leaves out."""
        tap = self.clock.tap
        tap_s = tap.own_s if tap is not None else 0.0
        sampler_s = self.resources.sampler.thread_cpu_s if self.resources.sampler is not None else 0.0
        spent = self.hooks_s + tap_s + sampler_s
        return {
            "hooks_s": self.hooks_s,
            "tap_s": tap_s,
            "sampler_cpu_s": sampler_s,
            "fraction": spent / run_s if run_s > 0 else None,
        }

    def _calls(self) -> dict[str, int]:
        clock = self.clock
        steps = clock.steps
        return {"warmup": min(steps, clock.warmup_steps), "validation": len(clock.validation), "framework": steps}

    def _jitter(self, actions: dict[str, list], batches: dict[str, list[float]]) -> dict[str, Any]:
        clock = self.clock
        jitter = jitter_summary(batches["data_wait"], batches["train_step"])
        every = steady_state_batches(actions, 0)  # every batch, warm-up included, for later analysis
        jitter["per_batch"] = {
            "warmup_steps": clock.warmup_steps,
            "data_wait_s": [round(x, 6) for x in every["data_wait"]],
            "train_step_s": [round(x, 6) for x in every["train_step"]],
            "forward_s": [round(x, 6) for x in clock.forward_s],
        }
        device_steps = clock.device_step_times()[clock.warmup_steps :]
        if device_steps:
            jitter["device_step"] = jitter_summary([0.0] * len(device_steps), device_steps)["train_step"]
        return jitter

    def _verdict(self, results: dict[str, Any], device: torch.device) -> dict[str, Any]:
        """In segperf's overrides for a run segperf configured (its record holds the config); in
        DataLoader and Trainer arguments for anyone else's."""
        segperf_run = "config" in results
        gpu_percent = results["resources"].get("gpu_util_mean_percent")
        return verdict(
            results["phases"],
            starved_fraction=results["jitter"]["starved"]["fraction"],
            gpu_util_mean=None if gpu_percent is None else gpu_percent / 100.0,
            device_type=device.type,
            settings=results.get("config") if segperf_run else self.loader,
            advice="segperf" if segperf_run else "dataloader",
            cores=self._cores(results),
        )

    def _cores(self, results: dict[str, Any]) -> dict[str, Any] | None:
        """The verdict's `cores`: what this run may use, torch's threads, and the cores its
        DataLoader workers kept busy while it trained (None without workers or that sample)."""
        workers = results["resources"].get("workers_cpu_training_percent")
        if not (self.loader.get("dataloader") or {}).get("num_workers") or workers is None:
            return None
        return {
            "cores": self.loader["hints"]["workers"],
            "torch_threads": torch.get_num_threads(),  # as the run ended (ShareCores may have changed them)
            "workers_cores": workers / 100.0,
        }

    def _log(self, trainer, results: dict[str, Any], batches: dict[str, list[float]]) -> None:
        """Scalars through the trainer's own loggers (any kind); TensorBoard also gets the resource
        time series and the jitter histograms."""
        metrics = {}
        for phase, row in results["phases"].items():
            metrics[f"phases/{phase}_s"], metrics[f"phases/{phase}_fraction"] = row["wall_s"], row["fraction"]
        throughput = results.get("throughput") or {}
        metrics["perf/train_samples_per_s"] = results["train"].get("images_per_s")
        metrics["perf/mfu"], metrics["perf/measured_mfu"] = throughput.get("mfu"), throughput.get("measured_mfu")
        metrics = {k: float(v) for k, v in metrics.items() if v is not None}
        for logger in trainer.loggers:
            logger.log_metrics(metrics, step=trainer.global_step)
            if isinstance(logger, TensorBoardLogger):
                log_histograms(logger.experiment, batches, trainer.global_step)
        self.resources.log_series(trainer, self.run_start or 0.0)
        for logger in trainer.loggers:
            logger.save()

    def write(self, results: dict[str, Any]) -> dict[str, Any]:
        """A user's run: results.json and summary.txt (printed too) in `dirpath` or the log dir."""
        trainer = self.trainer
        results = {"dataset": {}, "train": {}, "quality": {}, "notices": [], **results}
        self.record(results)
        if trainer is not None:
            results["quality"] = validation_metrics(trainer)
        if trainer is not None and not trainer.is_global_zero:
            return results
        folder = self.dirpath or Path(trainer.log_dir if trainer is not None and trainer.log_dir else ".")
        folder.mkdir(parents=True, exist_ok=True)
        write_json_atomic(folder / "results.json", results)
        summary = format_run_summary(results)
        write_text_atomic(folder / "summary.txt", summary)
        print(summary, end="")
        print(f"Results: {folder / 'results.json'}")
        return results


def overrides(callback: L.Callback, hook: str) -> bool:
    """Whether `callback` does anything in `hook` (Lightning's base Callback does nothing in any)."""
    return getattr(type(callback), hook) is not getattr(L.Callback, hook)


def _forward(name: str):
    def hook(self: PerfMonitor, *args: Any, **kwargs: Any) -> None:
        methods = self._forwards[name]
        if methods:
            entered = time.perf_counter()
            for method in methods:
                method(*args, **kwargs)
            self.hooks_s += time.perf_counter() - entered

    hook.__name__ = name
    return hook


for _name in FORWARDED_HOOKS:
    setattr(PerfMonitor, _name, _forward(_name))


def train_loader(trainer) -> DataLoader | None:
    """The trainer's training DataLoader: the first of several, and the one inside a wrapper that
    keeps it as `.loader` (segperf's resumable loader); None when there is none."""
    loader = trainer.train_dataloader
    for _ in range(8):  # wrappers in wrappers, not a cycle
        if isinstance(loader, DataLoader):
            return loader
        if isinstance(loader, (list, tuple, dict)) and loader:  # several loaders: the first one's settings
            loader = next(iter(loader.values())) if isinstance(loader, dict) else loader[0]
        elif hasattr(loader, "loader"):
            loader = loader.loader
        else:
            return None
    return None


def loader_settings(trainer) -> dict[str, Any]:
    """The knobs a workload segperf did not configure has, as the verdict reads them: its training
    DataLoader's and its Trainer's settings, and this machine's usable cores as the workers hint."""
    cores = available_cores()
    settings: dict[str, Any] = {
        "trainer": {"precision": str(trainer.precision), "log_every_n_steps": trainer.log_every_n_steps},
        "hints": {"workers": max(1, cores)},
    }
    loader = train_loader(trainer)
    if loader is not None:
        settings["dataloader"] = {
            "num_workers": loader.num_workers,
            "pin_memory": loader.pin_memory,
            "persistent_workers": loader.persistent_workers,
            "batch_size": loader.batch_size,
        }
    return settings


def validation_metrics(trainer) -> dict[str, float]:
    """The run's last validation metrics (names starting with 'val'), as results.json's `quality`."""
    quality = {}
    for name, value in trainer.callback_metrics.items():
        if name.startswith("val") and (not isinstance(value, torch.Tensor) or value.numel() == 1):
            quality[name.replace("/", "_")] = float(value)
    return quality
