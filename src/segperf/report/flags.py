"""What the report warns about, as hyperfine warns about outliers: evidence a number may not mean
what it seems to.

- **Not applied**: a requested setting the machine adjusted away (results.json `adjusted`).
- **Busy machine**: a run that started while other processes kept the CPU busy. A run records
  the load average at its start (`machine_load.loadavg_start`, 1/5/15 min) and its usable cores.
  The 1-minute load still holds this sweep's previous job when the run is not its process's
  first (`process_job` > 0): that job's CPU use (`resources.cpu_mean_percent`, in cores), damped
  as the kernel damps it (1 - e^(-wall/60 s)), is taken off first. What is left counts as other
  processes; over BUSY_SHARE of the cores + BUSY_MARGIN, they took a share of the CPU the run
  wanted (a job that uses every core loses up to that share), while an idle machine's daemons stay
  well under it, and the margin keeps a 1- or 2-core machine from being flagged for one short-lived
  process.
- **First job of a process**: it pays one-time costs (file caches, library loading, allocator
  warm-up). Flagged when its images/s is more than OUTLIER_Z robust standard deviations
  (1.4826·MAD, at least OUTLIER_FLOOR of the median: two or three repeats cannot estimate a
  spread) from the median of its configuration's other completed runs (hyperfine's "first run
  much slower" check, on a modified z-score).
- **Quality fell**: a configuration whose quality (Dice, or accuracy for the classifier) is lower
  than the baseline's beyond the spread of their repeats, by the speed-ups' rule (Welch, LEVEL,
  here on the values themselves), and by at least QUALITY_FLOOR.

Older results.json files without these records load as before: nothing is flagged from them.
"""

from __future__ import annotations

import math
import statistics
from dataclasses import dataclass
from typing import Any

from segperf.perf.formatting import fmt_num
from segperf.report.stats import LEVEL, present_numbers, welch
from segperf.report.sweep import Configuration, Run, Sweep

BUSY_SHARE, BUSY_MARGIN = 0.5, 0.5
OUTLIER_Z, OUTLIER_FLOOR = 3.5, 0.03
QUALITY_FLOOR = 0.005
LOAD_TIME_CONSTANT_S = 60.0  # the kernel's 1-minute load average


@dataclass(frozen=True)
class Flag:
    """One warning: what kind, which configuration (and job, for a run), and its line in report.md."""

    kind: str  # "not_applied" | "busy" | "first_job" | "quality"
    label: str
    job: int | None
    text: str
    detail: dict | None = None  # a busy run's run_load


def quality_metric(configs: list[Configuration]) -> tuple[str, str]:
    """The quality a sweep is judged by: val Dice for the U-Net, val accuracy for the CPU study's
    classifier (it has no Dice): (results path, name)."""
    has = {path: any(c.stat(path).n for c in configs) for path in ("quality.val_accuracy", "quality.val_dice")}
    if has["quality.val_accuracy"] and not has["quality.val_dice"]:
        return "quality.val_accuracy", "val accuracy"
    return "quality.val_dice", "val Dice"


def _number(value: Any) -> float | None:
    return next(iter(present_numbers([value])), None)


def _cores(run: Run) -> float | None:
    load = run.get("machine_load") or {}
    recorded = (load.get("cores"), run.get("machine.cpu_threads"), run.get("machine.cpu_cores"))
    return next((n for value in recorded if (n := _number(value))), None)


def run_load(run: Run, previous: Run | None) -> dict[str, Any] | None:
    """The machine load `run` started on: the 1-minute load average, the part of it estimated to be
    other processes', the threshold and whether it was over it; None when the run recorded none.
    `previous`: the job this sweep ran just before it, in the same process (its load carries over)."""
    load = run.get("machine_load")
    start = load.get("loadavg_start") if isinstance(load, dict) else None
    one_min = _number(start[0]) if isinstance(start, list | tuple) and start else None
    cores = _cores(run)
    if one_min is None or not cores:
        return None
    carried = 0.0
    if previous is not None and _number(run.get("process_job")):
        cpu = _number(previous.get("resources.cpu_mean_percent"))
        wall = _number(previous.get("accounted.run_wall_s")) or _number(previous.get("train.wall_s"))
        if cpu is not None and wall is not None:
            carried = cpu / 100 * (1 - math.exp(-wall / LOAD_TIME_CONSTANT_S))
    others = max(one_min - carried, 0.0)
    threshold = BUSY_SHARE * cores + BUSY_MARGIN
    return {"loadavg_1m": one_min, "others": others, "cores": cores, "threshold": threshold, "busy": others > threshold}


def busy_runs(sweep: Sweep) -> dict[int, dict[str, Any]]:
    """run_load of every run that recorded one, by job number."""
    loads = {}
    for i, run in enumerate(sweep.runs):
        previous = sweep.runs[i - 1] if i else None
        if previous is not None and previous.job != run.job - 1:
            previous = None  # a gap in the job numbers: not the job just before
        if (load := run_load(run, previous)) is not None:
            loads[run.job] = load
    return loads


def _mhz(run: Run) -> str:
    load = run.get("machine_load") or {}
    start, end = _number(load.get("cpu_mhz_start")), _number(load.get("cpu_mhz_end"))
    if start is None:
        return ""
    return f"; CPU clock {start:,.0f} MHz at its start" + (f", {end:,.0f} at its end" if end is not None else "")


