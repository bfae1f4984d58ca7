"""`python -m segperf.report <sweep dir> [--out DIR]` (segperf.report.cli)."""

import sys

from segperf.report.cli import main

if __name__ == "__main__":
    sys.exit(main())
