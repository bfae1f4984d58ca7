"""How many samples a batch holds, whatever its structure."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

import torch

BatchSizeFn = Callable[[Any], int]


class BatchSizeError(TypeError):
    """A batch in which no tensor says how many samples it holds."""


def first_tensor(batch: Any) -> torch.Tensor | None:
    """The first tensor of a batch: the batch itself, or the first one found depth-first in a
    tuple, list or dict (in the dict's order), or None."""
    if isinstance(batch, torch.Tensor):
        return batch
    if isinstance(batch, Mapping):
        batch = list(batch.values())
    if isinstance(batch, (tuple, list)):
        for item in batch:
            found = first_tensor(item)
            if found is not None:
                return found
    return None


def batch_size(batch: Any) -> int:
    """The leading dimension of the batch's first tensor (tensor, tuple, list or dict batches).

    Raises BatchSizeError, saying what to do, for a batch with no tensor or a 0-d one first: then
    only the user knows what a sample is (PerfMonitor(batch_size_fn=...))."""
    tensor = first_tensor(batch)
    if tensor is None or tensor.dim() == 0:
        what = "no tensor" if tensor is None else "a 0-d tensor first"
        raise BatchSizeError(
            f"cannot count the samples of a {type(batch).__name__} batch with {what}: "
            "pass PerfMonitor(batch_size_fn=lambda batch: <samples in batch>)"
        )
    return int(tensor.shape[0])