def _busy_flags(sweep: Sweep, labels: dict[int, str]) -> list[Flag]:
    flags, loads = [], busy_runs(sweep)
    for run in sweep.runs:
        load = loads.get(run.job)
        if not load or not load["busy"] or run.job not in labels:
            continue
        text = (
            f"job {run.job} (`{labels[run.job]}`) started on a busy machine: 1-minute load average "
            f"{load['loadavg_1m']:.2f} on {load['cores']:g} usable cores, about {load['others']:.1f} of it from other "
            f"processes (over {load['threshold']:.1f}: half the cores + {BUSY_MARGIN}){_mhz(run)}. Its timing may be "
            "low: re-run it on a quiet machine."
        )
        flags.append(Flag("busy", labels[run.job], run.job, text, load))
    return flags


def warning_lines(flags: list[Flag]) -> list[str]:
    """The flags' lines for report.md, in order; several busy runs make one line, not one each."""
    busy = [f for f in flags if f.kind == "busy"]
    if len(busy) < 2:
        return [f.text for f in flags]
    loads = [f.detail or {} for f in busy]

    def span(key: str, digits: int) -> str:
        low, high = (f"{v:.{digits}f}" for v in (min(d[key] for d in loads), max(d[key] for d in loads)))
        return low if low == high else f"{low}–{high}"

    jobs = ", ".join(f"{f.job} (`{f.label}`)" for f in busy)
    merged = (
        f"jobs {jobs} started on a busy machine: 1-minute load average {span('loadavg_1m', 2)} on "
        f"{span('cores', 0)} usable cores, about {span('others', 1)} of it from other processes (over "
        f"{span('threshold', 1)}: half the cores + {BUSY_MARGIN}). Their timings may be low: re-run them on a quiet "
        "machine."
    )
    first = flags.index(busy[0])
    rest = [f.text for f in flags if f.kind != "busy"]
    return rest[:first] + [merged] + rest[first:]


def first_job_outlier(config: Configuration, path: str = "train.images_per_s") -> tuple[Run, float, float] | None:
    """(the run, its value, the others' median) when the first job of a sweep process is an
    outlier among its configuration's completed runs (see the module docstring); else None."""
    for run in config.ok_runs:
        if run.get("process_job") != 0 or _number(run.get(path)) is None:
            continue
        others = present_numbers(r.get(path) for r in config.ok_runs if r is not run)
        if len(others) < 2:
            continue
        median = statistics.median(others)
        mad = statistics.median(abs(v - median) for v in others)
        scale = max(1.4826 * mad, OUTLIER_FLOOR * abs(median))
        value = float(run.get(path))
        if scale and abs(value - median) > OUTLIER_Z * scale:
            return run, value, median
    return None


def quality_fell(config: Configuration, baseline: Configuration | None, path: str) -> bool | None:
    """True when `config`'s quality is lower than the baseline's beyond their repeats' spread
    (Welch at LEVEL, and by QUALITY_FLOOR or more); None when it cannot be judged (fewer than
    two runs on a side, no baseline, or a configuration that ran the baseline's settings)."""
    if baseline is None or config is baseline or config.same_as is not None:
        return None
    test = welch(config.values(path), baseline.values(path), LEVEL)
    if test.distinguishable is None:
        return None
    drop = (baseline.stat(path).median or 0.0) - (config.stat(path).median or 0.0)
    return bool(test.distinguishable and test.high < 0 and drop >= QUALITY_FLOOR)


def collect(sweep: Sweep, configs: list[Configuration], baseline: Configuration | None) -> list[Flag]:
    """Every warning about `configs` (one kind of run, e.g. the training configurations)."""
    flags = []
    for c in configs:
        for name, change in c.not_applied.items():
            ran = f"; it ran what `{c.same_as}` ran: shown as same as it, with no speed-up" if c.same_as else ""
            text = (
                f"`{c.label}`: {name} was not applied (requested {change.get('requested')}, ran with "
                f"{change.get('used')}): {change.get('reason') or 'no reason recorded'}{ran}."
            )
            flags.append(Flag("not_applied", c.label, None, text))
    flags += _busy_flags(sweep, {r.job: c.label for c in configs for r in c.runs})
    for c in configs:
        if (outlier := first_job_outlier(c)) is not None:
            run, value, median = outlier
            change = value / median - 1
            text = (
                f"job {run.job} (`{c.label}`), the first job of its sweep process, ran {fmt_num(value)} images/s, "
                f"{abs(change):.0%} {'slower' if change < 0 else 'faster'} than the median of the configuration's "
                f"other runs ({fmt_num(median)}): it may have paid one-time costs (file caches, library loading, "
                "allocator warm-up), and is left out of the speed-up decision. Start the sweep with a throw-away "
                "job, or add repeats, before trusting this configuration's range."
            )
            flags.append(Flag("first_job", c.label, run.job, text))
    path, name = quality_metric(configs)
    base = baseline.stat(path) if baseline else None
    for c in configs:
        if quality_fell(c, baseline, path):
            mine = c.stat(path)
            text = (
                f"`{c.label}`: {name} {mine.median:.3f} [{mine.min:.3f}–{mine.max:.3f}] is lower than the "
                f"baseline's {base.median:.3f} [{base.min:.3f}–{base.max:.3f}], beyond the spread of their repeats "
                f"(Welch's t-test, {LEVEL:.0%}): the speed may have cost quality."
            )
            flags.append(Flag("quality", c.label, None, text))
    return flags
