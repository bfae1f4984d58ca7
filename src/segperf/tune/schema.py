"""The structured schema of `python -m segperf.tune`'s settings (conf/tune.yaml `tune:`): types and
key names, registered with the training config's (segperf.schema.TrainSchema.tune, which only
conf/tune.yaml sets); their ranges are checked by segperf.tune.settings_check."""

from __future__ import annotations

from dataclasses import dataclass, field

from omegaconf import MISSING


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
    """`python -m segperf.tune`'s settings (conf/tune.yaml; checked by segperf.tune.settings_check;
    docs/tuning.md, "The settings")."""

    budget_minutes: float = MISSING
    presets: list[list[str]] = MISSING
    batch_size: bool = MISSING
    level: float = MISSING
    min_runs: int = MISSING
    max_runs: int = MISSING
    later_noise: float | None = None
    probe: TuneProbeSchema = field(default_factory=TuneProbeSchema)
    quality: TuneQualitySchema = field(default_factory=TuneQualitySchema)
