"""`python -m segperf.bench data [options]`: see segperf.bench.loader (`--help` for the options)."""

from __future__ import annotations

import sys

BENCHMARKS = {"data": "segperf.bench.loader"}


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if not argv or argv[0] not in BENCHMARKS:
        print(f"usage: python -m segperf.bench {{{','.join(BENCHMARKS)}}} [options]", file=sys.stderr)
        return 2
    import importlib

    return importlib.import_module(BENCHMARKS[argv[0]]).main(argv[1:])


if __name__ == "__main__":
    sys.exit(main())
