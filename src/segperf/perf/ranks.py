"""Data-parallel ranks: each rank's row, the whole run from them, and the straggler with its cause.

Where the ranks meet inside a step besides the gradient all-reduce (DDP's buffer broadcast at
every forward of a net with BatchNorm, SyncBatchNorm, a `sync_dist` log, a barrier), each rank's
wait there is measured (segperf.callbacks.collective_wait) and taken out of the phase it sits in;
then the straggler is the rank that waits least where they meet, step by step, and its cause the
part of its own step (waits left out) by which it exceeds the others most (segperf.perf.meetings).
Without those waits (a record from before them, a strategy without the timing) the rule below,
by the arrival at the gradient all-reduce, names it.

In DDP every training step ends with a gradient all-reduce that no rank leaves before the last
one has joined it. So per step a rank's *arrival* at the all-reduce is what matters: its data
wait, its forward (host work: Python, kernel launches, the forward's compute), and the part of
its backward it computes before its last gradient bucket is ready. The rank that arrives last
sets the pace, and the others wait inside the all-reduce for it.

A per-rank timing of backward as a whole cannot find a rank slow in backward: the all-reduce
makes every rank's backward as long as the slowest one's. `segperf.callbacks.allreduce_wait`
times, per step, when each rank's last gradient bucket was ready (a DDP communication hook), so
a rank's backward splits into its own compute and its wait for the others; the rank whose
compute is long and whose wait is short is the one the others wait for.

The evidence is paired, step by step (the ranks step together): how often the named rank
arrived last, and by how much, not a difference of two averages that one stall can make. A rank
is named a straggler only when it arrived last in most steps *and* by a margin that matters
against the step; otherwise the run says no rank stands out. Nothing here imports Lightning.
"""

from __future__ import annotations

import socket
from statistics import fmean, median
from typing import Any

from segperf.perf.meetings import BETWEEN_WAITS, TABLE_WAITS, WAIT_COLUMNS, WAIT_PHASES, run_verdict
from segperf.perf.memory_trend import memory_row

# a rank's own step, part by part, waits left out: the cause named for a straggler (the first
# key a row has; a row from before the waits were measured has the forward whole)
CAUSES = {
    "data": ("data_own_mean_s", "data_wait_mean_s"),
    "host": ("forward_compute_mean_s", "forward_mean_s"),
    "backward": ("backward_compute_mean_s",),
    "optimizer": ("optimizer_compute_mean_s",),
}
CAUSE_TEXT = {
    "data": "waits for its data",
    "host": "is slow in its forward (host work: Python, launches, the forward's compute)",
    "backward": "computes its backward slowly (the others wait for it inside the gradient all-reduce)",
    "optimizer": "is slow in its optimizer step",
}
# a straggler arrives last in at least this share of the steps ...
LAST_SHARE = 0.75
# ... and later than the others by at least this share of the median step (data wait + step):
# two identical ranks on 2 shared CPU cores were 0.1-0.5 ms (2-10%) apart, one last in 71-81% of steps
LAG_SHARE = 0.10
# per-step arrivals each rank sends (its last ones): enough for the pairing, bounded for long runs
ARRIVALS_KEPT = 4096


def _mean(values: list[float]) -> float | None:
    return fmean(values) if values else None


# a rank's per-step parts (step_values' lists; step_parts' means of them): its phases, the host
# time it was blocked in each (taken out of it; by where it sat in the phase table, for the
# verdict), and its wait in each meeting (segperf.perf.meetings)
PARTS = (
    "data_wait",
    "data_own",
    "train_step",
    "forward",
    "backward_compute",
    "allreduce_wait",
    "optimizer",
    "forward_host_wait",
    "optimizer_host_wait",
    *(f"{where}_table_wait" for where in TABLE_WAITS),
    *(f"{phase}_wait" for phase in WAIT_PHASES),
    "meeting_wait",
)


