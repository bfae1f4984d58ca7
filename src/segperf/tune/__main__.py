"""`python -m segperf.tune [overrides]`: the fastest training configuration for this machine
(segperf.tune.cli; docs/tuning.md)."""

from __future__ import annotations

import sys

if __name__ == "__main__":
    # the entry point of the imported module, not of `__main__`: launchers that pickle the task
    # function (hydra-submitit-launcher) then pickle it by name (see segperf/train.py)
    from segperf.command_line import set_up_command

    set_up_command()  # before any library the tuner imports reads it
    from segperf.tune.cli import main

    sys.exit(main())
