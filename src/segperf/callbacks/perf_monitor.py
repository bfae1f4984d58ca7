"""PerfMonitor: segperf's measurement as one callback, for any Lightning Trainer.

It is the set of measuring callbacks, each owning its part as Lightning's ThroughputMonitor and
DeviceStatsMonitor do (set up in `setup`, recording in the batch hooks, writing its own section
at the end): PhaseClock (phases, jitter, the train_step split, the sample rate), ResourceMonitor
(CPU, RSS, GPU), MfuMonitor (FLOPs per sample, MFU) and, under DDP, AllReduceWait (each rank's
backward split into its compute and its wait in the gradient all-reduce). Those parts are
PerfMonitor's own; use them through it.

Under DDP (any strategy that starts several processes) every rank measures itself; at the end
of `fit` every rank sends its row to rank 0 over a process group of PerfMonitor's own with a
bounded timeout, so a rank that is gone cannot leave the others waiting for long; rank 0 alone
writes and logs the summary, once, with one row per rank and the straggler named with its
cause (segperf.perf.ranks).

A monitor never breaks the run it measures: whatever fails inside PerfMonitor (a folder it
cannot write, a model it cannot count FLOPs for, a batch it cannot size, a strategy it does not
know) becomes one warning, and that part of the record says `not_measured`; the user's `fit`
runs its steps and ends as it would have without it.

Output goes through `logging` (logger "segperf"): the summary at INFO, problems at WARNING.
`logging.getLogger("segperf").setLevel(logging.WARNING)` silences the summary.

segperf's own runs use it too (conf/callbacks/default.yaml): there the run's record
(segperf.training.record) writes the files once the run is over (after a last validation,
whatever happened), calling `record(results)` as it does for every callback that has one, and
`span(phase)` times what the recipe does outside the Trainer.
"""

from __future__ import annotations

import logging
import sys
import time
import warnings
from collections import defaultdict
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import lightning as L
import torch
from lightning.pytorch.loggers import TensorBoardLogger
from torch.utils.data import DataLoader

from segperf.callbacks.allreduce_wait import AllReduceWait
from segperf.callbacks.batch_size import BatchSizeFn
from segperf.callbacks.long_run import RunFolder
from segperf.callbacks.mfu_monitor import MfuMonitor
from segperf.callbacks.phase_clock import PhaseClock
from segperf.callbacks.rank_gather import add_ranks, gather_group, gather_rows
from segperf.callbacks.resource_monitor import ResourceMonitor
from segperf.callbacks.validation_metrics import ValidationMetrics, logged_validation_metrics, quality_section
from segperf.config import available_cores
from segperf.perf.folding import distribution_of
from segperf.perf.jitter import jitter_summary, log_histograms
from segperf.perf.machine import machine_info
from segperf.perf.machine_load import load_at_end, load_at_start
from segperf.perf.phases import (
    FETCH_ACTION,
    STEP_ACTION,
    account_phases,
    phase_of_action,
    split_rows,
    split_steps,
    steady_state_batches,
)
from segperf.perf.ranks import rank_row, step_parts
from segperf.perf.results import write_record
from segperf.perf.summary import format_run_summary
from segperf.perf.train_rate import train_section
from segperf.perf.verdict import verdict
from segperf.quality import declared

log = logging.getLogger("segperf")

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
# how long rank 0 waits for the other ranks' rows at the end of fit before it writes its own alone
GATHER_TIMEOUT_S = 120.0


class _Stdout(logging.StreamHandler):
    """A handler on whatever sys.stdout is when it writes (a test's capture, a notebook's cell)."""

    @property
    def stream(self):  # type: ignore[override]
        return sys.stdout

    @stream.setter
    def stream(self, value) -> None:  # StreamHandler.__init__ sets it
        pass


def _console() -> None:
    """segperf's messages reach the console as Lightning's do (lightning.pytorch's __init__): at
    INFO, through a handler of its own unless the application configured logging, in which case
    they propagate to its handlers."""
    if log.level == logging.NOTSET:
        log.setLevel(logging.INFO)
    if not log.handlers and not logging.getLogger().hasHandlers():
        handler = _Stdout()
        handler.setFormatter(logging.Formatter("%(message)s"))
        log.addHandler(handler)
        log.propagate = False


_console()


