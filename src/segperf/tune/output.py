"""What a tune leaves behind: tuned.yaml (the winner as a preset) and tune.json (every number).

tuned.yaml is a `# @package _global_` preset like conf/opt/all.yaml, spelt out concretely: the
option of every speed group this workload has (`override /workers: auto`, ...), whatever the
search started from or went through (`+opt=all` is expanded), and the numbers it tuned under them
(`data.num_workers: 1`). It is written to the tune folder and, as the newest tune on this
machine, to `<segperf cache>/tune/opt/tuned.yaml`, which `python -m segperf.train +opt=tuned`
finds through the search path plugin (hydra_plugins/segperf_tuner/search_path.py). Both writes
are atomic: a tune stopped while writing leaves the previous preset whole.
"""

from __future__ import annotations

import shlex
import socket
from collections.abc import Mapping, Sequence
from datetime import datetime
from importlib import metadata
from pathlib import Path
from typing import Any

import yaml
from omegaconf import OmegaConf

from segperf.axes import training_axes
from segperf.command_line import override_key
from segperf.config import available_cores, segperf_cache_dir
from segperf.perf.machine import cpu_model
from segperf.perf.results import write_json_atomic, write_text_atomic
from segperf.tune.probe import Config
from segperf.tune.report import axes_tried, busy_warning, ratio_cell, write_report
from segperf.tune.side_by_side import final_table, tuned_against_presets

# the speed axes that are config groups (conf/<group>/), in the seed study's order
AXIS_GROUPS = tuple(axis.group for axis in training_axes())
# the numbers under the groups that the search tunes directly (batch_size only when asked)
KNOBS = ("data.num_workers", "data.prefetch_factor", "num_threads")
# CPU flags that make reduced precision native (segperf.training.trainer.NATIVE_CPU_FLAGS; not
# imported: that module loads torch and Lightning)
BF16_FLAGS = ("avx512_bf16", "amx_bf16")


def cached_preset() -> Path:
    """Where `+opt=tuned` is found: the newest tune's preset in segperf's cache folder."""
    return segperf_cache_dir() / "tune" / "opt" / "tuned.yaml"


def cpu_flags() -> set[str]:
    try:
        with open("/proc/cpuinfo", encoding="utf-8", errors="replace") as f:
            return next((set(line.split(":", 1)[1].split()) for line in f if line.startswith("flags")), set())
    except OSError:
        return set()


def machine_facts() -> dict[str, Any]:
    """What a tune's answer depends on: the CPU, its cores and bf16 instructions, torch."""
    flags = cpu_flags()
    try:
        torch_version = metadata.version("torch")
    except metadata.PackageNotFoundError:
        torch_version = None
    return {
        "hostname": socket.gethostname(),
        "cpu_model": cpu_model(),
        "cores": available_cores(),
        **{flag: flag in flags for flag in BF16_FLAGS},
        "torch": torch_version,
    }


def _value(override: str) -> Any:
    try:
        return yaml.safe_load(override.split("=", 1)[1])
    except yaml.YAMLError:
        return override.split("=", 1)[1]


def preset_body(best: Config, choices: Mapping[str, Any], *, batch_size: bool = False) -> dict[str, Any]:
    """tuned.yaml's content: every speed group's option as `best` composes it (`choices` are that
    composition's hydra.runtime.choices), and the tuned numbers `best` sets."""
    body: dict[str, Any] = {
        "defaults": [{f"override /{group}": str(choices[group])} for group in AXIS_GROUPS if group in choices]
    }
    knobs = (*KNOBS, "batch_size") if batch_size else KNOBS
    for override in best:
        key = override_key(override)
        if key in knobs and not override.startswith("~"):
            *parents, leaf = key.split(".")
            node = body
            for part in parents:
                node = node.setdefault(part, {})
            node[leaf] = _value(override)
    return body


def preset_text(body: Mapping[str, Any], header: Sequence[str]) -> str:
    comments = "".join(f"# {line}\n" for line in header)
    return "# @package _global_\n" + comments + yaml.safe_dump(dict(body), sort_keys=False, default_flow_style=False)


