"""When each profiled action ran, whatever profiler the Trainer has.

Lightning's loops announce every phase of a run to `trainer.profiler` (`train_dataloader_next`,
`batch_to_device`, `run_training_batch`, `save_checkpoint`, callback hooks), and read that
attribute at every call. `PhaseTap` stands in for the trainer's profiler during `fit`: it passes
every call on to the one the user chose (SimpleProfiler, AdvancedProfiler, PyTorchProfiler, or
Lightning's do-nothing default) and keeps the (start, end) of the actions segperf turns into
phases. So PerfMonitor needs no profiler of its own and takes none away from the user: the one
profiler slot a Trainer has stays theirs, with its report written as before.

Logger calls are not profiled by Lightning; `time_loggers` wraps each logger's `log_metrics` for
the fit, so that writing metrics shows up as the `logging` phase with any logger.
"""

from __future__ import annotations

import time
from collections import defaultdict
from contextlib import nullcontext
from typing import Any

from lightning.pytorch.profilers import PassThroughProfiler, Profiler

from segperf.perf.phase_names import PHASES
from segperf.perf.phases import Interval, phase_of_action

LOG_ACTION = "segperf.log_metrics"


class PhaseTap(Profiler):
    def __init__(self, inner: Profiler) -> None:
        super().__init__()
        self.inner = inner
        self.intervals: dict[str, list[Interval]] = defaultdict(list)
        self._open: dict[str, float] = {}
        self._is_phase: dict[str, bool] = {}  # action -> phase_of_action is not None, looked up once
        self.own_s = 0.0  # the tap's own bookkeeping, not the inner profiler's: what measuring costs
        self._actions: dict[str, _Action | nullcontext] = {}

    @classmethod
    def install(cls, trainer) -> PhaseTap:
        tap = cls(trainer.profiler)
        trainer.profiler = tap
        return tap

    def uninstall(self, trainer) -> None:
        if trainer.profiler is self:
            trainer.profiler = self.inner

    def profile(self, action_name: str) -> _Action | nullcontext:
        """`with trainer.profiler.profile(name)`, which Lightning's loops open ~60 times a step (every
        callback's every hook), for ~3 actions segperf times: a plain context manager, made once per
        action, in place of the base Profiler's generator-based one. An action no phase reads goes
        straight to the user's profiler, or to nothing under Lightning's do-nothing default: on a
        1 ms step those ~60 empty hooks' bookkeeping was a tenth of the step."""
        action = self._actions.get(action_name)
        if action is None:
            action = self._actions[action_name] = self._action(action_name)
        return action

    def _action(self, action_name: str) -> _Action | nullcontext:
        if self._timed(action_name):
            return _Action(self, action_name)
        if type(self.inner) is PassThroughProfiler:
            return _UNPROFILED
        return _Action(self.inner, action_name)

    def _timed(self, action_name: str) -> bool:
        timed = self._is_phase.get(action_name)
        if timed is None:
            timed = self._is_phase[action_name] = phase_of_action(action_name) is not None
        return timed

    def start(self, action_name: str) -> None:
        entered = time.perf_counter()
        timed = self._timed(action_name)
        now = time.perf_counter()
        if timed:
            self._open[action_name] = now
        self.own_s += now - entered
        self.inner.start(action_name)

    def open_phase(self) -> str | None:
        """The phase of the timed actions open now, the first in PHASES where several are (None: none
        is): where a collective that runs now sits in the phase table (segperf.callbacks.collective_wait)."""
        phases = [phase_of_action(action) for action in self._open]
        return min(phases, key=PHASES.index) if phases else None

    def stop(self, action_name: str) -> None:
        self.inner.stop(action_name)
        now = time.perf_counter()
        start = self._open.pop(action_name, None)
        if start is not None:
            self.intervals[action_name].append((start, now))
        self.own_s += time.perf_counter() - now

    def fold(self, until: float, by_index: dict[str, tuple[int, int]]) -> dict[str, list[Interval]]:
        """Take the intervals that ended by `until` out, returning them: for the actions in
        `by_index`, those at positions [head, upto) (kept aligned with the steps); for the rest,
        every one that ended by then (segperf.perf.folding)."""
        taken: dict[str, list[Interval]] = {}
        for action, spans in self.intervals.items():
            if action in by_index:
                head, upto = by_index[action]
                taken[action] = spans[head:upto]
                del spans[head:upto]
            else:
                kept = [span for span in spans if span[1] > until]
                taken[action] = [span for span in spans if span[1] <= until]
                spans[:] = kept
        return taken

    # the rest of a profiler's life is the user's profiler's
    def setup(self, *args: Any, **kwargs: Any) -> None:
        self.inner.setup(*args, **kwargs)

    def teardown(self, stage: str | None) -> None:
        self.inner.teardown(stage)

    def describe(self) -> None:
        self.inner.describe()

    def summary(self) -> str:
        return self.inner.summary()

    def __del__(self) -> None:  # the inner profiler tears itself down
        pass


class _Action:
    """The context manager of one profiled action: starts and stops it on `target`, the tap for an
    action a phase reads, the user's profiler for one no phase reads. It holds no state of its own,
    so one per action name serves nested and repeated uses alike."""

    __slots__ = ("target", "name")

    def __init__(self, target: Profiler, name: str) -> None:
        self.target, self.name = target, name

    def __enter__(self) -> str:
        self.target.start(self.name)
        return self.name

    def __exit__(self, *exc_info: Any) -> None:
        self.target.stop(self.name)  # on an exception too, as the base Profiler's `finally` does


_UNPROFILED = nullcontext()  # reusable: an action neither segperf nor the user's profiler times


def time_loggers(trainer, tap: PhaseTap) -> list:
    """Time every logger's log_metrics as the LOG_ACTION; returns the loggers to `untime_loggers`."""
    timed = []
    for logger in trainer.loggers:
        original = logger.log_metrics

        def log_metrics(*args: Any, _original=original, **kwargs: Any) -> None:
            tap.start(LOG_ACTION)
            try:
                _original(*args, **kwargs)
            finally:
                tap.stop(LOG_ACTION)

        logger.log_metrics = log_metrics  # on the instance: the logger's class is left alone
        timed.append(logger)
    return timed


def untime_loggers(loggers: list) -> None:
    for logger in loggers:
        logger.__dict__.pop("log_metrics", None)
