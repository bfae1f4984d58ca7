"""Data-parallel runs (trainer=ddp): one run folder whatever starts the ranks, and every rank's
measurement gathered into rank 0's results.json.

Lightning's DDP starts ranks 1..N-1 of a node by running the script again; under Hydra it runs
`sys.argv` again with `hydra.run.dir=<hydra.run.dir>`. In a multirun that replays the whole
sweep (`-m` and every sweep value) into the *run* folder pattern, not the job's folder: the
known "extra output folders" of Hydra multirun with DDP. `rank_command` replaces that command
with this job's own: its resolved overrides (`hydra.overrides.task`, one value per swept key),
the job's folder as `hydra.run.dir`, and no `.hydra/` of its own. Lightning has no public hook
for the command, so `per_job_rank_commands` swaps its module-level helper for the duration of
`fit` (a test fails if Lightning renames it). Under SLURM (srun starts every rank) and torchrun
nothing is re-launched; every rank runs in the job's folder and only rank 0 writes the run's
files (segperf.training.run).

Each rank measures itself (phases, per-batch data wait and step times); `gather_ranks` brings
one row per rank to rank 0 (torch.distributed.all_gather_object), adds them up and names the
slowest rank: in DDP every step ends with a gradient all-reduce, so the rank that reaches it
last (longest data wait + forward) sets the pace and the others wait for it.
"""

from __future__ import annotations

import os
import socket
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from statistics import fmean, median
from typing import Any

import torch

# Hydra's options that choose the config; the per-rank command keeps them (with their values)
CONFIG_FLAGS = ("-cp", "--config-path", "-cn", "--config-name", "-cd", "--config-dir")


def config_flags(argv: list[str]) -> list[str]:
    """The --config-path/--config-name/--config-dir options (and values) of a command line."""
    kept: list[str] = []
    args = iter(argv)
    for arg in args:
        if arg in CONFIG_FLAGS:
            kept += [arg, next(args, "")]
        elif arg.startswith(tuple(f"{flag}=" for flag in CONFIG_FLAGS)):
            kept.append(arg)
    return kept


def rank_command(local_rank: int) -> tuple[list[str], str]:
    """The command (and working directory) for rank `local_rank` of this Hydra job: the same job
    in the same folder, whether it runs alone or as one job of a sweep."""
    from hydra.core.hydra_config import HydraConfig
    from hydra.utils import get_original_cwd

    hydra_cfg = HydraConfig.get()
    command = [sys.executable, "-m", "segperf.train", *config_flags(sys.argv[1:]), *hydra_cfg.overrides.task]
    command += [
        f'hydra.run.dir="{hydra_cfg.runtime.output_dir}"',
        f"hydra.job.name={hydra_cfg.job.name}_rank{local_rank}",  # its own log file in the job folder
        "hydra.output_subdir=null",  # rank 0 keeps the job's .hydra/
    ]
    return command, get_original_cwd()


@contextmanager
def per_job_rank_commands() -> Iterator[None]:
    """Make Lightning start the other ranks with `rank_command` while this block runs."""
    from lightning.pytorch.strategies.launchers import subprocess_script

    original = getattr(subprocess_script, "_hydra_subprocess_cmd", None)
    if original is None:  # pragma: no cover - a Lightning release without the helper
        raise RuntimeError(
            "lightning.pytorch.strategies.launchers.subprocess_script._hydra_subprocess_cmd is gone: "
            "segperf.training.distributed needs updating for this Lightning release"
        )
    subprocess_script._hydra_subprocess_cmd = rank_command
    try:
        yield
    finally:
        subprocess_script._hydra_subprocess_cmd = original


def _mean(values: list[float]) -> float | None:
    return fmean(values) if values else None


def rank_row(results: dict[str, Any], trainer) -> dict[str, Any]:
    """This rank's row: where it ran, what it trained on, and its steady-state times per step."""
    train = results.get("train", {})
    per_batch = results.get("jitter", {}).get("per_batch", {})
    warm = per_batch.get("warmup_steps", 0)
    if len(per_batch.get("train_step_s", [])) <= warm:
        warm = 0  # too few steps to leave warm-up out (as for images/s): all of them rather than none
    waits = per_batch.get("data_wait_s", [])[warm:]
    steps = per_batch.get("train_step_s", [])[warm:]
    forward = per_batch.get("forward_s", [])[warm:]
    ready = [w + f for w, f in zip(waits, forward, strict=False)]  # lists of one run: same length
    device_step = results.get("jitter", {}).get("device_step") or {}
    resources = results.get("resources") or {}
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
        "data_wait_s": sum(waits),
        "data_wait_mean_s": _mean(waits),
        "train_step_s": sum(steps),
        "train_step_mean_s": _mean(steps),
        "forward_mean_s": _mean(forward),
        # data wait + forward per step: when this rank reaches the gradient all-reduce
        "ready_mean_s": _mean(ready),
        "device_step_mean_s": device_step.get("mean"),  # a jitter distribution (CUDA events)
        # this rank's process tree (rank 0's holds the ranks Lightning started on its node)
        "cpu_mean_percent": resources.get("cpu_mean_percent"),
        "gpu_util_mean_percent": resources.get("gpu_util_mean_percent"),
        "peak_allocated_bytes": resources.get("peak_allocated_bytes"),
    }


