"""The two inference throughputs, and the agreement measures of the predictions they produce.

End-to-end: the validation loader (decode, resize, collate, pin) feeding the model, its outputs
back on the host; what a user of the model waits for. Model-only: the same images already
converted on the device, forward passes only; what the network alone costs. The gap between the
two is the loading the seed study's data axes (workers, prefetch, pin) attack.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any, Protocol

import torch
from torch import nn


class Runner(Protocol):
    """A model behind the two calls the benchmark times: input conversion and forward."""

    def prepare(self, x: torch.Tensor) -> Any: ...

    def forward(self, x: Any) -> Any: ...

    def sync(self) -> None: ...


class TorchRunner:
    """An eager or compiled torch net in `dtype`: the module's input (fed as training feeds it,
    segperf.inference.workload) cast to the weights' dtype, in the memory_format group's layout."""

    def __init__(self, net: nn.Module, device: torch.device, dtype: torch.dtype, memory_format: str):
        self.net, self.device, self.dtype = net, device, dtype
        self.channels_last = memory_format == "channels_last"

    def prepare(self, x: torch.Tensor) -> torch.Tensor:
        x = x.to(self.dtype) if x.is_floating_point() else x  # the cast keeps the strides
        if self.channels_last and x.ndim == 4:  # a no-op where the module's own hook chose the layout
            x = x.contiguous(memory_format=torch.channels_last)
        return x

    def forward(self, x: torch.Tensor) -> Any:
        with torch.inference_mode():
            return self.net(x)

    def sync(self) -> None:
        if self.device.type == "cuda":  # kernels are asynchronous: wait before reading the host clock
            torch.cuda.synchronize(self.device)


@dataclass
class Measurement:
    images: int = 0
    warmup_batches: int = 0  # run, which the loader may cap
    warmup_s: float = 0.0
    wall_s: float = 0.0
    model_wall_s: float = 0.0
    passes: int = 0
    batches: list[Any] = field(default_factory=list)  # as loaded, on the host
    outputs: list[Any] = field(default_factory=list)  # the engine's, on the host

    def timing(self) -> dict[str, Any]:
        return {
            "images": self.images,
            "wall_s": self.wall_s,
            "end_to_end_images_per_s": self.images / self.wall_s if self.wall_s else None,
            "model_wall_s": self.model_wall_s,
            "model_passes": self.passes,
            "model_images_per_s": self.images * self.passes / self.model_wall_s if self.model_wall_s else None,
        }


def to_host(output: Any) -> Any:
    """The outputs where a user of the model reads them (a device-to-host copy waits for the GPU)."""
    if isinstance(output, torch.Tensor):
        return output.cpu()
    if isinstance(output, list | tuple):
        return type(output)(to_host(item) for item in output)
    if isinstance(output, dict):
        return {key: to_host(value) for key, value in output.items()}
    return output


def measure(
    runner: Runner,
    feed: Callable[[Any], torch.Tensor],
    loader: Iterable[Any],
    warmup_batches: int,
    passes: int,
    last_batch: int = 0,
) -> Measurement:
    """Warm up, then one timed end-to-end pass over the loader, then `passes` timed model-only passes.

    `feed` turns a loaded batch into the module's input on the device. Warm-up runs the first
    `warmup_batches` batches of the loader through the model (compilation, allocator and kernel
    caches, worker start-up) and, if the last batch is smaller (`last_batch` images), one batch of
    that size too (a compiled net specializes on it); none of it is timed.
    """
    if passes < 1:
        raise ValueError(f"passes={passes}: the model-only loop needs at least one pass")
    m = Measurement(passes=passes)
    start = time.perf_counter()
    if warmup_batches > 0:
        batches = iter(loader)
        for _, batch in zip(range(warmup_batches), batches, strict=False):
            x = feed(batch)
            runner.forward(runner.prepare(x))
            m.warmup_batches += 1
            if last_batch:
                runner.forward(runner.prepare(x[:last_batch]))
                last_batch = 0
        del batches  # ends a prefetch thread
        runner.sync()
    m.warmup_s = time.perf_counter() - start

    start = time.perf_counter()
    for batch in loader:
        x = feed(batch)
        m.outputs.append(to_host(runner.forward(runner.prepare(x))))
        m.batches.append(batch)
        m.images += len(x)
    runner.sync()
    m.wall_s = time.perf_counter() - start

    inputs = [runner.prepare(feed(batch)) for batch in m.batches]
    runner.sync()
    start = time.perf_counter()
    for _ in range(passes):
        for x in inputs:
            runner.forward(x)
    runner.sync()
    m.model_wall_s = time.perf_counter() - start
    return m


def pixel_agreement(pred: list[torch.Tensor], target: list[torch.Tensor]) -> float:
    same = sum(int((p == t.long()).sum()) for p, t in zip(pred, target, strict=True))
    return same / sum(t.numel() for t in target)


def dice(pred: list[torch.Tensor], target: list[torch.Tensor], num_classes: int) -> float:
    """Dice over the foreground classes (the car) per image, averaged over the images, as training's
    val/dice (torchmetrics DiceScore, micro over classes); images without any foreground pixel on
    either side are left out, and if all are, 1.0 (both agree: no car)."""
    scores = []
    for p, t in zip(pred, target, strict=True):
        p, t = p.flatten(1), t.long().flatten(1)  # [images, pixels]
        overlap = sum(((p == c) & (t == c)).sum(1) for c in range(1, num_classes))
        total = sum((p == c).sum(1) + (t == c).sum(1) for c in range(1, num_classes))
        scores += [2 * o / n for o, n in zip(overlap.tolist(), total.tolist(), strict=True) if n]
    return sum(scores) / len(scores) if scores else 1.0
