"""What a run trains: a LightningModule and a LightningDataModule, each given by its `_target_` and
init arguments, or no data module at all (`data=none`: the module's own loaders). segperf's own
workloads (conf/model/*.yaml, conf/data/*.yaml) and a user's (`--config-dir ./conf model=mine
data=mine`) are built by the one `build_workload`, which the recipe (segperf.training.run) calls.

Whose workload it is is never guessed from a config's keys (a lightning-hydra-template model has a
`net: {_target_: ...}` just as segperf's do). What differs is what the classes themselves declare:

- Init arguments. A model or data config holds, beside its class's arguments, keys that are
  segperf's: the speed axes write `data.num_workers` / `data.prefetch_factor` / `data.pin_memory` /
  `data.persistent_workers` and `model.memory_format` / `model.compile` into it, and `model.quality`
  names the quality metric. Such a key reaches a constructor only if the constructor takes an
  argument of that name whose annotation (or, unannotated, whose default) admits segperf's value
  (`takes`): `compile: bool` takes `model.compile`, `memory_format: torch.memory_format` does not
  take "channels_last". A constructor with `**kwargs` takes them all (segperf's data modules).
- The model axes. An axis handed to the module's constructor is the module's to apply: segperf's
  modules compile their net and set its layout themselves, and so does the lightning-hydra-template's
  `compile: bool` (its net compiled in `setup("fit")`); `model.compile` is that argument. An axis
  not handed over segperf applies itself: channels-last weights and inputs, and torch.compile of the
  module's forward. `model_changes` in results.json says which happened.
- The loaders. A data module that is a segperf RunDataModule (segperf.data.base) builds its loaders
  with the run's axes and draws `train_images` itself. Any other data module's loaders, or the
  module's own under `data=none`, are rebuilt with the run's batch size and DataLoader axes
  (segperf.training.loaders), and the run size limits the batches the Trainer draws.
- The net. A net that answers segperf.model.Net (`check_input_size`, `describe`) is checked against
  the data module's height and width before any work, and describes the run.
"""

from __future__ import annotations

import inspect
import math
import types
import typing
from collections.abc import Callable
from typing import Any

import lightning as L
import torch
from hydra.utils import get_object, instantiate
from lightning.pytorch.utilities.model_helpers import is_overridden
from lightning_utilities.core.apply_func import apply_to_collection
from omegaconf import DictConfig, OmegaConf

from segperf.data.base import RunDataModule
from segperf.errors import SettingsError
from segperf.training.loaders import LoaderSettings, rebuild

USER_MODEL_KEYS = ("memory_format", "compile", "quality")  # segperf's keys in a model config
USER_DATA_KEYS = ("num_workers", "prefetch_factor", "pin_memory", "persistent_workers")  # ... in a data config
# what a workload-only axis group writes into the config: the node whose class must take that argument
# (the key's last part), and the axis's name
WORKLOAD_ONLY = {
    "model.net.upsample": ("model.net", "upsample (the U-Net's)"),
    "data.decode": ("data", "decode"),
    "data.cache": ("data", "cache"),
    "data.augment": ("data", "augment"),
}
# a module's init arguments as plain lists and dicts, not OmegaConf's: its save_hyperparameters()
# puts them in every checkpoint, which segperf.infer loads with weights_only=True (plain data only)
PLAIN = "all"
GENERIC_AXES = "workers, prefetch, pin, memory_format, compile, precision, threads, batch_size"
LOADER_HOOKS = ("train", "val")  # the loaders a run reads: `<name>_dataloader()`


def is_users_model(model_cfg: Any) -> bool:
    """Whether a model config names someone else's LightningModule than segperf's own, from its
    `_target_` alone: a class of the segperf package (segperf.model...) or not. Never from the
    config's keys. segperf.infer reads a segperf module's net and data sizes; training takes one
    path for both (module docstring)."""
    return not str(model_cfg.get("_target_") or "").startswith("segperf.")


def has_no_data_module(data_cfg: Any) -> bool:
    """`data=none` (conf/data/none.yaml, `_target_: null`): the module's own loaders."""
    return data_cfg.get("_target_") is None