def step_values(
    waits: list[float],
    steps: list[tuple[float, float]],
    backward: list[tuple[float | None, float | None]],
    last_bucket: list[float | None] | None,
    skip: int,
    meetings: list | None = None,
) -> dict[str, list[float]]:
    """A rank's parts per step after the first `skip` steps (PARTS), its arrivals and waits.

    `waits[i]`, `steps[i]` (start, end), `backward[i]` (first before-backward, last after-backward),
    `last_bucket[i]` (when its last gradient bucket was ready, or None: no all-reduce that step,
    or not measured) and `meetings[i]` (a segperf.perf.meetings.StepWaits: its time blocked in
    collectives, per phase; None: not measured) belong to step i. Own data time (`data_own`) =
    the data wait less its time blocked inside the fetch. Backward compute =
    before-backward to the last bucket, less its time blocked in collectives there; all-reduce
    wait = the last bucket to after-backward. Without a bucket time the backward is not split (a
    single process, or a strategy without the hook). A step's `meeting_wait` (every wait of the
    step, the all-reduce's included) is there when both were measured."""
    n = min(len(waits), len(steps), len(backward))
    if n <= skip:
        skip = 0  # too few steps to leave warm-up out: all of them rather than none
    values: dict[str, list[float]] = {part: [] for part in (*PARTS, "arrivals")}
    for i in range(skip, n):
        (start, end), (before, after) = steps[i], backward[i]
        met = meetings[i] if meetings is not None and i < len(meetings) else None
        host, table = (met.host, met.table) if met is not None else ({}, {})
        own_data = waits[i] - min(waits[i], host.get("fetch", 0.0))  # a wait inside the fetch left out
        values["train_step"].append(end - start)
        values["data_wait"].append(waits[i])
        values["data_own"].append(own_data)
        for where in BETWEEN_WAITS:  # between the steps: the verdict's data wait, framework, ...
            values[f"{where}_table_wait"].append(table.get(where, 0.0))
        if met is not None:
            for phase in WAIT_PHASES:
                values[f"{phase}_wait"].append(met.waits.get(phase, 0.0))
        if before is None or after is None or not start <= before <= after <= end:
            continue
        forward_wait = min(before - start, host.get("forward", 0.0))
        values["forward"].append(before - start)
        values["forward_host_wait"].append(forward_wait)
        values["optimizer"].append(end - after)
        values["optimizer_host_wait"].append(min(end - after, host.get("optimizer", 0.0)))
        # inside train_step (its split), for the verdict: a call outside run_training_batch (a
        # callback's hook at the batch's start) sits in the framework's time, filed there
        values["forward_table_wait"].append(min(before - start, table.get("forward", 0.0)))
        values["optimizer_step_table_wait"].append(min(end - after, table.get("optimizer_step", 0.0)))
        bucket = last_bucket[i] if last_bucket is not None and i < len(last_bucket) else None
        arrival = own_data + before - start - forward_wait  # waits left out: its own time
        if bucket is not None and before <= bucket <= after:
            in_backward = min(bucket - before, host.get("backward", 0.0))  # SyncBatchNorm's all-reduce
            values["backward_compute"].append(bucket - before - in_backward)
            values["allreduce_wait"].append(after - bucket)
            values["backward_table_wait"].append(min(bucket - before, table.get("backward", 0.0)) + after - bucket)
            arrival += bucket - before - in_backward
            if met is not None:
                values["meeting_wait"].append(sum(met.waits.values()) + after - bucket)
        else:
            values["backward_table_wait"].append(min(after - before, table.get("backward", 0.0)))
        values["arrivals"].append(arrival)
    return values


