"""What the verdict suggests trying: overrides that compose for the run's workload and that the
run does not already use.

A suggestion is only worth a line if the user can paste it and it changes something. So each
lever names the config key it sets and which of that key's values mean "not pulled yet": the
verdict reads the run's own config (results.json's `config`), drops levers already pulled and
levers whose key the workload does not have (the CNN on MNIST has no `upsample`, `decode` or
`cache`: Hydra would refuse them), and turns sizes into numbers (`batch_size=8`, not "a larger
batch"). tests/test_verdict_overrides.py composes every override this can produce.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

_ABSENT = object()


@dataclass(frozen=True)
class Lever:
    override: str  # what the user types, e.g. "workers=auto"
    key: str  # the config key it sets
    untried: Callable[[Any], bool]  # true for a value of `key` that means the lever is not pulled yet


@dataclass(frozen=True)
class Scaled:
    """`key=<the run's value times factor>`: a size, as a number the user can paste (`text` says
    how to write it, from `key` and `value`)."""

    key: str
    factor: float
    text: str = "{key}={value}"
    # whether the lever can change anything in a run of these settings (None: always)
    applies: Callable[[dict[str, Any]], bool] | None = None

    def override(self, value: Any) -> str | None:
        if not isinstance(value, int) or isinstance(value, bool) or value <= 0:
            return None
        scaled = max(1, int(value * self.factor))
        return None if scaled == value else self.text.format(key=self.key, value=scaled)


WORKERS = Lever("workers=auto", "data.num_workers", lambda v: v == 0)
PREFETCH = Lever("prefetch=on", "data.prefetch_factor", lambda v: v is None)
PIN = Lever("pin=on", "data.pin_memory", lambda v: v is False)
DECODE = Lever("decode=reduced", "data.decode", lambda v: v == "full")  # Carvana
CACHE = Lever("cache=memory", "data.cache", lambda v: v == "off")  # Carvana
DEVICE_CACHE = Lever("cache=device", "data.cache", lambda v: v in ("off", "memory"))
BF16 = Lever("precision=bf16", "trainer.precision", lambda v: v == "32-true")  # fp16 is reduced already
CHANNELS_LAST = Lever("memory_format=channels_last", "model.memory_format", lambda v: v == "nchw")
COMPILE = Lever("compile=on", "model.compile", lambda v: v is False)
NO_COMPILE = Lever("compile=off", "model.compile", lambda v: v is True)
DECONV = Lever("upsample=deconv", "model.net.upsample", lambda v: v == "upconv")  # U-Net

LARGER_BATCH = Scaled("batch_size", 2)
LONGER_RUN = Scaled("train_images", 4)


def _validates_before_the_end(settings: dict[str, Any]) -> bool:
    """Whether a run validates more than once: with val_every_images at or above train_images it
    validates only at its end, which validating less often cannot remove."""
    every, images = settings.get("val_every_images"), settings.get("train_images")
    return not (isinstance(every, int) and isinstance(images, int) and every >= images)


RARER_VALIDATION = Scaled("val_every_images", 2, applies=_validates_before_the_end)
FEWER_VAL_IMAGES = Scaled("val_images", 0.5)
RARER_LOGGING = Scaled("trainer.log_every_n_steps", 2)

# per bottleneck, the levers in the order worth trying
LEVERS: dict[str, tuple[Lever | Scaled, ...]] = {
    "data": (WORKERS, PREFETCH, DECODE, CACHE),
    "data-gpu": (WORKERS, PREFETCH, PIN, DECODE, CACHE),
    "copy": (PIN, PREFETCH, DEVICE_CACHE),
    "warm-up": (LONGER_RUN, NO_COMPILE),
    "validation": (RARER_VALIDATION, FEWER_VAL_IMAGES),
    "logging": (RARER_LOGGING,),
    "checkpoint": (RARER_VALIDATION,),  # last.ckpt is written at every validation
    "framework": (LARGER_BATCH,),  # Lightning's per-step cost, amortized over more samples a step
    "compute-cpu": (DECONV, LARGER_BATCH),
    "compute-host": (COMPILE, LARGER_BATCH),
    "compute-gpu": (BF16, CHANNELS_LAST, COMPILE, DECONV),
}


# A workload segperf did not configure (PerfMonitor in a user's own script): the knobs it has are
# its DataLoader's and its Trainer's, read from the run itself (segperf.callbacks.perf_monitor's
# `loader_settings`). `{workers}` is filled in from settings["hints"]: this machine's usable cores.
LOADER_WORKERS = Lever("DataLoader(num_workers={workers})", "dataloader.num_workers", lambda v: v == 0)
LOADER_PERSISTENT = Lever("DataLoader(persistent_workers=True)", "dataloader.persistent_workers", lambda v: v is False)
LOADER_PIN = Lever("DataLoader(pin_memory=True)", "dataloader.pin_memory", lambda v: v is False)
LOADER_BATCH = Scaled("dataloader.batch_size", 2, "DataLoader(batch_size={value})")
TRAINER_BF16 = Lever("Trainer(precision='bf16-mixed')", "trainer.precision", lambda v: v == "32-true")
TRAINER_LOGGING = Scaled("trainer.log_every_n_steps", 2, "Trainer(log_every_n_steps={value})")
DATALOADER_LEVERS: dict[str, tuple[Lever | Scaled, ...]] = {
    "data": (LOADER_WORKERS, LOADER_PERSISTENT),
    "data-gpu": (LOADER_WORKERS, LOADER_PIN, LOADER_PERSISTENT),
    "copy": (LOADER_PIN,),
    "warm-up": (),
    "validation": (),
    "logging": (TRAINER_LOGGING,),
    "checkpoint": (),
    "framework": (LOADER_BATCH,),
    "compute-cpu": (LOADER_BATCH,),
    "compute-host": (LOADER_BATCH,),
    "compute-gpu": (TRAINER_BF16, LOADER_BATCH),
}


# what a run whose config is not known is taken to use: the baseline of the axes every workload has
BASELINE: dict[str, Any] = {
    "data": {"num_workers": 0, "prefetch_factor": None, "pin_memory": False},
    "trainer": {"precision": "32-true"},
    "model": {"memory_format": "nchw", "compile": False},
}


def _select(settings: dict[str, Any], key: str) -> Any:
    node: Any = settings
    for part in key.split("."):
        if not isinstance(node, dict) or part not in node:
            return _ABSENT
        node = node[part]
    return node


def untried(levers: Sequence[Lever | Scaled], settings: dict[str, Any] | None) -> list[str]:
    """The overrides of `levers` that compose for this run's workload and change its settings.

    `settings` is the run's resolved config; None (a run whose config is not known) is read as
    BASELINE: only the axes every workload has, and no sizes."""
    settings = BASELINE if settings is None else settings
    chosen: list[str] = []
    for lever in levers:
        value = _select(settings, lever.key)
        if value is _ABSENT:
            continue  # not a key of this workload: Hydra would refuse the override
        if isinstance(lever, Scaled):
            override = lever.override(value) if lever.applies is None or lever.applies(settings) else None
        else:
            override = lever.override if lever.untried(value) else None
        if override is not None:
            override = override.format(**settings.get("hints", {})) if "{" in override else override
        if override is not None and override not in chosen:
            chosen.append(override)
    return chosen