class Workload:
    """The run's data module (None under `data=none`) and module, a line describing them, and what
    the Trainer needs for them (`trainer_options`); `record(results)` adds what segperf changed to
    results.json."""

    def __init__(self, datamodule: L.LightningDataModule | None, module: L.LightningModule, description: str) -> None:
        self.datamodule, self.module, self.description = datamodule, module, description
        self.trainer_options: dict[str, Any] = {}
        self.loaders: dict[str, Any] = {}  # per loader name: what rebuilding changed / could not apply
        self.model_changes: dict[str, Any] = {}
        self.quality_choice: dict[str, Any] | None = None

    @property
    def loader_source(self) -> Any:
        """What the run's loaders come from: the data module, or the module itself (data=none)."""
        return self.module if self.datamodule is None else self.datamodule

    @property
    def validates(self) -> bool:
        """Whether the run has a validation loader (a module with its own loaders may have none)."""
        return isinstance(self.datamodule, RunDataModule) or has_loader(self.loader_source, "val")

    def dataset_summary(self) -> dict[str, Any] | None:
        """results.json's `dataset`: segperf's data modules say it themselves; otherwise the sizes
        of the datasets the loaders read."""
        if getattr(self.datamodule, "split", None) is not None:
            return self.datamodule.summary()
        if not self.loaders:
            return None
        sizes = {f"{name}_dataset_size": entry.get("dataset_size") for name, entry in self.loaders.items()}
        return {"datamodule": source_name(self.datamodule, self.module), **sizes}

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
    """The data module and the module from their configs, one path for anyone's (module docstring)."""
    refuse_workload_only_axes(cfg)
    datamodule = None if has_no_data_module(cfg.data) else instantiate(init_config(cfg.data, USER_DATA_KEYS))
    module = instantiate(init_config(cfg.model, USER_MODEL_KEYS), _convert_=PLAIN)
    if datamodule is None and not has_loader(module, "train"):
        raise SettingsError(
            [
                f"data=none: {type(module).__qualname__} has no train_dataloader() of its own; name a data module "
                "with data=<name> (a data/<name>.yaml giving its _target_)"
            ]
        )
    workload = Workload(datamodule, module, check_and_describe(module, datamodule))
    workload.quality_choice = OmegaConf.to_container(cfg.model.quality) if cfg.model.get("quality") else None
    workload.model_changes = apply_model_axes(module, cfg.model)
    if isinstance(datamodule, RunDataModule):  # builds its loaders with the axes, and draws the run itself
        return workload
    settings = LoaderSettings(
        num_workers=cfg.data.get("num_workers", 0),
        prefetch_factor=cfg.data.get("prefetch_factor"),
        pin_memory=cfg.data.get("pin_memory", False),
        persistent_workers=cfg.data.get("persistent_workers", True),
        batch_size=cfg.batch_size,
    )
    own_workers = None if datamodule is None else constructor_default(cfg.data, "num_workers")
    for name in LOADER_HOOKS:
        if has_loader(workload.loader_source, name):
            rebuild_loaders_of(workload, name, settings, own_workers)
    steps = math.ceil(cfg.train_images / cfg.batch_size)
    workload.trainer_options = {
        # the run size in batches: the loaders have their own length, and may be shorter
        "max_steps": steps,
        "max_epochs": -1,
        "limit_train_batches": steps,
        "limit_val_batches": math.ceil(cfg.val_images / cfg.batch_size),
        # plain loaders: Lightning shards them across ranks (segperf's own shard themselves)
        "use_distributed_sampler": True,
    }
    return workload


def has_loader(source: Any, name: str) -> bool:
    """Whether a data module (or a module, under data=none) defines `<name>_dataloader()` itself,
    rather than inheriting Lightning's, which raises."""
    return source is not None and is_overridden(f"{name}_dataloader", source)


def source_name(datamodule: L.LightningDataModule | None, module: L.LightningModule) -> str:
    if datamodule is None:
        return f"{type(module).__qualname__}'s own loaders"
    return type(datamodule).__qualname__


