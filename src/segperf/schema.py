"""The structured schema of `conf/train.yaml`, and the range checks a type cannot express.

Two layers, so every bad setting stops before any work with one line that names it:

1. Types and key names: the dataclasses below are registered in Hydra's ConfigStore as
   `segperf_train_schema` and head train.yaml's defaults list, so Hydra itself rejects a
   misspelt key (`data.num_worker=2`) or a value of the wrong type (`batch_size=abc`) while
   composing, with its own one-line message and no traceback.
2. Values: `check_settings` runs first thing in every run (sweep jobs too) and lists every
   out-of-range or unknown value, each with what is allowed. OmegaConf does not call a
   dataclass's `__post_init__`, so these checks cannot live in the dataclasses.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from hydra.core.config_store import ConfigStore
from omegaconf import MISSING, DictConfig, OmegaConf

from segperf.errors import SegperfError

# Lightning precision names segperf measures, and the `precision` group option that sets each.
PRECISIONS = {"32-true": "fp32", "bf16-mixed": "bf16", "16-mixed": "fp16"}
CHOICES = {
    "data.on_bad_sample": ("raise", "skip"),
    "data.decode": ("full", "reduced"),
    "data.cache": ("off", "memory", "device"),
    "data.augment": ("off", "basic"),
    "model.net.upsample": ("upconv", "deconv"),
    "model.memory_format": ("nchw", "channels_last"),
    "trainer.accelerator": ("auto", "cpu", "gpu", "cuda", "mps"),
}


@dataclass
class SyntheticSchema:
    cache_dir: str = "~/.cache/segperf"
    cars: int = 10
    seed: int = 0
    width: int = 1918
    height: int = 1280


@dataclass
class LoaderSchema:
    """What every data option has: where the data is, the run size, and the DataLoader axes."""

    _target_: str = MISSING
    root: str | None = None
    train_images: int = MISSING
    val_images: int = MISSING
    batch_size: int = MISSING
    seed: int = 0
    num_workers: int = 0
    prefetch_factor: int | None = None
    pin_memory: bool = False
    persistent_workers: bool = True
    # the Carvana pipeline's axes; their groups set them for every workload (problems_in and the
    # other data modules accept only the baselines)
    decode: str = "full"
    cache: str = "off"
    augment: str = "off"


@dataclass
class DataSchema(LoaderSchema):
    _target_: str = "segperf.data.datamodule.CarvanaDataModule"
    height: int = 256
    width: int = 384
    holdout_frac: float = 0.2
    on_bad_sample: str = "raise"
    cold_cache: bool = False
    synthetic: SyntheticSchema = field(default_factory=SyntheticSchema)


@dataclass
class NetSchema:
    _target_: str = "segperf.model.UNet"
    in_channels: int = 3
    num_classes: int = 2
    stem_channels: int = 16
    level_channels: list[int] = field(default_factory=lambda: [32, 64, 128, 256, 512])
    upsample: str = "upconv"


@dataclass
class ModelSchema:
    _target_: str = "segperf.model.SegmentationModule"
    net: NetSchema = field(default_factory=NetSchema)
    lr: float = 1e-4
    memory_format: str = "nchw"
    compile: bool = False
    sample_panels: int = 4


@dataclass
class BuiltinDigitsSchema:
    cache_dir: str = "~/.cache/segperf"
    train: int = 60000
    test: int = 10000
    seed: int = 0


@dataclass
class MnistSchema(LoaderSchema):
    _target_: str = "segperf.data.mnist.MnistDataModule"
    builtin: BuiltinDigitsSchema = field(default_factory=BuiltinDigitsSchema)


@dataclass
class CnnNetSchema:
    _target_: str = "segperf.model.cnn.DigitCNN"
    in_channels: int = 1
    num_classes: int = 10
    channels: list[int] = field(default_factory=lambda: [32, 64])
    hidden: int = 128
    dropout: float = 0.25
    upsample: str = "upconv"  # set by the U-Net's upsample group for every model; only upconv applies


@dataclass
class CnnSchema:
    _target_: str = "segperf.model.cnn.ClassificationModule"
    net: CnnNetSchema = field(default_factory=CnnNetSchema)
    lr: float = 1e-3
    memory_format: str = "nchw"
    compile: bool = False


@dataclass
class TrainerSchema:
    accelerator: str = "auto"
    devices: Any = 1
    # "ddp" over several devices/nodes (trainer=ddp); "auto": one device
    strategy: str = "auto"
    num_nodes: int = 1
    precision: str = "32-true"
    num_sanity_val_steps: int = 0
    log_every_n_steps: int = 5
    enable_progress_bar: bool = True
    enable_model_summary: bool = True
    deterministic: Any = False
    benchmark: bool | None = None


@dataclass
class PerfSchema:
    measure: bool = True
    sample_interval_s: float = 0.05
    ops_steps: int = 0
    # perf stat hardware counters over the training steps after warm-up (profile=counters)
    counters: bool = False


@dataclass
class TrainSchema:
    # each option of the data and model groups brings its own schema (e.g. data/carvana.yaml
    # starts from `carvana_schema`), so another workload can have other keys
    data: Any = MISSING
    model: Any = MISSING
    trainer: TrainerSchema = field(default_factory=TrainerSchema)
    perf: PerfSchema = field(default_factory=PerfSchema)
    train_images: int = MISSING
    val_images: int = MISSING
    batch_size: int = MISSING
    val_every_images: int = MISSING
    seed: int = 0
    warmup_steps: int = 2
    cold_cache: bool = False
    # torch's intra-op threads (torch.set_num_threads); null = torch's default (the threads group)
    num_threads: int | None = None
    # sweep axis for repeated measurements (`-m repeat=0,1,2`); the report groups repeats
    repeat: int | None = None
    # a run folder to continue from its last checkpoint (see README, "Interrupting and resuming")
    resume: str | None = None


def register_schema() -> None:
    """Make the schemas available to the defaults lists: `segperf_train_schema` (train.yaml),
    `data/carvana_schema` (data/carvana.yaml), `model/unet_schema` (model/unet.yaml), and the
    MNIST/CNN workload's `data/mnist_schema` and `model/cnn_schema`. Idempotent."""
    store = ConfigStore.instance()
    store.store(name="segperf_train_schema", node=TrainSchema)
    store.store(group="data", name="carvana_schema", node=DataSchema)
    store.store(group="model", name="unet_schema", node=ModelSchema)
    store.store(group="data", name="mnist_schema", node=MnistSchema)
    store.store(group="model", name="cnn_schema", node=CnnSchema)