def combine(rows: list[dict[str, Any]]) -> dict[str, Any]:
    """The whole run from its ranks' rows: images and images/s added up, the slowest rank named.

    Total images/s is the sum of the ranks' own rates (each over its own steady state): the
    ranks step together, so it equals the global batch over the time of one step."""
    rates = [row["images_per_s"] for row in rows]
    ready = {row["rank"]: row["ready_mean_s"] for row in rows if row["ready_mean_s"] is not None}
    combined: dict[str, Any] = {
        "images": sum(row["images"] or 0 for row in rows),
        "steps_per_rank": [row["steps"] for row in rows],
        "images_per_s": sum(rates) if rates and None not in rates else None,
        "slowest_rank": None,
        "slowest_by": "ready_mean_s (data wait + forward per step: the last rank to reach the all-reduce)",
        "slowest_lag_s": None,
    }
    if len(ready) > 1:
        slowest = max(ready, key=ready.__getitem__)
        others = [value for rank, value in ready.items() if rank != slowest]
        combined["slowest_rank"] = slowest
        # how much later than the typical other rank it arrives, per step: what the others wait
        combined["slowest_lag_s"] = ready[slowest] - median(others)
    return combined


def gather_ranks(results: dict[str, Any], trainer) -> None:
    """On every rank: send this rank's row to rank 0. On rank 0: `results["distributed"]` with
    the per-rank rows and their combination, and `train` turned into the whole run's numbers
    (rank 0's own stay in its row). A collective: every rank must call it, after training."""
    row = rank_row(results, trainer)
    world = trainer.world_size
    rows: list[Any] = [None] * world
    torch.distributed.all_gather_object(rows, row)
    if not trainer.is_global_zero:
        return
    rows.sort(key=lambda r: r["rank"])
    combined = combine(rows)
    results["distributed"] = {
        "strategy": type(trainer.strategy).__name__,
        "backend": torch.distributed.get_backend(),
        "world_size": world,
        "num_nodes": trainer.num_nodes,
        "devices_per_node": trainer.num_devices,
        "hosts": sorted({r["host"] for r in rows}),
        **combined,
        "ranks": rows,
    }
    train = results.setdefault("train", {})
    train["rank0_images_per_s"] = train.get("images_per_s")
    train["images"] = combined["images"]
    train["images_per_s"] = combined["images_per_s"]


def log_ranks(trainer, results: dict[str, Any]) -> None:
    """The per-rank rows in TensorBoard (rank 0's loggers): one chart per quantity, one series
    per rank (`ranks/<quantity>/rank<N>`), so a straggler stands out next to the others."""
    from lightning.pytorch.loggers import TensorBoardLogger

    dist = results.get("distributed")
    if not dist:
        return
    quantities = ("images_per_s", "data_wait_mean_s", "train_step_mean_s", "ready_mean_s")
    for logger in trainer.loggers:
        if not isinstance(logger, TensorBoardLogger):
            continue
        writer = logger.experiment
        for row in dist["ranks"]:
            for quantity in quantities:
                if row.get(quantity) is not None:
                    writer.add_scalar(f"ranks/{quantity}/rank{row['rank']}", row[quantity], trainer.global_step)
        writer.flush()


def is_distributed() -> bool:
    return torch.distributed.is_available() and torch.distributed.is_initialized()


# what Lightning's launcher sets in the launching process for the ranks it starts (and for itself)
LAUNCH_ENV = ("MASTER_ADDR", "MASTER_PORT", "NODE_RANK", "LOCAL_RANK", "WORLD_SIZE")


class DistributedJob:
    """One run's data-parallel state, undone when the run ends, so that the next job of a sweep
    (Hydra's basic launcher runs them one after another in this process) starts its own ranks:
    with LOCAL_RANK left set, Lightning would take the next job's ranks as already started and
    wait for them forever, and the finished job's process group would be reused."""

    def __init__(self) -> None:
        self._env = {key: os.environ.get(key) for key in LAUNCH_ENV}

    def close(self) -> None:
        if is_distributed():
            torch.distributed.destroy_process_group()
        for key, value in self._env.items():
            if value is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = value
