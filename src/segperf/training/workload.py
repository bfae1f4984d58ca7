"""What a run trains: segperf's own net in its LightningModule, or a user's LightningModule and
LightningDataModule given by their `_target_` and init arguments (`--config-dir ./conf model=mine
data=mine`). The recipe (segperf.training.run) asks `build_workload` and treats both alike.

A user's config holds, beside its init arguments, keys that are segperf's: the speed axes write
`data.num_workers` / `data.prefetch_factor` / `data.pin_memory` and `model.memory_format` /
`model.compile` into it, and `model.quality` names the quality metric. Those never reach the
user's constructors (unless a constructor takes an argument of that name); segperf applies them
itself: the DataLoaders are rebuilt (segperf.training.loaders), channels-last and torch.compile
are applied to the module, and the run size limits the batches the Trainer draws.
"""

from __future__ import annotations

import inspect
import math
from collections.abc import Callable
from typing import Any

import lightning as L
import torch
from hydra.utils import get_class, instantiate
from lightning_utilities.core.apply_func import apply_to_collection
from omegaconf import DictConfig, OmegaConf

from segperf.errors import SettingsError
from segperf.training.loaders import LoaderSettings, rebuild

USER_MODEL_KEYS = ("memory_format", "compile", "quality")  # segperf's keys in a user's model config
USER_DATA_KEYS = ("num_workers", "prefetch_factor", "pin_memory", "persistent_workers")
# what a workload-only axis group writes into the config, and which workloads have it
WORKLOAD_ONLY = {"model.net": "upsample (the U-Net's)", "data.decode": "decode", "data.cache": "cache"}
WORKLOAD_ONLY |= {"data.augment": "augment"}
# a module's init arguments as plain lists and dicts, not OmegaConf's: its save_hyperparameters()
# puts them in every checkpoint, which segperf.infer loads with weights_only=True (plain data only)
PLAIN = "all"
GENERIC_AXES = "workers, prefetch, pin, memory_format, compile, precision, threads, batch_size"


def is_users_model(model_cfg: Any) -> bool:
    """A model config without segperf's `net` (a `_target_` of its own) is a user's LightningModule."""
    net = model_cfg.get("net")
    return not (isinstance(net, dict | DictConfig) and "_target_" in net)


class Workload:
    """The run's data module and module, a line describing them, and what the Trainer needs
    for them (`trainer_options`); `record(results)` adds what segperf changed to results.json."""

    def __init__(self, datamodule: L.LightningDataModule, module: L.LightningModule, description: str) -> None:
        self.datamodule, self.module, self.description = datamodule, module, description
        self.trainer_options: dict[str, Any] = {}
        self.loaders: dict[str, Any] = {}  # per loader name: what rebuilding changed / could not apply
        self.model_changes: dict[str, Any] = {}
        self.quality_choice: dict[str, Any] | None = None

    def dataset_summary(self) -> dict[str, Any] | None:
        """results.json's `dataset`: segperf's data modules say it themselves; for a user's, the
        sizes of the datasets its loaders read."""
        if getattr(self.datamodule, "split", None) is not None:
            return self.datamodule.summary()
        if not self.loaders:
            return None
        sizes = {f"{name}_dataset_size": entry.get("dataset_size") for name, entry in self.loaders.items()}
        return {"datamodule": type(self.datamodule).__qualname__, **sizes}

    def record(self, results: dict[str, Any]) -> dict[str, dict[str, Any]]:
        """results.json's `loaders` and `model_changes`; each setting a loader could not apply goes
        into `adjusted` (the report's "not applied"). Returns those, for the run's notices."""
        added: dict[str, dict[str, Any]] = {}
        if self.loaders:
            results["loaders"] = self.loaders
            for entry in self.loaders.values():
                for key, change in entry["not_applied"].items():
                    if key not in results["adjusted"]:
                        results["adjusted"][key] = added[key] = change
        if self.model_changes:
            results["model_changes"] = self.model_changes
        return added


def build_workload(cfg: DictConfig) -> Workload:
    """segperf's net and module from `model.net`, or the user's classes (see the module docstring)."""
    if not is_users_model(cfg.model):
        datamodule = instantiate(cfg.data)
        net = instantiate(cfg.model.net)
        net.check_input_size(datamodule.height, datamodule.width)  # before any work, not at the first step
        module = instantiate(cfg.model, net=net, _convert_=PLAIN)
        return Workload(datamodule, module, net.describe(datamodule.height, datamodule.width))
    refuse_workload_only_axes(cfg)
    datamodule = instantiate(init_config(cfg.data, USER_DATA_KEYS))
    module = instantiate(init_config(cfg.model, USER_MODEL_KEYS), _convert_=PLAIN)
    workload = Workload(datamodule, module, describe(module, datamodule))
    workload.quality_choice = OmegaConf.to_container(cfg.model.quality) if cfg.model.get("quality") else None
    workload.model_changes = apply_model_axes(module, cfg.model)
    settings = LoaderSettings(
        num_workers=cfg.data.get("num_workers", 0),
        prefetch_factor=cfg.data.get("prefetch_factor"),
        pin_memory=cfg.data.get("pin_memory", False),
        persistent_workers=cfg.data.get("persistent_workers", True),
        batch_size=cfg.batch_size,
    )
    own_workers = constructor_default(cfg.data, "num_workers")
    for name in ("train", "val"):
        rebuild_loaders_of(workload, name, settings, own_workers)
    steps = math.ceil(cfg.train_images / cfg.batch_size)
    workload.trainer_options = {
        # the run size in batches: the user's loaders have their own length, and may be shorter
        "max_steps": steps,
        "max_epochs": -1,
        "limit_train_batches": steps,
        "limit_val_batches": math.ceil(cfg.val_images / cfg.batch_size),
        # a user's plain loaders: Lightning shards them across ranks (segperf's own shard themselves)
        "use_distributed_sampler": True,
    }
    return workload


