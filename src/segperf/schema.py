"""The structured schema of `conf/train.yaml`, and the range checks a type cannot express.

Each rule lives in one place, so every bad setting stops before any work with a line that names it:

1. Types, key names and choices: the dataclasses below are registered in Hydra's ConfigStore as
   `segperf_train_schema` and head train.yaml's defaults list, so Hydra itself rejects a
   misspelt key (`data.num_worker=2`), a value of the wrong type (`batch_size=abc`) or an
   option a setting does not have (`data.cache=disk`: the enums below; Hydra lists the valid
   ones) while composing, with its own message and no traceback.
2. Ranges: `check_settings` runs first thing in every run (sweep jobs too) and lists every
   out-of-range value at once, one line each, with what is allowed. OmegaConf does not call a
   dataclass's `__post_init__`, so each workload's schema carries its range checks as a
   `problems` classmethod beside its types (`own_problems` finds them by the type a config node
   was composed from); the checks of the run itself are in `problems_in`.
3. A net's own rule about its input (the U-Net's size divisible by 2 per pooling) is the net's
   `check_input_size`, which a run calls before any work: it is not restated here.

The values themselves live in conf/ (the YAML): a field here only types its key (MISSING), and
the constructors (segperf.data, segperf.model) do not check again what the schema guarantees.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any

from hydra.core.config_store import ConfigStore
from omegaconf import MISSING, DictConfig, OmegaConf

from segperf.errors import SettingsError  # raised by check_settings; imported from here too
from segperf.quality import MODES as QUALITY_MODES  # what model.quality.mode may be


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
            _positive_int(problems, f"data.builtin.{split}", data.builtin[split], " (images of the built-in digits)")
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
class TrainerSchema:
    """Types of the Trainer's arguments segperf sets; the values live in conf/trainer/*.yaml."""

    _target_: str = MISSING
    accelerator: Accelerator = MISSING
    devices: Any = MISSING
    strategy: str = MISSING
    num_nodes: int = MISSING
    precision: str = MISSING
    max_epochs: int = MISSING
    val_check_interval: int = MISSING
    check_val_every_n_epoch: int | None = MISSING
    use_distributed_sampler: bool = MISSING
    num_sanity_val_steps: int = MISSING
    log_every_n_steps: int = MISSING
    enable_progress_bar: bool = MISSING
    enable_model_summary: bool = MISSING
    deterministic: Any = MISSING
    benchmark: bool | None = MISSING
    # a limit on training's wall time (Lightning's Timer stops after the step that passes it; the run
    # ends like a finished one, with the images/s of its steps): the tuner's probes set it. null: none
    max_time: Any = None


@dataclass
class PathsSchema:
    output_dir: str | None = MISSING  # the run folder (Hydra's; train() sets it); None without one (`--cfg job`)


@dataclass
class PerfSchema:
    measure: bool = MISSING
    sample_interval_s: float = MISSING
    peak_probe: bool = MISSING


@dataclass
class TuneProbeSchema:
    steps: int = MISSING
    max_steps: int = MISSING
    precision: float = MISSING
    val_images: int = MISSING
    time_limit_factor: float = MISSING
    min_time_limit_s: float = MISSING
    screen_factor: float = MISSING
    screen_steps: int = MISSING
    overrides: list[str] = MISSING


@dataclass
class TuneQualitySchema:
    enabled: bool = MISSING
    # per model; `default` for a model not listed (null: not checked)
    runs: dict[str, list[str] | None] = MISSING
    tolerance: float = MISSING


@dataclass
class TuneSchema:
    """`python -m segperf.tune`'s settings (conf/tune.yaml; checked by segperf.tune.settings_check)."""

    budget_minutes: float = MISSING
    presets: list[list[str]] = MISSING
    batch_size: bool = MISSING
    level: float = MISSING
    min_runs: int = MISSING
    max_runs: int = MISSING
    later_noise: float | None = None
    probe: TuneProbeSchema = field(default_factory=TuneProbeSchema)
    quality: TuneQualitySchema = field(default_factory=TuneQualitySchema)


@dataclass
class TrainSchema:
    # each option of the data and model groups brings its own schema (e.g. data/carvana.yaml
    # starts from `carvana_schema`), so another workload can have other keys
    data: Any = MISSING
    model: Any = MISSING
    trainer: TrainerSchema = field(default_factory=TrainerSchema)
    # the Lightning callbacks by name, each with its `_target_` (the callbacks and profile groups)
    callbacks: dict[str, Any] = field(default_factory=dict)
    paths: PathsSchema = field(default_factory=PathsSchema)
    perf: PerfSchema = field(default_factory=PerfSchema)
    train_images: int = MISSING
    val_images: int = MISSING
    batch_size: int = MISSING
    val_every_images: int = MISSING
    seed: int = MISSING
    warmup_steps: int = MISSING
    cold_cache: bool = MISSING
    # torch's intra-op threads (torch.set_num_threads); null = torch's default (the threads group)
    num_threads: int | None = MISSING
    # sweep axis for repeated measurements (`-m repeat=0,1,2`); the report groups repeats
    repeat: int | None = MISSING
    # a run folder to continue from its last checkpoint (see docs/troubleshooting.md, "Interrupting and resuming")
    resume: str | None = MISSING
    # the tuner's settings: only conf/tune.yaml has them (python -m segperf.tune; docs/tuning.md)
    tune: TuneSchema | None = None


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