def step_parts(
    waits: list[float],
    steps: list[tuple[float, float]],
    backward: list[tuple[float | None, float | None]],
    last_bucket: list[float | None] | None,
    skip: int,
    folded: dict[str, list[float]] | None = None,
    meetings: list | None = None,
) -> dict[str, Any]:
    """Per-step means of a rank's parts (step_values), its last arrivals and waits, and the host
    seconds its train_step split spent waiting (`host_wait_s`, for the verdict); `folded` holds
    each part's (sum, count) over the steps a long run folded away (segperf.perf.folding)."""
    values = step_values(waits, steps, backward, last_bucket, skip, meetings)
    parts: dict[str, Any] = {}
    totals: dict[str, float] = {}
    for part in PARTS:
        total, count = (folded or {}).get(part, (0.0, 0))
        total, count = total + sum(values[part]), count + len(values[part])
        parts[f"{part}_mean_s"] = total / count if count else None
        totals[part] = total
        if part in ("data_wait", "train_step"):
            parts[f"{part}_s"] = total
    parts["steps"] = len(values["train_step"]) + (folded or {}).get("train_step", (0.0, 0))[1]
    parts["arrivals"] = [round(a, 6) for a in values["arrivals"][-ARRIVALS_KEPT:]]
    parts["waits"] = [round(w, 6) for w in values["meeting_wait"][-ARRIVALS_KEPT:]]
    parts["host_wait_s"] = {where: totals[f"{where}_table_wait"] for where in TABLE_WAITS}
    return parts


def _less(whole: float | None, wait: float | None) -> float | None:
    return None if whole is None else whole - (wait or 0.0)


def rank_row(results: dict[str, Any], trainer, parts: dict[str, Any] | None = None) -> dict[str, Any]:
    """This rank's row: where it ran, what it trained on, and its steady-state times per step
    (`parts` from `step_parts`; for an older record, from its per-batch lists)."""
    train = results.get("train", {})
    if parts is None:
        parts = _parts_from_per_batch(results)
    device_step = results.get("jitter", {}).get("device_step") or {}
    resources = results.get("resources") or {}
    forward = _less(parts.get("forward_mean_s"), parts.get("forward_host_wait_mean_s"))
    data = parts.get("data_own_mean_s", parts.get("data_wait_mean_s"))
    ready = None
    if forward is not None and data is not None:
        ready = data + forward + (parts.get("backward_compute_mean_s") or 0.0)
    return {
        "rank": trainer.global_rank,
        "node_rank": trainer.node_rank,
        "local_rank": trainer.local_rank,
        "host": socket.gethostname(),
        "device": str(trainer.strategy.root_device),
        "status": results.get("status"),
        "images": train.get("images"),
        "steps": train.get("steps"),
        "images_per_s": train.get("images_per_s"),
        "wall_s": train.get("wall_s"),
        "data_wait_s": parts.get("data_wait_s"),
        "data_wait_mean_s": parts.get("data_wait_mean_s"),
        "data_own_mean_s": data,  # its data wait less its waits for the others inside the fetch
        "train_step_s": parts.get("train_step_s"),
        "train_step_mean_s": parts.get("train_step_mean_s"),
        "forward_mean_s": parts.get("forward_mean_s"),
        # its own time in each part, waits for the other ranks left out
        "forward_compute_mean_s": forward,
        "backward_compute_mean_s": parts.get("backward_compute_mean_s"),
        "optimizer_compute_mean_s": _less(parts.get("optimizer_mean_s"), parts.get("optimizer_host_wait_mean_s")),
        "allreduce_wait_mean_s": parts.get("allreduce_wait_mean_s"),
        # its wait for the others in each meeting, per step (segperf.perf.meetings), and in all
        **{key: parts.get(key) for key in WAIT_COLUMNS if key != "allreduce_wait_mean_s"},
        "meeting_wait_mean_s": parts.get("meeting_wait_mean_s"),
        # data wait + forward + backward compute per step: when this rank joins the all-reduce
        "ready_mean_s": ready,
        "device_step_mean_s": device_step.get("mean"),  # a jitter distribution (CUDA events)
        # this rank's process tree (rank 0's holds the ranks Lightning started on its node)
        "cpu_mean_percent": resources.get("cpu_mean_percent"),
        "gpu_util_mean_percent": resources.get("gpu_util_mean_percent"),
        "peak_allocated_bytes": resources.get("peak_allocated_bytes"),
        # this rank's memory peaks and creep (results.json's memory, segperf.perf.memory_trend)
        "memory": memory_row(results),
        "arrivals": parts.get("arrivals", []),
        "waits": parts.get("waits", []),
        "verdict": results.get("verdict"),  # its own (waits left out): the run's if it sets the pace
    }


