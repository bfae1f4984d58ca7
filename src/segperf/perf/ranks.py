"""Data-parallel ranks: each rank's row, the whole run from them, and the straggler with its cause.

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

# a rank's arrival at the all-reduce, part by part: the cause named for a straggler
CAUSES = {
    "data": "data_wait_mean_s",
    "host": "forward_mean_s",
    "backward": "backward_compute_mean_s",
}
CAUSE_TEXT = {
    "data": "waits for its data",
    "host": "is slow in its forward (host work: Python, launches, the forward's compute)",
    "backward": "computes its backward slowly (the others wait for it inside the gradient all-reduce)",
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


# a rank's per-step parts (step_values' lists; step_parts' means of them)
PARTS = ("data_wait", "train_step", "forward", "backward_compute", "allreduce_wait")


def step_values(
    waits: list[float],
    steps: list[tuple[float, float]],
    backward: list[tuple[float | None, float | None]],
    last_bucket: list[float | None] | None,
    skip: int,
) -> dict[str, list[float]]:
    """A rank's parts per step after the first `skip` steps (PARTS), and its arrivals.

    `waits[i]`, `steps[i]` (start, end), `backward[i]` (first before-backward, last after-backward)
    and `last_bucket[i]` (when its last gradient bucket was ready, or None: no all-reduce that
    step, or not measured) belong to step i. Backward compute = before-backward to the last
    bucket; all-reduce wait = the last bucket to after-backward. Without a bucket time the
    backward is not split (a single process, or a strategy without the hook)."""
    n = min(len(waits), len(steps), len(backward))
    if n <= skip:
        skip = 0  # too few steps to leave warm-up out: all of them rather than none
    values: dict[str, list[float]] = {part: [] for part in (*PARTS, "arrivals")}
    for i in range(skip, n):
        (start, end), (before, after) = steps[i], backward[i]
        values["train_step"].append(end - start)
        values["data_wait"].append(waits[i])
        if before is None or after is None or not start <= before <= after <= end:
            continue
        values["forward"].append(before - start)
        bucket = last_bucket[i] if last_bucket is not None and i < len(last_bucket) else None
        arrival = waits[i] + before - start
        if bucket is not None and before <= bucket <= after:
            values["backward_compute"].append(bucket - before)
            values["allreduce_wait"].append(after - bucket)
            arrival += bucket - before
        values["arrivals"].append(arrival)
    return values


def step_parts(
    waits: list[float],
    steps: list[tuple[float, float]],
    backward: list[tuple[float | None, float | None]],
    last_bucket: list[float | None] | None,
    skip: int,
    folded: dict[str, list[float]] | None = None,
) -> dict[str, Any]:
    """Per-step means of a rank's parts (step_values) and its last arrivals; `folded` holds each
    part's (sum, count) over the steps a long run folded away (segperf.perf.folding)."""
    values = step_values(waits, steps, backward, last_bucket, skip)
    parts: dict[str, Any] = {}
    for part in PARTS:
        total, count = (folded or {}).get(part, (0.0, 0))
        total, count = total + sum(values[part]), count + len(values[part])
        parts[f"{part}_mean_s"] = total / count if count else None
        if part in ("data_wait", "train_step"):
            parts[f"{part}_s"] = total
    parts["steps"] = len(values["train_step"]) + (folded or {}).get("train_step", (0.0, 0))[1]
    parts["arrivals"] = [round(a, 6) for a in values["arrivals"][-ARRIVALS_KEPT:]]
    return parts


