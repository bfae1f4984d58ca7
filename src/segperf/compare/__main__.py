"""`python -m segperf.compare REF CAND [--max-slowdown 0.05]` (see segperf.compare.cli)."""

import sys

from segperf.compare.cli import main

if __name__ == "__main__":
    sys.exit(main())
