"""PerfMonitor's end of fit under DDP: every rank's row to rank 0, combined there, logged.

Why by hand: Lightning gathers tensors (`all_gather`), not a rank's record; the rows are Python
objects sent with torch.distributed.all_gather_object over a gloo group of their own.
"""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import torch

from segperf.perf.memory_trend import rank_memory
from segperf.perf.ranks import combine, rank_row


def gather_group(trainer, timeout_s: float):
    """A gloo process group of PerfMonitor's own, with a bounded timeout, for the end-of-fit
    gather (None in a single process). Its own so that a rank gone at the end costs the others
    `timeout_s`, not the default group's 30 minutes; gloo so that the rows (Python objects)
    travel on the CPU whatever the training backend is. Every rank creates it, at setup."""
    dist = torch.distributed
    if trainer.world_size < 2 or not (dist.is_available() and dist.is_initialized()):
        return None
    return dist.new_group(backend="gloo", timeout=timedelta(seconds=timeout_s))


def gather_rows(row: dict[str, Any], world_size: int, group=None) -> list[dict[str, Any]]:
    """Every rank's row, on every rank, sorted by rank (torch.distributed.all_gather_object)."""
    rows: list[Any] = [None] * world_size
    torch.distributed.all_gather_object(rows, row, group=group)
    return sorted(rows, key=lambda r: r["rank"])


def gather_ranks(trainer, results: dict[str, Any], group, step_parts, failed) -> None:
    """Every rank's row to rank 0 (`results["distributed"]` there), over `group` (gather_group).
    A collective: every rank calls it once, whatever failed on it before: a rank whose row cannot
    be made (`step_parts()` raising) joins with an empty row, said through `failed(what, error)`."""
    try:
        row = rank_row(results, trainer, step_parts())
    except Exception as error:  # noqa: BLE001 - still join the collective, with an empty row
        failed("this rank's row", error)
        row = {"rank": trainer.global_rank, "status": "not measured", "images": 0, "steps": 0}
        row["images_per_s"] = row["ready_mean_s"] = None
    try:
        rows = gather_rows(row, trainer.world_size, group)
    finally:
        # the group is PerfMonitor's own and this was its last use: shut down now, not by the
        # destructors at interpreter exit, where a gloo group's threads can end the process (SIGABRT)
        try:
            torch.distributed.destroy_process_group(group)
        except Exception:  # noqa: BLE001 - already gone with the default group: nothing to release
            pass
    if trainer.is_global_zero:
        add_ranks(results, rows, trainer)


def add_ranks(results: dict[str, Any], rows: list[dict[str, Any]], trainer) -> None:
    """Rank 0: `results["distributed"]` with the rows and their combination, `train` turned into
    the whole run's numbers (rank 0's own stay in its row), the per-rank scalars to its loggers."""
    combined = combine(rows)
    verdict = combined.pop("verdict", None)
    if verdict:  # the run's, from all its ranks: the one the others wait for sets the pace
        results["verdict"] = verdict
    results["distributed"] = {
        "strategy": type(trainer.strategy).__name__,
        "backend": torch.distributed.get_backend(),
        "world_size": trainer.world_size,
        "num_nodes": trainer.num_nodes,
        "devices_per_node": trainer.num_devices,
        "hosts": sorted({r.get("host", "?") for r in rows}),
        **combined,
        "ranks": rows,
    }
    train = results.setdefault("train", {})
    train["rank0_images_per_s"] = train.get("images_per_s")
    train["images"] = combined["images"]
    train["images_per_s"] = combined["images_per_s"]
    if any(r.get("memory") for r in rows):  # each rank's peaks, the imbalance, the rank that creeps
        results.setdefault("memory", {})["ranks"] = rank_memory(rows)
    log_ranks(trainer, results)


# the per-rank quantities every logger gets, one series per rank: a straggler stands out
RANK_SCALARS = (
    "images_per_s",
    "data_wait_mean_s",
    "train_step_mean_s",
    "forward_mean_s",
    "backward_compute_mean_s",
    "allreduce_wait_mean_s",
    "ready_mean_s",
)


def log_ranks(trainer, results: dict[str, Any]) -> None:
    """The per-rank rows to rank 0's loggers, any kind (`ranks/<quantity>/rank<N>`)."""
    dist = results.get("distributed")
    if not dist:
        return
    metrics = {
        f"ranks/{quantity}/rank{row['rank']}": float(row[quantity])
        for row in dist["ranks"]
        for quantity in RANK_SCALARS
        if row.get(quantity) is not None
    }
    for logger in trainer.loggers:
        logger.log_metrics(metrics, step=trainer.global_step)
        logger.save()
