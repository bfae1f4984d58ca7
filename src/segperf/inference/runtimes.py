"""Inference runtimes: one class each, instantiated from conf/runtime/<name>.yaml (its `_target_`,
its options as constructor arguments).

A runtime turns the loaded net into the Runner the benchmark times (segperf.inference.benchmark):
`TorchRuntime` runs the net itself, eager or compiled, in the memory_format group's layout;
`OnnxRuntime` exports it to ONNX and runs it in ONNX Runtime, checked against torch first. What a
runtime cannot honour it records in `adjusted`. Another runtime is a `Runtime` subclass and a YAML
naming it; the run itself has no per-runtime branch.
"""

from __future__ import annotations

import copy
from abc import ABC, abstractmethod
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
from hydra.utils import instantiate
from torch import nn

from segperf.inference import onnx_export
from segperf.inference.benchmark import Runner, TorchRunner
from segperf.inference.checkpoint import DTYPE_NAMES, PRECISION_OF, InferenceError
from segperf.inference.summary import adjust
from segperf.training.trainer import precision_notice


@dataclass
class Job:
    """What a runtime builds its runner from: the loaded weights and the run's settings."""

    net: nn.Module  # the weights in `dtype`, on `device`
    reference: nn.Module  # the fp32 net on `device`: where a fallback to fp32 starts (not to be changed)
    dtype: torch.dtype
    device: torch.device
    memory_format: str  # the memory_format group: "nchw" or "channels_last"
    compile: bool
    pin_memory: bool
    precision: str  # trainer.precision as requested, for `adjusted`
    batch_size: int
    example: torch.Tensor  # the module's input of one validation batch (fp32, on `device`)
    out_dir: Path  # the run dir, for a runtime's files (model.onnx)
    results: dict[str, Any]  # results.json: a runtime records adjustments and its own section here


@dataclass
class Built:
    """A runtime's runner and the dtype its weights really run in (fp32 after a fallback)."""

    runner: Runner
    dtype: torch.dtype
    # its outputs are those of the fp32 eager net: no separate fp32 reference pass
    is_fp32_reference: bool = False


class Runtime(ABC):
    """An inference engine; `name` is what results.json records as `axes.runtime`."""

    def __init__(self, name: str) -> None:
        self.name = name

    def dtype_notice(self, precision: str, device: torch.device) -> str | None:
        """A note on running weights of `precision` on `device` (e.g. emulated, hence slow), if any."""
        return None

    @abstractmethod
    def build(self, job: Job) -> Built:
        """The runner the benchmark times; untimed work (export, checks) happens here."""


def from_config(node: Any) -> Runtime:
    """The runtime a `runtime` group config describes (its `_target_`)."""
    runtime = instantiate(node) if "_target_" in node else None
    if not isinstance(runtime, Runtime):
        raise InferenceError(f"runtime={node.get('name')!r}: use runtime=torch or runtime=onnxruntime")
    return runtime


class TorchRuntime(Runtime):
    """PyTorch itself: eager, or compiled in place (lazily, at the first warm-up batch), in the
    memory_format group's layout, fed like training feeds the net."""

    def __init__(self, name: str = "torch") -> None:
        super().__init__(name)

    def dtype_notice(self, precision: str, device: torch.device) -> str | None:
        return precision_notice(precision, device.type)

    def build(self, job: Job) -> Built:
        net = job.net
        if job.memory_format == "channels_last":
            net = net.to(memory_format=torch.channels_last)
        if job.compile:
            net.compile()
        runner = TorchRunner(net, job.device, job.dtype, job.memory_format)
        # the reference is the module's own fp32 forward on the same inputs, in the same layout
        return Built(runner, job.dtype, is_fp32_reference=job.dtype == torch.float32 and not job.compile)


class OnnxRuntime(Runtime):
    """The cast net exported to <run dir>/model.onnx and run by ONNX Runtime on `providers` (in
    order of preference; None: CUDA when torch sees a GPU, then CPU). Before anything is timed,
    its predictions on one batch must agree with torch's on at least `min_agreement` of the pixels.
    A dtype ONNX Runtime cannot run is exported in fp32 instead (recorded)."""

    def __init__(
        self, name: str = "onnxruntime", providers: Sequence[str] | None = None, min_agreement: float = 0.99
    ) -> None:
        super().__init__(name)
        self.providers = list(providers) if providers else None
        self.min_agreement = float(min_agreement)

    def build(self, job: Job) -> Built:
        ort = onnx_export.require_onnxruntime()
        for setting, requested, used in (("compile", job.compile, False), ("memory_format", job.memory_format, "nchw")):
            if requested != used:
                notice = f"model.{setting} does not apply to onnxruntime (NCHW, own graph)"
                adjust(job.results, setting, requested, used, notice, "onnxruntime runs its own graph, in NCHW")
        image = job.example
        # a batch of at least 2 (a batch of 1 would be specialized into the graph)
        example = torch.rand(max(2, job.batch_size), *image.shape[1:], device=job.device).to(job.dtype)
        provider_list = onnx_export.providers(ort, job.device, self.providers)
        path = job.out_dir / "model.onnx"
        net, dtype = job.net, job.dtype
        try:
            runner = onnx_export.OrtRunner(ort, onnx_export.export(net, example, path), dtype, provider_list)
            runner.forward(runner.prepare(image[:1]))
        except (InferenceError, TypeError, RuntimeError) as error:
            if dtype == torch.float32:
                raise
            notice = f"onnxruntime ({', '.join(provider_list)}) cannot run {DTYPE_NAMES[dtype]} weights: exported fp32"
            adjust(job.results, "precision", job.precision, PRECISION_OF[torch.float32], notice, str(error).strip())
            net, dtype = copy.deepcopy(job.reference).to(job.device), torch.float32
            runner = onnx_export.OrtRunner(ort, onnx_export.export(net, example.float(), path), dtype, provider_list)
        torch_runner = TorchRunner(net, job.device, dtype, "nchw")
        check = onnx_export.compare(runner, torch_runner, image, self.min_agreement)
        job.results["onnx"] = {"path": str(path), "providers": runner.providers, **check}
        return Built(runner, dtype)
