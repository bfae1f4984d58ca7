"""Key names and types of `conf/bench.yaml`, and the checks a type cannot express.

Like segperf/schema.py for training: the dataclasses are registered in Hydra's ConfigStore as
`segperf_bench_schema` and head bench.yaml's defaults list, so Hydra refuses a misspelt key or a
value of the wrong type while composing; `settings()` then checks every value and lists each bad
one in one line that names its key. The values (and their comments) live in bench.yaml.

The grid's axes (data.decode, data.cache, data.num_workers, data.pin_memory) take a list, or one
value for a list of one, so they are typed `Any` here and checked by `settings()`.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from hydra.core.config_store import ConfigStore
from omegaconf import MISSING, DictConfig, OmegaConf

from segperf.errors import SegperfError
from segperf.schema import Augment, Cache, Decode

# the training schema's choices (each a list here: the bench runs a grid of them)
DECODES = tuple(Decode)
CACHES = tuple(Cache)
AUGMENTS = tuple(Augment)
_PIN = {"on": True, "true": True, "off": False, "false": False}
FORMATS = ("carvana", "imagefolder")  # training's data configs the bench builds (conf/data/<format>.yaml)


@dataclass
class SyntheticOverrides:
    """data.synthetic.* of training's data/carvana.yaml, set for the bench (null: that config's value)."""

    cache_dir: str | None = None
    cars: int | None = None
    seed: int | None = None
    width: int | None = None
    height: int | None = None


@dataclass
class BuiltinOverrides:
    """data.builtin.* of training's data/imagefolder.yaml, set for the bench (null: that config's value)."""

    cache_dir: str | None = None
    classes: int | None = None
    per_class: int | None = None
    seed: int | None = None


@dataclass
class BenchDataSchema:
    root: str | None = MISSING
    height: int = MISSING
    width: int = MISSING
    decode: Any = MISSING
    cache: Any = MISSING
    num_workers: Any = MISSING
    pin_memory: Any = MISSING
    augment: str = MISSING
    synthetic: SyntheticOverrides = field(default_factory=SyntheticOverrides)  # the built-in data's, as in training
    format: str = MISSING
    builtin: BuiltinOverrides = field(default_factory=BuiltinOverrides)  # data.format=imagefolder's


@dataclass
class BenchSchema:
    data: BenchDataSchema = field(default_factory=BenchDataSchema)
    images: int = MISSING
    batch_size: int = MISSING
    min_seconds: float = MISSING
    cold_cache: bool = MISSING
    num_threads: int | None = MISSING
    seed: int = MISSING
    out: str | None = MISSING


def register_schema() -> None:
    """Make `segperf_bench_schema` available to bench.yaml's defaults list. Idempotent."""
    ConfigStore.instance().store(name="segperf_bench_schema", node=BenchSchema)


def keys(cfg: Any = None) -> list[str]:
    """Every dotted key of `cfg`, by default of the bench's schema (for the did-you-mean of a
    misspelt key, and to refuse one added with `+`)."""

    def walk(node: Any, prefix: str) -> list[str]:
        if not OmegaConf.is_dict(node):
            return [prefix]
        return [k for name in node for k in walk(node._get_node(name), f"{prefix}{name}.")]

    return [k.rstrip(".") for k in walk(OmegaConf.structured(BenchSchema) if cfg is None else cfg, "")]


@dataclass(frozen=True)
class Settings:
    """One benchmark run's settings, checked, as plain Python."""

    root: Path | None  # None: the built-in data of training's data config
    synthetic: dict[str, Any]  # the data.synthetic.* set for the bench (the rest: the data config's)
    height: int
    width: int
    decode: list[str]
    cache: list[str]
    workers: list[int]
    pin: list[bool]
    augment: str
    images: int
    batch_size: int
    min_seconds: float
    cold_cache: bool
    num_threads: int | None
    seed: int
    out: Path | None
    format: str = "carvana"  # data.format: training's data config (segperf.bench.workload)
    builtin: dict[str, Any] = field(default_factory=dict)  # the data.builtin.* set, for data.format=imagefolder


