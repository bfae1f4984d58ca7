"""Peak memory torch allocated and reserved on a CUDA device, per phase."""

from __future__ import annotations

from typing import Any


def torch_memory(device: Any, reset: bool = False) -> dict[str, int | None]:
    """Peak torch allocated/reserved bytes on a cuda device (None elsewhere); `reset` starts a new peak (per phase)."""
    import torch

    dev = torch.device(device)
    if dev.type != "cuda" or not torch.cuda.is_available():
        return {"peak_allocated_bytes": None, "peak_reserved_bytes": None}
    out = {
        "peak_allocated_bytes": int(torch.cuda.max_memory_allocated(dev)),
        "peak_reserved_bytes": int(torch.cuda.max_memory_reserved(dev)),
    }
    if reset:
        torch.cuda.reset_peak_memory_stats(dev)
    return out
