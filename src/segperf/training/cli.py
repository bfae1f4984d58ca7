"""The command line of `python -m segperf.train [overrides]`: one measured training run (or a
sweep with -m).

The command line only: Hydra composes the config (and answers `--cfg job`, `--help`) before
the run's heavy imports (segperf.training.run: torch, Lightning, ...) are made.
"""

from __future__ import annotations

import logging
import sys
from pathlib import Path

import hydra
from hydra.core.hydra_config import HydraConfig
from hydra.types import RunMode
from omegaconf import DictConfig

from segperf.command_line import fail, prepared, set_up_command
from segperf.config import CONFIG_DIR
from segperf.errors import SegperfError, explain, is_worker_error, write_problem
from segperf.training.resume import resume_argv

CONFIG_NAME = "train"
PROG = "segperf"  # the prefix of its error lines


@hydra.main(config_path=str(CONFIG_DIR), config_name=CONFIG_NAME, version_base="1.3")
def main(cfg: DictConfig) -> None:
    from segperf.callbacks import Terminated
    from segperf.training.run import train

    hydra_cfg = HydraConfig.get()
    run_dir = Path(hydra_cfg.runtime.output_dir)
    multirun = hydra_cfg.mode == RunMode.MULTIRUN
    # the job's log file on a full disk: no "--- Logging error ---" traceback for every line
    logging.raiseExceptions = False
    try:
        results = train(cfg, run_dir)
    except KeyboardInterrupt as error:  # before or after the trainer ran (it handles Ctrl-C itself)
        print("segperf: interrupted", file=sys.stderr)
        raise SystemExit(143 if isinstance(error, Terminated) else 130) from None
    except Exception as error:
        if problem := write_problem(error, run_dir):  # a full or read-only disk: stops a sweep too
            fail(PROG, problem)
        if not multirun:
            if isinstance(error, SegperfError) or is_worker_error(error):
                fail(PROG, explain(error))
            raise
        # One failed job (out of memory, a crashed worker) must not end the sweep: its
        # results.json already records the error, and the report lists it.
        print(
            f"segperf: job {hydra_cfg.job.num} failed ({type(error).__name__}: {explain(error)}); "
            f"recorded in {run_dir / 'results.json'}; the sweep goes on."
        )
        return
    if results["status"] == "interrupted":
        # stops a sweep too: Ctrl-C means stop
        if "resume_command" in results:
            print(f"segperf: interrupted; resume with: {results['resume_command']}", file=sys.stderr)
        else:
            print("segperf: interrupted before the first checkpoint; start the run again", file=sys.stderr)
        raise SystemExit(143 if results.get("interrupted_by") == "SIGTERM" else 130)


def cli() -> None:
    """Paths as segperf prints them (`=` and `,` included) quoted for Hydra, `resume=` expanded
    into the run's overrides, and the output folder tried, all before Hydra composes."""
    set_up_command()  # done already by `python -m segperf.train`; here for a script that calls cli()
    # `model=m data=d -m workers=off,auto` as well; `resume=` expanded into the run's overrides
    sys.argv[1:] = prepared(sys.argv[1:], PROG, CONFIG_DIR / f"{CONFIG_NAME}.yaml", expand=resume_argv)
    main()
