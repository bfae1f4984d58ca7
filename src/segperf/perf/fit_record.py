"""A fit's record, assembled from what PerfMonitor's parts measured: results.json's `phases` (with
the train_step split), `folded`, `accounted`, `train`, `jitter`, `measurement_cost` and the
verdict's inputs. No Lightning here: the parts hand over their plain state (the phase clock's
intervals and marks, a long run's folded totals, the spans timed outside the Trainer).
"""

from __future__ import annotations

import logging
from collections import defaultdict
from pathlib import Path
from typing import Any

from segperf.perf.folding import distribution_of
from segperf.perf.jitter import jitter_summary
from segperf.perf.phases import (
    STEP_ACTION,
    account_phases,
    phase_of_action,
    split_rows,
    split_steps,
    steady_state_batches,
)
from segperf.perf.results import write_record
from segperf.perf.summary import format_run_summary
from segperf.perf.train_rate import train_section
from segperf.perf.verdict import verdict

log = logging.getLogger("segperf")

Span = tuple[float, float]


def add_settings(results: dict[str, Any], device: Any, precision: Any, torch_threads: int) -> None:
    """The device, precision and torch threads the run ended with, where its record has none yet
    (and its list of notices)."""
    results.setdefault("notices", [])
    if device is not None:
        results.setdefault("device", str(device))
        results.setdefault("precision", str(precision))
    results.setdefault("torch_threads", torch_threads)


def phase_intervals(clock: Any, spans: dict[str, list[Span]], actions: dict[str, list], run: Span) -> dict:
    """Every phase's (start, end) records: the profiled actions, the spans, the clock's edges."""
    intervals: dict[str, list[Span]] = defaultdict(list)
    for action, times in actions.items():
        intervals[phase_of_action(action)].extend(times)
    for phase, times in spans.items():
        intervals[phase].extend(times)
    intervals["validation"].extend(clock.validation)
    marks = clock.marks
    if "fit_called" in marks:  # Trainer.fit up to the first batch, and from the last to its return
        setup_end = marks.get("train_start", marks.get("fit_returned", run[1]))
        intervals["setup"].append((marks["fit_called"], setup_end))
    if "train_end" in marks:
        intervals["teardown"].append((marks["train_end"], marks.get("fit_returned", run[1])))
    if "train_start" in marks:  # the loop's time no other phase holds (lowest priority within it)
        intervals["framework"].append((marks["train_start"], marks.get("train_end", run[1])))
    if "train_start" in marks and clock.warmup_steps:
        intervals["warmup"].append((marks["train_start"], marks.get("warmup_end", marks.get("train_end", run[1]))))
    return dict(intervals)


def phase_table(clock: Any, spans: dict[str, list[Span]], folded: Any, actions: dict[str, list], run: Span):
    """The phase table of the run: what is held, laid on the timeline after the folded part, and
    the folded part's totals (segperf.perf.folding)."""
    intervals = phase_intervals(clock, spans, actions, run)
    calls = {phase: folded.phase_calls.get(phase, 0) + len(times) for phase, times in intervals.items()}
    steps = clock.steps
    calls |= {"warmup": min(steps, clock.warmup_steps), "validation": len(clock.validation), "framework": steps}
    if folded.until is None:
        return account_phases(intervals, run, calls)
    table = account_phases(intervals, (folded.until, run[1]), calls)
    table.wall_s = wall = run[1] - run[0]
    for phase, seconds in folded.phase_s.items():
        row = table.phases.setdefault(phase, {"calls": calls.get(phase, 0), "wall_s": 0.0, "fraction": 0.0})
        row["wall_s"] += seconds
    for row in table.phases.values():
        row["fraction"] = row["wall_s"] / wall if wall > 0 else 0.0
    return table


def add_step_split(table: Any, clock: Any, folded: Any, actions: dict[str, list], device_split: dict | None) -> None:
    """train_step's row gains its split into forward, backward and optimizer step (host time, the
    folded steps' totals added) and, on a GPU, the device's split."""
    if "train_step" not in table.phases:
        return
    split = split_steps(actions.get(STEP_ACTION, []), clock.backward, clock.warmup_steps)
    for part, seconds in folded.split_s.items():
        split["seconds"][part] += seconds
    split["steps"] += folded.split_steps
    split["unsplit_s"] += folded.unsplit_s
    if split["steps"]:
        table.phases["train_step"]["split"] = split_rows(split, table.wall_s)
    if device_split:
        for part, seconds in folded.device_split_s.items():
            device_split[part] = device_split.get(part, 0.0) + seconds
        table.phases["train_step"]["device_split_s"] = device_split


def fill_timing(
    results: dict[str, Any],
    clock: Any,
    spans: dict[str, list[Span]],
    long_run: Any,
    actions: dict[str, list],
    run: Span,
    device_split: dict | None,
):
    """results.json's `phases` (train_step split included), `folded` (a long run), `accounted` and
    `train`; returns the phase table (its windows go to the resources' record)."""
    folded = long_run.folded
    table = phase_table(clock, spans, folded, actions, run)
    add_step_split(table, clock, folded, actions, device_split)
    results["phases"] = table.phases
    if folded.steps:
        results["folded"] = {
            "steps": folded.steps,
            "held_from_start": long_run.head,
            "how": "steps past the first held ones are folded into totals every few thousand steps: phases, "
            "split and means exact, the jitter quantiles from a histogram of 0.5% bins",
        }
    results["accounted"] = {
        "wall_s": table.accounted_s,
        "fraction": table.accounted_fraction,
        "run_wall_s": table.wall_s,
    }
    results["train"] = train_section(clock, table.phases.get("validation", {}).get("wall_s", 0.0), run)
    return table


