"""What the tuner may change: the speed axes of one workload, each with the options to try.

An axis is a config group of conf/ (its options are the group's YAML files, so a new option
file is tried without touching the tuner) plus, where the group stands for a number, a few
values of that number (`data.num_workers`, `data.prefetch_factor`, `num_threads`; `batch_size`
only when asked, since a batch size changes what is learned, not just how fast). Only the axes
the workload has are listed: the U-Net's `upsample` and Carvana's `decode`/`cache`
exist only where the composed config has their keys (model=cnn data=mnist has none of them).

Options are override strings, as a user would type them; a numeric value that one of the
group's options already sets on this machine (`data.num_workers=2` on 2 cores is `workers=auto`)
is left out, so that no configuration is measured twice under two names.

`presets` spells the `+opt=` presets out as group overrides of this workload's axes, so that the
tuner can change one axis of a preset like any other configuration (`+opt=all` cannot be
composed with model=cnn at all: it sets `upsample`, which the CNN has no group for).
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import yaml

from segperf import axes as axis_table
from segperf.axes import group_options
from segperf.command_line import override_key
from segperf.config import CONFIG_DIR, CORE_RESOLVERS
from segperf.tune.probe import Config, config_of

# The order the coordinate ascent walks the axes (segperf.axes says why; `augment` is not one)
SEARCH_ORDER = axis_table.search_order()
# Axes whose change changes what is learned, not only how fast: reduced precision (numerics), the
# upsampling layer (another net), JPEG decoding at reduced scale (other pixels) and the batch size
# (another optimization). The quality guard falls back by undoing these, in order.
CHANGES_LEARNING = ("precision", "batch_size", "upsample", "decode")
PREFETCH_DEPTHS = (2, 8)  # around prefetch=on's 4 batches per worker
PRESETS = ("+opt=all", "+opt=all compile=off")  # what the tuned result is held against


@dataclass(frozen=True)
class SearchAxis:
    """One thing a tune changes, as it tries it on this machine: a row of segperf.axes' table (what
    the group is, its baseline, where the walk takes it: segperf.axes.SearchAxis) made concrete for one
    workload on one machine, or the batch size (a number, not a config group). `options` are the
    alternatives (each a Config of override strings: the group's options less those that set the
    same value here, numeric values, a workers option paired with threads); `keys` the override
    keys the axis owns (its group and its config key), so that trying an option first drops the
    best's own setting of the axis; `start` the option the tune's start composed (from
    hydra.runtime.choices), the setting of a configuration that does not override the axis;
    `changes_learning`: a change the quality guard may undo."""

    name: str
    options: tuple[Config, ...]
    keys: tuple[str, ...] = ()
    start: Config = ()
    changes_learning: bool = False


def without_keys(overrides: Iterable[str], keys: Iterable[str]) -> list[str]:
    """`overrides` less those that set one of `keys` (override_key)."""
    drop = set(keys)
    return [o for o in overrides if override_key(o) not in drop]


def axes(
    cfg: Any, choices: Mapping[str, Any], cores: int, batch_size: bool = False, compute_on_cpu: bool = False
) -> list[SearchAxis]:
    """The speed axes of the workload `cfg` composes (a DictConfig or its plain container), with
    `choices` (hydra.runtime.choices) telling which option of each group it was composed with,
    and `cores` the cores one training process may use (segperf.config.cores_per_rank).
    `compute_on_cpu`: the net runs on the CPU, where DataLoader workers and torch's threads share
    the cores (share_cores)."""
    cores = max(1, int(cores))
    found = []
    for group in SEARCH_ORDER:
        key = axis_table.BY_GROUP[group].key
        if group not in choices or not _has(cfg, key):
            continue  # not this workload's axis (model=cnn has no upsample, data=mnist no cache)
        chosen = str(choices[group])
        options = [(f"{group}={name}",) for name in _deduplicated(group, group_options(group), cores, chosen)]
        options += [(f"{key}={value}",) for value in numeric_values(group, cores)]
        found.append(
            SearchAxis(
                group, tuple(options), (group, key), (f"{group}={chosen}",), changes_learning=group in CHANGES_LEARNING
            )
        )
    if compute_on_cpu:
        found = share_cores(found)
    if batch_size and isinstance(cfg.get("batch_size"), int):
        size = cfg.get("batch_size")
        sizes = [s for s in (size // 2, size * 2, size * 4) if s >= 1 and s != size]
        found.append(
            SearchAxis(
                "batch_size", tuple((f"batch_size={s}",) for s in sizes), ("batch_size",), (f"batch_size={size}",), True
            )
        )
    return found


def share_cores(found: list[SearchAxis], threads: str = "threads=half") -> list[SearchAxis]:
    """`found` with the workers axis also trying each worker count together with `threads`; the
    first of these pairs (workers=auto with threads=half) is the axis' first option.

    Why: where the net computes on the CPU, worker processes and torch's intra-op threads compete
    for the same cores, so the two axes interact and coordinate ascent, which changes one axis at a
    time, can miss the pair. Measured on an outside input-bound CNN on 2 cores (docs/BENCHMARKS.md):
    workers=auto alone 1.18x the start, threads=one alone 0.91x, both 1.75x, and at the tune's
    probe size workers alone was not distinguishable, so the tune kept neither."""
    by_name = {axis.name: axis for axis in found}
    if "workers" not in by_name or "threads" not in by_name:
        return found
    workers = by_name["workers"]
    counted = [option for option in workers.options if not _loads_in_main_process(option)]
    joint = tuple((*option, threads) for option in counted)
    options = joint[:1] + workers.options + joint[1:]
    return [replace(axis, options=options) if axis is workers else axis for axis in found]


def _loads_in_main_process(option: Config) -> bool:
    """Whether a workers option sets no worker processes (workers=off, data.num_workers=0)."""
    for override in option:
        key, _, value = override.partition("=")
        if key == "workers":
            return axis_table.option_settings("workers", value)["data.num_workers"] == 0
        if key == "data.num_workers":
            return int(value) == 0
    return False


def option_value(group: str, option: str, cores: int) -> Any:
    """What `group=option` sets the group's key to where one training process may use `cores`
    cores, read from conf/<group>/<option>.yaml (`${cores_per_rank:...}` counts `cores`)."""
    value = axis_table.option_settings(group, option)[axis_table.BY_GROUP[group].key]
    if isinstance(value, str) and (resolver := re.fullmatch(r"\$\{(\w+):.*\}", value)):
        if resolver[1] not in CORE_RESOLVERS:
            raise ValueError(f"conf/{group}/{option}.yaml: the tuner cannot tell what {value} is on {cores} cores")
        return CORE_RESOLVERS[resolver[1]](cores)
    return value


def numeric_values(group: str, cores: int) -> list[int]:
    """The numbers to try under a group beyond what its options set on this machine: halvings of
    the cores for workers and threads (a few, not every count: each costs a comparison), two
    depths around prefetch=on's for the prefetch factor."""
    if group == "prefetch":
        return list(PREFETCH_DEPTHS)
    if group not in ("workers", "threads"):
        return []
    taken = {option_value(group, name, cores) for name in group_options(group)}
    halvings = {max(1, cores // 2**k) for k in range(1, 4)}
    return sorted(n for n in halvings if n not in taken)


def _deduplicated(group: str, names: Iterable[str], cores: int, chosen: str) -> list[str]:
    """Group options, without the ones that set the same value on this machine as another (on 2
    cores threads=half is threads=one): the start's own option is kept, else the one whose file
    writes the value out (`num_threads: 1` over `${half_cores_per_rank:...}`), else the first by name."""

    def written(name: str) -> bool:
        value = axis_table.option_settings(group, name)[axis_table.BY_GROUP[group].key]
        return not (isinstance(value, str) and value.startswith("${"))

    kept, seen = [], []
    for name in sorted(names, key=lambda name: (name != chosen, not written(name), name)):
        value = option_value(group, name, cores)
        if value not in seen:
            seen.append(value)
            kept.append(name)
    return sorted(kept)


def presets(
    choices: Mapping[str, Any], names: Sequence[str] = PRESETS, config_dir: Path = CONFIG_DIR
) -> dict[str, Config]:
    """Each preset command (`+opt=all compile=off`) as the overrides it sets on this workload's
    axes (`compile=off`, `workers=auto`, ...): `+opt=<name>` is read from conf/opt/<name>.yaml's
    `override /group: option` lines, groups the workload does not have are left out, and a later
    override on the command line wins, as in Hydra."""
    return {name: expand(name.split(), choices, config_dir) for name in names}


def expand(overrides: Sequence[str], choices: Mapping[str, Any], config_dir: Path = CONFIG_DIR) -> Config:
    """`overrides` with every `+opt=<name>` replaced by the group overrides it stands for."""
    settings: dict[str, str] = {}
    for override in overrides:
        key = override_key(override)
        if key == "opt":
            for group, option in preset_overrides(override.split("=", 1)[1], config_dir).items():
                if group in choices:
                    settings[group] = f"{group}={option}"
        else:
            settings[key] = override
    return config_of(settings.values())


def preset_overrides(name: str, config_dir: Path = CONFIG_DIR) -> dict[str, str]:
    """The groups conf/opt/<name>.yaml's defaults list sets: its `override /group: option` entries,
    and its `/opt/choice/group: option` ones (the choice a workload's own group reads, for the
    groups only some workloads have; see conf/opt/all.yaml)."""
    path = config_dir / "opt" / f"{name}.yaml"
    try:
        defaults = (yaml.safe_load(path.read_text()) or {}).get("defaults") or []
    except FileNotFoundError:
        raise ValueError(f"+opt={name}: no preset {path}; the presets are {group_options('opt', config_dir)}") from None
    found = {}
    for entry in defaults:
        if isinstance(entry, dict):
            for target, option in entry.items():
                for prefix in ("override /", "/opt/choice/", "opt/choice/"):
                    if target.startswith(prefix):
                        found[target.removeprefix(prefix)] = str(option)
    return found


def _has(cfg: Any, dotted: str) -> bool:
    """Whether `cfg` (DictConfig or dict) has the key `a.b.c`, without resolving its value (the
    workers and threads keys are interpolations that need segperf's resolvers)."""
    node = cfg
    for part in dotted.split("."):
        if not hasattr(node, "keys") or part not in node.keys():
            return False
        node = node._get_node(part) if hasattr(node, "_get_node") else node[part]
    return True


def setting(config: Config, axis: SearchAxis) -> Config:
    """The overrides of `config` on `axis` (empty: it leaves the axis as its base composes it)."""
    return tuple(o for o in config if override_key(o) in axis.keys)


def with_setting(config: Config, axis: SearchAxis, new: Config) -> Config:
    """`config` with its own setting of `axis` replaced by `new` (empty: the base's); `new` may set
    another axis too (share_cores' workers with threads), which then replaces config's setting of
    that axis, by its group or by its key (`threads=half` replaces `num_threads=1`)."""
    replaced = [*axis.keys]
    for override in new:
        key = override_key(override)
        replaced += [key, *(axis_table.BY_GROUP[key].keys if key in axis_table.BY_GROUP else ())]
    return config_of(without_keys(config, replaced) + list(new))


def merge(base: Config, overrides: Config) -> Config:
    """`base` with `overrides` on top, one override per key (the later wins, as on Hydra's command line)."""
    settings = {override_key(o): o for o in base}
    settings.update({override_key(o): o for o in overrides})
    return config_of(settings.values())


def effective(config: Config, axis: SearchAxis, start: Config) -> Config:
    """The setting `config` runs `axis` with: its own override, else the tune's start's, else the
    option the start composed."""
    return setting(config, axis) or setting(start, axis) or axis.start


def without_settings(
    config: Config, entries: Sequence[str], axes: Sequence[SearchAxis], start: Config
) -> tuple[Config, tuple[str, ...] | None]:
    """`config` with the axes that the `key: reason` entries (Probe.not_applied) name set back to
    the start's, and the overrides taken out; None for those when an entry's key is on none of
    the axes (it cannot be taken out)."""
    dropped: list[str] = []
    for entry in entries:
        key = entry.split(":", 1)[0].strip()
        axis = next((a for a in axes if key in a.keys), None)
        if axis is None:
            return config, None
        dropped += setting(config, axis)
        config = with_setting(config, axis, setting(start, axis))
    return config, tuple(dict.fromkeys(dropped))


def undo_learning_changes(best: Config, axes: Sequence[SearchAxis], start: Config) -> list[Config]:
    """`best`, then `best` with its changes that alter what is learned (SearchAxis.changes_learning)
    set back to the start's one after another, in CHANGES_LEARNING's order (precision first, the
    likeliest to cost quality; decoding last, the least): the configurations the quality guard
    tries in turn."""
    found = [best]
    rank = {name: i for i, name in enumerate(CHANGES_LEARNING)}
    for axis in sorted(axes, key=lambda a: rank.get(a.name, len(rank))):
        if axis.changes_learning and set(effective(found[-1], axis, start)) != set(effective(start, axis, start)):
            found.append(with_setting(found[-1], axis, setting(start, axis)))
    return found
