"""The quality of any LightningModule: every metric it logs in validation, first to last.

segperf's own modules keep their validation history themselves (segperf.model.history). A user's
module only calls `self.log("val_acc", ...)`, so this callback reads what validation logged at
each validation's end (`trainer.callback_metrics`, reduced over the epoch) and keeps one entry per
validation. `quality_section` turns that into results.json's `quality`: each metric's last value,
its first (`first_<name>`), the history, and `metric` / `mode`: the one metric the report's quality
column and the tuner's quality guard read, and whether higher (max) or lower (min) is better.
"""

from __future__ import annotations

import re
from typing import Any

import lightning as L
import torch

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


class ValidationMetrics(L.Callback):
    """One entry per validation (not the sanity check): {"step": N, "val_acc": 0.91, ...}."""

    def __init__(self) -> None:
        self.history: list[dict[str, float]] = []

    def on_validation_end(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        # after the epoch-end reduction: callback_metrics hold this validation's values
        if trainer.sanity_checking:
            return
        entry: dict[str, float] = {"step": int(trainer.global_step)}
        for name, value in trainer.callback_metrics.items():
            if is_validation_metric(name):
                entry[results_key(name)] = float(value.item() if isinstance(value, torch.Tensor) else value)
        if len(entry) > 1:
            self.history.append(entry)

    def state_dict(self) -> dict[str, Any]:  # in checkpoints: a resumed run still knows its first validation
        return {"history": [dict(entry) for entry in self.history]}

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        self.history = [dict(entry) for entry in state_dict.get("history", [])]


def default_metric(names: list[str]) -> tuple[str | None, str]:
    """The quality a run is judged by when the model's config does not say: an accuracy-like
    metric (higher is better), else a loss (lower is better), else the first one logged."""
    for name in names:
        if "acc" in name.lower():
            return name, "max"
    for name in names:
        if "loss" in name.lower():
            return name, "min"
    return (names[0], "max") if names else (None, "max")


def quality_section(history: list[dict[str, float]], chosen: dict[str, Any] | None) -> dict[str, Any]:
    """results.json's `quality` from a ValidationMetrics history and the model config's
    `quality: {metric, mode}` (None: the default_metric rule)."""
    if not history:
        return {}
    last, first = history[-1], history[0]
    names = [name for name in last if name != "step"]
    section: dict[str, Any] = {name: last[name] for name in names}
    section |= {f"first_{name}": first[name] for name in names if name in first}
    section["val_history"] = history
    metric, mode = default_metric(names)
    if chosen:  # as logged (`val/acc`, say): read under its results.json key
        metric, mode = results_key(chosen.get("metric") or metric), chosen.get("mode") or mode
    section["metric"], section["mode"] = metric, mode
    return section
