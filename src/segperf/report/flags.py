"""What the report warns about, as hyperfine warns about outliers: evidence a number may not mean
what it seems to.

- **Not applied**: a requested setting the machine adjusted away (results.json `adjusted`).
- **Busy machine**: a run that shared the CPU with other processes. A run records the cores
  other processes kept busy during it (`machine_load.others_cores`, /proc/stat less its own
  process tree, and `steal_cores`, a VM's hypervisor running someone else): over BUSY_RUN_SHARE
  of its usable cores (at least BUSY_RUN_FLOOR cores), it lost CPU it wanted. An idle machine's
  daemons use about 0.01 cores. Records from before that measurement have only the load average at
  the start (`loadavg_start`), which lags by a minute and still holds this sweep's previous job
  when the run is not its process's first (`process_job` > 0): that job's CPU use
  (`resources.cpu_mean_percent`, in cores), damped as the kernel damps it (1 - e^(-wall/60 s)),
  is taken off first, and what is left over BUSY_SHARE of the cores + BUSY_MARGIN counts as busy.
- **First job of a process**: it pays one-time costs (file caches, library loading, allocator
  warm-up). Flagged when its images/s is more than OUTLIER_Z robust standard deviations
  (1.4826·MAD, at least OUTLIER_FLOOR of the median: two or three repeats cannot estimate a
  spread) from the median of its configuration's other completed runs (hyperfine's "first run
  much slower" check, on a modified z-score).
- **Quality fell**: a configuration whose quality (the metric its runs are judged by,
  segperf.quality: Dice for the U-Net, accuracy for the classifier) is worse
  than the baseline's beyond the spread across seeds (two or more seeds a side), by the speed-ups'
  rule (Welch, LEVEL, here on the values themselves), and by at least QUALITY_FLOOR.

Older results.json files without these records load as before: nothing is flagged from them.
"""

from __future__ import annotations

import math
import statistics
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from segperf.perf.decision import LEVEL, MIN_RUNS, present_numbers, welch
from segperf.perf.formatting import fmt_num
from segperf.quality import Quality, of_results
from segperf.report.sweep import Configuration, Run, Sweep

BUSY_RUN_SHARE, BUSY_RUN_FLOOR = 0.1, 0.2  # measured during the run
BUSY_SHARE, BUSY_MARGIN = 0.5, 0.5  # estimated from the load average at the start (older records)
OUTLIER_Z, OUTLIER_FLOOR = 3.5, 0.03
QUALITY_FLOOR = 0.005
LOAD_TIME_CONSTANT_S = 60.0  # the kernel's 1-minute load average
# a sweep none of whose runs logged a validation metric: its quality column is n/a throughout
NO_QUALITY = Quality("quality", "max", label="quality")


@dataclass(frozen=True)
class Flag:
    """One warning: what kind, which configuration (and job, for a run), and its line in report.md."""

    kind: str  # "not_applied" | "busy" | "first_job" | "quality"
    label: str
    job: int | None
    text: str
    detail: dict | None = None  # a busy run's run_load


def sweep_quality(configs: list[Configuration]) -> Quality:
    """The quality a sweep is judged by: the one its runs recorded (segperf.quality.of_results:
    the U-Net's val Dice, the classifier's val accuracy, what a user's module or model config
    declared), the first completed run's that has one."""
    judged = (of_results(r.get("quality")) for c in configs for r in c.ok_runs)
    return next((q for q in judged if q is not None), NO_QUALITY)


def quality_metric(configs: list[Configuration]) -> tuple[str, str]:
    """(results path, name) of the sweep's quality (sweep_quality)."""
    quality = sweep_quality(configs)
    return f"quality.{quality.key}", quality.name


def quality_mode(configs: list[Configuration]) -> str:
    """Whether the sweep's quality is higher-is-better ("max": Dice, accuracy) or lower-is-better
    ("min": a loss or an error)."""
    return sweep_quality(configs).mode


def worse_word(mode: str) -> str:
    """How a worse quality reads: lower for an accuracy, higher for an error."""
    return "higher" if mode == "min" else "lower"


def _number(value: Any) -> float | None:
    return next(iter(present_numbers([value])), None)


def _cores(run: Run) -> float | None:
    load = run.get("machine_load") or {}
    recorded = (load.get("cores"), run.get("machine.cpu_threads"), run.get("machine.cpu_cores"))
    return next((n for value in recorded if (n := _number(value))), None)


def run_load(run: Run, previous: Run | None) -> dict[str, Any] | None:
    """How busy the machine was around `run`: the cores other processes used (`others`), the
    threshold and whether it was over it, and how that was known (`measured`: during the run, or
    estimated from the 1-minute load average at its start); None when the run recorded neither.
    `previous`: the job this sweep ran just before it, in the same process (its load carries over
    into the load average)."""
    load = run.get("machine_load")
    if not isinstance(load, dict):
        return None
    cores = _cores(run)
    start = load.get("loadavg_start")
    one_min = _number(start[0]) if isinstance(start, list | tuple) and start else None
    others = _number(load.get("others_cores"))
    if others is not None and cores:
        others += _number(load.get("steal_cores")) or 0.0
        threshold = max(BUSY_RUN_SHARE * cores, BUSY_RUN_FLOOR)
        return {
            "measured": "during the run",
            "others": others,
            "steal": _number(load.get("steal_cores")),
            "loadavg_1m": one_min,
            "cores": cores,
            "threshold": threshold,
            "busy": others > threshold,
        }
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
    return {
        "measured": "load average at the start",
        "loadavg_1m": one_min,
        "others": others,
        "cores": cores,
        "threshold": threshold,
        "busy": others > threshold,
    }


