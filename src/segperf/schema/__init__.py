"""The structured schema of `conf/train.yaml`, and the range checks a type cannot express.

Each rule lives in one place, so every bad setting stops before any work with a line that names it:

1. Types, key names and choices: the dataclasses below (the run's), in segperf.schema.workloads
   (each data and model option's, with the enums of their choices) and in segperf.tune.schema
   (the tuner's settings) are registered in Hydra's ConfigStore (`register_schema`), and
   `segperf_train_schema` heads train.yaml's defaults list, so Hydra itself rejects a misspelt
   key (`data.num_worker=2`), a value of the wrong type (`batch_size=abc`) or an option a setting
   does not have (`data.cache=disk`: Hydra lists the valid ones) while composing, with its own
   message and no traceback.
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
from typing import Any

from hydra.core.config_store import ConfigStore
from omegaconf import MISSING, DictConfig, OmegaConf

from segperf.errors import SettingsError  # raised by check_settings; imported from here too
from segperf.quality import MODES as QUALITY_MODES  # what model.quality.mode may be
from segperf.schema.workloads import (  # the data and model options' schemas, and their choices
    PRECISIONS,
    Accelerator,
    Augment,
    Cache,
    CnnSchema,
    DataSchema,
    Decode,
    ImageFolderSchema,
    MemoryFormat,
    MnistSchema,
    ModelSchema,
    ResNetSchema,
    positive_int,
)
from segperf.tune.schema import TuneSchema  # the tuner's settings: only conf/tune.yaml has them

__all__ = [
    "Augment",
    "Cache",
    "Decode",
    "MemoryFormat",
    "SettingsError",
    "TrainSchema",
    "check_settings",
    "own_problems",
    "problems_in",
    "register_schema",
]


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
        positive_int(problems, name, cfg[name])
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
        positive_int(problems, "num_threads", cfg.num_threads, " (or threads=one|half|all, or null: torch's default)")
    return problems


def check_settings(cfg: DictConfig) -> None:
    """Raise SettingsError listing every bad value; silent when the config can run."""
    problems = problems_in(cfg)
    if problems:
        raise SettingsError(problems)
