"""What an inference run runs: the trained LightningModule and its data, for any model segperf trains.

The module is rebuilt from the training run's config (results.json `config.model`: the U-Net,
the CNN, ResNet-18, or a user's own LightningModule by its `_target_`) and loaded with the
checkpoint's weights; the data module likewise (`config.data`), with infer's DataLoader axes and
batch size. A user's class is imported by its `_target_`, so infer needs the import path training
had: run it from the folder training ran in (the one holding the user's package), as training.

A batch becomes the module's input the way training feeds it: moved to the device, then the
module's own `on_after_batch_transfer` (segperf's modules convert uint8 to float there and pick
the layout), then the batch's first item (`module(image)` for an `(image, target)` batch).
"""

from __future__ import annotations

import importlib
import math
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import lightning as L
import torch
from hydra.utils import instantiate
from omegaconf import DictConfig, OmegaConf
from torch import nn

from segperf.inference.checkpoint import InferenceError
from segperf.quality import choose, declared, of_results
from segperf.training.loaders import LoaderSettings, rebuild
from segperf.training.workload import (
    PLAIN,
    USER_DATA_KEYS,
    USER_MODEL_KEYS,
    constructor_default,
    init_config,
    is_users_model,
    to_channels_last,
    wrap_after_transfer,
)


@dataclass
class InferenceWorkload:
    """The fp32 module (eval, on the device, weights loaded), the net the runtimes run (segperf's
    net, or the user's whole module: what its forward calls), the validation loader, and the
    number of images the loader yields (for the warm-up of a smaller last batch)."""

    module: L.LightningModule
    net: nn.Module
    datamodule: L.LightningDataModule
    loader: Any
    device: torch.device
    images: int | None
    users: bool
    quality_choice: dict[str, Any] | None

    def feed(self, batch: Any) -> torch.Tensor:
        """The module's input of one loaded batch, as training computes it (module docstring)."""
        batch = self.module.transfer_batch_to_device(batch, self.device, 0)
        return model_input(self.module.on_after_batch_transfer(batch, 0))

    def dataset_summary(self) -> dict[str, Any]:
        if getattr(self.datamodule, "split", None) is not None:
            return self.datamodule.summary()
        return {"datamodule": type(self.datamodule).__qualname__, "val_dataset_size": self.images}


def model_input(batch: Any) -> torch.Tensor:
    """The first item of an `(input, target, ...)` batch, or the batch itself when it is a tensor."""
    item = batch[0] if isinstance(batch, list | tuple) and batch else batch
    if not isinstance(item, torch.Tensor):
        raise InferenceError(
            f"segperf.infer runs module(batch[0]) on each validation batch; this data module's batches are "
            f"{type(batch).__name__}{'' if item is batch else f' whose first item is {type(item).__name__}'}, "
            "not (input tensor, target, ...): return batches of that form from val_dataloader()"
        )
    return item


def build(
    model_cfg: DictConfig,
    data_cfg: DictConfig,
    state_dict: dict[str, torch.Tensor],
    *,
    val_images: int | None,
    batch_size: int,
    device: torch.device,
    checkpoint: str,
) -> InferenceWorkload:
    """The module with the checkpoint's weights and the validation loader (module docstring)."""
    users = is_users_model(model_cfg)
    module = instantiate_module(model_cfg, users)
    try:
        module.load_state_dict(state_dict)
    except RuntimeError as error:
        raise InferenceError(
            f"{checkpoint}: its weights do not fit {model_cfg._target_} as the run's config builds it: "
            f"{str(error).strip().splitlines()[0]}"
        ) from None
    module = module.float().eval().to(device)
    if users:
        importable(data_cfg, "data")
        datamodule = instantiate_checked(init_config(data_cfg, USER_DATA_KEYS), "data")
        datamodule.prepare_data()  # as Lightning does before setup: a download, a cache written once
        datamodule.setup("validate")
        settings = LoaderSettings(
            num_workers=data_cfg.get("num_workers", 0),
            prefetch_factor=data_cfg.get("prefetch_factor"),
            pin_memory=data_cfg.get("pin_memory", False),
            persistent_workers=data_cfg.get("persistent_workers", True),
            batch_size=batch_size,
        )
        loader = rebuild(
            datamodule.val_dataloader(), settings, "val", constructor_default(data_cfg, "num_workers")
        ).loader
        dataset = getattr(loader, "dataset", None)
        size = len(dataset) if hasattr(dataset, "__len__") else None
        if val_images is not None:  # whole batches from the start, as training's limit_val_batches
            batches = math.ceil(val_images / batch_size)
            loader = FirstBatches(loader, batches)
            size = batches * batch_size if size is None else min(size, batches * batch_size)
        quality = OmegaConf.to_container(model_cfg.quality) if model_cfg.get("quality") else None
        return InferenceWorkload(module, module, datamodule, loader, device, size, True, quality)
    datamodule = instantiate_checked(data_cfg, "data", val_images=val_images or 1, batch_size=batch_size)
    datamodule.prepare_data()
    datamodule.setup("validate")
    if val_images is None:  # null: the whole validation split
        use_whole_split(datamodule)
    module.net.check_input_size(datamodule.height, datamodule.width)  # before any work
    loader = datamodule.val_dataloader()
    return InferenceWorkload(module, module.net, datamodule, loader, device, len(loader.dataset), False, None)


