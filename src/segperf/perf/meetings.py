"""Where data-parallel ranks meet inside a step: each rank's wait there, taken out of the phase it
sits in, and the run judged by the rank the others wait for.

A rank that waits in a collective is not computing: rank 0 of a BatchNorm net under DDP, whose
other rank loads its batch 250 ms late, spends ~18 ms of its "forward" computing and ~237 ms
waiting in DDP's buffer broadcast. So a phase's time splits into its compute and its wait (the
waits measured by segperf.callbacks.collective_wait and, for the gradient all-reduce,
segperf.callbacks.allreduce_wait), and:

- the rank the others wait for is the one that waits least where they meet, step by step (its
  lag: the least of the others' waits less its own; the transfer itself, the same on every rank,
  cancels);
- its cause is the part of its own step, waits left out, by which it exceeds the others most;
- the run is as slow as that rank: its own verdict (waits left out) is the run's, named for it.

Nothing here imports torch or Lightning.
"""

from __future__ import annotations

from typing import Any

# the phases of a step a collective can sit in (segperf.callbacks.collective_wait): `fetch` is the
# training loader's fetch, `between` the rest of the time between two steps
WAIT_PHASES = ("between", "fetch", "forward", "backward", "optimizer")
# the rows' mean wait per step in each meeting, and how the summary heads its column
WAIT_COLUMNS = {
    "fetch_wait_mean_s": "fetch wait",
    "forward_wait_mean_s": "fwd wait",
    "backward_wait_mean_s": "bwd wait",
    "allreduce_wait_mean_s": "in AR",
    "optimizer_wait_mean_s": "opt wait",
    "between_wait_mean_s": "betw. wait",
}
# what a collective's name says to a user about where the ranks met
MEETING_NAMES = {
    "_broadcast_coalesced": "DDP's buffer broadcast (BatchNorm statistics, broadcast_buffers=True)",
    "all_gather": "all-gathers (SyncBatchNorm, metrics)",
    "all_gather_single": "all-gathers (SyncBatchNorm on NCCL)",
    "all_gather_into_tensor": "all-gathers",
    "all_reduce": "all-reduces (sync_dist logging, SyncBatchNorm's backward)",
    "barrier": "barriers (sync_dist logging, checkpoints)",
}


# where in the phase table a wait can sit: a part of train_step's split, or a phase between steps
SPLIT_PARTS = ("forward", "backward", "optimizer_step")
BETWEEN_WAITS = ("data_wait", "batch_to_device", "logging", "checkpoint", "framework")
TABLE_WAITS = (*SPLIT_PARTS, *BETWEEN_WAITS)
# the train_step split's part for a step phase of CollectiveWait's
SPLIT_OF = {"forward": "forward", "backward": "backward", "optimizer": "optimizer_step"}


class StepWaits:
    """One step's time blocked in collectives, per phase: `waits` as the meeting's wait (on CUDA the
    device's), `host` as the host's (what to take out of a host-timed phase), and `table` the host's
    by where it sat in the phase table (TABLE_WAITS: what the verdict takes it out of)."""

    __slots__ = ("host", "table", "waits")

    def __init__(self) -> None:
        self.waits: dict[str, float] = {}
        self.host: dict[str, float] = {}
        self.table: dict[str, float] = {}

    def add(self, phase: str, host_s: float, wait_s: float | None, where: str | None = None) -> None:
        """`where`: the phase-table part it sat in (None: the split part of a step phase)."""
        self.host[phase] = self.host.get(phase, 0.0) + host_s
        where = where or SPLIT_OF.get(phase, phase)
        self.table[where] = self.table.get(where, 0.0) + host_s
        if wait_s is not None:
            self.waits[phase] = self.waits.get(phase, 0.0) + wait_s


def verdict_waits(parts: dict[str, Any]) -> dict[str, float]:
    """Seconds this rank spent waiting for the others over its steady-state steps, by where they sat
    in the phase table (TABLE_WAITS: a part of the train_step split, or a phase between steps such as
    the data wait or the framework's), host time: what the phase table holds; from
    `segperf.perf.ranks.step_parts`. The verdict reads them as waiting, not compute, data or overhead."""
    sums = parts.get("host_wait_s") or {}
    return {part: float(sums.get(part) or 0.0) for part in TABLE_WAITS}


def add_waits(results: dict[str, Any], parts: dict[str, Any]) -> None:
    """This rank's waits into its phase table for the verdict: `phases.train_step.waits_s` (by part
    of its split) and `rank_wait_s` of each phase between steps that held some (the table's seconds
    are unchanged: the phase table stays what each phase lasted)."""
    phases = results.get("phases") or {}
    waits = verdict_waits(parts)
    split = {part: waits[part] for part in SPLIT_PARTS}
    if phases.get("train_step") is not None and any(split.values()):
        phases["train_step"]["waits_s"] = split
    for phase in BETWEEN_WAITS:
        if waits[phase] > 0 and phases.get(phase) is not None:
            phases[phase]["rank_wait_s"] = waits[phase]


def run_verdict(own: dict[str, Any] | None, rows: list[dict[str, Any]], found: dict[str, Any] | None) -> Any:
    """The run's verdict from all its ranks: the verdict of the straggler `found` names (its own
    phases, waits left out) with the rank said, else rank 0's `own`. A data-parallel run is as
    slow as its slowest rank; where one rank is late, the others' phases hold its lateness as waits."""
    rank = (found or {}).get("rank")
    theirs = next((row.get("verdict") for row in rows if row.get("rank") == rank), None) if rank is not None else None
    if not theirs or theirs.get("kind") in (None, "unknown"):
        return own
    lag = found.get("lag_median_s")
    wait = f", {lag * 1e3:,.1f} ms a step" if lag is not None else ""
    text = f"rank {rank} sets the pace (the others wait for it where the ranks meet{wait}); on rank {rank}: "
    return {**theirs, "text": text + theirs["text"], "rank": rank, "rank0": own}


def meetings_text(calls: dict[str, int] | None) -> str:
    """Where the ranks met besides the gradient all-reduce, as a user would say it ('' if nowhere)."""
    names = [MEETING_NAMES.get(name, name) for name, count in sorted((calls or {}).items()) if count]
    return ", ".join(dict.fromkeys(names))
