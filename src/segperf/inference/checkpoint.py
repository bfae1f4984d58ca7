"""Where the weights come from, how they are loaded safely, and which dtype they run in.

A checkpoint is loaded with `torch.load(weights_only=True)`: tensors and plain data only, so a
file from elsewhere cannot run code on unpickling. One that holds objects (a module that saves its
`net` nn.Module in its hyperparameters, as lightning-hydra-template's does) is read through the
weights-only copy segperf's own runs write beside it (segperf.training.checkpoints.weights_copy),
loaded the same way; without one it is refused in one line that says what to do. The module is
rebuilt from its config, not from pickled classes: the training run's (results.json
`config.model`, any model segperf trains, a user's own LightningModule too), or for a bare U-Net
checkpoint the `net_config` that SegmentationModule.on_save_checkpoint stores.
"""

from __future__ import annotations

import inspect
import json
import pickle
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch
from torch import nn

from segperf.errors import needs_code, unreadable_checkpoint
from segperf.model.unet import UNet
from segperf.training.checkpoints import unsafe_globals, weights_copy


class InferenceError(RuntimeError):
    """An expected failure (bad path, foreign checkpoint, missing package): reported in one line."""


# The `precision` group sets trainer.precision for training (autocast); inference reuses the same
# group to choose the dtype the trained fp32 weights are cast to (the seed's "reduce parameter precision").
WEIGHT_DTYPES = {
    "32-true": torch.float32,
    "32": torch.float32,
    "bf16-mixed": torch.bfloat16,
    "bf16-true": torch.bfloat16,
    "16-mixed": torch.float16,
    "16-true": torch.float16,
}
DTYPE_NAMES = {torch.float32: "float32", torch.bfloat16: "bfloat16", torch.float16: "float16"}
PRECISION_OF = {torch.float32: "32-true", torch.bfloat16: "bf16-mixed", torch.float16: "16-mixed"}


def weights_dtype(precision: str) -> torch.dtype:
    try:
        return WEIGHT_DTYPES[str(precision)]
    except KeyError:
        raise InferenceError(
            f"trainer.precision={precision!r} has no weight dtype; use precision=fp32, bf16 or fp16"
        ) from None


@dataclass
class Source:
    """Where the weights are, and what the training run recorded (None with a bare `ckpt`)."""

    checkpoint: Path
    train_config: dict[str, Any] | None = None
    train_quality: dict[str, Any] = field(default_factory=dict)


def resolve_source(ckpt: str | None, run_dir: str | None) -> Source:
    """The checkpoint file, and the training run's config and quality when a run dir is given.

    `run_dir` supplies checkpoints/last.ckpt and the config recorded in its results.json (which
    model and data module, image size, data root); an explicit `ckpt` wins over the run's checkpoint.
    """
    if ckpt is None and run_dir is None:
        raise InferenceError("no weights given: use ckpt=<path to a .ckpt file> or run_dir=<a training run dir>")
    source = Source(Path())
    if run_dir is not None:
        run = Path(run_dir).expanduser()
        if not run.is_dir():
            raise InferenceError(f"run_dir={run}: no such directory")
        results = run / "results.json"
        recorded: dict[str, Any] = {}
        if results.is_file():
            recorded = json.loads(results.read_text())
            source.train_config, source.train_quality = recorded.get("config"), recorded.get("quality") or {}
        if ckpt is None:
            ckpt = str(run / "checkpoints" / "last.ckpt")
            if not Path(ckpt).is_file():
                raise InferenceError(no_run_checkpoint(run, recorded))
    path = Path(ckpt).expanduser().absolute()
    if path.is_dir():
        raise InferenceError(
            f"ckpt={path}: a folder, not a checkpoint file; give run_dir={path} for a training run's folder, "
            "or ckpt=<its checkpoints/last.ckpt>"
        )
    if not path.is_file():
        raise InferenceError(f"checkpoint not found: {path}")
    source.checkpoint = path
    return source


def no_run_checkpoint(run: Path, results: dict[str, Any]) -> str:
    """Why a training run folder has no checkpoints/last.ckpt, and what to give instead."""
    status = results.get("status")
    why = f"the run's status is {status!r}" if status else "it has no results.json (is it a training run folder?)"
    message = f"run_dir={run} has no checkpoints/last.ckpt to run: {why}; a run saves it at each validation"
    interrupted = run / "checkpoints" / "interrupted.ckpt"
    if interrupted.is_file():
        return f"{message}. It has {interrupted}: give ckpt={interrupted} run_dir={run} to run those weights"
    return f"{message}. Train it to a validation first (or resume it: python -m segperf.train resume={run})"