def measured_busy(run: Run) -> bool:
    """Other processes kept the machine busy during `run`, as measured then (`others_cores`): a
    fact about the run, unlike the load-average estimate of older records, which is not used here."""
    load = run_load(run, None)
    return bool(load and load["measured"] == "during the run" and load["busy"])


def busy_during(results: dict[str, Any]) -> bool:
    """measured_busy for a results.json read elsewhere (the tuner reads each probe's)."""
    return measured_busy(Run(Path(), 0, "", str(results.get("status")), None, results, ()))


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


def _busy_text(load: dict[str, Any]) -> str:
    """What made a run busy, in words: measured during it, or estimated from the load average."""
    if load["measured"] == "during the run":
        steal = f", {load['steal']:.2f} of it VM steal" if (load.get("steal") or 0.0) >= 0.005 else ""
        return (
            f"ran on a busy machine: other processes kept {load['others']:.2f} of its {load['cores']:g} usable cores "
            f"busy during it{steal} (over {load['threshold']:.2f})"
        )
    return (
        f"started on a busy machine: 1-minute load average {load['loadavg_1m']:.2f} on {load['cores']:g} usable "
        f"cores, about {load['others']:.1f} of it from other processes "
        f"(over {load['threshold']:.1f}: half the cores + {BUSY_MARGIN})"
    )


def _busy_flags(sweep: Sweep, labels: dict[int, str]) -> list[Flag]:
    flags, loads = [], busy_runs(sweep)
    for run in sweep.runs:
        load = loads.get(run.job)
        if not load or not load["busy"] or run.job not in labels:
            continue
        why = f"{_busy_text(load)}{_mhz(run)}"
        text = f"job {run.job} (`{labels[run.job]}`) {why}. Its timing may be low: re-run it on a quiet machine."
        if load["measured"] == "during the run":
            text += " It is left out of the speed-up decision while its configuration has two quiet runs."
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
    measured = {d.get("measured") for d in loads}
    if measured == {"during the run"}:
        why = (
            f"ran on a busy machine: other processes kept {span('others', 2)} of their {span('cores', 0)} usable "
            f"cores busy during them (over {span('threshold', 2)})"
        )
    elif measured == {"load average at the start"}:
        why = (
            f"started on a busy machine: 1-minute load average {span('loadavg_1m', 2)} on {span('cores', 0)} usable "
            f"cores, about {span('others', 1)} of it from other processes (over {span('threshold', 1)}: half the "
            f"cores + {BUSY_MARGIN})"
        )
    else:  # records of both kinds
        why = (
            f"ran on a busy machine: other processes used about {span('others', 1)} of {span('cores', 0)} usable cores"
        )
    merged = f"jobs {jobs} {why}. Their timings may be low: re-run them on a quiet machine."
    if measured == {"during the run"}:
        merged += " They are left out of the speed-up decision while their configuration has two quiet runs."
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


def seeds_measured(config: Configuration, path: str) -> int:
    """How many different seeds `config`'s completed runs measured `path` with."""
    return len({r.get("config.seed") for r in config.ok_runs if _number(r.get(path)) is not None} - {None})


def quality_fell(config: Configuration, baseline: Configuration | None, path: str, mode: str = "max") -> bool | None:
    """True when `config`'s quality is worse than the baseline's beyond the spread across seeds
    (Welch at LEVEL, and by QUALITY_FLOOR or more): lower, or higher where `mode` is "min" (a loss,
    an error: an outside regression model's better val_mae was flagged as fallen); None when it
    cannot be judged (fewer than MIN_RUNS seeds on a side, no baseline, or a configuration that ran
    the baseline's settings).

    Quality is judged across seeds, not across `+repeat`s of one seed: on a CPU those train to the
    same weights, so their spread is zero and any change in the arithmetic (deconv, bf16) would be
    "beyond the spread" — a 0.02 Dice difference a sweep of seeds shows is noise."""
    if baseline is None or config is baseline or config.same_as is not None:
        return None
    if min(seeds_measured(config, path), seeds_measured(baseline, path)) < MIN_RUNS:
        return None
    test = welch(config.values(path), baseline.values(path), LEVEL)
    if test.distinguishable is None:
        return None
    drop = (baseline.stat(path).median or 0.0) - (config.stat(path).median or 0.0)
    if mode == "min":
        return bool(test.distinguishable and test.low > 0 and -drop >= QUALITY_FLOOR)
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
    mode = quality_mode(configs)
    base = baseline.stat(path) if baseline else None
    for c in configs:
        if quality_fell(c, baseline, path, mode):
            mine = c.stat(path)
            text = (
                f"`{c.label}`: {name} {mine.median:.3f} [{mine.min:.3f}–{mine.max:.3f}] is {worse_word(mode)} than the "
                f"baseline's {base.median:.3f} [{base.min:.3f}–{base.max:.3f}], beyond the spread across seeds "
                f"(Welch's t-test, {LEVEL:.0%}): the speed may have cost quality."
            )
            flags.append(Flag("quality", c.label, None, text))
    return flags
