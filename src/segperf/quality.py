"""Which logged metric is a run's quality, and whether higher or lower is better: said here only.

A module declares its quality as a class attribute, as segperf's own do
(`quality = Quality("val/dice", "max", label="val Dice")`); a user's module may do the same, or
the model config's `quality: {metric, mode}` names it (and wins over the module's, so a user can
choose without touching the code). Neither: `default_metric` picks among what validation logged.
The run records the choice in results.json (`quality.metric` and `quality.mode`, `quality.label`
where declared), and every reader (the summary, the report, the tuner's guard, infer, TensorBoard's
HParams) asks `of_results` what a record's quality is, instead of naming a metric of its own.

Pure (no torch): the report and the tuner read it without loading a model.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

MODES = ("max", "min")

# a validation metric's name starts with one of these words ("val_acc", "val/loss", "valid-f1")
_VALIDATION_NAME = re.compile(r"^(val|valid|validation)([/_.\-]|$)", re.IGNORECASE)


def is_validation_metric(name: str) -> bool:
    """Lightning keeps no record of which hook logged a metric in its public API, but validation
    metrics are named for it by near-universal convention (Lightning's own docs: "val_loss")."""
    return bool(_VALIDATION_NAME.match(name))


def results_key(name: str) -> str:
    """A logged metric's key in results.json: `val/acc` (Lightning's and TensorBoard's grouping
    separator) is `val_acc` there, as segperf's own workloads' `val/dice` is `val_dice`."""
    return name.replace("/", "_")


@dataclass(frozen=True)
class Quality:
    """The metric a run is judged by, as logged (`val/dice`) or as results.json keys it (`val_dice`),
    and whether higher (max) or lower (min) is better. `label` is how the report's column names it
    (default: the results.json key)."""

    metric: str
    mode: str = "max"
    label: str | None = None

    def __post_init__(self) -> None:  # a typo in a module's declaration would judge it upside down
        if self.mode not in MODES:
            raise ValueError(f"Quality({self.metric!r}, mode={self.mode!r}): mode is max (higher is better) or min")

    @property
    def key(self) -> str:
        return results_key(self.metric)

    @property
    def name(self) -> str:
        return self.label or self.key

    @property
    def lower_is_better(self) -> bool:
        return self.mode == "min"

    def higher_is_better(self, value: float | None) -> float | None:
        """The value on a higher-is-better scale: negated where lower is better (a loss)."""
        return -value if value is not None and self.lower_is_better else value

    def record(self) -> dict[str, str]:
        """results.json's `metric`, `mode` (and `label`, where declared) of the `quality` section."""
        return {"metric": self.key, "mode": self.mode} | ({"label": self.label} if self.label else {})


def as_quality(value: Any) -> Quality | None:
    """A declaration (a Quality, or a `{metric, mode}` mapping like the model config's) as a
    Quality; None for anything else (an unrelated `quality` attribute of a user's module)."""
    if isinstance(value, Quality):
        return value
    if isinstance(value, Mapping) and isinstance(value.get("metric"), str) and value["metric"]:
        mode = value.get("mode") or "max"
        return Quality(value["metric"], mode if mode in MODES else "max", value.get("label"))
    return None


def declared(module: Any = None, config: Mapping[str, Any] | None = None) -> Quality | None:
    """What a run declares: the model config's `quality: {metric, mode}`, else the module's
    `quality` class attribute; None when neither says."""
    return as_quality(config) or as_quality(getattr(module, "quality", None))


def default_metric(names: list[str]) -> tuple[str | None, str]:
    """The quality a run is judged by when nothing declares it: an accuracy-like metric (higher is
    better), else a loss (lower is better), else the first one logged."""
    for name in names:
        if "acc" in name.lower():
            return name, "max"
    for name in names:
        if "loss" in name.lower():
            return name, "min"
    return (names[0], "max") if names else (None, "max")


def default(names: list[str]) -> Quality | None:
    metric, mode = default_metric(names)
    return None if metric is None else Quality(metric, mode)


def choose(names: list[str], *candidates: Quality | None) -> Quality | None:
    """The first candidate among the metrics logged (`names`, results.json keys), else the default."""
    for candidate in candidates:
        if candidate is not None and candidate.key in names:
            return candidate
    return default(names)


def metric_names(section: Mapping[str, Any]) -> list[str]:
    """The validation metrics a results.json `quality` section holds, as logged, in order: each
    validation's names where it kept a history, else its numeric `val...` keys."""
    history = section.get("val_history") or []
    if history and isinstance(history[-1], Mapping):
        return [name for name in history[-1] if name != "step"]
    return [
        name
        for name, value in section.items()
        if is_validation_metric(name) and isinstance(value, int | float) and not isinstance(value, bool)
    ]


# Records written before every run named its quality: segperf's U-Net was judged by its Dice and
# the CPU study's classifier by its accuracy (the modules' own declarations, as results.json keys
# them); read as before. A record naming `quality.metric` never reaches this.
LEGACY = (Quality("val_dice", "max", "val Dice"), Quality("val_accuracy", "max", "val accuracy"))


def of_results(section: Mapping[str, Any] | None) -> Quality | None:
    """A run's quality from its results.json `quality` section: the metric and mode it recorded;
    for an older record, segperf's own workloads' (LEGACY), else the default among what it logged;
    None when it logged nothing."""
    section = section or {}
    recorded = as_quality(section)
    if recorded is not None:
        return recorded
    present = [q for q in LEGACY if isinstance(section.get(q.key), int | float)]
    return present[0] if present else default(metric_names(section))
