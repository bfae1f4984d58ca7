"""InterruptCheckpoint: `interrupted.ckpt` when fit ends by an exception (Ctrl-C, SIGTERM, an error).

It remembers which signal stopped the run (for results.json), and skips the save when no step has
finished. It does what Lightning's OnExceptionCheckpoint does, but is not one: with an
OnExceptionCheckpoint present, Lightning silently resumes every `fit` from `ckpt_path="last"`
when one exists, and a segperf run resumes only when asked (`resume=`).
"""

from __future__ import annotations

from pathlib import Path

from lightning.pytorch.callbacks import Checkpoint
from lightning.pytorch.utilities.exceptions import SIGTERMException

from segperf.callbacks.terminate_outside_training import Terminated
from segperf.errors import is_write_failure


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
