"""What a run actually ran with: its requested settings, minus what the machine adjusted away.

A run records the axes it was asked for (results.json `axes`) and, under `adjusted.<setting>`,
each setting it could not honour as {requested, used, reason}: `pin=on` without CUDA runs with
`data.pin_memory=false`, `compile=on` whose compiler failed ran eager, onnxruntime ignores
`memory_format`. Its *effective* settings are the axes with each `used` value put in, plus the
dir-name overrides that no recorded axis covers. Two configurations with equal effective settings
ran the same thing: the report shows the later one as "same as" the earlier, never with a
speed-up (their difference is run-to-run noise and the order the jobs ran in).
"""

from __future__ import annotations

import json
from typing import Any

from segperf.axes import inference_axes, training_axis_keys
from segperf.command_line import override_key

# axis name -> the config key it reads: training's axes, and the inference benchmark's own (runtime)
AXIS_KEYS = training_axis_keys() | {axis.group: axis.key for axis in inference_axes()}
AXIS_OF_KEY = {key: axis for axis, key in AXIS_KEYS.items()}
# override groups that only choose axis options (the ladder's and the tuner's presets): what
# they set is in `axes`, so `+opt=3_pin` and `+opt=2_workers` compare by what they turned on
PRESET_GROUPS = {"opt"}


def hashable(value: Any) -> Any:
    """A dict or list value as JSON text, so it can be part of a grouping key (segperf.report.sweep too)."""
    return json.dumps(value, sort_keys=True) if isinstance(value, dict | list) else value


def bare_key(key: str) -> str:
    """`+repeat` -> `repeat` (segperf.command_line.override_key, of a key without its value)."""
    return override_key(key)


def axis_of(setting: str, axes: dict) -> str | None:
    """The axis an `adjusted` key names: training writes config keys ("data.pin_memory"),
    inference the axis names themselves ("compile"); None for a setting no axis covers."""
    if setting in axes:
        return setting
    return AXIS_OF_KEY.get(setting) if AXIS_OF_KEY.get(setting) in axes else None


def not_applied(results: dict) -> dict[str, dict]:
    """The run's `adjusted` settings whose used value differs from the requested one, by key."""
    adjusted = results.get("adjusted")
    if not isinstance(adjusted, dict):
        return {}
    return {
        key: change
        for key, change in adjusted.items()
        if isinstance(change, dict) and change.get("requested") != change.get("used")
    }


def setting_name(setting: str, results: dict) -> str:
    """How the report names an adjusted setting: its axis ("pin"), else its key."""
    axes = results.get("axes") if isinstance(results.get("axes"), dict) else {}
    return axis_of(setting, axes) or setting


def effective_settings(results: dict, overrides: tuple = ()) -> tuple | None:
    """What the run ran with, as a comparable key; None for a run that recorded no axes.

    The axes with each adjusted setting's `used` value, plus the overrides (seed/repeat already
    left out) that name no recorded axis, its config key, or a preset (those are in the axes).
    An override naming an axis the run did not record stays: it is the only trace of it."""
    axes = results.get("axes")
    if not isinstance(axes, dict) or not axes:
        return None
    effective = dict(axes)
    for setting, change in not_applied(results).items():
        if (axis := axis_of(setting, axes)) is not None:
            effective[axis] = change.get("used")

    def covered(key: str) -> bool:
        axis = key if key in AXIS_KEYS else AXIS_OF_KEY.get(key)
        return key in PRESET_GROUPS or (axis is not None and axes.get(axis) is not None)

    extra = tuple(sorted((k, v) for k, v in overrides if not covered(bare_key(k))))
    kind = results.get("kind") or "train"
    return (kind, tuple(sorted((k, hashable(v)) for k, v in effective.items())), extra)


def mark_same_settings(configs: list) -> None:
    """Set `same_as` on each configuration whose effective settings (one key for all its runs)
    equal an earlier configuration's: the label of the first such one."""
    seen: dict[tuple, str] = {}
    for config in configs:
        runs = [r for r in config.runs if r.ok] or config.runs
        keys = {effective_settings(r.results, r.overrides) for r in runs}
        if len(keys) != 1 or None in keys:
            continue
        key = keys.pop()
        if key in seen:
            config.same_as = seen[key]
        else:
            seen[key] = config.label