def apply_command(command: str, batch_size: bool = False) -> str:
    """How to train with the tune: its workload (--config-dir, model=, data=), the rest of the
    start's overrides that the preset does not set (the run size: `+opt=tuned` alone trains at the
    default size, not the batch size the tune measured) and `+opt=tuned`, from the tune's command
    line. `batch_size`: the tune searched the batch size, so the preset sets it."""
    tuned = {*AXIS_GROUPS, *KNOBS, *(key for axis in training_axes() for key in axis.keys)}
    tuned |= {"batch_size"} if batch_size else set()
    words = iter(shlex.split(command))
    kept = []
    for word in words:
        if word in ("--config-dir", "-cd"):
            kept += [word, next(words, "")]
        elif word.startswith("--config-dir="):
            kept.append(word)
        elif "=" in word and not word.startswith("-"):
            key = override_key(word)
            if key not in tuned and key.split(".")[0] not in ("tune", "hydra") and not key.startswith("hydra/"):
                kept.append(word)
    return shlex.join(["python", "-m", "segperf.train", *kept, "+opt=tuned"])


def preset_header(facts: Mapping[str, Any], tune_dir: Path, speedup: str, apply: str = "") -> list[str]:
    return [
        f"The fastest configuration `python -m segperf.tune` found on {facts['hostname']}",
        f"({facts['cpu_model']}, {facts['cores']} cores, torch {facts['torch']}) on {datetime.now():%Y-%m-%d %H:%M}:",
        f"{speedup}. The tune: {tune_dir} (tune_report.md).",
        f"Apply it with: {apply or 'python -m segperf.train +opt=tuned'}",
    ]


def write_preset(tune_dir: Path, text: str) -> tuple[Path, Path]:
    """tuned.yaml in the tune folder and as the newest tune in the cache folder (both atomic)."""
    return write_text_atomic(Path(tune_dir) / "tuned.yaml", text), write_text_atomic(cached_preset(), text)


def write_tune_json(tune_dir: Path, data: Mapping[str, Any]) -> Path:
    return write_json_atomic(Path(tune_dir) / "tune.json", dict(data))


def finish(result: Any, config: Any, loader: Any, settings: Any, command: str, notes: list[str]) -> Any:
    """tuned.yaml (tune folder and cache), tune.json and tune_report.md; the preset's path last."""
    tune_dir = Path(str(config.hydra.sweep.dir))
    facts = machine_facts()
    data = result.to_dict()
    rows = {row["name"]: row for row in final_table(data, data["level"])}
    tuned = rows.get("tuned") or {}
    low, high = tuned.get("vs_start_interval") or (None, None)
    speedup = f"{ratio_cell(tuned.get('vs_start'), low, high, tuned.get('distinguishable'))} the start's images/s"
    failed = sum(result.failures.values())
    if tuple(result.best) == tuple(result.start):
        why = "nothing was faster beyond noise, or the quality check undid it"
        if failed:
            why = f"{failed} of its {result.runs} runs failed, see tune_report.md; or nothing was faster beyond noise"
        speedup = f"the start itself ({why})"
    composed = loader.load_sweep_config(config, list(result.best))
    choices = {str(k): v for k, v in composed.hydra.runtime.choices.items()}
    text = preset_text(
        preset_body(result.best, choices, batch_size=settings.batch_size),
        preset_header(facts, tune_dir, speedup, apply_command(command, settings.batch_size)),
    )
    local, cached = write_preset(tune_dir, text)
    record = {
        "command": command,
        "machine": facts,
        "tune_dir": str(tune_dir),
        "settings": OmegaConf.to_container(settings, resolve=True),
        "notes": notes,
        "result": data,
        "final_table": list(rows.values()),
        "tuned_against_best_other": tuned_against_presets(data, data["level"]),
        "tuned_yaml": str(cached),
        "tuned_yaml_in_tune_dir": str(local),
        "tuned_text": text,
    }
    write_tune_json(tune_dir, record)
    report = write_report(record, tune_dir)
    changed = " ".join(o for o in result.best if o not in set(result.start)) or "(the start)"
    print(f"segperf.tune: tuned {changed}: {speedup}")
    if tried := axes_tried(data):
        print(f"segperf.tune: axes tried: {tried}")
    if failed:
        reason, count = next(iter(result.failures.items()))
        print(f"segperf.tune: warning: {failed} of {result.runs} runs failed; most often ({count}x): {reason}")
    if result.tuner_problems:  # not counted against any configuration: the tuner's own
        reason, count = next(iter(result.tuner_problems.items()))
        total = sum(result.tuner_problems.values())
        print(f"segperf.tune: warning: {total} of {result.runs} runs were not measured ({count}x): {reason}")
    if result.busy_runs:
        print(f"segperf.tune: warning: {busy_warning(result.busy_runs, result.runs)}")
    print(f"segperf.tune: report {report}; apply with: {apply_command(command, settings.batch_size)}")
    print(cached)  # always the last line, the preset's path: a script takes it with `tail -n 1`
    return result
