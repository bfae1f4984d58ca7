"""The two sides of a comparison, read back from their run folders, and whether they may be compared.

A side is one run's folder or a sweep's folder; every run below a sweep folder is a repeat of
that side (`+repeat=0,1,2`), so the runs of a side must be one configuration: a sweep that varied
something (`-m workers=off,auto`) is narrowed to one with `--ref-where workers=off`. Two sides
compare only when their timings can: every run completed, the same workload (what is trained on
what: the model's and data's classes, the image size), and the same machine as the report
judges it (segperf.report.comparability). Anything else is an `Incomparable` naming the reason.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from segperf.report.comparability import differences
from segperf.report.settings import bare_key
from segperf.report.sweep import Configuration, Run, Sweep, SweepError, get_path, load_sweep

# each kind of run's throughput: the path the report's tables read it from
THROUGHPUT = {"train": "train.images_per_s", "inference": "inference.end_to_end_images_per_s"}
# what makes two runs the same workload: what is trained on what. The speed axes (workers, pin,
# batch_size, ...) are what a comparison is for; the run size changes the timing little, and is shown
WORKLOAD_KEYS = ("model._target_", "model.net._target_", "data._target_", "data.height", "data.width")


class Incomparable(Exception):
    """The two sides cannot be compared; the message says why and what to do, in one line."""


@dataclass
class Side:
    """One side: its folder and the runs pooled as its repeats (one configuration)."""

    name: str  # "REF" | "CAND"
    path: Path
    config: Configuration

    @property
    def runs(self) -> list[Run]:
        return self.config.runs

    @property
    def kind(self) -> str:
        return self.runs[0].kind

    @property
    def throughput(self) -> str:
        return THROUGHPUT.get(self.kind, THROUGHPUT["train"])


def matches(run: Run, where: list[tuple[str, str]]) -> bool:
    """True when `run` has every KEY=VALUE of `where`: in its folder name's overrides
    (`0_workers=auto,+repeat=1`) or as an axis it recorded (results.json `axes`)."""
    overrides = {bare_key(k): v for k, v in run.overrides}
    axes = run.results.get("axes") if isinstance(run.results.get("axes"), dict) else {}
    return all(overrides.get(key) == value or str(axes.get(key)).lower() == value.lower() for key, value in where)


def load_side(name: str, path: Path, where: list[tuple[str, str]]) -> Side:
    """The runs of `path` (narrowed by `where`) as one side; Incomparable when there are none,
    when one of them did not complete, or when they are more than one configuration."""
    try:
        sweep = load_sweep(path)
    except SweepError as error:
        raise Incomparable(f"{name}: {error}") from None
    runs = [run for run in sweep.runs if matches(run, where)]
    if not runs:
        picked = " ".join(f"{k}={v}" for k, v in where)
        raise Incomparable(f"{name}: no run in {path} has {picked}")
    for run in runs:
        if not run.ok:
            raise Incomparable(
                f"{name}: run {run.path} did not complete ({run.status}: {run.error}); "
                "a failed or interrupted run has no throughput to compare: run it again"
            )
    configs = Sweep(path, runs).configurations()
    if len(configs) > 1:
        labels = ", ".join(c.label for c in configs)
        option = f"--{name.lower()}-where"
        raise Incomparable(
            f"{name}: {path} holds {len(configs)} configurations ({labels}), not repeats of one; "
            f"pick one with {option} KEY=VALUE (e.g. {option} {configs[0].label.split(', ')[0]})"
        )
    return Side(name, path, configs[0])


def workload(run: Run) -> dict[str, Any]:
    """What `run` trained on what: its kind and the WORKLOAD_KEYS it recorded (a key a run did not
    record, an older results.json, is unknown, not different)."""
    config = run.results.get("config") if isinstance(run.results.get("config"), dict) else {}
    found = {key: get_path(config, key) for key in WORKLOAD_KEYS}
    return {"kind": run.kind} | {key: value for key, value in found.items() if value is not None}


def unrecorded_workload(runs: list[Run]) -> list[Run]:
    """The runs that recorded no workload (results.json without `config`: PerfMonitor in a user's
    own script) when others did: compared on the user's word that they trained the same model."""
    recorded = [run for run in runs if isinstance(run.results.get("config"), dict)]
    return [run for run in runs if run not in recorded] if recorded else []


def workload_differences(runs: list[Run]) -> dict[str, list[str]]:
    """Workload fields with more than one recorded value across `runs`, each with its values."""
    seen: dict[str, dict[str, None]] = {}
    for run in runs:
        for key, value in workload(run).items():
            seen.setdefault(key, {})[str(value)] = None
    return {key: list(values) for key, values in seen.items() if len(values) > 1}


def check_comparable(ref: Side, cand: Side, allow_mixed_machines: bool = False) -> None:
    """Incomparable when the runs of the two sides are different workloads, or (unless allowed)
    come from machines that differ in anything the report judges comparability by."""
    runs = ref.runs + cand.runs
    if diffs := workload_differences(runs):
        what = "; ".join(f"{key} ({' vs '.join(values)})" for key, values in diffs.items())
        raise Incomparable(f"another workload: the runs differ in {what}; compare runs of one model on one data set")
    if not allow_mixed_machines and (diffs := differences([run.results.get("machine") for run in runs])):
        what = "; ".join(f"{key} ({' vs '.join(values)})" for key, values in diffs.items())
        raise Incomparable(
            f"another machine: the runs come from machines that differ in {what}; timings from different "
            "machines do not compare (--allow-mixed-machines compares them anyway)"
        )