def jitter_section(
    clock: Any, long_run: Any, actions: dict[str, list], batches: dict[str, list[float]], device_steps: list
) -> dict[str, Any]:
    """results.json `jitter`: the data wait's and the step's distributions, the starved steps,
    every held batch's times, and the device's step times where CUDA events timed them."""
    folded, head = long_run.folded, long_run.head
    if folded.steps:  # a long run: the folded steps' histograms with the held steps' values
        jitter = {
            "data_wait": distribution_of(folded.wait, batches["data_wait"]),
            "train_step": distribution_of(folded.step, batches["train_step"]),
            "starved": folded.starved(batches["data_wait"], batches["train_step"]),
        }
    else:
        jitter = jitter_summary(batches["data_wait"], batches["train_step"])
    every = steady_state_batches(actions, 0)  # every batch held, warm-up included, for later analysis
    jitter["per_batch"] = {
        "warmup_steps": clock.warmup_steps,
        "data_wait_s": [round(x, 6) for x in every["data_wait"]],
        "train_step_s": [round(x, 6) for x in every["train_step"]],
        "forward_s": [round(x, 6) for x in clock.forward_s],
    }
    if folded.steps:  # the lists hold the first steps and the last ones
        jitter["per_batch"]["folded_after"] = head
        jitter["per_batch"]["folded_steps"] = folded.steps
    device_steps = device_steps[clock.warmup_steps :]
    if device_steps or folded.device_step.n:
        jitter["device_step"] = distribution_of(folded.device_step, device_steps)
        if not folded.device_step.n:
            jitter["device_step"] = jitter_summary([0.0] * len(device_steps), device_steps)["train_step"]
    return jitter


def measurement_cost(hooks_s: float, tap: Any, sampler: Any, run_s: float) -> dict[str, Any]:
    """What measuring took, measured directly rather than as a difference of two noisy
    throughputs: the training thread's time inside PerfMonitor's per-batch hooks and the profiler
    tap's bookkeeping, and the sampler thread's own CPU time. Their sum over the run's wall time is
    the share of a core the measurement used; on a machine whose every core trains, about what it
    takes from training. Not counted: a preempted intra-op thread's wait when the sampler wakes
    (the side-by-side throughput with perf.measure=false is the check on that), nor the one step
    FLOPs are counted on running slower under the counter: it is a warm-up step, which throughput
    leaves out."""
    tap_s = tap.own_s if tap is not None else 0.0
    sampler_s = sampler.thread_cpu_s if sampler is not None else 0.0
    spent = hooks_s + tap_s + sampler_s
    return {
        "hooks_s": hooks_s,
        "tap_s": tap_s,
        "sampler_cpu_s": sampler_s,
        "fraction": spent / run_s if run_s > 0 else None,
    }


def run_verdict(results: dict[str, Any], device_type: str, loader: dict[str, Any], torch_threads: int) -> dict:
    """The verdict in segperf's overrides for a run segperf configured (its record holds the
    config), in DataLoader and Trainer arguments for anyone else's (`loader`: their settings,
    segperf.training.loaders.loader_settings)."""
    segperf_run = "config" in results
    resources = results["resources"]
    gpu_percent = resources.get("gpu_util_mean_percent")
    workers = resources.get("workers_cpu_training_percent")
    cores = None  # what this run may use, torch's threads and the cores its DataLoader workers kept busy
    if (loader.get("dataloader") or {}).get("num_workers") and workers is not None:
        cores = {"cores": loader["hints"]["workers"], "torch_threads": torch_threads, "workers_cores": workers / 100.0}
    return verdict(
        results["phases"],
        starved_fraction=results["jitter"]["starved"]["fraction"],
        gpu_util_mean=None if gpu_percent is None else gpu_percent / 100.0,
        device_type=device_type,
        settings=results.get("config") if segperf_run else loader,
        advice="segperf" if segperf_run else "dataloader",
        cores=cores,
    )


def publish(folder: Path, results: dict[str, Any]) -> None:
    """Rank 0: results.json and summary.txt in the folder, the summary logged. A folder that
    cannot be written costs one warning; the summary is still logged."""
    summary = format_run_summary(results)
    try:
        write_record(folder, results, summary)
    except Exception as error:  # noqa: BLE001 - a full disk, a read-only or foreign folder
        log.info("%s", summary.rstrip("\n"))
        log.warning(
            "segperf: PerfMonitor could not write results.json to %s (%s); training was not affected. "
            "Pass PerfMonitor(dirpath=...) a folder you can write.",
            folder,
            error,
        )
        return
    log.info("%s", summary.rstrip("\n"))
    log.info("Results: %s", folder / "results.json")
