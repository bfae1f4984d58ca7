"""`python -m segperf.compare REF CAND [--max-slowdown 0.05]` (see segperf.compare.cli)."""

import sys

from segperf.command_line import set_up_command

set_up_command()  # before segperf.report's charts import matplotlib
from segperf.compare.cli import main  # noqa: E402

if __name__ == "__main__":
    sys.exit(main())
