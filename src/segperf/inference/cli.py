"""The command line of `python -m segperf.infer ckpt=<file> | run_dir=<training run dir> [overrides]`:
the inference benchmark.

The command line only: Hydra composes the config, segperf.inference.run does the work (the
trained weights cast to the `precision` group's dtype, timed over the validation split). An
expected failure (a missing or unreadable checkpoint, bad data, a full or read-only disk) is
`segperf.infer: error:` lines and exit status 2; results.json records it.
"""

from __future__ import annotations

import logging
import sys
from pathlib import Path

import hydra
from hydra.core.hydra_config import HydraConfig
from omegaconf import DictConfig

from segperf.command_line import output_folder_problem, quote_path_values
from segperf.config import CONFIG_DIR
from segperf.errors import SegperfError, explain, is_worker_error, write_problem

CONFIG_NAME = "infer"


def command_line_keys() -> set[str]:
    """Dotted keys the user set on the command line (they win over a run_dir's config)."""
    return {o.split("=", 1)[0].lstrip("+~") for o in HydraConfig.get().overrides.task}


@hydra.main(config_path=str(CONFIG_DIR), config_name=CONFIG_NAME, version_base="1.3")
def main(cfg: DictConfig) -> None:
    from segperf.inference.checkpoint import InferenceError
    from segperf.inference.run import infer

    out_dir = Path(HydraConfig.get().runtime.output_dir)
    logging.raiseExceptions = False  # the job's log file on a full disk: no traceback per line
    try:
        infer(cfg, out_dir, keep=command_line_keys())
    except InferenceError as error:  # expected failures: one line, no traceback (results.json has it)
        fail(str(error))
    except Exception as error:
        if problem := write_problem(error, out_dir):
            fail(problem)
        if isinstance(error, SegperfError) or is_worker_error(error):  # bad data, as training says it
            fail(explain(error))
        raise


def fail(message: str) -> None:
    """A problem the user can fix: its lines (bad data lists one per kind), no traceback, exit 2."""
    for line in message.splitlines():
        print(f"segperf.infer: error: {line}", file=sys.stderr)
    raise SystemExit(2)


def cli() -> None:
    """Paths as segperf prints them (a sweep job's folder: `=` and `,`) quoted for Hydra, and the
    output folder tried, before Hydra composes."""
    sys.argv[1:] = quote_path_values(sys.argv[1:])
    if problem := output_folder_problem(sys.argv[1:], CONFIG_DIR / f"{CONFIG_NAME}.yaml"):
        fail(problem)
    main()
