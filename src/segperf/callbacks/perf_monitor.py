"""PerfMonitor: segperf's measurement as one callback, for any Lightning Trainer.

A set of measuring parts, each a callback owning one concern as Lightning's ThroughputMonitor and
DeviceStatsMonitor do: PhaseClock (phases, jitter, the train_step split, the sample rate),
ResourceMonitor (CPU, RSS, GPU), MfuMonitor (FLOPs, MFU), under DDP AllReduceWait (each rank's wait
in the gradient all-reduce) and CollectiveWait (its waits wherever else the ranks meet: DDP's buffer
broadcast, sync_dist, barriers), ValidationMetrics and PerfScalars (the loggers' scalars). One rule
passes Lightning's hooks on to them and keeps a failing part from the run (segperf.callbacks.parts);
the record is assembled without Lightning (segperf.perf.fit_record). Under DDP every rank measures
itself and sends its row to rank 0 at the end of `fit`, over a group of its own with a bounded
timeout; rank 0 alone writes and logs the summary, the straggler named with its cause.

Output goes through `logging` (logger "segperf"): the summary at INFO, problems at WARNING.
`logging.getLogger("segperf").setLevel(logging.WARNING)` silences the summary.
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

from segperf.callbacks.allreduce_wait import AllReduceWait
from segperf.callbacks.batch_size import BatchSizeFn
from segperf.callbacks.collective_wait import CollectiveWait, record_waits
from segperf.callbacks.console import show_on_console
from segperf.callbacks.loader_settings import loader_settings
from segperf.callbacks.long_run import RunFolder
from segperf.callbacks.memory_watch import MemoryWatch
from segperf.callbacks.mfu_monitor import MfuMonitor
from segperf.callbacks.parts import Parts
from segperf.callbacks.perf_scalars import PerfScalars
from segperf.callbacks.phase_clock import PhaseClock
from segperf.callbacks.rank_gather import gather_group, gather_ranks
from segperf.callbacks.resource_monitor import ResourceMonitor
from segperf.callbacks.validation_metrics import ValidationMetrics, fit_quality
from segperf.perf import fit_record
from segperf.perf.machine import machine_info
from segperf.perf.machine_load import load_at_end, load_at_start
from segperf.perf.phases import steady_state_batches
from segperf.perf.train_rate import train_section

# Lightning's hooks PerfMonitor only passes on to its parts
PASSED_ON = (
    "on_before_backward on_after_backward on_train_batch_end on_train_epoch_start on_train_end "
    "on_validation_start on_validation_batch_start on_validation_batch_end on_validation_end"
).split()
# how long rank 0 waits for the other ranks' rows at the end of fit before it writes its own alone
GATHER_TIMEOUT_S = 120.0


class PerfMonitor(L.Callback):
    """Where a training run's time goes, for any Lightning Trainer.

    At the end of ``fit`` it writes ``results.json`` and ``summary.txt`` into the trainer's log
    dir (or ``dirpath``) and logs the summary: the phases (data wait, the copy to the device,
    the train step split into forward, backward and optimizer step, validation, checkpoints),
    jitter and starved steps, CPU/GPU utilization and memory, samples/s, MFU, a verdict (data-,
    host- or compute-bound) with advice as DataLoader and Trainer arguments; under DDP one row
    per rank and the straggler with its cause. Live scalars go to the trainer's loggers.

    Example::

        import lightning as L
        from segperf import PerfMonitor

        trainer = L.Trainer(max_epochs=1, callbacks=[PerfMonitor()])
        trainer.fit(model, datamodule)   # the summary is logged; results.json in trainer.log_dir

    Args:
        dirpath: where results.json and summary.txt go; default the trainer's log dir.
        warmup_steps: the first training steps (compilation, caches), kept out of throughput.
        batch_size_fn: samples in a batch; default the leading dimension of its first tensor.
        sample_interval_s: resource sampling period (CPU, RSS, GPU utilization and memory).
        measure: False keeps only the sample rate (a few host timestamps per batch), to
            measure what measuring costs side by side.
        peak_probe: MFU also against this machine's measured peak (~1 s once, then cached).
    """

    def __init__(
        self,
        dirpath: str | Path | None = None,
        warmup_steps: int = 2,
        batch_size_fn: BatchSizeFn | None = None,
        sample_interval_s: float = 0.05,
        measure: bool = True,
        peak_probe: bool = True,
    ) -> None:
        self.dirpath = None if dirpath is None else Path(dirpath)
        self.measure = measure
        self.writes_files = True
        self._settings = (warmup_steps, batch_size_fn, sample_interval_s, peak_probe)
        self._fits = 0
        self._start_measuring()

    def hand_files_over(self) -> None:
        """The caller writes results.json and summary.txt, calling `record(results)` and (every rank)
        `gather(trainer, results)` when its run is over (segperf.training.record does)."""
        self.writes_files = False

    def _start_measuring(self) -> None:
        """Fresh parts and state: at construction, and for each further `fit` of the same Trainer
        (each fit is a record of its own)."""
        warmup_steps, batch_size_fn, sample_interval_s, peak_probe = self._settings
        measure = self.measure
        self.clock = PhaseClock(warmup_steps, record_phases=measure, batch_size_fn=batch_size_fn)
        self.resources = ResourceMonitor(sample_interval_s) if measure else None
        self.mfu = MfuMonitor(batch_size_fn, peak_probe) if measure else None
        self.allreduce = AllReduceWait() if measure else None
        self.collectives = CollectiveWait() if measure else None  # waits where the ranks meet in a step
        self.memory = MemoryWatch(warmup_steps=max(10, warmup_steps)) if measure else None  # creep, while it runs
        self.validations = ValidationMetrics()  # every metric validation logged, one entry per validation
        self.scalars = PerfScalars(self.clock)
        parts = (self.clock, self.resources, self.mfu, self.allreduce, self.collectives, self.memory)
        parts += (self.validations, self.scalars)
        self.parts = Parts([p for p in parts if p is not None])
        self.spans: dict[str, list[tuple[float, float]]] = defaultdict(list)
        self.run_start: float | None = None
        self.trainer: L.Trainer | None = None
        self.loader: dict[str, Any] = {}  # the training DataLoader's and the Trainer's settings
        self._folder, self._gather_group = None, None  # the output folder and the rows' process group (setup)
        self.long_run = RunFolder(self.clock)  # past its first steps, a long run is folded into totals
        self._load_start: tuple[dict[str, Any], Any] | None = None  # the machine's load (a user's script)

    # -- the run around the Trainer -------------------------------------------------------------
    def begin(self) -> None:
        """The run starts: at the first `span` or at `setup`, whichever comes first."""
        if self.run_start is None:
            self.run_start = time.perf_counter()
            self._load_start = self.parts.safely("machine load", load_at_start)
            if self.parts.get(self.resources) is not None:
                self.parts.guarded(self.resources, self.resources.start)

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

    # -- Lightning's hooks, passed on to the parts ----------------------------------------------
    def setup(self, trainer, pl_module, stage: str) -> None:
        if stage != "fit" and self.run_start is None:
            return  # a test/validate/predict with no fit (an eval script, a spawned test): nothing to measure
        show_on_console()  # here, not at construction: under ddp_spawn each rank gets a pickled copy
        if stage == "fit":
            if self._fits:  # a second fit of the same Trainer: a record of its own
                self._start_measuring()
            self._fits += 1
        self.clock.marks.setdefault("fit_called", time.perf_counter())  # before the sampler thread starts
        self.begin()
        self.trainer = trainer
        if stage == "fit":
            # collectives: every rank is here, at the same point (Trainer.log_dir is a broadcast)
            self._folder = self.parts.safely("the output folder", self._resolve_folder, trainer)
            self._gather_group = self.parts.safely("the per-rank gather", gather_group, trainer, GATHER_TIMEOUT_S)
        self.parts.call("setup", trainer, pl_module, stage)

    def _resolve_folder(self, trainer) -> Path:
        return self.dirpath or Path(trainer.log_dir or trainer.default_root_dir or ".")

    def _phase_intervals(self, actions: dict[str, list], run: tuple[float, float]) -> dict[str, list]:
        return fit_record.phase_intervals(self.clock, self.spans, actions, run)

    def on_train_start(self, trainer, pl_module) -> None:
        self.loader = self.parts.safely("the training loader's settings", loader_settings, trainer) or {}
        self.parts.call("on_train_start", trainer, pl_module)

    def on_train_batch_start(self, trainer, pl_module, batch, batch_idx: int) -> None:
        self.parts.call("on_train_batch_start", trainer, pl_module, batch, batch_idx)
        if self.measure and self.long_run.due():
            entered, parts = time.perf_counter(), self.parts
            fold, start = self.long_run.fold, self.run_start or 0.0
            measured = (parts.get(p) for p in (self.resources, self.allreduce, self.collectives))
            parts.safely("folding a long run", fold, start, self._phase_intervals, *measured)
            parts.hooks_s += time.perf_counter() - entered

    def teardown(self, trainer, pl_module, stage: str) -> None:
        self.parts.call("teardown", trainer, pl_module, stage)
        if stage == "fit":
            self._finish(trainer, {"status": "completed"})

    def on_exception(self, trainer, pl_module, exception: BaseException) -> None:
        """The run failed: its record says so, on rank 0 (no collective: another rank may be gone)."""
        self.parts.call("on_exception", trainer, pl_module, exception)
        if trainer.state.fn != "fit":
            return  # a test/validate/predict failed: the fit's record, if any, was written at its end
        interrupted = isinstance(exception, KeyboardInterrupt)
        error = f"{type(exception).__name__}: {exception}".strip().rstrip(":")
        self._finish(trainer, {"status": "interrupted" if interrupted else "failed", "error": error})

    def _finish(self, trainer, status: dict[str, str]) -> None:
        """The record of a fit that ended, written by rank 0 unless the files were handed over; at a
        completed fit's end every rank joins the gather of the rows, whatever failed on it before."""
        if not self.writes_files:
            return
        results = self.parts.safely("the record", self._measure, dict(status))
        results = results or {**status, "not_measured": dict(self.parts.not_measured)}
        if status["status"] == "completed":
            self.parts.safely("the per-rank gather", self.gather, trainer, results)
        if trainer.is_global_zero:
            folder = self._folder or self._resolve_folder(trainer)
            self.parts.safely("the summary", fit_record.publish, folder, results)

    # -- the end of the run ---------------------------------------------------------------------
    def record(self, results: dict[str, Any]) -> None:
        """Fill `machine`, `train`, `phases`, `accounted`, `resources`, `jitter`, `throughput`,
        `verdict` and `not_measured`. Safe after a failure: sections whose inputs never came into
        being stay small, and a section that cannot be measured is named in `not_measured`."""
        # the run ends with its last measured part: the fit's return or the last span after it, not
        # here (stopping the sampler thread, which can wait out an interval, is not the run's time)
        ends = [e for spans in self.spans.values() for _, e in spans] + [self.clock.marks.get("fit_returned")]
        end = max((t for t in ends if t is not None), default=time.perf_counter())
        run = (self.run_start or end, end)
        clock, trainer, parts, safely = self.clock, self.trainer, self.parts, self.parts.safely
        if "machine_load" not in results and self._load_start is not None:
            results["machine_load"] = safely("machine load", load_at_end, *self._load_start)
        results["machine"] = safely("the machine", machine_info) or {}  # the report refuses to mix machines
        device = trainer.strategy.root_device if trainer is not None else torch.device("cpu")
        threads = torch.get_num_threads()  # as the run ended (ShareCores may have changed them)
        fit_record.add_settings(results, trainer and device, trainer and trainer.precision, threads)  # notices too
        if not self.measure:
            results["train"] = train_section(clock, sum(e - s for s, e in clock.validation), run)
            results["measurement"] = "off"
            return results.update(self._not_measured())
        actions = clock.intervals()
        device_split = safely("the device split", clock.device_split, clock.warmup_steps)
        table = fit_record.fill_timing(results, clock, self.spans, self.long_run, actions, run, device_split)
        results.setdefault("resources", {})
        if parts.get(self.resources) is not None:
            safely("resources", self.resources.record, results, table.windows, device)
        batches = steady_state_batches(actions, clock.warmup_steps)
        device_steps = safely("device step times", clock.device_step_times) or []
        results["jitter"] = fit_record.jitter_section(clock, self.long_run, actions, batches, device_steps)
        if trainer is not None and parts.get(self.mfu) is not None:
            safely("FLOPs and MFU", self.mfu.record, results, trainer)
        if self.allreduce is not None and self.allreduce.state != "not started":
            results["allreduce_timing"] = self.allreduce.state
        if parts.get(self.collectives) is not None:  # before the verdict: it reads a wait as waiting
            safely("the waits where the ranks meet", record_waits, results, self.collectives, self.step_parts)
        results["verdict"] = safely("the verdict", fit_record.run_verdict, results, device.type, self.loader, threads)
        results["verdict"] = results["verdict"] or {"kind": "unknown", "text": "not measured"}
        if parts.get(self.memory) is not None:  # after the verdict, which it adds to; before the rows are gathered
            safely("memory", self.memory.record, results)
        sampler = self.resources.sampler if self.resources is not None else None
        results["measurement_cost"] = fit_record.measurement_cost(parts.hooks_s, clock.tap, sampler, table.wall_s)
        if trainer is not None and trainer.is_global_zero and parts.get(self.scalars) is not None:
            resources = parts.get(self.resources)
            safely("the logger scalars", self.scalars.log_run, trainer, results, batches, resources, run[0])
        results.update(self._not_measured())

    def _not_measured(self) -> dict[str, Any]:
        return {"not_measured": dict(self.parts.not_measured)} if self.parts.not_measured else {}

    def step_parts(self) -> dict[str, Any]:
        """This rank's per-step parts after warm-up, held and folded (segperf.perf.ranks.step_parts)."""
        return self.long_run.step_parts(self.allreduce, self.parts.get(self.collectives))

    def _measure(self, results: dict[str, Any]) -> dict[str, Any]:
        results = {"dataset": {}, "train": {}, "quality": {}, "notices": [], **results}
        self.record(results)
        if self.trainer is not None:
            results["quality"] = fit_quality(self.trainer, self.parts.get(self.validations))
        return results

    def gather(self, trainer, results: dict[str, Any]) -> None:
        """Every rank's row to rank 0 (`results["distributed"]` there). A collective: every rank
        calls it once, at the end of fit (or, in segperf's own runs, the run's record after its
        last validation); a rank that is gone costs the others GATHER_TIMEOUT_S at most, and rank
        0 then writes its own record and says so."""
        if self._gather_group is not None and trainer.world_size > 1:
            step_parts = self.step_parts if self.measure else dict
            gather_ranks(trainer, results, self._gather_group, step_parts, self.parts.failed)
            self._gather_group = None  # gather_ranks shut it down: one gather a fit


def _passed_on(hook: str):
    def pass_on(self: PerfMonitor, *args: Any) -> None:
        self.parts.call(hook, *args)

    pass_on.__name__ = pass_on.__qualname__ = hook
    pass_on.__doc__ = f"Lightning's `{hook}`, to the parts that act in it."
    return pass_on


for _hook in PASSED_ON:
    setattr(PerfMonitor, _hook, _passed_on(_hook))
