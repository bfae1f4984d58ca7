"""HardTimeLimit: stop training inside a step once it has run `seconds`, not after the step.

Lightning's `max_time` (its Timer callback) is checked when a step ends, so one step that runs
for minutes runs to its end: a tuner's probe of fp16 autocast on a CPU that emulates it took one
step of 177 s against a 7 s limit (docs/BENCHMARKS.md, the 128x192 tune on an Intel Xeon with
AMX). This callback arms a POSIX interval timer (SIGALRM) when training starts; when it fires,
the handler raises `TimeLimitReached` in the main thread at the next Python bytecode, which comes
within one operator of the step (a convolution, not the whole step). Lightning then ends fit as
it does on any error (its callbacks' `on_exception`), and the run's record says the run was cut:
results.json `time_limit` (written by `record`) and the error naming the limit.

Why not a watchdog thread: a thread cannot stop the main thread's step; only a signal handler
runs there. Why not Lightning's SIGTERM handling: it also waits for the step's end. The timer is
per process (DataLoader workers do not inherit it) and armed only from the main thread, where
Python runs signal handlers; elsewhere (a launcher that trains in a thread) or without
`signal.setitimer` (Windows) it is not armed and `record` says why, leaving `max_time` to stop
the run after the step.
"""

from __future__ import annotations

import signal
import threading
import time
from typing import Any

import lightning as L

SECTION = "time_limit"  # results.json's key


class TimeLimitReached(RuntimeError):
    """Raised inside the training step when the hard time limit passes."""


class HardTimeLimit(L.Callback):
    def __init__(self, seconds: float) -> None:
        if not seconds > 0:
            raise ValueError(f"HardTimeLimit(seconds={seconds}): must be > 0 seconds")
        self.seconds = float(seconds)
        self.armed = False
        self.reached = False
        self.not_armed: str | None = None
        self.steps = 0  # training steps finished before the limit
        self._started: float | None = None
        self._previous: Any = None

    def on_train_start(self, trainer, pl_module) -> None:
        if not hasattr(signal, "setitimer"):
            self.not_armed = "no POSIX interval timer on this platform (signal.setitimer)"
        elif threading.current_thread() is not threading.main_thread():
            self.not_armed = "training runs outside the main thread, where no signal handler runs"
        else:
            self._previous = signal.signal(signal.SIGALRM, self._expired)
            signal.setitimer(signal.ITIMER_REAL, self.seconds)
            self._started, self.armed = time.perf_counter(), True

    def _expired(self, signum, frame) -> None:
        self._disarm()
        self.reached = True
        raise TimeLimitReached(
            f"stopped at the hard time limit of {self.seconds:.0f} s of training, inside step {self.steps + 1} "
            f"(one step ran past the run's time limit)"
        )

    def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx: int) -> None:
        self.steps += 1

    def on_train_end(self, trainer, pl_module) -> None:
        self._disarm()  # validation and teardown after training are not limited

    def on_exception(self, trainer, pl_module, exception: BaseException) -> None:
        self._disarm()

    def teardown(self, trainer, pl_module, stage: str) -> None:
        self._disarm()

    def _disarm(self) -> None:
        if self.armed:
            signal.setitimer(signal.ITIMER_REAL, 0)
            signal.signal(signal.SIGALRM, self._previous if self._previous is not None else signal.SIG_DFL)
            self.armed = False

    def record(self, results: dict[str, Any]) -> None:
        """results.json `time_limit`: the limit, whether it stopped the run and after how many steps."""
        results[SECTION] = {
            "hard_limit_s": self.seconds,
            "reached": self.reached,
            "steps_done": self.steps,
            "not_armed": self.not_armed,
        }