def init_config(node: DictConfig, segperf_keys: tuple[str, ...]) -> DictConfig:
    """`node` without segperf's keys, except those the constructor itself takes."""
    params = inspect.signature(get_class(node._target_).__init__).parameters
    takes_any = any(p.kind is inspect.Parameter.VAR_KEYWORD for p in params.values())
    plain = OmegaConf.to_container(node, resolve=True)
    return OmegaConf.create({k: v for k, v in plain.items() if k not in segperf_keys or k in params or takes_any})


def refuse_workload_only_axes(cfg: DictConfig) -> None:
    """A key only segperf's own workloads have (`+upsample=deconv` puts a `net` in the model config)."""
    present = [name for key, name in WORKLOAD_ONLY.items() if OmegaConf.select(cfg, key) is not None]
    if present:
        raise SettingsError(
            [
                f"{', '.join(present)}: not an axis of this workload ({cfg.model._target_} on {cfg.data._target_}); "
                f"its axes are {GENERIC_AXES}"
            ]
        )


def describe(module: L.LightningModule, datamodule: L.LightningDataModule) -> str:
    params = sum(p.numel() for p in module.parameters())
    return f"{type(module).__qualname__} ({params:,} parameters) on {type(datamodule).__qualname__}"


def apply_model_axes(module: L.LightningModule, model_cfg: DictConfig) -> dict[str, Any]:
    """memory_format and compile on a module segperf did not write: the weights (and 4-D float
    inputs, after the batch reaches the device) in channels-last; the module's forward compiled in
    place (what `self(x)` in its steps calls; submodules it calls directly stay eager)."""
    changes: dict[str, Any] = {}
    if model_cfg.get("memory_format", "nchw") == "channels_last":
        module.to(memory_format=torch.channels_last)
        wrap_after_transfer(module, to_channels_last)
        changes["memory_format"] = "channels_last: weights, and 4-D float inputs on the device"
    if model_cfg.get("compile", False):
        module.compile()
        changes["compile"] = "torch.compile of the module's forward (in place)"
    return changes


def to_channels_last(batch: Any) -> Any:
    """Every 4-d floating-point tensor of the batch in channels-last layout, the batch's structure
    kept (tuples, NamedTuples, dicts, dataclasses: Lightning's own collection walker)."""

    def convert(tensor: torch.Tensor) -> torch.Tensor:
        if tensor.ndim == 4 and tensor.is_floating_point():
            return tensor.contiguous(memory_format=torch.channels_last)
        return tensor

    return apply_to_collection(batch, torch.Tensor, convert)


def wrap_after_transfer(module: L.LightningModule, convert: Callable[[Any], Any]) -> None:
    """`convert` after the module's own on_after_batch_transfer, on this instance only."""
    own = module.on_after_batch_transfer

    def on_after_batch_transfer(batch: Any, dataloader_idx: int) -> Any:
        return convert(own(batch, dataloader_idx))

    module.on_after_batch_transfer = on_after_batch_transfer


def constructor_default(node: DictConfig, key: str) -> Any:
    """What the user's own class gives `key` when segperf does not: None where segperf does not pass
    it (the class takes no such argument), else the argument's default (0 when it has none)."""
    params = inspect.signature(get_class(node._target_).__init__).parameters
    if key not in params or node.get(key) is None:
        return None
    default = params[key].default
    return 0 if default is inspect.Parameter.empty else default


def rebuild_loaders_of(workload: Workload, name: str, settings: LoaderSettings, own_workers: int | None = None) -> None:
    """The data module's `<name>_dataloader` returns its loader rebuilt; patched on the instance,
    so every other hook of the user's data module (setup, transfer, state) stays theirs.
    `own_workers`: the workers the data module would have given its loaders had segperf not passed
    its num_workers to the constructor (see segperf.training.loaders.rebuild)."""
    datamodule = workload.datamodule
    own = getattr(datamodule, f"{name}_dataloader")

    def rebuilt_loader() -> Any:
        result = rebuild(own(), settings, name, own_workers)
        dataset = getattr(result.loader, "dataset", None)
        size = len(dataset) if hasattr(dataset, "__len__") else None
        workload.loaders[name] = result.record() | {"dataset_size": size}
        return result.loader

    setattr(datamodule, f"{name}_dataloader", rebuilt_loader)
