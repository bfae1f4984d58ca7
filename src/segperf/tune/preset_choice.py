"""Which presets a tune measures here: each spelt out as this workload's groups
(segperf.tune.space.presets), without those Hydra cannot compose for it, and as this machine runs
them (a preset's emulated precision replaced by full precision: segperf.tune.native.native_presets)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from omegaconf import DictConfig

from segperf.errors import SegperfError
from segperf.tune import space
from segperf.tune.native import native_presets
from segperf.tune.probe_results import first_line
from segperf.tune.space import merge


def presets_here(
    config: DictConfig, loader: Any, settings: Any, choices: dict, start: tuple, emulated: Mapping[str, str]
) -> tuple[dict, list]:
    """The presets a tune measures here: composable_presets, as this machine runs them (`emulated`:
    the precision options it emulates), with a note for each change."""
    presets, notes = composable_presets(config, loader, settings, choices, start)
    presets, native_notes = native_presets(presets, emulated)
    return presets, notes + native_notes


def composable_presets(
    config: DictConfig, loader: Any, settings: Any, choices: dict, start: tuple
) -> tuple[dict, list]:
    """The presets spelt out as this workload's groups (segperf.tune.space.presets), without
    those Hydra cannot compose here: each left out, or cut down, with a note saying so."""
    notes, kept = [], {}
    names = [" ".join(preset) for preset in settings.presets]
    try:
        expanded = space.presets(choices, names)
    except ValueError as error:
        raise SegperfError(f"tune.presets: {error}") from None
    for name, preset in expanded.items():
        try:
            loader.load_sweep_config(config, list(merge(start, preset)))
        except Exception as error:  # Hydra's and OmegaConf's composition errors
            notes.append(f"preset {name}: skipped, it does not compose here ({first_line(error)})")
            continue
        missing = sorted(
            {
                g
                for o in name.split()
                if o.lstrip("+").startswith("opt=")
                for g in space.preset_overrides(o.split("=")[1])
            }
            - set(choices)
        )
        if missing:
            notes.append(f"preset {name}: without {', '.join(missing)} (this workload has no such groups)")
        kept[name] = preset
    return kept, notes