def register_schema() -> None:
    """Make the schemas available to the defaults lists: `segperf_train_schema` (train.yaml),
    `data/carvana_schema` (data/carvana.yaml), `model/unet_schema` (model/unet.yaml), and the
    MNIST/CNN workload's `data/mnist_schema` and `model/cnn_schema`, and the image folder's
    `model/resnet18_schema` and `data/imagefolder_schema`. Idempotent."""
    store = ConfigStore.instance()
    store.store(name="segperf_train_schema", node=TrainSchema)
    store.store(group="data", name="carvana_schema", node=DataSchema)
    store.store(group="model", name="unet_schema", node=ModelSchema)
    store.store(group="data", name="mnist_schema", node=MnistSchema)
    store.store(group="model", name="cnn_schema", node=CnnSchema)
    store.store(group="model", name="resnet18_schema", node=ResNetSchema)
    store.store(group="data", name="imagefolder_schema", node=ImageFolderSchema)


def _positive_int(problems: list[str], name: str, value: Any, hint: str = "") -> None:
    if not isinstance(value, int) or isinstance(value, bool) or value < 1:
        problems.append(f"{name}={value!r}: must be a whole number >= 1{hint}")


def own_problems(node: Any) -> list[str]:
    """The range checks of the schema a config node was composed from (its `problems`), if any."""
    if not OmegaConf.is_dict(node):
        return []
    check = getattr(OmegaConf.get_type(node), "problems", None)
    return check(node) if check is not None else []


def quality_problems(quality: Any) -> list[str]:
    """The model config's `quality: {metric, mode}` (a user's own config has no schema): a mode
    other than max or min was taken as max, so a lower-is-better metric was judged upside down."""
    if quality is None:
        return []
    example = "e.g. quality: {metric: val_acc, mode: max}"
    if not OmegaConf.is_dict(quality):
        return [f"model.quality={quality!r}: give the logged validation metric and its direction, {example}"]
    problems = [
        f"model.quality.{key}: not a setting of model.quality, which takes metric and mode ({example})"
        for key in quality
        if key not in ("metric", "mode")
    ]
    mode, metric = quality.get("mode"), quality.get("metric")
    if mode is not None and mode not in QUALITY_MODES:
        problems.append(
            f"model.quality.mode={mode!r}: use max (higher is better: an accuracy, Dice) or min (lower is better: "
            "a loss, an error)"
        )
    if metric is not None and not isinstance(metric, str):
        problems.append(
            f"model.quality.metric={metric!r}: the name of a metric the module logs in validation ({example})"
        )
    return problems


def problems_in(cfg: DictConfig) -> list[str]:
    """Every out-of-range value in a composed train config, one line each (the schema's types
    and enums have already refused wrong types and unknown options while composing)."""
    problems: list[str] = []
    data, model = cfg.data, cfg.model
    for name in ("train_images", "val_images", "batch_size", "val_every_images"):
        _positive_int(problems, name, cfg[name])
    if cfg.warmup_steps < 0:
        problems.append(f"warmup_steps={cfg.warmup_steps}: must be >= 0 (0 measures every step)")
    # each workload's checks live beside its types (a user's own data or model config has none)
    problems += own_problems(data) + own_problems(model) + own_problems(model.get("net"))
    problems += quality_problems(model.get("quality"))
    precision = cfg.trainer.precision
    if precision not in PRECISIONS:
        options = ", ".join(f"{name} (precision={group})" for name, group in PRECISIONS.items())
        problems.append(f"trainer.precision={precision!r}: use one of {options}")
    if cfg.perf.sample_interval_s <= 0:
        problems.append(f"perf.sample_interval_s={cfg.perf.sample_interval_s}: must be > 0 seconds, e.g. 0.05")
    if cfg.get("num_threads") is not None:
        _positive_int(problems, "num_threads", cfg.num_threads, " (or threads=one|half|all, or null: torch's default)")
    return problems


def check_settings(cfg: DictConfig) -> None:
    """Raise SettingsError listing every bad value; silent when the config can run."""
    problems = problems_in(cfg)
    if problems:
        raise SettingsError(problems)