def check_and_describe(module: L.LightningModule, datamodule: L.LightningDataModule | None) -> str:
    """A net that answers segperf.model.Net (its module's `net`) checks the data's input size,
    before any work, and describes the run; any other module is described by its parameters."""
    net = getattr(module, "net", None)
    height, width = getattr(datamodule, "height", None), getattr(datamodule, "width", None)
    if callable(getattr(net, "check_input_size", None)) and height is not None and width is not None:
        net.check_input_size(height, width)
        if callable(getattr(net, "describe", None)):
            return net.describe(height, width)
    return describe(module, datamodule)


def describe(module: L.LightningModule, datamodule: L.LightningDataModule | None) -> str:
    params = sum(p.numel() for p in module.parameters())
    return f"{type(module).__qualname__} ({params:,} parameters) on {source_name(datamodule, module)}"


def init_config(node: DictConfig, segperf_keys: tuple[str, ...]) -> DictConfig:
    """`node` without those of segperf's keys its constructor does not take (see `takes`). Raises
    SettingsError where the constructor has an argument of that name that segperf's value does
    not fit and no default for it (segperf cannot fill it, and will not pass a value of another
    meaning)."""
    plain = OmegaConf.to_container(node, resolve=True)
    kept, problems = {}, []
    for key, value in plain.items():
        if key not in segperf_keys or takes(node, key, value):
            kept[key] = value
        elif (parameter := parameters_of(node).get(key)) is not None and parameter.default is inspect.Parameter.empty:
            problems.append(
                f"{key}: {node._target_} takes `{key}` as {annotation_text(parameter)}, which segperf's {key}="
                f"{value!r} does not fit, and has no default for it; give it a default (segperf then leaves it "
                "alone), or another name"
            )
    if problems:
        raise SettingsError(problems)
    return OmegaConf.create(kept)


def parameters_of(node: DictConfig) -> dict[str, inspect.Parameter]:
    """The init arguments of the callable a config's `_target_` names."""
    try:
        return dict(inspect.signature(get_object(node._target_)).parameters)
    except (TypeError, ValueError):  # no signature to read (a builtin)
        return {}


def takes(node: DictConfig, key: str, value: Any) -> bool:
    """Whether the constructor `node._target_` names takes `key` as segperf means it: an argument of
    that name whose annotation admits `value` (unannotated: whose default is of `value`'s type, or
    None), or `**kwargs`."""
    parameter = parameters_of(node).get(key)
    if parameter is None:
        return takes_argument(node, key)
    if parameter.kind in (inspect.Parameter.VAR_POSITIONAL, inspect.Parameter.POSITIONAL_ONLY):
        return False
    annotation = resolved_annotation(node, parameter)
    if annotation is not inspect.Parameter.empty:
        return admits(annotation, value)
    default = parameter.default
    if default is inspect.Parameter.empty or default is None or value is None:
        return True
    return admits(type(default), value)


def resolved_annotation(node: DictConfig, parameter: inspect.Parameter) -> Any:
    """A parameter's annotation as a type: a string one (`from __future__ import annotations`)
    evaluated in its constructor's module, or left a string where that fails."""
    annotation = parameter.annotation
    if not isinstance(annotation, str):
        return annotation
    target = get_object(node._target_)
    function = target.__init__ if isinstance(target, type) else target
    try:
        return eval(annotation, getattr(function, "__globals__", {}))  # noqa: S307 (how inspect reads them too)
    except Exception:
        return annotation


def admits(annotation: Any, value: Any) -> bool:
    """Whether an argument annotated `annotation` takes `value` as what it is (a bool is no int here:
    `compile: int` is not segperf's compile switch)."""
    if annotation in (Any, object):
        return True
    if isinstance(annotation, str):  # not resolvable: read by its words
        words = annotation.replace("|", " ").replace("[", " ").replace("]", " ").replace(",", " ").split()
        return (
            "Any" in words
            or (value is None and ("None" in words or "Optional" in words))
            or (type(value).__name__ in words)
        )
    origin = typing.get_origin(annotation)
    if origin in (typing.Union, types.UnionType):
        return any(admits(arg, value) for arg in typing.get_args(annotation))
    if origin is typing.Literal:
        return value in typing.get_args(annotation)
    if origin is typing.Annotated:
        return admits(typing.get_args(annotation)[0], value)
    if annotation is None or annotation is type(None):
        return value is None
    kind = origin or annotation
    if not isinstance(kind, type):
        return True  # a TypeVar, a NewType, ...: nothing to hold the value against
    if isinstance(value, bool) and kind is not bool:
        return False
    if kind is float and isinstance(value, int):
        return True
    return isinstance(value, kind)