def instantiate_module(model_cfg: DictConfig, users: bool) -> L.LightningModule:
    """fp32, eager: the runtime compiles and casts a copy. segperf's modules pick the input layout
    in their own transfer hook (memory_format); a user's gets channels-last as training gives it."""
    if not users:
        return instantiate_checked(model_cfg, "model", compile=False)
    importable(model_cfg, "model")  # before init_config reads the class's signature
    module = instantiate_checked(init_config(model_cfg, USER_MODEL_KEYS), "model")
    if model_cfg.get("memory_format", "nchw") == "channels_last":
        module.to(memory_format=torch.channels_last)
        wrap_after_transfer(module, to_channels_last)
    return module


def importable(node: DictConfig, group: str) -> None:
    """The module of `node._target_` imports, or one line saying where infer must run: it imports a
    user's classes as training did, so from the same folder."""
    try:
        importlib.import_module(str(node._target_).rpartition(".")[0])
    except ImportError as error:
        raise InferenceError(
            f"cannot import the run's {group}._target_={node._target_} ({error}): run segperf.infer from the "
            "folder training ran in (the one holding your package), or put that package on PYTHONPATH"
        ) from None


def instantiate_checked(node: DictConfig, group: str, **kwargs: Any) -> Any:
    """`instantiate` of an importable class, its init arguments as plain data."""
    importable(node, group)
    return instantiate(node, _convert_=PLAIN, **kwargs)


def use_whole_split(datamodule: L.LightningDataModule) -> None:
    """Every validation image: MNIST's data module picks its `val_images` in setup (set up again),
    Carvana's and the image folders' when building the loader."""
    if hasattr(datamodule, "test_images"):
        datamodule.split, datamodule.val_images = None, datamodule.test_images
        datamodule.setup("validate")
    else:
        datamodule.val_images = len(datamodule.split.val)


class FirstBatches:
    """The first `batches` batches of a loader (a user's loader is as long as its dataset)."""

    def __init__(self, loader: Any, batches: int) -> None:
        self.loader, self.batches = loader, batches

    def __len__(self) -> int:
        return min(self.batches, len(self.loader)) if hasattr(self.loader, "__len__") else self.batches

    def __iter__(self) -> Iterator[Any]:
        for index, batch in enumerate(self.loader):
            if index == self.batches:
                return
            yield batch

    def __getattr__(self, name: str) -> Any:  # dataset, batch_size, ...
        return getattr(self.loader, name)


def quality_choice(workload: InferenceWorkload, train_quality: dict[str, Any], names: list[str]) -> tuple[str, str]:
    """The metric the run is judged by (segperf.quality): the training run's (its results.json),
    the model config's or the module's declaration, else the rule training uses; among `names`."""
    train = of_results(train_quality) if train_quality else None
    judged = choose(names, train, declared(workload.module, workload.quality_choice))
    return (judged.key, judged.mode) if judged is not None else ("", "max")
