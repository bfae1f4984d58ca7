"""Where the wall time of a run went: phases built from the actions Lightning profiles.

Lightning's loops announce every step and hook to the trainer's profiler
(`train_dataloader_next`, `batch_to_device`, `run_training_batch`, `save_checkpoint`, each
callback hook). A phase table needs *when* each call happened, so that nested and overlapping
records (a batch_to_device inside a validation, a progress-bar refresh inside the warm-up) are
counted once and the phases add up to the run's wall time. segperf.callbacks.profiler_tap keeps
the (start, end) of those calls, the PhaseClock callback adds the edges no profiler action marks
(validation windows, the end of warm-up, the training loop's bounds, the backward inside each
step), and `account_phases` lays all of it on one timeline. Nothing here imports Lightning.

All times are `time.perf_counter()` (the clock SimpleProfiler and the resource sampler use).
On a GPU the host clock measures where the *host* waits; CUDA events (no synchronization in
the hot path, read once at the end) give each step's device time alongside.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from segperf.perf.phase_names import PHASES

Interval = tuple[float, float]

# Lightning profiler action -> phase (exact names, then prefixes for callback hooks).
ACTION_PHASES = {
    "[_TrainingEpochLoop].train_dataloader_next": "data_wait",
    "run_training_batch": "train_step",
    "save_checkpoint": "checkpoint",
    "segperf.log_metrics": "logging",
}
ACTION_PREFIXES = {
    "[Strategy]": ("batch_to_device", ".batch_to_device"),
    "[Callback]TQDMProgressBar": ("logging", ""),
    "[Callback]RichProgressBar": ("logging", ""),
}


def phase_of_action(action: str) -> str | None:
    if action in ACTION_PHASES:
        return ACTION_PHASES[action]
    for prefix, (phase, suffix) in ACTION_PREFIXES.items():
        if action.startswith(prefix) and action.endswith(suffix):
            return phase
    return None


@dataclass
class PhaseTable:
    wall_s: float
    phases: dict[str, dict[str, Any]] = field(default_factory=dict)
    windows: dict[str, list[Interval]] = field(default_factory=dict)

    @property
    def accounted_s(self) -> float:
        return sum(p["wall_s"] for p in self.phases.values())

    @property
    def accounted_fraction(self) -> float:
        return self.accounted_s / self.wall_s if self.wall_s > 0 else 0.0


def account_phases(
    intervals: dict[str, list[Interval]], run: Interval, calls: dict[str, int] | None = None
) -> PhaseTable:
    """Lay every phase's intervals on one timeline within `run`; an instant covered by several
    phases goes to the one listed first in PHASES. Returns wall seconds, share of the run and
    call counts per phase, and the exclusive windows each phase got (for resource statistics)."""
    run_start, run_end = run
    edges: list[tuple[float, int, int]] = []  # (time, +1/-1, phase rank)
    for phase, spans in intervals.items():
        rank = PHASES.index(phase)
        for start, end in spans:
            start, end = max(start, run_start), min(end, run_end)
            if end > start:
                edges.append((start, 1, rank))
                edges.append((end, -1, rank))
    edges.sort()
    # open intervals per phase, and a bit per phase with any open: the owner is the lowest set bit
    # (a long run sweeps ~16,000 edges per fold: segperf.perf.folding)
    active = [0] * len(PHASES)
    mask = 0
    windows: dict[str, list[Interval]] = defaultdict(list)
    previous = None
    for t, delta, rank in edges:
        if mask and t > previous:
            spans = windows[PHASES[(mask & -mask).bit_length() - 1]]
            if spans and spans[-1][1] == previous:
                spans[-1] = (spans[-1][0], t)  # extend the open span
            else:
                spans.append((previous, t))
        active[rank] += delta
        if active[rank]:
            mask |= 1 << rank
        else:
            mask &= ~(1 << rank)
        previous = t
    wall = run_end - run_start
    table = PhaseTable(wall_s=wall, windows=dict(windows))
    for phase in PHASES:
        spans = windows.get(phase, [])
        if not spans and phase not in intervals:
            continue
        seconds = sum(end - start for start, end in spans)
        table.phases[phase] = {
            "calls": (calls or {}).get(phase, len(intervals.get(phase, []))),
            "wall_s": seconds,
            "fraction": seconds / wall if wall > 0 else 0.0,
        }
    return table


FETCH_ACTION, STEP_ACTION = "[_TrainingEpochLoop].train_dataloader_next", "run_training_batch"
# the parts of a training step, in the order they run (results.json's phases.train_step.split)
STEP_PARTS = ("forward", "backward", "optimizer_step")


def steady_state_batches(intervals: dict[str, list[Interval]], warmup_steps: int) -> dict[str, list[float]]:
    """Per-batch data_wait and train_step seconds after warm-up, in batch order (for jitter), from
    the profiled actions' intervals. Lightning fetches once per training batch, so the i-th fetch
    belongs to the i-th step."""
    waits = intervals.get(FETCH_ACTION, [])
    steps = intervals.get(STEP_ACTION, [])
    n = min(len(waits), len(steps))
    return {
        "data_wait": [end - start for start, end in waits[warmup_steps:n]],
        "train_step": [end - start for start, end in steps[warmup_steps:n]],
    }


def split_steps(
    steps: Sequence[Interval], backward: Sequence[tuple[float | None, float | None]], skip: int
) -> dict[str, Any]:
    """Seconds of the training steps after the first `skip` (warm-up) spent in forward, backward and
    the optimizer step, from each step's (start, end) and its (first on_before_backward, last
    on_after_backward) host times: forward = start to the backward, optimizer_step = the backward's
    end to the step's end (gradient clipping, the optimizer, its zero_grad). The parts of a step add
    up to it exactly; a step with no backward inside it (manual optimization that never called
    manual_backward) is counted whole as `unsplit_s`."""
    seconds = dict.fromkeys(STEP_PARTS, 0.0)
    unsplit, split = 0.0, 0
    for (start, end), (before, after) in zip(steps[skip:], backward[skip:], strict=False):
        if before is None or after is None or not start <= before <= after <= end:
            unsplit += end - start
            continue
        seconds["forward"] += before - start
        seconds["backward"] += after - before
        seconds["optimizer_step"] += end - after
        split += 1
    return {"steps": split, "seconds": seconds, "unsplit_s": unsplit}


def split_rows(split: dict[str, Any], run_wall_s: float) -> dict[str, dict[str, Any]]:
    """phases.train_step.split: per part its calls, wall seconds and share of the run (as every phase
    row has), and its share of train_step. The parts are measured on the same steps as train_step, so
    they add up to it (less any step counted unsplit)."""
    total = sum(split["seconds"].values()) + split["unsplit_s"]
    rows: dict[str, dict[str, Any]] = {}
    for part, seconds in split["seconds"].items():
        rows[part] = {
            "calls": split["steps"],
            "wall_s": seconds,
            "fraction": seconds / run_wall_s if run_wall_s > 0 else 0.0,
            "of_train_step": seconds / total if total > 0 else None,
        }
    if split["unsplit_s"]:
        rows["unsplit"] = {"wall_s": split["unsplit_s"], "of_train_step": split["unsplit_s"] / total}
    return rows
