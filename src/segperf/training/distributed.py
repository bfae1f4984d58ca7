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

Each rank measures itself (PerfMonitor, whatever started the ranks); its `gather` brings one row
per rank to rank 0 and names the straggler with its cause (segperf.perf.ranks).
"""

from __future__ import annotations

import os
import sys
from collections.abc import Iterator
from contextlib import contextmanager

import torch

from segperf.perf.ranks import combine, rank_row  # noqa: F401 - their home before segperf.perf.ranks

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
