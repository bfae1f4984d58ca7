"""Each probe's job: segperf.train's own, with its console output kept in its run folder's
output.txt, so that the tune's console shows one progress line per probe."""

from __future__ import annotations

import logging
import sys
from collections.abc import Iterator
from contextlib import contextmanager, redirect_stderr, redirect_stdout
from pathlib import Path
from typing import TextIO

import hydra
from hydra.core.hydra_config import HydraConfig
from omegaconf import DictConfig

from segperf.config import CONFIG_DIR

CONFIG_NAME = "tune"


@contextmanager
def console_handlers_to(log: TextIO) -> Iterator[None]:
    """Point the logging handlers that write to the console at `log` for a while.

    Why: Lightning adds a console handler of its own to its loggers when it is imported before
    logging is configured (lightning/pytorch/__init__.py: a StreamHandler, propagate=False), bound
    to the stderr of that moment, so redirect_stderr does not reach it: each probe printed its
    seed, accelerator and stopping lines among the tune's progress lines."""
    consoles = {sys.stderr, sys.stdout, sys.__stderr__, sys.__stdout__}
    loggers = [
        logging.getLogger(),
        *(v for v in logging.Logger.manager.loggerDict.values() if isinstance(v, logging.Logger)),
    ]
    moved = [
        (handler, handler.setStream(log))
        for logger in loggers
        for handler in logger.handlers
        if type(handler) is logging.StreamHandler and handler.stream in consoles
    ]
    try:
        yield
    finally:
        for handler, stream in moved:
            handler.setStream(stream)


@hydra.main(config_path=str(CONFIG_DIR), config_name=CONFIG_NAME, version_base="1.3")
def probe_job(cfg: DictConfig) -> None:
    """One probe: segperf.train's job, with its console output in the run folder's output.txt.
    A problem that stops the whole tune (a full disk: exit 2) is repeated on the console."""
    from segperf.train import main as train_main

    run_dir = Path(HydraConfig.get().runtime.output_dir)
    run_dir.mkdir(parents=True, exist_ok=True)
    stopped: SystemExit | None = None
    with (
        (run_dir / "output.txt").open("w") as log,
        console_handlers_to(log),
        redirect_stdout(log),
        redirect_stderr(log),
    ):
        try:
            train_main.__wrapped__(cfg)  # the undecorated job function (hydra.main wraps it with functools.wraps)
        except SystemExit as stop:
            stopped = stop
    if stopped is not None:
        if stopped.code not in (None, 0, 130, 143):
            for line in (run_dir / "output.txt").read_text().splitlines():
                if line.startswith("segperf: error:"):
                    print(line, file=sys.stderr)
        raise stopped
