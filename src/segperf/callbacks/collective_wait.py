"""CollectiveWait: per training step, how long this rank waited for the others wherever the
ranks met (DDP's buffer broadcast, SyncBatchNorm, a `sync_dist` log, a barrier), by phase.

Why by hand: neither Lightning nor torch times it, and the meetings depend on the user's net
(BatchNorm buffers, SyncBatchNorm) and code (`self.log(..., sync_dist=True)`). For the training
loop of a fit (train start to train end, validations included) this callback times every
blocking collective torch.distributed runs on the training thread (segperf.perf.collectives
says how, and how on CUDA) and files each under the phase the loop is in, from Lightning's hooks:
`forward` (batch start to the first backward: DDP's forward and the training step), `backward`,
`optimizer` (the backward's end to the batch end), `fetch` (inside the training loader's fetch:
a collective there, in a user's dataset or sampler, would otherwise read as data wait), `between`
(the rest of a batch's end to the next one's start: Lightning's per-step SIGTERM broadcast, the
callbacks at the step's edges), and outside the steps `validation`. Each is also filed by where it
sits in the phase table (the profiler tap's open action: segperf.perf.meetings.TABLE_WAITS), so that
the verdict takes it out of the phase that holds it: a barrier in a callback's on_train_batch_start
sits in the framework's time, not the forward's.
The gradient all-reduce is not among them: DDP runs it asynchronously (`async_op=True`), and its
wait is timed by segperf.callbacks.allreduce_wait's communication hook.

Left alone, said in `state`: a single process, torch.distributed not initialized. The functions
are the module's own again at train end, at teardown and when the fit fails.

Example (PerfMonitor holds one; on its own it only collects)::

    waits = CollectiveWait()
    trainer = L.Trainer(strategy="ddp", devices=2, callbacks=[waits])
    trainer.fit(model, loader)
    waits.steps[-1].waits   # {"forward": 0.237, ...}: seconds waited, by phase, in the last step
"""

from __future__ import annotations

from collections import Counter
from typing import Any

import lightning as L
import torch

from segperf.perf.collectives import CollectiveTimer, cuda_events, device_seconds
from segperf.perf.meetings import SPLIT_OF, StepWaits, add_waits


class CollectiveWait(L.Callback):
    def __init__(self, events=None) -> None:
        self.steps: list[StepWaits] = []  # per training step, as PhaseClock's step_times
        self.outside = StepWaits()  # waits outside the steps: validation, the loop's own edges
        self.calls: Counter[str] = Counter()  # blocking collectives timed, by name
        self.state = "not started"
        self._events = events  # a factory of (start, end) device events; CUDA's on a CUDA device
        self._timer: CollectiveTimer | None = None
        self._phase = "outside"
        self._current = StepWaits()
        self._pending: list[tuple[StepWaits, str, Any]] = []  # device waits not yet complete
        self._tap: Any = None  # the trainer's profiler tap: which phase-table action is open

    # -- the fit's training loop ----------------------------------------------------------------
    def on_train_start(self, trainer, pl_module) -> None:
        dist = torch.distributed
        if trainer.world_size < 2 or not (dist.is_available() and dist.is_initialized()):
            self.state = "not measured: a single process (no ranks to wait for)"
            return
        events = self._events
        if events is None and trainer.strategy.root_device.type == "cuda":
            events = cuda_events  # NCCL returns before the collective is done: time it on the stream
        profiler = getattr(trainer, "profiler", None)
        self._tap = profiler if hasattr(profiler, "open_phase") else None  # PhaseClock's PhaseTap
        self._timer = CollectiveTimer(self._waited, events)
        self._timer.install()
        self._phase = "between"
        self.state = "measured on the device (CUDA events)" if events is not None else "measured"

    def _restore(self) -> None:
        if self._timer is not None:
            self._timer.uninstall()
            self._timer = None
        self._phase = "outside"

    def on_train_end(self, trainer, pl_module) -> None:
        self._restore()

    def teardown(self, trainer, pl_module, stage: str) -> None:
        self._restore()

    def on_exception(self, trainer, pl_module, exception: BaseException) -> None:
        self._restore()

    # -- where the loop is ----------------------------------------------------------------------
    def on_train_batch_start(self, trainer, pl_module, batch, batch_idx: int) -> None:
        self._phase = "forward"

    def on_before_backward(self, trainer, pl_module, loss) -> None:
        if self._phase == "forward":  # the first backward of the step (several under manual optimization)
            self._phase = "backward"

    def on_after_backward(self, trainer, pl_module) -> None:
        if self._phase in ("backward", "optimizer"):
            self._phase = "optimizer"

    def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx: int) -> None:
        self.steps.append(self._current)
        self._current = StepWaits()  # the next step's: its `between` starts now
        self._phase = "between" if self._timer is not None else "outside"
        self._resolve(block=False)

    def on_validation_start(self, trainer, pl_module) -> None:
        if self._timer is not None:
            self._phase = "validation"

    def on_validation_end(self, trainer, pl_module) -> None:
        if self._timer is not None:
            self._phase = "between"

    # -- each collective ------------------------------------------------------------------------
    def _waited(self, name: str, host_s: float, device: Any) -> None:
        phase, where = self._phase, None
        if self._tap is not None:
            within = self._tap.open_phase()  # None: the loop's own time between the profiled actions
            if within == "data_wait" and phase == "between":
                phase = "fetch"
            where = (SPLIT_OF.get(phase) if within == "train_step" else within) or "framework"
        target = self._current if phase in ("between", "fetch", *SPLIT_OF) else self.outside
        self.calls[name] += 1
        target.add(phase, host_s, None if device is not None else host_s, where)
        if device is not None:
            self._pending.append((target, phase, device))

    def _resolve(self, block: bool) -> None:
        """Device waits into their steps as their events complete (in order: one stream)."""
        done = 0
        for target, phase, pair in self._pending:
            seconds = device_seconds(pair, block)
            if seconds is None:
                break
            target.add(phase, 0.0, seconds)
            done += 1
        del self._pending[:done]

    # -- read at the end ------------------------------------------------------------------------
    def per_step(self) -> list[StepWaits]:
        """Every held step's waits, the device's read (once, waiting for them: the fit is over)."""
        self._resolve(block=True)
        return self.steps

    def fold(self, head: int, upto: int) -> list[StepWaits]:
        """Take the held steps [head, upto) out (segperf.perf.folding), returning them."""
        self._resolve(block=False)
        taken = self.steps[head:upto]
        del self.steps[head:upto]
        return taken

    def record(self, results: dict[str, Any]) -> None:
        """results.json's `collective_wait`: how it was measured, which collectives ran, and the
        waits outside the training steps (each step's go to the rank's row)."""
        self._resolve(block=True)
        results["collective_wait"] = {
            "state": self.state,
            "calls": dict(self.calls),
            "outside_steps_s": dict(self.outside.waits),
        }


def record_waits(results: dict[str, Any], collectives: CollectiveWait, step_parts) -> None:
    """Where the ranks met (`collective_wait`) and this rank's waits in its phase table for the
    verdict (segperf.perf.meetings.add_waits); nothing for a single process."""
    if not collectives.state.startswith("measured"):
        return
    collectives.record(results)
    add_waits(results, step_parts())