def rank_row(results: dict[str, Any], trainer, parts: dict[str, Any] | None = None) -> dict[str, Any]:
    """This rank's row: where it ran, what it trained on, and its steady-state times per step
    (`parts` from `step_parts`; for an older record, from its per-batch lists)."""
    train = results.get("train", {})
    if parts is None:
        parts = _parts_from_per_batch(results)
    device_step = results.get("jitter", {}).get("device_step") or {}
    resources = results.get("resources") or {}
    ready = None
    if parts.get("forward_mean_s") is not None and parts.get("data_wait_mean_s") is not None:
        ready = parts["data_wait_mean_s"] + parts["forward_mean_s"] + (parts.get("backward_compute_mean_s") or 0.0)
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
        "train_step_s": parts.get("train_step_s"),
        "train_step_mean_s": parts.get("train_step_mean_s"),
        "forward_mean_s": parts.get("forward_mean_s"),
        "backward_compute_mean_s": parts.get("backward_compute_mean_s"),
        "allreduce_wait_mean_s": parts.get("allreduce_wait_mean_s"),
        # data wait + forward + backward compute per step: when this rank joins the all-reduce
        "ready_mean_s": ready,
        "device_step_mean_s": device_step.get("mean"),  # a jitter distribution (CUDA events)
        # this rank's process tree (rank 0's holds the ranks Lightning started on its node)
        "cpu_mean_percent": resources.get("cpu_mean_percent"),
        "gpu_util_mean_percent": resources.get("gpu_util_mean_percent"),
        "peak_allocated_bytes": resources.get("peak_allocated_bytes"),
        "arrivals": parts.get("arrivals", []),
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
    per-step `arrivals` are used here and dropped (they would grow the record)."""
    arrivals = {row["rank"]: row.pop("arrivals", None) or [] for row in rows}
    rates = [row["images_per_s"] for row in rows]
    ready = {row["rank"]: row["ready_mean_s"] for row in rows if row.get("ready_mean_s") is not None}
    combined: dict[str, Any] = {
        "images": sum(row["images"] or 0 for row in rows),
        "steps_per_rank": [row["steps"] for row in rows],
        "images_per_s": sum(rates) if rates and None not in rates else None,
        "slowest_rank": None,
        "slowest_by": "ready_mean_s (data wait + forward + backward compute per step: the last rank to reach "
        "the gradient all-reduce)",
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
    combined["straggler"] = straggler(rows, slowest, arrivals)
    return combined


def straggler(rows: list[dict[str, Any]], slowest: int, arrivals: dict[int, list[float]]) -> dict[str, Any]:
    """Whether rank `slowest` is a straggler, by how much, how often, and why.

    Paired by step: in each step, is it the last to arrive, and by how much after the latest of
    the others. The cause is the part of its arrival (data wait, forward, backward compute) by
    which it exceeds the median of the other ranks the most. The others' wait inside the
    all-reduce is the check: it should be about the lag."""
    by_rank = {row["rank"]: row for row in rows}
    mine = arrivals.get(slowest) or []
    theirs = [arrivals.get(rank) or [] for rank in by_rank if rank != slowest]
    n = min([len(mine), *(len(a) for a in theirs)]) if theirs else 0
    lags = [mine[-n + i] - max(a[-n + i] for a in theirs) for i in range(n)] if n else []
    last_share = sum(lag > 0 for lag in lags) / len(lags) if lags else None
    parts = {}
    for cause, key in CAUSES.items():
        own = by_rank[slowest].get(key)
        other = [row.get(key) for rank, row in by_rank.items() if rank != slowest and row.get(key) is not None]
        if own is not None and other:
            parts[cause] = own - median(other)
    cause = max(parts, key=parts.__getitem__) if parts else None
    step = median(
        (row.get("data_wait_mean_s") or 0.0) + (row.get("train_step_mean_s") or 0.0) for row in by_rank.values()
    )
    lag = median(lags) if lags else None
    others_wait = [
        row["allreduce_wait_mean_s"]
        for rank, row in by_rank.items()
        if rank != slowest and row.get("allreduce_wait_mean_s") is not None
    ]
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
        "excess_s": parts,  # per cause: its part of the arrival over the other ranks' median
        "backward_split": "measured" if "backward" in parts else "not measured",
        "others_allreduce_wait_mean_s": median(others_wait) if others_wait else None,
    }
    result["text"] = straggler_text(result)
    return result


def straggler_text(found: dict[str, Any]) -> str:
    """One line for the summary: who, why, and the evidence."""
    rank, lag, share = found.get("candidate_rank"), found.get("lag_median_s"), found.get("last_share")
    if lag is None or share is None:
        return "no straggler measured (no paired steps after warm-up)"
    evidence = (
        f"last to reach the gradient all-reduce in {share:.0%} of {found['paired_steps']} steps, "
        f"by {lag * 1e3:,.1f} ms (median; p90 {found['lag_p90_s'] * 1e3:,.1f} ms)"
    )
    if found.get("rank") is None:
        return f"no rank stands out (rank {rank} was {evidence})"
    text = f"rank {rank} {CAUSE_TEXT[found['cause']]}: {evidence}"
    excess = found["excess_s"].get(found["cause"])
    if excess is not None:
        text += f"; its {found['cause']} part is {excess * 1e3:,.1f} ms a step over the others'"
    if found.get("others_allreduce_wait_mean_s") is not None:
        text += f"; the others wait {found['others_allreduce_wait_mean_s'] * 1e3:,.1f} ms a step in the all-reduce"
    if found["backward_split"] != "measured":
        text += " (backward not split: no all-reduce timing on this strategy)"
    return text


def _quantile(values: list[float], q: float) -> float | None:
    if not values:
        return None
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]