def _parts_from_per_batch(results: dict[str, Any]) -> dict[str, Any]:
    """A record's per-step parts from its `jitter.per_batch` lists (records written before
    PerfMonitor kept `step_parts`); the backward is not split there."""
    per_batch = results.get("jitter", {}).get("per_batch", {})
    warm = per_batch.get("warmup_steps", 0)
    if len(per_batch.get("train_step_s", [])) <= warm:
        warm = 0
    waits = per_batch.get("data_wait_s", [])[warm:]
    steps = per_batch.get("train_step_s", [])[warm:]
    forward = per_batch.get("forward_s", [])[warm:]
    return {
        "data_wait_s": sum(waits),
        "data_wait_mean_s": _mean(waits),
        "train_step_s": sum(steps),
        "train_step_mean_s": _mean(steps),
        "forward_mean_s": _mean(forward),
        "arrivals": [w + f for w, f in zip(waits, forward, strict=False)],
    }


def combine(rows: list[dict[str, Any]]) -> dict[str, Any]:
    """The whole run from its ranks' rows: images and images/s added up, the slowest rank and,
    where it stands out, the straggler with its cause.

    Total images/s is the sum of the ranks' own rates (each over its own steady state): the
    ranks step together, so it equals the global batch over the time of one step. The rows'
    per-step `arrivals` and `waits` are used here and dropped (they would grow the record). The
    slowest rank is the one that waits least where the ranks meet when every rank's waits were
    measured, else the last to reach the gradient all-reduce."""
    arrivals = {row["rank"]: row.pop("arrivals", None) or [] for row in rows}
    waits = {row["rank"]: row.pop("waits", None) or [] for row in rows}
    rates = [row["images_per_s"] for row in rows]
    by_waits = len(rows) > 1 and all(waits.values())
    if by_waits:  # negated: the rank the others wait for has the largest
        ready = {rank: -fmean(w) for rank, w in waits.items()}
        slowest_by = "meeting_wait_mean_s (the rank that waits least where the ranks meet: the others wait for it)"
    else:
        ready = {row["rank"]: row["ready_mean_s"] for row in rows if row.get("ready_mean_s") is not None}
        slowest_by = (
            "ready_mean_s (data wait + forward + backward compute per step: the last rank to reach "
            "the gradient all-reduce)"
        )
    combined: dict[str, Any] = {
        "images": sum(row["images"] or 0 for row in rows),
        "steps_per_rank": [row["steps"] for row in rows],
        "images_per_s": sum(rates) if rates and None not in rates else None,
        "slowest_rank": None,
        "slowest_by": slowest_by,
        "slowest_lag_s": None,
        "straggler": None,
    }
    if len(ready) < 2:
        return combined
    slowest = max(ready, key=ready.__getitem__)
    others = [rank for rank in ready if rank != slowest]
    combined["slowest_rank"] = slowest
    # how much later than the typical other rank it arrives, per step: what the others wait
    combined["slowest_lag_s"] = ready[slowest] - median(ready[rank] for rank in others)
    combined["straggler"] = straggler(rows, slowest, waits if by_waits else arrivals, by_waits)
    own = next((row.get("verdict") for row in rows if row["rank"] == 0), None)
    combined["verdict"] = run_verdict(own, rows, combined["straggler"])
    return combined


