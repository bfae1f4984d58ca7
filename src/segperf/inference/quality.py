"""The quality of an inference run, measured by the module's own validation.

Whatever the model (Dice for the U-Net, accuracy for a classifier, whatever a user's module
logs), the metric code is the module's: `Trainer.validate` runs its validation_step and epoch end
over the batches the benchmark loaded, exactly as training validates. What differs is where the
predictions come from: the module's `forward` is replaced, for that validation, by a replay of
the outputs the timed engine produced (the cast, compiled or ONNX net), so the metrics are those
of what was timed, without running it again. A second validation with the module's own fp32
forward gives the reference those metrics are compared with (`fp32_<metric>`, `change_vs_fp32`)
and the fp32 outputs the engine's predictions are compared with (`agreement_vs_fp32`).
"""

from __future__ import annotations

import logging
import warnings
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

import lightning as L
import torch
from torch.utils.data import DataLoader, Dataset

from segperf.inference import benchmark
from segperf.training.quality import is_validation_metric, results_key


class Batches(Dataset):
    """Already loaded batches, served as they are (a DataLoader with batch_size=None)."""

    def __init__(self, batches: list[Any]) -> None:
        self.batches = batches

    def __len__(self) -> int:
        return len(self.batches)

    def __getitem__(self, index: int) -> Any:
        return self.batches[index]


class Replay:
    """A stand-in for the module's forward returning, call by call, the engine's outputs of the
    same batches (as fp32 on the caller's device). `matched` turns false when a call does not fit
    (another batch size, more calls than batches): the module's validation_step does not call
    `self(input)` once per batch, and that call runs the module's own fp32 forward instead."""

    def __init__(self, outputs: list[Any], own_forward: Callable[..., Any]) -> None:
        self.outputs, self.own_forward = outputs, own_forward
        self.calls, self.matched = 0, True

    def __call__(self, x: Any, *args: Any, **kwargs: Any) -> Any:
        index, self.calls = self.calls, self.calls + 1
        if index >= len(self.outputs) or leading_size(self.outputs[index]) != leading_size(x):
            self.matched = False
            return self.own_forward(x, *args, **kwargs)
        device = x.device if isinstance(x, torch.Tensor) else None
        return tree_map(lambda t: (t.float() if t.is_floating_point() else t).to(device), self.outputs[index])


class Recorder:
    """The module's own forward, keeping each output on the host (the fp32 reference)."""

    def __init__(self, own_forward: Callable[..., Any]) -> None:
        self.own_forward, self.outputs = own_forward, []

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        output = self.own_forward(*args, **kwargs)
        self.outputs.append(tree_map(lambda t: t.detach().cpu(), output))
        return output


def tree_map(fn: Callable[[torch.Tensor], Any], value: Any) -> Any:
    if isinstance(value, torch.Tensor):
        return fn(value)
    if isinstance(value, list | tuple):
        return type(value)(tree_map(fn, v) for v in value)
    if isinstance(value, dict):
        return {k: tree_map(fn, v) for k, v in value.items()}
    return value


def leading_size(value: Any) -> int | None:
    """The leading dimension of the first tensor in `value` (a batch's samples)."""
    if isinstance(value, torch.Tensor):
        return value.shape[0] if value.ndim else None
    items = value.values() if isinstance(value, dict) else value if isinstance(value, list | tuple) else ()
    return next((size for v in items if (size := leading_size(v)) is not None), None)


@contextmanager
def forward_replaced(module: L.LightningModule, forward: Callable[..., Any]) -> Iterator[None]:
    """`module(x)` calls `forward` on this instance only, until the block ends."""
    module.forward = forward
    try:
        yield
    finally:
        del module.forward  # the class's forward again


def validate(module: L.LightningModule, batches: list[Any], device: torch.device) -> dict[str, float]:
    """The module's own validation over `batches` (Trainer.validate, no logger, no callbacks):
    every metric it logs in validation, named as results.json names them (`val/dice` -> `val_dice`)."""
    accelerator, devices = ("cuda", [device.index or 0]) if device.type == "cuda" else ("cpu", 1)
    quiet = logging.getLogger("lightning.pytorch")
    level, quiet.level = quiet.level, logging.WARNING  # "GPU available: ..." once per validation
    # Lightning's own pytree deprecation, once per validation
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message=r".*isinstance\(treespec, LeafSpec\)` is deprecated.*")
        try:
            trainer = L.Trainer(
                accelerator=accelerator,
                devices=devices,
                logger=False,
                callbacks=[],
                enable_checkpointing=False,
                enable_progress_bar=False,
                enable_model_summary=False,
            )
            trainer.validate(module, dataloaders=DataLoader(Batches(batches), batch_size=None), verbose=False)
        finally:
            quiet.level = level
    return {
        results_key(name): float(value)
        for name, value in trainer.callback_metrics.items()
        if is_validation_metric(name)
    }


def measure(
    module: L.LightningModule, batches: list[Any], outputs: list[Any], device: torch.device, is_fp32: bool
) -> tuple[dict[str, float], dict[str, float], list[Any], bool]:
    """The engine's metrics (its `outputs` replayed), the fp32 module's metrics and outputs (the
    same when the engine is the fp32 module itself), and whether the replay fitted."""
    replay = Replay(outputs, module.forward)
    with forward_replaced(module, replay):
        metrics = validate(module, batches, device)
    matched = replay.matched and replay.calls == len(outputs)
    if is_fp32 and matched:
        return metrics, metrics, outputs, True
    recorder = Recorder(module.forward)
    with forward_replaced(module, recorder):
        fp32_metrics = validate(module, batches, device)
    return (metrics if matched else fp32_metrics), fp32_metrics, recorder.outputs, matched


def comparison(outputs: list[Any], reference: list[Any], segmentation: bool) -> dict[str, float]:
    """How far the engine's predictions are from the fp32 module's: the share of predicted classes
    (argmax over dim 1: per image, or per pixel) that agree, for outputs of scores per class; with
    `segmentation`, also the Dice between the two sets of masks."""
    pairs = [(o, r) for o, r in zip(outputs, reference, strict=True) if isinstance(o, torch.Tensor)]
    if len(pairs) != len(outputs) or not pairs or pairs[0][0].ndim < 2:
        return {}
    ours = [o.float().argmax(1) for o, _ in pairs]
    theirs = [r.float().argmax(1) for _, r in pairs]
    result = {"agreement_vs_fp32": benchmark.pixel_agreement(ours, theirs)}
    if segmentation:
        result["dice_vs_fp32"] = benchmark.dice(ours, theirs, pairs[0][0].shape[1])
    return result
