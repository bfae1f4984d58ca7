"""`python -m segperf.report <sweep dir> [--out DIR]` (see segperf.report.markdown)."""

import sys

from segperf.report.markdown import main

if __name__ == "__main__":
    sys.exit(main())