class BenchSettingsError(SegperfError, ValueError):
    """Settings the bench cannot run: one line per problem, each naming its key."""

    def __init__(self, problems: list[str]) -> None:
        self.problems = problems
        super().__init__("\n".join(problems))


def _as_list(value: Any) -> list[Any]:
    value = OmegaConf.to_container(value) if OmegaConf.is_config(value) else value
    return list(value) if isinstance(value, list | tuple) else [value]


def _hydra(values: list[Any]) -> str:
    """A list as it is typed in an override: [false,true], [full,reduced]."""
    return "[" + ",".join(str(v).lower() if isinstance(v, bool) else str(v) for v in values) + "]"


def _whole(value: Any, low: int) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and value >= low


def _set(overrides: DictConfig) -> dict[str, Any]:
    """The keys of a built-in data section given a value (the others stay the data config's)."""
    return {k: v for k, v in OmegaConf.to_container(overrides, resolve=True).items() if v is not None}


def settings(cfg: DictConfig) -> Settings:
    """The checked settings of a composed bench config; BenchSettingsError lists every bad value."""
    known = set(keys())
    problems = [f"{k}: no such key (added with +; the bench would ignore it)" for k in keys(cfg) if k not in known]
    data = cfg.data

    def choices(key: str, allowed: tuple[str, ...]) -> list[str]:
        values = _as_list(data[key])
        if not values or any(v not in allowed for v in values):
            problems.append(f"data.{key}={_hydra(values)}: a list of {', '.join(allowed)} (e.g. [{allowed[0]}])")
        return values

    decode = choices("decode", DECODES)
    cache = choices("cache", CACHES)
    workers = _as_list(data.num_workers)
    if not workers or not all(_whole(w, 0) for w in workers):
        problems.append(f"data.num_workers={_hydra(workers)}: a list of worker counts >= 0 (e.g. [0,2])")
    pin = [_PIN.get(str(p).lower(), p) for p in _as_list(data.pin_memory)]
    if not pin or not all(isinstance(p, bool) for p in pin):
        problems.append(f"data.pin_memory={_hydra(_as_list(data.pin_memory))}: a list of true/false (or on/off)")
    if data.format not in FORMATS:
        problems.append(f"data.format={data.format!r}: use one of {', '.join(FORMATS)}")
    if data.augment not in AUGMENTS:
        problems.append(f"data.augment={data.augment!r}: use one of {', '.join(AUGMENTS)}")
    for key, value in (("data.height", data.height), ("data.width", data.width), ("images", cfg.images),
                       ("batch_size", cfg.batch_size)):  # fmt: skip
        if not _whole(value, 1):
            problems.append(f"{key}={value}: must be a whole number >= 1")
    if cfg.min_seconds < 0:
        problems.append(f"min_seconds={cfg.min_seconds}: must be >= 0 (0: one timed pass per configuration)")
    if cfg.num_threads is not None and not _whole(cfg.num_threads, 1):
        problems.append(f"num_threads={cfg.num_threads}: must be >= 1, or null for torch's default")
    if problems:
        raise BenchSettingsError(problems)
    return Settings(
        root=Path(data.root).expanduser() if data.root else None,
        synthetic=_set(data.synthetic),
        height=data.height,
        width=data.width,
        decode=decode,
        cache=cache,
        workers=workers,
        pin=pin,
        augment=data.augment,
        images=cfg.images,
        batch_size=cfg.batch_size,
        min_seconds=float(cfg.min_seconds),
        cold_cache=cfg.cold_cache,
        num_threads=cfg.num_threads,
        seed=cfg.seed,
        out=Path(cfg.out) if cfg.out else None,
        format=data.format,
        builtin=_set(data.builtin),
    )


# on import, as segperf/__init__ registers the training schema: whoever composes conf/bench.yaml
# (the command line, a test, a notebook) finds it
register_schema()
