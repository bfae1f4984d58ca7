"""`RunIf(min_gpus=1)`: skip a test, with the reason, where the hardware it needs is absent (as the
lightning-hydra-template's RunIf helper does)."""

from __future__ import annotations

import os

import pytest
import torch

REHEARSE = "GPU_CHECK_REHEARSE"  # =1: the GPU check's tests run on this CPU, at rehearsal sizes


def rehearsing() -> bool:
    return os.environ.get(REHEARSE) == "1"


def RunIf(min_gpus: int = 0, rehearsable: bool = False) -> pytest.MarkDecorator:  # noqa: N802 (the template's name)
    """A skipif marker: fewer than `min_gpus` CUDA devices skips the test, unless it is
    `rehearsable` and GPU_CHECK_REHEARSE=1 asks for the CPU rehearsal."""
    gpus = torch.cuda.device_count()
    reason = f"needs {min_gpus} CUDA GPU(s), this machine has {gpus}"
    if rehearsable:
        reason += f" ({REHEARSE}=1 rehearses the GPU check on the CPU: scripts/gpu_check.sh --rehearse)"
    return pytest.mark.skipif(gpus < min_gpus and not (rehearsable and rehearsing()), reason=reason)
