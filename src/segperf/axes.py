"""The optimization axes: one table that the tuner, the inference benchmark, the report, the run
record and the README's axes table all read.

Each row is a config group of conf/ (`workers=auto`) and says what only a person can: which
workloads have it, its baseline, what it is for, whether the inference benchmark has it, and
where in its walk the tuner tries it. What an option *sets* is never restated here: it is read
from the option's own YAML (`option_settings`), so a new option file is an option everywhere.

Torch-free and Hydra-free (PyYAML only): the report imports it on machines without torch.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from functools import cache
from pathlib import Path
from typing import Any

import yaml

from segperf.config import CONFIG_DIR

EVERY_WORKLOAD = ("carvana", "imagefolder", "mnist")  # data=<name>, each with its default model
IMAGE_WORKLOADS = ("carvana", "imagefolder")  # the ones that decode image files


@dataclass(frozen=True)
class Axis:
    """One config group that changes how fast a run is (or, for `augment`, what it trains on).

    `workloads`: the data options whose runs have the group (the U-Net's `upsample` is Carvana's,
    the only workload whose default model is the U-Net). `search`: the tuner's walk, in order of
    this number (None: not searched). `infer`: an axis of `python -m segperf.infer` too.
    `record_key`: the key results.json's `axes` records, where an option sets more than one."""

    group: str
    baseline: str
    description: str
    workloads: tuple[str, ...] = EVERY_WORKLOAD
    search: int | None = None
    infer: bool = False
    train: bool = True
    record_key: str | None = None

    @property
    def options(self) -> list[str]:
        """The group's options, baseline first, then by name: the names of its YAML files."""
        return group_options(self.group)

    @property
    def keys(self) -> tuple[str, ...]:
        """The config keys the group's options set, read from its baseline's YAML."""
        return tuple(option_settings(self.group, self.baseline))

    @property
    def key(self) -> str:
        """The one key that says which option ran (what results.json's `axes` records)."""
        if self.record_key:
            return self.record_key
        if len(self.keys) != 1:
            raise ValueError(
                f"conf/{self.group}/{self.baseline}.yaml sets {list(self.keys)}: name the recorded one "
                f"as record_key in segperf/axes.py"
            )
        return self.keys[0]


# The search order (`search`) walks the data side first, so that a budget running out cuts what
# matters least: JPEG decoding, caching and workers are a CPU's big wins, and a preset that turns
# them on together with bf16 can hide them (on a CPU without bf16 instructions +opt=all is slower
# than the start); precision and compile late, since the preset stage has measured them already
# and their bad options are the slow ones (bf16 emulated, a compile's warm-up), which cost a probe
# up to its time limit each. `augment` is not searched: a recipe choice (whether training sees
# flipped, jittered images) that only costs time, and a start with augment=basic must not lose it
# to a faster augment=off.
AXES: tuple[Axis, ...] = (
    Axis(
        "workers",
        "off",
        "DataLoader worker processes: none, or one per core this process may use",
        search=3,
        infer=True,
    ),
    Axis(
        "prefetch",
        "off",
        "batches kept ready ahead of the step (a thread when there are no workers)",
        search=5,
        infer=True,
    ),
    Axis("pin", "off", "page-locked host batches: asynchronous host-to-device copies", search=10, infer=True),
    Axis(
        "upsample",
        "upconv",
        "the U-Net's upsampling: bilinear + 3x3 conv, or a transposed conv",
        ("carvana",),
        search=7,
    ),
    Axis(
        "memory_format", "nchw", "batches and model in NCHW, or channels-last with no conversion", search=6, infer=True
    ),
    Axis(
        "compile", "off", "torch.compile the net (compilation is warm-up, outside the throughput)", search=8, infer=True
    ),
    Axis("precision", "fp32", "fp32, or bf16 / fp16 autocast (Lightning's mixed precision)", search=9, infer=True),
    Axis("threads", "default", "torch's intra-op threads: torch's default, one, half or all the cores", search=4),
    Axis("decode", "full", "decode the whole JPEG then resize, or at a reduced DCT scale", IMAGE_WORKLOADS, search=1),
    Axis(
        "cache",
        "off",
        "decoded samples: decoded every time, cached in shared memory, or on the device",
        IMAGE_WORKLOADS,
        search=2,
    ),
    Axis("augment", "off", "training-time flips, scale/shift and colour jitter (quality, not speed)", IMAGE_WORKLOADS),
    Axis(
        "runtime",
        "torch",
        "what runs the cast net: PyTorch, or ONNX Runtime",
        (),
        infer=True,
        train=False,
        record_key="runtime.name",
    ),
)
BY_GROUP = {axis.group: axis for axis in AXES}

# Settings results.json's `axes` records beside the groups, by the key each reads: the run size
# and cold reads, and a data-parallel run's shape (trainer=ddp: ranks = devices x num_nodes).
RECORDED_SETTINGS = {
    "cold_cache": "data.cold_cache",
    "batch_size": "batch_size",
    "train_images": "train_images",
    "strategy": "trainer.strategy",
    "devices": "trainer.devices",
    "num_nodes": "trainer.num_nodes",
}


def training_axes() -> tuple[Axis, ...]:
    return tuple(axis for axis in AXES if axis.train)


def inference_axes() -> tuple[Axis, ...]:
    return tuple(axis for axis in AXES if axis.infer)


def search_order() -> tuple[str, ...]:
    """The groups the tuner walks, in the order it walks them."""
    return tuple(a.group for a in sorted((a for a in AXES if a.search is not None), key=lambda a: a.search))


@cache
def training_axis_keys() -> dict[str, str]:
    """Each axis of a training run and the config key it reads: what results.json's `axes`
    records and what the report maps `adjusted.<key>` back to."""
    return {axis.group: axis.key for axis in training_axes()} | RECORDED_SETTINGS


def group_options(group: str, config_dir: Path = CONFIG_DIR) -> list[str]:
    """A group's options: the names of its YAML files, its table baseline first."""
    names = sorted(path.stem for path in (config_dir / group).glob("*.yaml"))
    baseline = BY_GROUP[group].baseline if group in BY_GROUP else None
    return sorted(names, key=lambda name: name != baseline)


@cache
def option_settings(group: str, option: str, config_dir: Path = CONFIG_DIR) -> dict[str, Any]:
    """The keys conf/<group>/<option>.yaml sets, dotted, with their values as written there (an
    interpolation as its `${...}` string): read from the file, in the package it declares
    (`# @package _global_`: from the top; otherwise under the group's name, as Hydra places it)."""
    path = config_dir / group / f"{option}.yaml"
    try:
        text = path.read_text()
    except FileNotFoundError:
        raise ValueError(f"{group}={option}: no option file {path}; the options are {group_options(group)}") from None
    content = yaml.safe_load(text) or {}
    content.pop("defaults", None)
    package = re.search(r"^#\s*@package\s+(\S+)", text, re.MULTILINE)
    prefix = "" if package and package[1] == "_global_" else f"{package[1] if package else group}."
    return {prefix + key: value for key, value in _flatten(content)}


def _flatten(node: dict[str, Any], prefix: str = "") -> list[tuple[str, Any]]:
    found = []
    for key, value in node.items():
        if isinstance(value, dict) and value:
            found += _flatten(value, f"{prefix}{key}.")
        else:
            found.append((f"{prefix}{key}", value))
    return found