def annotation_text(parameter: inspect.Parameter) -> str:
    annotation = parameter.annotation
    return annotation if isinstance(annotation, str) else getattr(annotation, "__name__", str(annotation))


def refuse_workload_only_axes(cfg: DictConfig) -> None:
    """A key only some workloads have (`+upsample=deconv` puts `net.upsample` in any model config,
    `+cache=memory` a `cache` in any data config), where the class it would reach takes no such
    argument."""
    present = []
    for key, (owner, name) in WORKLOAD_ONLY.items():
        if OmegaConf.select(cfg, key) is None:
            continue
        node = OmegaConf.select(cfg, owner)
        argument = key.rsplit(".", 1)[1]
        if not (OmegaConf.is_dict(node) and node.get("_target_") and takes_argument(node, argument)):
            present.append(name)
    if present:
        data = cfg.data.get("_target_") or "its own loaders (data=none)"
        raise SettingsError(
            [
                f"{', '.join(present)}: not an axis of this workload ({cfg.model._target_} on {data}); "
                f"its axes are {GENERIC_AXES}"
            ]
        )


def takes_argument(node: DictConfig, name: str) -> bool:
    """Whether the callable a config's `_target_` names takes an argument `name` (or **kwargs)."""
    parameters = parameters_of(node)
    return name in parameters or any(p.kind is inspect.Parameter.VAR_KEYWORD for p in parameters.values())


def apply_model_axes(module: L.LightningModule, model_cfg: DictConfig) -> dict[str, Any]:
    """memory_format and compile: given to the module's constructor where it takes them (it applies
    them itself, said in the record when they are not the baseline), else applied here: the weights
    (and 4-D float inputs, after the batch reaches the device) in channels-last; the module's forward
    compiled in place (what `self(x)` in its steps calls; submodules it calls directly stay eager)."""
    changes: dict[str, Any] = {}
    name = type(module).__qualname__
    memory_format, compile = model_cfg.get("memory_format", "nchw"), model_cfg.get("compile", False)
    if memory_format == "channels_last":
        if takes(model_cfg, "memory_format", memory_format):
            changes["memory_format"] = f"channels_last: given to {name}(memory_format=...), which applies it"
        else:
            module.to(memory_format=torch.channels_last)
            wrap_after_transfer(module, to_channels_last)
            changes["memory_format"] = "channels_last: weights, and 4-D float inputs on the device"
    if compile:
        if takes(model_cfg, "compile", compile):
            changes["compile"] = f"true: given to {name}(compile=True), which compiles as it does"
        else:
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
    it (the class takes no such argument, or not as segperf means it), else the argument's default
    (0 when it has none)."""
    parameter = parameters_of(node).get(key)
    if parameter is None or node.get(key) is None or not takes(node, key, node.get(key)):
        return None
    default = parameter.default
    return 0 if default is inspect.Parameter.empty else default


def rebuild_loaders_of(workload: Workload, name: str, settings: LoaderSettings, own_workers: int | None = None) -> None:
    """The data module's (or, under data=none, the module's) `<name>_dataloader` returns its loader
    rebuilt; patched on the instance, so every other hook of the user's class (setup, transfer,
    state) stays theirs. `own_workers`: the workers the data module would have given its loaders had
    segperf not passed its num_workers to the constructor (see segperf.training.loaders.rebuild)."""
    source = workload.loader_source
    own = getattr(source, f"{name}_dataloader")

    def rebuilt_loader() -> Any:
        result = rebuild(own(), settings, name, own_workers)
        dataset = getattr(result.loader, "dataset", None)
        size = len(dataset) if hasattr(dataset, "__len__") else None
        workload.loaders[name] = result.record() | {"dataset_size": size}
        return result.loader

    setattr(source, f"{name}_dataloader", rebuilt_loader)