def straggler(
    rows: list[dict[str, Any]], slowest: int, per_step: dict[int, list[float]], by_waits: bool = False
) -> dict[str, Any]:
    """Whether rank `slowest` is a straggler, by how much, how often, and why.

    Paired by step. `by_waits`: `per_step` holds each rank's wait where the ranks meet, and in
    each step the straggler waits least; its lag is the least of the others' waits less its own.
    Else `per_step` holds arrivals at the gradient all-reduce, and its lag is its arrival after the
    latest of the others. The cause is the part of its own step (waits left out: data wait,
    forward, backward compute, optimizer step) by which it exceeds the median of the other ranks
    the most. The others' waits are the check: they should be about the lag."""
    by_rank = {row["rank"]: row for row in rows}
    mine = per_step.get(slowest) or []
    theirs = [per_step.get(rank) or [] for rank in by_rank if rank != slowest]
    n = min([len(mine), *(len(a) for a in theirs)]) if theirs else 0
    if by_waits:
        lags = [min(a[-n + i] for a in theirs) - mine[-n + i] for i in range(n)] if n else []
    else:
        lags = [mine[-n + i] - max(a[-n + i] for a in theirs) for i in range(n)] if n else []
    last_share = sum(lag > 0 for lag in lags) / len(lags) if lags else None
    parts = {}
    for cause, keys in CAUSES.items():
        key = next((k for k in keys if by_rank[slowest].get(k) is not None), keys[0])
        own = by_rank[slowest].get(key)
        other = [row.get(key) for rank, row in by_rank.items() if rank != slowest and row.get(key) is not None]
        if own is not None and other:
            parts[cause] = own - median(other)
    cause = max(parts, key=parts.__getitem__) if parts else None
    step = median(
        (row.get("data_wait_mean_s") or 0.0) + (row.get("train_step_mean_s") or 0.0) for row in by_rank.values()
    )
    lag = median(lags) if lags else None
    named = (
        lag is not None and last_share is not None and last_share >= LAST_SHARE and step > 0 and lag >= LAG_SHARE * step
    )
    result: dict[str, Any] = {
        "rank": slowest if named else None,
        "candidate_rank": slowest,
        "cause": cause if named else None,
        "lag_median_s": lag,
        "lag_p90_s": _quantile(lags, 0.9),
        "lag_fraction_of_step": lag / step if lag is not None and step > 0 else None,
        "last_share": last_share,
        "paired_steps": len(lags),
        "paired_by": "waits where the ranks meet" if by_waits else "arrivals at the gradient all-reduce",
        "excess_s": parts,  # per cause: its part of the step over the other ranks' median
        "backward_split": "measured" if "backward" in parts else "not measured",
        "others_allreduce_wait_mean_s": _others(by_rank, slowest, "allreduce_wait_mean_s"),
        # the others' wait per step in each meeting (median over them): where they waited for it
        "others_wait_s": {
            key: value for key in WAIT_COLUMNS if (value := _others(by_rank, slowest, key)) is not None and value > 0
        },
    }
    result["text"] = straggler_text(result)
    return result


def _others(by_rank: dict[int, dict[str, Any]], rank: int, key: str) -> float | None:
    values = [row[key] for other, row in by_rank.items() if other != rank and row.get(key) is not None]
    return median(values) if values else None


def straggler_text(found: dict[str, Any]) -> str:
    """One line for the summary: who, why, and the evidence."""
    rank, lag, share = found.get("candidate_rank"), found.get("lag_median_s"), found.get("last_share")
    if lag is None or share is None:
        return "no straggler measured (no paired steps after warm-up)"
    by_waits = found.get("paired_by", "").startswith("waits")
    where = "where the ranks meet" if by_waits else "the gradient all-reduce"
    evidence = (
        f"last to reach {where} in {share:.0%} of {found['paired_steps']} steps, "
        f"by {lag * 1e3:,.1f} ms (median; p90 {found['lag_p90_s'] * 1e3:,.1f} ms)"
    )
    if found.get("rank") is None:
        return f"no rank stands out (rank {rank} was {evidence})"
    text = f"rank {rank} {CAUSE_TEXT[found['cause']]}: {evidence}"
    excess = found["excess_s"].get(found["cause"])
    if excess is not None:
        text += f"; its {found['cause']} part is {excess * 1e3:,.1f} ms a step over the others'"
    others = found.get("others_wait_s") or {}
    if by_waits and others:
        each = ", ".join(f"{WAIT_COLUMNS[key]} {value * 1e3:,.1f}" for key, value in others.items())
        text += f"; the others wait {sum(others.values()) * 1e3:,.1f} ms a step where the ranks meet ({each} ms)"
    elif found.get("others_allreduce_wait_mean_s") is not None:
        text += f"; the others wait {found['others_allreduce_wait_mean_s'] * 1e3:,.1f} ms a step in the all-reduce"
    if found["backward_split"] != "measured":
        text += " (backward not split: no all-reduce timing on this strategy)"
    return text


def _quantile(values: list[float], q: float) -> float | None:
    if not values:
        return None
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]
