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

from segperf.command_line import fail, override_key, prepared
from segperf.config import CONFIG_DIR
from segperf.errors import SegperfError, explain, is_worker_error, write_problem

CONFIG_NAME = "infer"
PROG = "segperf.infer"  # the prefix of its error lines


def command_line_keys() -> set[str]:
    """Dotted keys the user set on the command line (they win over a run_dir's config)."""
    return {override_key(o) for o in HydraConfig.get().overrides.task}


@hydra.main(config_path=str(CONFIG_DIR), config_name=CONFIG_NAME, version_base="1.3")
def main(cfg: DictConfig) -> None:
    from segperf.inference.checkpoint import InferenceError
    from segperf.inference.run import infer

    out_dir = Path(HydraConfig.get().runtime.output_dir)
    logging.raiseExceptions = False  # the job's log file on a full disk: no traceback per line
    try:
        infer(cfg, out_dir, keep=command_line_keys())
    except InferenceError as error:  # expected failures: one line, no traceback (results.json has it)
        fail(PROG, str(error))
    except Exception as error:
        if problem := write_problem(error, out_dir):
            fail(PROG, problem)
        if isinstance(error, SegperfError) or is_worker_error(error):  # bad data, as training says it
            fail(PROG, explain(error))
        raise


def cli() -> None:
    """Paths as segperf prints them (a sweep job's folder: `=` and `,`) quoted for Hydra, and the
    output folder tried, before Hydra composes."""
    sys.argv[1:] = prepared(sys.argv[1:], PROG, CONFIG_DIR / f"{CONFIG_NAME}.yaml", workload=False)
    main()
