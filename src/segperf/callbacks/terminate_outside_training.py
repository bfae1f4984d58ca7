"""TerminateOutsideTraining: SIGTERM outside Lightning's training loop recorded as an interrupted
run, instead of ending the process with nothing written."""

from __future__ import annotations

import signal
import threading
from typing import Any

from lightning.pytorch.callbacks import Callback


class Terminated(KeyboardInterrupt):
    """SIGTERM outside Lightning's training loop, raised like Ctrl-C so that the same paths record
    the run as interrupted (a KeyboardInterrupt subclass: Lightning handles it as one too)."""


class TerminateOutsideTraining(Callback):
    """SIGTERM before the first or after the last training step (data checks, cache fill, model
    set-up, the final validation) would end the process with nothing written: Lightning only
    handles SIGTERM inside its training loop (it stops after the current step). This handler
    turns it into `Terminated` there, and stays quiet inside the loop, where Lightning's own
    handler (which calls this one too) does the graceful stop."""

    def __init__(self) -> None:
        self.in_training_loop = False
        self._previous: Any = None

    def install(self) -> TerminateOutsideTraining:
        if threading.current_thread() is threading.main_thread():  # signals go to the main thread only
            self._previous = signal.signal(signal.SIGTERM, self.handle)
        return self

    def uninstall(self) -> None:
        if self._previous is not None:
            signal.signal(signal.SIGTERM, self._previous)
            self._previous = None

    def handle(self, signum, frame) -> None:
        if not self.in_training_loop:
            raise Terminated("SIGTERM")

    def on_train_start(self, trainer, pl_module) -> None:
        self.in_training_loop = True

    def on_train_end(self, trainer, pl_module) -> None:
        self.in_training_loop = False
