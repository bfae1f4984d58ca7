"""Checkpoints that survive interruptions: written atomically, loaded without unpickling code.
(The callbacks that save one when a run is stopped are segperf.callbacks.interrupt_checkpoint and
terminate_outside_training.)

- `AtomicCheckpointIO` replaces Lightning's local write, which stages the file in the system
  temp folder and moves it (a copy, not a rename, when /tmp is another file system; and a
  write outside the run folder): here the temp file sits next to the target, is fsynced, then
  renamed over it, so a crash mid-write leaves the previous checkpoint intact. Loading always
  uses `torch.load(weights_only=True)`.
"""

from __future__ import annotations

import pickle
from typing import Any

import torch
from lightning.pytorch.plugins.io import TorchCheckpointIO

from segperf.errors import SegperfError, needs_code, unreadable_checkpoint
from segperf.perf.results import write_atomic


class UnsafeCheckpointError(SegperfError):
    """A checkpoint that only loads by running pickled code."""


class UnreadableCheckpointError(SegperfError):
    """A file that is not a readable checkpoint: cut short, or not a torch checkpoint at all."""


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
