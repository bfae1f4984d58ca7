"""Where the weights come from, how they are loaded safely, and which dtype they run in.

A checkpoint is loaded with `torch.load(weights_only=True)`: tensors and plain data only, so a
file from elsewhere cannot run code on unpickling. The net is rebuilt from the `net_config` that
SegmentationModule.on_save_checkpoint stores, not from pickled classes.
"""

from __future__ import annotations

import json
import pickle
from pathlib import Path
from typing import Any

import torch

from segperf.errors import needs_code, unreadable_checkpoint
from segperf.model.unet import UNet


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


def resolve_source(ckpt: str | None, run_dir: str | None) -> tuple[Path, dict[str, Any] | None]:
    """The checkpoint file, and the training config when a training run dir is given.

    `run_dir` supplies checkpoints/last.ckpt and the config recorded in its results.json (image
    size, data root); an explicit `ckpt` wins over the run's checkpoint.
    """
    if ckpt is None and run_dir is None:
        raise InferenceError("no weights given: use ckpt=<path to a .ckpt file> or run_dir=<a training run dir>")
    train_config = None
    if run_dir is not None:
        run = Path(run_dir).expanduser()
        if not run.is_dir():
            raise InferenceError(f"run_dir={run}: no such directory")
        results = run / "results.json"
        if results.is_file():
            train_config = json.loads(results.read_text()).get("config")
        if ckpt is None:
            ckpt = str(run / "checkpoints" / "last.ckpt")
    path = Path(ckpt).expanduser().absolute()
    if path.is_dir():
        raise InferenceError(
            f"ckpt={path}: a folder, not a checkpoint file; give run_dir={path} for a training run's folder, "
            "or ckpt=<its checkpoints/last.ckpt>"
        )
    if not path.is_file():
        raise InferenceError(f"checkpoint not found: {path}")
    return path, train_config


def load_net(path: Path) -> UNet:
    """The fp32 U-Net of a segperf checkpoint, in eval mode on the CPU."""
    try:
        checkpoint = torch.load(path, map_location="cpu", weights_only=True)
    except pickle.UnpicklingError as error:
        if not needs_code(error):  # a damaged file: torch says UnpicklingError for that too
            raise InferenceError(unreadable_checkpoint(path, error)) from None
        reason = str(error).strip().splitlines()[0]
        raise InferenceError(
            f"refusing to load {path}: it holds objects other than tensors and plain data, and segperf loads "
            f"checkpoints with weights_only=True so that no file can run code ({reason})"
        ) from None
    except Exception as error:  # cut short, or not a torch file at all
        raise InferenceError(unreadable_checkpoint(path, error)) from None
    if not isinstance(checkpoint, dict) or "net_config" not in checkpoint or "state_dict" not in checkpoint:
        raise InferenceError(f"{path} is not a segperf checkpoint (no net_config and state_dict)")
    state = {k.removeprefix("net."): v for k, v in checkpoint["state_dict"].items() if k.startswith("net.")}
    net = UNet(**checkpoint["net_config"])
    try:
        net.load_state_dict(state)
    except RuntimeError as error:
        raise InferenceError(f"{path}: weights do not fit its net_config: {error}") from None
    return net.float().eval()


def probe_dtype(
    net_config: dict[str, Any], dtype: torch.dtype, device: torch.device, channels_last: bool
) -> str | None:
    """Run a tiny twin of the net (same layers, 4 channels, smallest input) in `dtype`; None when it
    works, else why not. Which dtypes a torch build runs on a device is found by trying, not by lists."""
    if dtype == torch.float32:
        return None
    levels = len(net_config["level_channels"])
    twin = UNet(**{**net_config, "stem_channels": 4, "level_channels": [4] * levels}).eval().to(device, dtype)
    side = 2 ** (levels - 1)
    x = torch.rand(1, net_config["in_channels"], side, side, device=device).to(dtype)
    if channels_last:
        twin, x = twin.to(memory_format=torch.channels_last), x.contiguous(memory_format=torch.channels_last)
    try:
        with torch.inference_mode():
            twin(x).float().sum().item()
    except (RuntimeError, NotImplementedError) as error:
        return str(error).strip().splitlines()[0]
    return None
