"""Checkpoints that survive interruptions: saved when a run is stopped, written atomically,
loaded without unpickling code.

- `InterruptCheckpoint` saves `interrupted.ckpt` when fit ends by an exception (Ctrl-C,
  SIGTERM, an error), remembers which signal stopped the run (for results.json), and skips the
  save when no step has finished. It does what Lightning's OnExceptionCheckpoint does, but is
  not one: with an OnExceptionCheckpoint present, Lightning silently resumes every `fit` from
  `ckpt_path="last"` when one exists, and a segperf run resumes only when asked (`resume=`).
- `AtomicCheckpointIO` replaces Lightning's local write, which stages the file in the system
  temp folder and moves it (a copy, not a rename, when /tmp is another file system; and a
  write outside the run folder): here the temp file sits next to the target, is fsynced, then
  renamed over it, so a crash mid-write leaves the previous checkpoint intact. Loading always
  uses `torch.load(weights_only=True)`.
"""

from __future__ import annotations

import pickle
import signal
import threading
from pathlib import Path
from typing import Any

import torch
from lightning.pytorch.callbacks import Callback, Checkpoint
from lightning.pytorch.plugins.io import TorchCheckpointIO
from lightning.pytorch.utilities.exceptions import SIGTERMException

from segperf.errors import SegperfError, is_write_failure, needs_code, unreadable_checkpoint
from segperf.perf.results import write_atomic


class UnsafeCheckpointError(SegperfError):
    """A checkpoint that only loads by running pickled code."""


class UnreadableCheckpointError(SegperfError):
    """A file that is not a readable checkpoint: cut short, or not a torch checkpoint at all."""


class InterruptCheckpoint(Checkpoint):
    def __init__(self, dirpath: str | Path) -> None:
        self.path = Path(dirpath) / "interrupted.ckpt"
        self.signal: str | None = None  # "SIGINT" / "SIGTERM" once the run was stopped by one

    def on_exception(self, trainer, pl_module, exception: BaseException) -> None:
        if isinstance(exception, Terminated):  # SIGTERM outside the loop (TerminateOutsideTraining)
            self.signal = "SIGTERM"
        elif isinstance(exception, KeyboardInterrupt):
            self.signal = "SIGINT"
        elif isinstance(exception, SIGTERMException):
            self.signal = "SIGTERM"
        if trainer.global_step == 0:
            return
        if is_write_failure(exception):  # a full or read-only disk: it would fail the same way
            print(f"segperf: no {self.path.name}: the run folder cannot be written; earlier checkpoints are kept")
            return
        if trainer.world_size > 1 and self.signal is None:
            # DDP: an error stops one rank while the others sit in a collective and would never
            # reach the checkpoint's barrier (a signal reaches every rank: Lightning forwards
            # SIGTERM to the ranks it started, Ctrl-C and SLURM signal them all). last.ckpt stays.
            print(f"segperf: no {self.path.name} after an error in a data-parallel run; last.ckpt is kept")
            return
        try:
            trainer.save_checkpoint(self.path)
            print(f"segperf: saved {self.path} at step {trainer.global_step}")
        except Exception as error:  # e.g. the device itself failed: report, keep the original error
            print(f"segperf: could not save {self.path} ({type(error).__name__}: {error})")

    def teardown(self, trainer, pl_module, stage: str) -> None:
        # Lightning calls this only when fit ended normally (e.g. a resumed run went on to the
        # end): last.ckpt is newer, this one is stale
        if stage == "fit":
            self.path.unlink(missing_ok=True)


class AtomicCheckpointIO(TorchCheckpointIO):
    def save_checkpoint(self, checkpoint: dict[str, Any], path, storage_options: Any | None = None) -> None:
        if storage_options is not None:
            raise TypeError("storage_options are not supported for local checkpoints")
        write_atomic(path, lambda f: torch.save(checkpoint, f))

    def load_checkpoint(self, path, map_location: Any = None, weights_only: bool | None = None) -> dict[str, Any]:
        return load_weights_only(path, map_location=map_location or "cpu")


def load_weights_only(path, map_location: Any = "cpu") -> dict[str, Any]:
    """`torch.load(weights_only=True)`: tensors and plain data only, never code."""
    try:
        return torch.load(path, map_location=map_location, weights_only=True)
    except pickle.UnpicklingError as error:
        if not needs_code(error):  # a damaged file: torch says UnpicklingError for that too
            raise UnreadableCheckpointError(unreadable_checkpoint(path, error)) from error
        first = str(error).strip().splitlines()[0] if str(error).strip() else type(error).__name__
        raise UnsafeCheckpointError(
            f"{path}: refused to load, it needs arbitrary unpickling, which can run code ({first}). "
            "Load only checkpoints written by segperf or another source you trust."
        ) from error
    except FileNotFoundError:
        raise
    except Exception as error:  # a zip cut short, a file of another kind, a directory
        raise UnreadableCheckpointError(unreadable_checkpoint(path, error)) from error


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
