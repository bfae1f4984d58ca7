"""The schemas of the data and model options (conf/data/*.yaml, conf/model/*.yaml start from
them: `carvana_schema`, `unet_schema`, ...), with the choices their settings take and each option's
range checks beside its types (a `problems` classmethod: segperf.schema.own_problems finds it by
the type a config node was composed from). See segperf.schema for the rules.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any

from omegaconf import MISSING, DictConfig


class Choice(StrEnum):
    """A setting with a fixed set of options (a `str` Enum): a member's name is what users type (`data.cache=memory`:
    OmegaConf matches an enum by name), its value the same string, so it equals and prints as the string the code
    compares it with. plain_config (enum_to_str) turns them into plain strings for results.json and the run."""


class Decode(Choice):
    full = "full"
    reduced = "reduced"


class Cache(Choice):
    off = "off"
    memory = "memory"
    device = "device"


class Augment(Choice):
    off = "off"
    basic = "basic"


class Upsample(Choice):
    upconv = "upconv"
    deconv = "deconv"


class Norm(Choice):
    none = "none"
    batch = "batch"
    group = "group"


class MemoryFormat(Choice):
    nchw = "nchw"
    channels_last = "channels_last"


class Accelerator(Choice):
    auto = "auto"
    cpu = "cpu"
    gpu = "gpu"
    cuda = "cuda"
    mps = "mps"


# `raise` is a Python keyword, so this one cannot be written as a class body
OnBadSample = Choice("OnBadSample", [("raise", "raise"), ("skip", "skip")], module=__name__)
DataCheck = Choice("DataCheck", [("header", "header"), ("decode", "decode")], module=__name__)

# Lightning precision names segperf measures, and the `precision` group option that sets each.
# trainer.precision stays a string checked by problems_in, not an enum: OmegaConf matches an
# enum by its member names, and Lightning's names ("32-true", "bf16-mixed") are not Python
# identifiers, so an enum would make users type other names than Lightning's.
PRECISIONS = {"32-true": "fp32", "bf16-mixed": "bf16", "16-mixed": "fp16"}
# MNIST's image side, segperf.data.mnist.digits.SIDE (not imported: it would load numpy and Pillow for
# every config check, which runs before the heavy imports)
DIGIT_SIDE = 28


@dataclass
class SyntheticSchema:
    cache_dir: str = MISSING
    cars: int = MISSING
    seed: int = MISSING
    width: int = MISSING
    height: int = MISSING


@dataclass
class LoaderSchema:
    """What every data option has: where the data is, the run size, and the DataLoader axes."""

    _target_: str = MISSING
    root: str | None = MISSING
    train_images: int = MISSING
    val_images: int = MISSING
    batch_size: int = MISSING
    seed: int = MISSING
    num_workers: int = MISSING
    prefetch_factor: int | None = MISSING
    pin_memory: bool = MISSING
    persistent_workers: bool = MISSING

    @classmethod
    def problems(cls, data: DictConfig) -> list[str]:
        """The out-of-range values of a data config of this type, one line each (each schema adds
        its own checks to those of the one it extends)."""
        problems = []
        if data.num_workers < 0:
            problems.append(
                f"data.num_workers={data.num_workers}: must be >= 0 (0 loads in the main process; workers=auto "
                "uses one per available core)"
            )
        if data.prefetch_factor is not None and data.prefetch_factor < 1:
            problems.append(
                f"data.prefetch_factor={data.prefetch_factor}: must be >= 1 batches, or null for none (prefetch=off)"
            )
        return problems


@dataclass
class ImageDataSchema(LoaderSchema):  # the image data sets': input size, split, the data pipeline
    height: int = MISSING
    width: int = MISSING
    holdout_frac: float = MISSING
    on_bad_sample: OnBadSample = MISSING  # type: ignore[valid-type]
    check: DataCheck = MISSING  # type: ignore[valid-type]  # header | decode: segperf.data.decodecheck
    max_image_pixels: int = MISSING  # <= 0 refuses every image, each named as "too large" with the setting
    # the data-pipeline axes: the data option's own groups set them (data/carvana.yaml's defaults list)
    decode: Decode = MISSING
    cache: Cache = MISSING
    augment: Augment = MISSING
    cold_cache: bool = MISSING

    @classmethod
    def problems(cls, data: DictConfig) -> list[str]:
        # the input size is the net's to judge (each net's check_input_size, before any work)
        problems = super().problems(data)
        if not 0.0 < data.holdout_frac < 1.0:
            problems.append(
                f"data.holdout_frac={data.holdout_frac}: must be between 0 and 1 (exclusive): the share of cars "
                "held out for validation, e.g. 0.2"
            )
        return problems


@dataclass
class DataSchema(ImageDataSchema):  # data=carvana
    synthetic: SyntheticSchema = field(default_factory=SyntheticSchema)

    @classmethod
    def problems(cls, data: DictConfig) -> list[str]:
        problems = super().problems(data)
        if data.synthetic.cars < 2:
            problems.append(f"data.synthetic.cars={data.synthetic.cars}: must be >= 2 (one to train on, one held out)")
        return problems


@dataclass
class NetSchema:
    _target_: str = MISSING
    in_channels: int = MISSING
    num_classes: int = MISSING
    stem_channels: int = MISSING
    level_channels: list[int] = MISSING
    # the upsample group, which the U-Net's own defaults list brings (model/unet.yaml)
    upsample: Upsample = MISSING
    # none: the seed's plain net; batch / group: a norm layer after each block conv (no conv bias)
    norm: Norm = MISSING


@dataclass
class ModelSchema:
    _target_: str = MISSING
    net: NetSchema = field(default_factory=NetSchema)
    lr: float = MISSING
    memory_format: MemoryFormat = MISSING
    compile: bool = MISSING
    sample_panels: int = MISSING
    # a learning-rate schedule stepped every training step: a `_partial_: true` scheduler config
    # (e.g. torch.optim.lr_scheduler.OneCycleLR), or null for a constant lr (the seed's)
    scheduler: Any = None

    @classmethod
    def problems(cls, model: DictConfig) -> list[str]:
        """The out-of-range values of a model config of this type, one line each."""
        return [f"model.lr={model.lr}: must be > 0, e.g. 1e-4"] if model.lr <= 0 else []


@dataclass
class BuiltinDigitsSchema:
    cache_dir: str = MISSING
    train: int = MISSING
    test: int = MISSING
    seed: int = MISSING


@dataclass
class MnistSchema(LoaderSchema):
    builtin: BuiltinDigitsSchema = field(default_factory=BuiltinDigitsSchema)

    @classmethod
    def problems(cls, data: DictConfig) -> list[str]:
        problems = super().problems(data)
        for split in ("train", "test"):
            positive_int(problems, f"data.builtin.{split}", data.builtin[split], " (images of the built-in digits)")
        return problems


@dataclass
class ClassifierNetSchema:  # ResNet-18's (model=resnet18); the CNN's adds its layers
    _target_: str = MISSING
    in_channels: int = MISSING
    num_classes: int = MISSING


@dataclass
class CnnNetSchema(ClassifierNetSchema):
    channels: list[int] = MISSING
    hidden: int = MISSING
    dropout: float = MISSING

    @classmethod
    def problems(cls, net: DictConfig) -> list[str]:
        problems = []
        if not 0.0 <= net.dropout < 1.0:
            problems.append(f"model.net.dropout={net.dropout}: must be >= 0 and < 1, e.g. 0.25")
        if DIGIT_SIDE % 2 ** len(net.channels):
            problems.append(
                f"model.net.channels={list(net.channels)}: each block halves the {DIGIT_SIDE}x{DIGIT_SIDE} "
                "digits, which must halve exactly: at most 2 blocks, e.g. [32, 64]"
            )
        return problems


@dataclass
class CnnSchema:
    _target_: str = MISSING
    net: CnnNetSchema = field(default_factory=CnnNetSchema)
    lr: float = MISSING
    memory_format: MemoryFormat = MISSING
    compile: bool = MISSING

    @classmethod
    def problems(cls, model: DictConfig) -> list[str]:
        return ModelSchema.problems(model)  # model.lr; the net's own checks are its schema's (CnnNetSchema)


@dataclass
class ResNetSchema(CnnSchema):
    net: ClassifierNetSchema = field(default_factory=ClassifierNetSchema)  # type: ignore[assignment]
    mean: list[float] = MISSING  # per-channel normalization of the 0-1 pixels
    std: list[float] = MISSING
    scheduler: Any = None
    top5: bool = MISSING  # top-5 accuracy too, where there are more than 5 classes


@dataclass
class BuiltinImagesSchema:
    cache_dir: str = MISSING
    classes: int = MISSING
    per_class: int = MISSING
    seed: int = MISSING


@dataclass
class ImageFolderSchema(ImageDataSchema):
    """`data=imagefolder`; `num_classes` is `${imagefolder_classes:...}` (segperf.config)."""

    split_seed: int = MISSING  # the split's own seed: runs of other seeds validate on the same images
    num_classes: int = MISSING
    builtin: BuiltinImagesSchema = field(default_factory=BuiltinImagesSchema)


def positive_int(problems: list[str], name: str, value: Any, hint: str = "") -> None:
    if not isinstance(value, int) or isinstance(value, bool) or value < 1:
        problems.append(f"{name}={value!r}: must be a whole number >= 1{hint}")
