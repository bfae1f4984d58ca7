"""`python -m segperf.report <sweep dir> [--out DIR]` (segperf.report.cli)."""

import sys

from segperf.command_line import set_up_command

set_up_command()  # before the report's charts import matplotlib
from segperf.report.cli import main  # noqa: E402

if __name__ == "__main__":
    sys.exit(main())