def read_checkpoint(path: Path) -> dict[str, Any]:
    """A checkpoint's contents, loaded with weights_only=True (see the module docstring); for one
    that holds objects, its weights-only copy's."""
    try:
        checkpoint = torch.load(path, map_location="cpu", weights_only=True)
    except pickle.UnpicklingError as error:
        if not needs_code(error):  # a damaged file: torch says UnpicklingError for that too
            raise InferenceError(unreadable_checkpoint(path, error)) from None
        checkpoint = read_weights_copy(path)
    except Exception as error:  # cut short, or not a torch file at all
        raise InferenceError(unreadable_checkpoint(path, error)) from None
    if not isinstance(checkpoint, dict) or "state_dict" not in checkpoint:
        raise InferenceError(f"{path} is not a segperf checkpoint (no state_dict: not a Lightning checkpoint)")
    return checkpoint


def read_weights_copy(path: Path) -> dict[str, Any]:
    """The weights-only copy a segperf run wrote beside `path` (a checkpoint that needs code to
    load), if it is of this checkpoint: written after it. Else one line saying what to do."""
    copy = weights_copy(path)
    if copy.is_file() and copy.stat().st_mtime_ns >= path.stat().st_mtime_ns:
        try:
            return torch.load(copy, map_location="cpu", weights_only=True)
        except Exception as error:  # damaged or cut short: said as for any checkpoint
            raise InferenceError(unreadable_checkpoint(copy, error)) from None
    raise InferenceError(refusal(path, copy))


def refusal(path: Path, copy: Path) -> str:
    """One line: why `path` is not loaded and the ways forward."""
    try:
        names = unsafe_globals(path)
    except Exception:  # the names are a courtesy; the refusal stands without them
        names = []
    shown = ", ".join(names[:3]) + (f" and {len(names) - 3} more" if len(names) > 3 else "")
    held = f" ({shown})" if shown else ""
    stale = f"; its {copy.name} is older than it" if copy.is_file() else f" and has no {copy.name} beside it"
    return (
        f"refusing to load {path}: it holds objects{held} that only load by running code from the file{stale}. "
        "Runs of this segperf write that weights-only copy: train it again with python -m segperf.train and give "
        "run_dir=<that run>, or keep objects out of the module's checkpoint "
        '(self.save_hyperparameters(ignore=["net"]))'
    )


def unet_model_config(path: Path, checkpoint: dict[str, Any]) -> dict[str, Any]:
    """The model config of a bare checkpoint (no training run to read it from): the U-Net in its
    SegmentationModule, rebuilt from the `net_config` the module stores. Any other net's checkpoint
    needs its run folder, whose results.json says which model (and data) it trained."""
    hint = "give run_dir=<its training run folder>: its results.json says which model and data it trained"
    if "net_config" not in checkpoint:
        raise InferenceError(f"{path} is not a segperf checkpoint (no net_config and state_dict); {hint}")
    config = dict(checkpoint["net_config"])
    unknown = set(config) - set(inspect.signature(UNet).parameters)
    if unknown:
        raise InferenceError(f"{path} holds another net than the U-Net ({', '.join(sorted(unknown))}); {hint}")
    return {"_target_": "segperf.model.SegmentationModule", "net": {"_target_": "segperf.model.UNet", **config}}


def load_net(path: Path) -> UNet:
    """The fp32 U-Net of a segperf checkpoint, in eval mode on the CPU."""
    checkpoint = read_checkpoint(path)
    unet_model_config(path, checkpoint)  # a U-Net's, or say which folder to give instead
    state = {k.removeprefix("net."): v for k, v in checkpoint["state_dict"].items() if k.startswith("net.")}
    net = UNet(**checkpoint["net_config"])
    try:
        net.load_state_dict(state)
    except RuntimeError as error:
        raise InferenceError(f"{path}: weights do not fit its net_config: {error}") from None
    return net.float().eval()


def probe_dtype(net: nn.Module, example: torch.Tensor) -> str | None:
    """Run the cast net on one input of the data (`example`, already in its dtype and layout); None
    when it works, else why not. Which dtypes a torch build runs on a device is found by trying,
    not by lists."""
    if example.dtype == torch.float32:
        return None
    try:
        with torch.inference_mode():
            output = net(example[:1])
        if isinstance(output, torch.Tensor):
            output.float().sum().item()
    except (RuntimeError, NotImplementedError, TypeError) as error:
        return str(error).strip().splitlines()[0]
    return None
