"""`runtime=onnxruntime`: the (cast) net exported to ONNX and run by ONNX Runtime.

A second runtime answers "is it torch or the model?": the same weights, dtype and images through
another engine, checked against torch's outputs on one batch before anything is timed.
"""

from __future__ import annotations

import contextlib
import io
import logging
import warnings
from pathlib import Path
from typing import Any

import numpy as np
import torch
from torch import nn

from segperf.inference.checkpoint import InferenceError

INSTALL_HINT = "runtime=onnxruntime needs onnx, onnxscript and onnxruntime: pip install -e .[onnx]"


def require_onnxruntime():
    """The onnxruntime module, or one line saying how to install it."""
    try:
        import onnx  # noqa: F401  (torch.onnx.export needs both)
        import onnxruntime
        import onnxscript  # noqa: F401
    except ImportError:
        raise InferenceError(INSTALL_HINT) from None
    return onnxruntime


def export(net: nn.Module, example: torch.Tensor, path: Path) -> Path:
    """torch.export-based ONNX export (dynamo=True) with a dynamic batch dimension (the last
    validation batch may be smaller), weights inside the one file."""
    path.parent.mkdir(parents=True, exist_ok=True)
    # the exporter's chatter ("torchvision is not installed", graph passes) under Hydra's INFO logging
    loggers = [logging.getLogger(name) for name in ("torch.onnx", "onnx_ir", "onnxscript")]
    levels = [logger.level for logger in loggers]
    for logger in loggers:
        logger.setLevel(logging.ERROR)
    try:
        with contextlib.redirect_stdout(io.StringIO()), warnings.catch_warnings():  # the exporter prints its steps
            warnings.filterwarnings("ignore", message=r".*isinstance\(treespec, LeafSpec\)` is deprecated.*")
            torch.onnx.export(
                net,
                (example,),
                str(path),
                dynamo=True,
                input_names=["image"],
                output_names=["logits"],
                dynamic_shapes=({0: "batch"},),
                external_data=False,
                verbose=False,
            )
    except Exception as error:
        raise InferenceError(f"ONNX export failed: {type(error).__name__}: {error}") from error
    finally:
        for logger, level in zip(loggers, levels, strict=True):
            logger.setLevel(level)
    return path


def providers(ort, device: torch.device, wanted: list[str] | None) -> list[str]:
    """`runtime.providers` if given; else CUDA when torch runs on a GPU and onnxruntime has it, then CPU."""
    if wanted:
        return list(wanted)
    available = ort.get_available_providers()
    if device.type == "cuda" and "CUDAExecutionProvider" in available:
        return ["CUDAExecutionProvider", "CPUExecutionProvider"]
    return ["CPUExecutionProvider"]


class OrtRunner:
    """An ONNX Runtime session fed NCHW numpy arrays in the exported dtype (ONNX has no layouts)."""

    def __init__(self, ort, path: Path, dtype: torch.dtype, provider_list: list[str]):
        options = ort.SessionOptions()
        options.log_severity_level = 3  # errors only
        try:
            self.session = ort.InferenceSession(str(path), options, providers=provider_list)
        except Exception as error:  # e.g. no bfloat16 Conv kernel in the CPU provider
            raise InferenceError(f"onnxruntime cannot load {path.name}: {str(error).strip()}") from error
        self.dtype = dtype
        self.input_name = self.session.get_inputs()[0].name
        self.providers = self.session.get_providers()

    def prepare(self, x: torch.Tensor) -> np.ndarray:
        """The module's input (as fed to torch) on the host, dense NCHW, in the exported dtype."""
        return x.detach().cpu().contiguous().to(self.dtype).numpy()

    def forward(self, x: np.ndarray) -> torch.Tensor:
        return torch.from_numpy(self.session.run(None, {self.input_name: x})[0])

    def sync(self) -> None:  # session.run returns when the outputs are on the host
        pass


def compare(ort_runner: OrtRunner, torch_runner, image: torch.Tensor, min_agreement: float) -> dict[str, Any]:
    """ONNX Runtime's and torch's outputs on the same batch; an error below `min_agreement`."""
    ours = ort_runner.forward(ort_runner.prepare(image)).float()
    theirs = torch_runner.forward(torch_runner.prepare(image)).float().cpu()
    agreement = float((ours.argmax(1) == theirs.argmax(1)).float().mean())  # per image, or per pixel
    result = {"max_abs_diff": float((ours - theirs).abs().max()), "agreement": agreement, "checked_images": len(image)}
    if agreement < min_agreement:
        raise InferenceError(
            f"onnxruntime's predictions agree with torch's on only {agreement:.2%} of them "
            f"(< {min_agreement:.0%}; max |logit difference| {result['max_abs_diff']:.3g})"
        )
    return result