class PerfMonitor(L.Callback):
    """Where a training run's time goes, for any Lightning Trainer.

    At the end of ``fit`` it writes ``results.json`` and ``summary.txt`` into the trainer's log
    dir (or ``dirpath``) and logs the summary: the phases (data wait, the copy to the device,
    the train step split into forward, backward and optimizer step, validation, checkpoints),
    the per-step jitter and starved steps, CPU/GPU utilization and memory, samples/s, FLOPs per
    sample and MFU, a verdict (data-, host- or compute-bound) and advice as DataLoader and
    Trainer arguments. Under DDP: one row per rank and the straggler with its cause. Every
    ``log_every_n_steps`` it logs ``perf/samples_per_s`` and ``perf/data_wait_fraction`` to the
    trainer's loggers (any kind), and at the end the phase shares, throughput and MFU.

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
        write_files: deprecated; segperf's own runs no longer need it.
    """

    def __init__(
        self,
        dirpath: str | Path | None = None,
        warmup_steps: int = 2,
        batch_size_fn: BatchSizeFn | None = None,
        sample_interval_s: float = 0.05,
        measure: bool = True,
        peak_probe: bool = True,
        write_files: bool | None = None,
    ) -> None:
        if write_files is not None:
            warnings.warn(
                "PerfMonitor(write_files=...) is deprecated: PerfMonitor writes results.json at the end of fit, "
                "and segperf's own runs hand that to their record without it",
                DeprecationWarning,
                stacklevel=2,
            )
        self.dirpath = None if dirpath is None else Path(dirpath)
        self.measure = measure
        # segperf's run record (segperf.training.record) writes the files itself and says so here
        self._writes_files = write_files is not False
        self._settings = (warmup_steps, batch_size_fn, sample_interval_s, peak_probe)
        self._fits = 0
        self._start_measuring()

    def _start_measuring(self) -> None:
        """Fresh parts and state: at construction, and for each further `fit` of the same Trainer
        (each fit is a record of its own)."""
        warmup_steps, batch_size_fn, sample_interval_s, peak_probe = self._settings
        measure = self.measure
        self.clock = PhaseClock(warmup_steps, record_phases=measure, batch_size_fn=batch_size_fn)
        self.resources = ResourceMonitor(sample_interval_s) if measure else None
        self.mfu = MfuMonitor(batch_size_fn, peak_probe) if measure else None
        self.allreduce = AllReduceWait() if measure else None
        self.validations = ValidationMetrics()  # every metric validation logged, one entry per validation
        self.parts: list[L.Callback] = [
            p for p in (self.clock, self.resources, self.mfu, self.allreduce, self.validations) if p is not None
        ]
        self._bind_forwards()
        self.spans: dict[str, list[tuple[float, float]]] = defaultdict(list)
        self.run_start: float | None = None
        self.trainer: L.Trainer | None = None
        self.loader: dict[str, Any] = {}
        self.hooks_s = 0.0  # wall time inside PerfMonitor's own hooks (its parts' included)
        # what failed inside the monitor, per part: said once, recorded, never raised to the run
        self.not_measured: dict[str, str] = {}
        self._folder: Path | None = None
        self._gather_group: Any = None
        self.long_run = RunFolder(self.clock)  # past its first steps, a long run is folded into totals
        # the live scalars' current window: its start (a step's end), samples and data wait so far
        self._live: list[float] = [0.0, 0.0, 0.0]
        # how busy the machine was around the run (results.json's machine_load), for a run whose
        # record nothing else keeps (a user's script); segperf's own record measures its whole run
        self._load_start: tuple[dict[str, Any], Any] | None = None

    def _bind_forwards(self) -> None:
        # per forwarded hook, the parts that implement it, bound once: Lightning calls the per-step
        # ones a few times a step, and most parts have nothing to do in most of them
        self._forwards: dict[str, tuple] = {
            name: tuple((p, getattr(p, name)) for p in self.parts if overrides(p, name)) for name in FORWARDED_HOOKS
        }

    # -- a monitor never breaks the run ---------------------------------------------------------
    def _failed(self, part: str, error: BaseException) -> None:
        """One warning per part, the part marked not measured; the run goes on."""
        if part not in self.not_measured:
            self.not_measured[part] = f"{type(error).__name__}: {error}".strip().rstrip(":")
            log.warning(
                "segperf: PerfMonitor could not measure %s (%s); that part of the record is marked not "
                "measured and training goes on",
                part,
                self.not_measured[part],
            )

    def _drop(self, part: L.Callback, error: BaseException) -> None:
        """A part whose hook failed is taken out of the run (its record would be partial)."""
        self._failed(type(part).__name__, error)
        self.parts = [p for p in self.parts if p is not part]
        self._bind_forwards()

    def _safely(self, part: str, fn, *args, **kwargs) -> Any:
        try:
            return fn(*args, **kwargs)
        except Exception as error:  # noqa: BLE001 - whatever it is, the user's run must not see it
            self._failed(part, error)
            return None

    def _each_part(self, hook: str, *args: Any) -> None:
        for part in list(self.parts):
            try:
                getattr(part, hook)(*args)
            except Exception as error:  # noqa: BLE001
                self._drop(part, error)

    # -- the run around the Trainer -------------------------------------------------------------
    def begin(self) -> None:
        """The run starts: at the first `span` or at `setup`, whichever comes first."""
        if self.run_start is None:
            self.run_start = time.perf_counter()
            self._load_start = self._safely("machine load", load_at_start)
            if self.resources is not None:
                try:
                    self.resources.start()
                except Exception as error:  # noqa: BLE001
                    self._drop(self.resources, error)
                    self.resources = None

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
        if stage == "fit":
            if self._fits:  # a second fit of the same Trainer: a record of its own
                self._start_measuring()
            self._fits += 1
        self.clock.marks.setdefault("fit_called", time.perf_counter())  # before the sampler thread starts
        self.begin()
        self.trainer = trainer
        if stage == "fit":
            # collectives: every rank is here, at the same point (Trainer.log_dir is a broadcast)
            self._folder = self._safely("the output folder", self._resolve_folder, trainer)
            self._gather_group = self._safely("the per-rank gather", gather_group, trainer, GATHER_TIMEOUT_S)
        self._each_part("setup", trainer, pl_module, stage)

    def _resolve_folder(self, trainer) -> Path:
        if self.dirpath is not None:
            return self.dirpath
        return Path(trainer.log_dir or trainer.default_root_dir or ".")

    def on_train_start(self, trainer, pl_module) -> None:
        self.loader = self._safely("the training loader's settings", loader_settings, trainer) or {}
        self._live[:] = [time.perf_counter(), 0.0, 0.0]
        self._each_part("on_train_start", trainer, pl_module)

    def _forward(self, name: str, *args: Any) -> None:
        """Lightning's hook `name` to each part that acts in it (timed as PerfMonitor's own cost);
        a part that fails is dropped."""
        if not self._forwards[name]:
            return
        entered = time.perf_counter()
        for part, method in self._forwards[name]:
            try:
                method(*args)
            except Exception as error:  # noqa: BLE001 - the user's run must not see it
                self._drop(part, error)
        self.hooks_s += time.perf_counter() - entered

    def on_train_batch_start(self, trainer, pl_module, batch, batch_idx: int) -> None:
        self._forward("on_train_batch_start", trainer, pl_module, batch, batch_idx)
        if self.measure and self.long_run.due():
            entered = time.perf_counter()
            resources = self.resources if self.resources in self.parts else None
            allreduce = self.allreduce if self.allreduce in self.parts else None
            fold, start = self.long_run.fold, self.run_start or 0.0
            self._safely("folding a long run", fold, start, self._phase_intervals, resources, allreduce)
            self.hooks_s += time.perf_counter() - entered

    def on_before_backward(self, trainer, pl_module, loss) -> None:
        self._forward("on_before_backward", trainer, pl_module, loss)

    def on_after_backward(self, trainer, pl_module) -> None:
        self._forward("on_after_backward", trainer, pl_module)

    def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx: int) -> None:
        self._forward("on_train_batch_end", trainer, pl_module, outputs, batch, batch_idx)
        clock, live = self.clock, self._live
        if not clock.step_times:
            return
        if clock.steps <= clock.warmup_steps:  # the window opens where warm-up ends
            live[:] = [clock.step_times[-1][1], 0.0, 0.0]
            return
        live[1] += clock.step_images[-1] if clock.step_images else 0
        fetches = clock.tap.intervals.get(FETCH_ACTION) if clock.tap is not None else None
        if fetches:
            live[2] += fetches[-1][1] - fetches[-1][0]
        every = trainer.log_every_n_steps
        if every and clock.steps % every == 0:
            entered = time.perf_counter()
            self._safely("the live scalars", self._log_live, trainer)
            self.hooks_s += time.perf_counter() - entered

    def on_train_end(self, trainer, pl_module) -> None:
        self._forward("on_train_end", trainer, pl_module)

    def on_validation_start(self, trainer, pl_module) -> None:
        self._forward("on_validation_start", trainer, pl_module)

    def on_validation_batch_start(self, trainer, pl_module, batch, batch_idx: int, dataloader_idx: int = 0) -> None:
        self._forward("on_validation_batch_start", trainer, pl_module, batch, batch_idx, dataloader_idx)

    def on_validation_batch_end(
        self, trainer, pl_module, outputs, batch, batch_idx: int, dataloader_idx: int = 0
    ) -> None:
        self._forward("on_validation_batch_end", trainer, pl_module, outputs, batch, batch_idx, dataloader_idx)

    def on_validation_end(self, trainer, pl_module) -> None:
        validations = len(self.clock.validation)
        self._forward("on_validation_end", trainer, pl_module)
        if self._live[0] and len(self.clock.validation) > validations:  # the live window leaves it out
            start, end = self.clock.validation[-1]
            self._live[0] += end - start

    def teardown(self, trainer, pl_module, stage: str) -> None:
        self._each_part("teardown", trainer, pl_module, stage)
        if stage != "fit" or not self._writes_files:
            return
        results = self._safely("the record", self._measure, {"status": "completed"})
        if results is None:
            results = {"status": "completed", "not_measured": dict(self.not_measured)}
        # every rank joins the gather, whatever failed on it before
        self._safely("the per-rank gather", self.gather, trainer, results)
        if trainer.is_global_zero:
            self._safely("the summary", self._publish, results)

    def on_exception(self, trainer, pl_module, exception: BaseException) -> None:
        """The run failed: its record says so, on rank 0 (no collective: another rank may be gone)."""
        self._each_part("on_exception", trainer, pl_module, exception)
        if not self._writes_files:
            return
        interrupted = isinstance(exception, KeyboardInterrupt)
        status = {
            "status": "interrupted" if interrupted else "failed",
            "error": f"{type(exception).__name__}: {exception}".strip().rstrip(":"),
        }
        results = self._safely("the record", self._measure, status) or status
        if trainer.is_global_zero:
            self._safely("the summary", self._publish, results)

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
        clock, trainer = self.clock, self.trainer
        results.setdefault("notices", [])
        if "machine_load" not in results and self._load_start is not None:
            results["machine_load"] = self._safely("machine load", load_at_end, *self._load_start)
        results["machine"] = self._safely("the machine", machine_info) or {}  # the report refuses to mix machines
        if trainer is not None:
            results.setdefault("device", str(trainer.strategy.root_device))
            results.setdefault("precision", str(trainer.precision))
        results.setdefault("torch_threads", torch.get_num_threads())
        if not self.measure:
            results["train"] = train_section(clock, sum(e - s for s, e in clock.validation), run)
            results["measurement"] = "off"
            self._not_measured(results)
            return
        actions = clock.intervals()
        table = self._phase_table(actions, run)
        results["phases"] = table.phases
        if "train_step" in table.phases:
            folded = self.long_run.folded
            split = split_steps(actions.get(STEP_ACTION, []), clock.backward, clock.warmup_steps)
            for part, seconds in folded.split_s.items():
                split["seconds"][part] += seconds
            split["steps"] += folded.split_steps
            split["unsplit_s"] += folded.unsplit_s
            if split["steps"]:
                table.phases["train_step"]["split"] = split_rows(split, table.wall_s)
            device_split = self._safely("the device split", clock.device_split, clock.warmup_steps)
            if device_split:
                for part, seconds in folded.device_split_s.items():
                    device_split[part] = device_split.get(part, 0.0) + seconds
                table.phases["train_step"]["device_split_s"] = device_split
        if self.long_run.folded.steps:
            results["folded"] = {
                "steps": self.long_run.folded.steps,
                "held_from_start": self.long_run.head,
                "how": "steps past the first held ones are folded into totals every few thousand steps: phases, "
                "split and means exact, the jitter quantiles from a histogram of 0.5% bins",
            }
        results["accounted"] = {
            "wall_s": table.accounted_s,
            "fraction": table.accounted_fraction,
            "run_wall_s": table.wall_s,
        }
        results["train"] = train_section(clock, table.phases.get("validation", {}).get("wall_s", 0.0), run)
        device = trainer.strategy.root_device if trainer is not None else torch.device("cpu")
        results.setdefault("resources", {})
        if self.resources is not None:
            self._safely("resources", self.resources.record, results, table.windows, device)
        batches = steady_state_batches(actions, clock.warmup_steps)
        results["jitter"] = self._jitter(actions, batches)
        if trainer is not None and self.mfu in self.parts:
            self._safely("FLOPs and MFU", self.mfu.record, results, trainer)
        if self.allreduce is not None and self.allreduce.state != "not started":
            results["allreduce_timing"] = self.allreduce.state
        results["verdict"] = self._safely("the verdict", self._verdict, results, device) or {
            "kind": "unknown",
            "text": "not measured",
        }
        results["measurement_cost"] = self._cost(table.wall_s)
        if trainer is not None and trainer.is_global_zero:
            self._safely("the logger scalars", self._log, trainer, results, batches)
        self._not_measured(results)

    def _not_measured(self, results: dict[str, Any]) -> None:
        if self.not_measured:
            results["not_measured"] = dict(self.not_measured)

    def step_parts(self) -> dict[str, Any]:
        """This rank's per-step parts after warm-up (segperf.perf.ranks.step_parts)."""
        clock = self.clock
        fetches = clock.intervals().get(FETCH_ACTION, [])
        waits = [end - start for start, end in fetches]
        last_bucket = self.allreduce.last_bucket if self.allreduce is not None else None
        folded = self.long_run.folded.parts
        return step_parts(waits, clock.step_times, clock.backward, last_bucket, clock.warmup_steps, folded)

    def _measure(self, results: dict[str, Any]) -> dict[str, Any]:
        results = {"dataset": {}, "train": {}, "quality": {}, "notices": [], **results}
        self.record(results)
        if self.trainer is not None:
            results["quality"] = self._quality(self.trainer)
        return results

    def _quality(self, trainer) -> dict[str, Any]:
        """results.json's `quality`: every validation's logged metrics, judged by the one the
        module declares (segperf.quality), else by the default rule; after a fit whose
        validations were not seen (none ran), what the trainer holds from validation."""
        history = self.validations.history if self.validations in self.parts else []
        if not history:
            last = logged_validation_metrics(trainer)
            history = [{"step": int(trainer.global_step), **last}] if last else []
        return quality_section(history, declared(trainer.lightning_module))

    def gather(self, trainer, results: dict[str, Any]) -> None:
        """Every rank's row to rank 0 (`results["distributed"]` there). A collective: every rank
        calls it once, at the end of fit (or, in segperf's own runs, the run's record after its
        last validation); a rank that is gone costs the others GATHER_TIMEOUT_S at most, and rank
        0 then writes its own record and says so."""
        if self._gather_group is None or trainer.world_size < 2:
            return
        try:
            parts = self.step_parts() if self.measure else {}
            row = rank_row(results, trainer, parts)
        except Exception as error:  # noqa: BLE001 - still join the collective, with an empty row
            self._failed("this rank's row", error)
            row = {"rank": trainer.global_rank, "status": "not measured", "images": 0, "steps": 0}
            row["images_per_s"] = row["ready_mean_s"] = None
        rows = gather_rows(row, trainer.world_size, self._gather_group)
        if trainer.is_global_zero:
            add_ranks(results, rows, trainer)

    def _publish(self, results: dict[str, Any]) -> None:
        """Rank 0: results.json and summary.txt in the folder, the summary logged. A folder that
        cannot be written costs one warning; the summary is still logged."""
        summary = format_run_summary(results)
        folder = self._folder or self._resolve_folder(self.trainer)
        try:
            write_record(folder, results, summary)
        except Exception as error:  # noqa: BLE001 - a full disk, a read-only or foreign folder
            log.info("%s", summary.rstrip("\n"))
            log.warning(
                "segperf: PerfMonitor could not write results.json to %s (%s); training was not affected. "
                "Pass PerfMonitor(dirpath=...) a folder you can write.",
                folder,
                error,
            )
            return
        log.info("%s", summary.rstrip("\n"))
        log.info("Results: %s", folder / "results.json")

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
        sampler = self.resources.sampler if self.resources is not None else None
        sampler_s = sampler.thread_cpu_s if sampler is not None else 0.0
        spent = self.hooks_s + tap_s + sampler_s
        return {
            "hooks_s": self.hooks_s,
            "tap_s": tap_s,
            "sampler_cpu_s": sampler_s,
            "fraction": spent / run_s if run_s > 0 else None,
        }

    def _phase_table(self, actions: dict[str, list], run: tuple[float, float]):
        """The phase table of the run: what is held, laid on the timeline after the folded part,
        and the folded part's totals (segperf.perf.folding)."""
        folded = self.long_run.folded
        intervals = self._phase_intervals(actions, run)
        calls = {phase: folded.phase_calls.get(phase, 0) + len(spans) for phase, spans in intervals.items()}
        calls |= self._calls()
        if folded.until is None:
            return account_phases(intervals, run, calls)
        table = account_phases(intervals, (folded.until, run[1]), calls)
        table.wall_s = wall = run[1] - run[0]
        for phase, seconds in folded.phase_s.items():
            row = table.phases.setdefault(phase, {"calls": calls.get(phase, 0), "wall_s": 0.0, "fraction": 0.0})
            row["wall_s"] += seconds
        for row in table.phases.values():
            row["fraction"] = row["wall_s"] / wall if wall > 0 else 0.0
        return table

    def _calls(self) -> dict[str, int]:
        clock = self.clock
        steps = clock.steps
        return {"warmup": min(steps, clock.warmup_steps), "validation": len(clock.validation), "framework": steps}

    def _jitter(self, actions: dict[str, list], batches: dict[str, list[float]]) -> dict[str, Any]:
        clock = self.clock
        folded = self.long_run.folded
        if folded.steps:  # a long run: the folded steps' histograms with the held steps' values
            jitter = {
                "data_wait": distribution_of(folded.wait, batches["data_wait"]),
                "train_step": distribution_of(folded.step, batches["train_step"]),
                "starved": folded.starved(batches["data_wait"], batches["train_step"]),
            }
        else:
            jitter = jitter_summary(batches["data_wait"], batches["train_step"])
        every = steady_state_batches(actions, 0)  # every batch held, warm-up included, for later analysis
        jitter["per_batch"] = {
            "warmup_steps": clock.warmup_steps,
            "data_wait_s": [round(x, 6) for x in every["data_wait"]],
            "train_step_s": [round(x, 6) for x in every["train_step"]],
            "forward_s": [round(x, 6) for x in clock.forward_s],
        }
        if folded.steps:  # the lists hold the first steps and the last ones
            jitter["per_batch"]["folded_after"] = self.long_run.head
            jitter["per_batch"]["folded_steps"] = folded.steps
        device_steps = self._safely("device step times", clock.device_step_times) or []
        device_steps = device_steps[clock.warmup_steps :]
        if device_steps or folded.device_step.n:
            jitter["device_step"] = distribution_of(folded.device_step, device_steps)
            if not folded.device_step.n:
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

    def _log_live(self, trainer) -> None:
        """Every `log_every_n_steps` after warm-up: samples/s and the data-wait share over the
        steps since the last time, to the trainer's loggers (rank 0's; Lightning's loggers
        write on rank 0 only)."""
        live = self._live
        start, end = live[0], self.clock.step_times[-1][1]
        if end > start:
            metrics = {"perf/samples_per_s": live[1] / (end - start)}
            if self.clock.tap is not None:
                metrics["perf/data_wait_fraction"] = live[2] / (end - start)
            for logger in trainer.loggers:
                logger.log_metrics(metrics, step=trainer.global_step)
        live[:] = [end, 0.0, 0.0]

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
        if self.resources is not None:
            self.resources.log_series(trainer, self.run_start or 0.0)
        for logger in trainer.loggers:
            logger.save()


def overrides(callback: L.Callback, hook: str) -> bool:
    """Whether `callback` does anything in `hook` (Lightning's base Callback does nothing in any)."""
    return getattr(type(callback), hook) is not getattr(L.Callback, hook)


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
