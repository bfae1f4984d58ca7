"""The two inference throughputs and the quality of the predictions they produce.

End-to-end: the validation loader (decode, resize, collate, pin) feeding the model, predictions
back on the host; what a user of the model waits for. Model-only: the same images already
converted on the device, forward passes only; what the network alone costs. The gap between the
two is the loading the seed study's data axes (workers, prefetch, pin) attack.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Any, Protocol

import torch
from torch import nn


class Runner(Protocol):
    """A model behind the two calls the benchmark times: input conversion and forward."""

    def prepare(self, image: torch.Tensor) -> Any: ...

    def forward(self, x: Any) -> torch.Tensor: ...

    def sync(self) -> None: ...


class TorchRunner:
    """An eager or compiled torch net in `dtype`, fed like SegmentationModule feeds it in training."""

    def __init__(self, net: nn.Module, device: torch.device, dtype: torch.dtype, memory_format: str, pin: bool):
        self.net, self.device, self.dtype = net, device, dtype
        self.nchw = memory_format == "nchw"
        self.non_blocking = pin and device.type == "cuda"

    def prepare(self, image: torch.Tensor) -> torch.Tensor:
        image = image.to(self.device, non_blocking=self.non_blocking).permute(0, 3, 1, 2)  # HWC view: channels-last
        if self.nchw:
            image = image.contiguous()
        # fp32 scaling first, then the cast: every dtype sees the same rounded pixel values
        return image.float().div_(255.0).to(self.dtype)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
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
    batches: list[torch.Tensor] = field(default_factory=list)  # uint8 HWC, as loaded
    masks: list[torch.Tensor] = field(default_factory=list)
    preds: list[torch.Tensor] = field(default_factory=list)  # class index per pixel, on the host

    def timing(self) -> dict[str, Any]:
        return {
            "images": self.images,
            "wall_s": self.wall_s,
            "end_to_end_images_per_s": self.images / self.wall_s if self.wall_s else None,
            "model_wall_s": self.model_wall_s,
            "model_passes": self.passes,
            "model_images_per_s": self.images * self.passes / self.model_wall_s if self.model_wall_s else None,
        }


def measure(runner: Runner, loader, warmup_batches: int, passes: int) -> Measurement:
    """Warm up, then one timed end-to-end pass over the loader, then `passes` timed model-only passes.

    Warm-up runs the first `warmup_batches` batches of the loader through the model (compilation,
    allocator and kernel caches, worker start-up) and, if the last batch is smaller, one batch of
    that size too (a compiled net specializes on it); none of it is timed.
    """
    if passes < 1:
        raise ValueError(f"passes={passes}: the model-only loop needs at least one pass")
    m = Measurement(passes=passes)
    last = len(loader.dataset) % loader.batch_size
    start = time.perf_counter()
    if warmup_batches > 0:
        batches = iter(loader)
        for _, (image, _mask) in zip(range(warmup_batches), batches, strict=False):
            runner.forward(runner.prepare(image))
            m.warmup_batches += 1
            if last:
                runner.forward(runner.prepare(image[:last]))
                last = 0
        del batches  # ends a prefetch thread
        runner.sync()
    m.warmup_s = time.perf_counter() - start

    start = time.perf_counter()
    for image, mask in loader:
        logits = runner.forward(runner.prepare(image))
        m.preds.append(logits.argmax(dim=1).cpu())
        m.batches.append(image)
        m.masks.append(mask)
    runner.sync()
    m.wall_s = time.perf_counter() - start
    m.images = sum(len(b) for b in m.batches)

    inputs = [runner.prepare(image) for image in m.batches]
    runner.sync()
    start = time.perf_counter()
    for _ in range(passes):
        for x in inputs:
            runner.forward(x)
    runner.sync()
    m.model_wall_s = time.perf_counter() - start
    return m


def predict(runner: Runner, batches: list[torch.Tensor]) -> list[torch.Tensor]:
    """Class predictions of `runner` on already loaded batches (the fp32 reference, untimed)."""
    return [runner.forward(runner.prepare(image)).argmax(dim=1).cpu() for image in batches]


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


def quality(m: Measurement, reference: list[torch.Tensor], num_classes: int) -> dict[str, float]:
    """Accuracy against the ground truth, agreement with the fp32 model's predictions, and what a
    cast costs: `dice_change_vs_fp32`, this run's Dice against the masks minus the fp32 model's on
    the same images (0.0 for the fp32 run itself; negative: the cast lost quality)."""
    val_dice = dice(m.preds, m.masks, num_classes)
    return {
        "val_pixel_accuracy": pixel_agreement(m.preds, m.masks),
        "val_dice": val_dice,
        "fp32_val_dice": (fp32_dice := dice(reference, m.masks, num_classes)),
        "dice_change_vs_fp32": val_dice - fp32_dice,
        "agreement_vs_fp32": pixel_agreement(m.preds, reference),
        "dice_vs_fp32": dice(m.preds, reference, num_classes),
    }
