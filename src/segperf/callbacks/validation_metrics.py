"""The quality of any LightningModule: every metric it logs in validation, first to last.

A module only calls `self.log("val_acc", ...)` (segperf's own too), so this callback reads what
validation logged at each validation's end (`trainer.callback_metrics`, reduced over the epoch) and keeps one entry per
validation. `quality_section` turns that into results.json's `quality`: each metric's last value,
its first (`first_<name>`), the history, and `metric` / `mode`: the one metric the report's quality
column and the tuner's quality guard read, and whether higher (max) or lower (min) is better.
"""

from __future__ import annotations

from typing import Any

import lightning as L
import torch

# what validation logged and how results.json names it: the one place that also says which is the quality
from segperf.quality import Quality, as_quality, declared, default, is_validation_metric, results_key
from segperf.quality import default_metric as default_metric

# past this many entries a long run's history keeps every other one, evenly over the run, so that
# results.json and checkpoints stay bounded however often it validates (a million steps
# validated every 25: 40,000 validations)
HISTORY_MAX = 512


class ValidationMetrics(L.Callback):
    """One entry per validation (not the sanity check): {"step": N, "val_acc": 0.91, ...}.

    Past HISTORY_MAX entries it keeps the validations at an even stride (1, then every 2nd, 4th,
    ...) and always the latest: the first and the last validation, which results.json's
    `first_<metric>` and `<metric>` read, are always in `history`."""

    def __init__(self) -> None:
        self._kept: list[dict[str, float]] = []  # validations 0, stride, 2*stride, ...
        self._latest: dict[str, float] | None = None
        self._seen, self._stride = 0, 1

    @property
    def history(self) -> list[dict[str, float]]:
        latest = self._latest
        return (
            self._kept + [latest]
            if latest is not None and (not self._kept or latest is not self._kept[-1])
            else self._kept
        )

    def on_validation_end(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        # after the epoch-end reduction: callback_metrics hold this validation's values
        if trainer.sanity_checking:
            return
        entry: dict[str, float] = {"step": int(trainer.global_step), **logged_validation_metrics(trainer)}
        if len(entry) > 1:
            self.remember(entry)

    def remember(self, entry: dict[str, float]) -> None:
        if self._seen % self._stride == 0:
            self._kept.append(entry)
            if len(self._kept) > HISTORY_MAX:  # kept[j] is validation j*stride: every other one stays
                self._kept, self._stride = self._kept[::2], 2 * self._stride
        self._latest, self._seen = entry, self._seen + 1

    def state_dict(self) -> dict[str, Any]:  # in checkpoints: a resumed run still knows its first validation
        return {"history": [dict(e) for e in self.history], "seen": self._seen, "stride": self._stride}

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        history = [dict(entry) for entry in state_dict.get("history", [])]
        self._seen, self._stride = state_dict.get("seen", len(history)), state_dict.get("stride", 1)
        # the latest is kept apart unless it fell on the stride
        on_stride = history and (self._seen - 1) % self._stride == 0
        self._kept = history if on_stride or not history else history[:-1]
        self._latest = history[-1] if history else None


def logged_validation_metrics(trainer: L.Trainer) -> dict[str, float]:
    """The validation metrics the trainer holds now (one number each), keyed as results.json keys them."""
    return {
        results_key(name): float(value.item() if isinstance(value, torch.Tensor) else value)
        for name, value in trainer.callback_metrics.items()
        if is_validation_metric(name) and (not isinstance(value, torch.Tensor) or value.numel() == 1)
    }


def quality_section(history: list[dict[str, float]], chosen: Quality | dict[str, Any] | None) -> dict[str, Any]:
    """results.json's `quality` from a validation history (ValidationMetrics', or a segperf
    module's own) and the declared quality (segperf.quality.declared; None: the default rule)."""
    if not history:
        return {}
    last, first = history[-1], history[0]
    names = [name for name in last if name != "step"]
    section: dict[str, Any] = {name: last[name] for name in names}
    section |= {f"first_{name}": first[name] for name in names if name in first}
    section["val_history"] = history
    quality = as_quality(chosen) or default(names)
    return section | (quality.record() if quality is not None else {})


def validation_history(trainer: L.Trainer, own: ValidationMetrics | None) -> list[dict[str, float]]:
    """The run's validation history, from one place: a ValidationMetrics among the trainer's own
    callbacks (it is in checkpoints, so a resumed run still knows its first validation; segperf's
    runs have one), else `own` (PerfMonitor's part), else what the trainer holds from its last
    validation (a fit whose validations were not seen)."""
    keeper = next((c for c in trainer.callbacks if isinstance(c, ValidationMetrics)), own)
    if keeper is not None and keeper.history:
        return keeper.history
    last = logged_validation_metrics(trainer)
    return [{"step": int(trainer.global_step), **last}] if last else []


def fit_quality(trainer: L.Trainer, own: ValidationMetrics | None) -> dict[str, Any]:
    """results.json's `quality`: every validation's logged metrics (validation_history), judged by
    the one the module declares (segperf.quality), else by the default rule."""
    return quality_section(validation_history(trainer, own), declared(trainer.lightning_module))