class SettingsError(SegperfError, ValueError):
    """Settings that cannot run; the message has one line per problem, each naming the setting."""

    def __init__(self, problems: list[str]) -> None:
        self.problems = problems
        super().__init__("\n".join(problems))


def _positive_int(problems: list[str], name: str, value: Any, hint: str = "") -> None:
    if not isinstance(value, int) or isinstance(value, bool) or value < 1:
        problems.append(f"{name}={value!r}: must be a whole number >= 1{hint}")


def problems_in(cfg: DictConfig) -> list[str]:
    """Every out-of-range or unknown value in a composed train config, one line each."""
    problems: list[str] = []
    data, model = cfg.data, cfg.model
    for name in ("train_images", "val_images", "batch_size", "val_every_images"):
        _positive_int(problems, name, cfg[name])
    if cfg.warmup_steps < 0:
        problems.append(f"warmup_steps={cfg.warmup_steps}: must be >= 0 (0 measures every step)")
    if data.get("num_workers", 0) < 0:
        problems.append(
            f"data.num_workers={data.num_workers}: must be >= 0 (0 loads in the main process; workers=auto "
            "uses one per available core)"
        )
    if data.get("prefetch_factor") is not None and data.prefetch_factor < 1:
        problems.append(
            f"data.prefetch_factor={data.prefetch_factor}: must be >= 1 batches, or null for none (prefetch=off)"
        )
    if "level_channels" in model.get("net", {}) and "height" in data:
        levels = len(model.net.level_channels) - 1
        divisor = 2**levels
        for name in ("height", "width"):
            value = data[name]
            if value < divisor or value % divisor:
                problems.append(
                    f"data.{name}={value}: the U-Net pools {levels} times, so the input size must be a positive "
                    f"multiple of {divisor} (e.g. 256x384)"
                )
    if "holdout_frac" in data and not 0.0 < data.holdout_frac < 1.0:
        problems.append(
            f"data.holdout_frac={data.holdout_frac}: must be between 0 and 1 (exclusive): the share of cars "
            "held out for validation, e.g. 0.2"
        )
    for key, allowed in CHOICES.items():
        value = OmegaConf.select(cfg, key, default=_ABSENT)  # absent: not this workload's key
        if value is not _ABSENT and value not in allowed:
            problems.append(f"{key}={value!r}: use one of {', '.join(allowed)}")
    precision = cfg.trainer.precision
    if precision not in PRECISIONS:
        options = ", ".join(f"{name} (precision={group})" for name, group in PRECISIONS.items())
        problems.append(f"trainer.precision={precision!r}: use one of {options}")
    if cfg.perf.sample_interval_s <= 0:
        problems.append(f"perf.sample_interval_s={cfg.perf.sample_interval_s}: must be > 0 seconds, e.g. 0.05")
    if cfg.perf.ops_steps < 0:
        problems.append(f"perf.ops_steps={cfg.perf.ops_steps}: must be >= 0 (0 = no operator profile)")
    if model.get("lr", 1.0) <= 0:
        problems.append(f"model.lr={model.lr}: must be > 0, e.g. 1e-4")
    if cfg.get("num_threads") is not None:
        _positive_int(problems, "num_threads", cfg.num_threads, " (or threads=one|half|all, or null: torch's default)")
    if "builtin" in data:
        for split in ("train", "test"):
            _positive_int(problems, f"data.builtin.{split}", data.builtin[split], " (images of the built-in digits)")
    if "builtin" in data:  # MNIST: the Carvana pipeline's axes have nothing to act on
        for key, baseline in (("decode", "full"), ("cache", "off"), ("augment", "off")):
            if data.get(key, baseline) != baseline:
                problems.append(f"data.{key}={data[key]!r}: applies to data=carvana only; use {key}={baseline} here")
    if "dropout" in model.get("net", {}) and model.net.get("upsample", "upconv") != "upconv":
        problems.append(f"model.net.upsample={model.net.upsample!r}: applies to model=unet only; use upsample=upconv")
    if "dropout" in model.get("net", {}) and not 0.0 <= model.net.dropout < 1.0:
        problems.append(f"model.net.dropout={model.net.dropout}: must be >= 0 and < 1, e.g. 0.25")
    if "synthetic" in data and data.synthetic.get("cars", 2) < 2:
        problems.append(f"data.synthetic.cars={data.synthetic.cars}: must be >= 2 (one to train on, one held out)")
    return problems


_ABSENT = object()


def check_settings(cfg: DictConfig) -> None:
    """Raise SettingsError listing every bad value; silent when the config can run."""
    problems = problems_in(cfg)
    if problems:
        raise SettingsError(problems)
