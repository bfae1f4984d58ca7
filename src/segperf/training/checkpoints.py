"""Checkpoints that survive interruptions: written atomically, loaded without unpickling code.
(The callbacks that save one when a run is stopped are segperf.callbacks.interrupt_checkpoint and
terminate_outside_training.)

- `AtomicCheckpointIO` replaces Lightning's local write, which stages the file in the system
  temp folder and moves it (a copy, not a rename, when /tmp is another file system; and a
  write outside the run folder): here the temp file sits next to the target, is fsynced, then
  renamed over it, so a crash mid-write leaves the previous checkpoint intact. Loading always
  uses `torch.load(weights_only=True)`.
- A checkpoint that holds objects (lightning-hydra-template's module saves its `net` nn.Module,
  its `_partial_` optimizer and scheduler in its hyperparameters) loads only by running code from
  the file, which segperf never does. Beside such a checkpoint the run writes its weights-only
  copy, `<name>.weights.pt` (`weights_copy`): the state_dict and the checkpoint's plain entries,
  written after it, so that segperf.infer reads the weights of any run segperf trained.
"""

from __future__ import annotations

import pickle
from pathlib import Path
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
        copy = weights_copy(path)
        if needs_code_to_load(path):  # written after the checkpoint: a copy older than it is stale
            write_atomic(copy, lambda f: torch.save(weights_only_part(checkpoint), f))
        else:
            copy.unlink(missing_ok=True)  # a module that no longer saves objects: no stale copy

    def remove_checkpoint(self, path) -> None:
        """ModelCheckpoint's save_top_k removes a checkpoint it no longer keeps: its copy goes too."""
        super().remove_checkpoint(path)
        weights_copy(path).unlink(missing_ok=True)

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


# the file name of a checkpoint's weights-only copy: `last.ckpt` -> `last.weights.pt` (not *.ckpt,
# which ModelCheckpoint and resume= take for checkpoints of their own)
WEIGHTS_SUFFIX = ".weights.pt"


def weights_copy(path) -> Path:
    """Where the weights-only copy of the checkpoint `path` is written, and looked for."""
    path = Path(path)
    return path.with_name(path.stem + WEIGHTS_SUFFIX)


def unsafe_globals(path) -> list[str]:
    """The classes and functions that loading `path` would have to import and call (read from its
    pickle without running it): empty for a checkpoint of tensors and plain data."""
    return list(torch.serialization.get_unsafe_globals_in_checkpoint(path))


def needs_code_to_load(path) -> bool:
    return bool(unsafe_globals(path))


def weights_only_part(checkpoint: dict[str, Any]) -> dict[str, Any]:
    """The state_dict and the checkpoint's top-level entries of plain data (net_config, the step,
    the epoch): what inference rebuilds a module's weights from, loadable with weights_only=True."""
    return {key: value for key, value in checkpoint.items() if key == "state_dict" or is_plain(value)}


PLAIN_TYPES = (str, int, float, bool, type(None), torch.Tensor, torch.dtype, torch.Size)


def is_plain(value: Any) -> bool:
    """Tensors, numbers, strings and lists, tuples and string-keyed dicts of them."""
    if isinstance(value, dict):
        return all(isinstance(k, str) and is_plain(v) for k, v in value.items()) and type(value) is dict
    if isinstance(value, (list, tuple)):
        return type(value) in (list, tuple) and all(is_plain(v) for v in value)
    return isinstance(value, PLAIN_TYPES) and not isinstance(value, torch.nn.Parameter)
