"""`python -m segperf.bench data [overrides]`: the first word names the benchmark, the rest are
its Hydra overrides (`python -m segperf.bench data --help` lists them)."""

from __future__ import annotations

import sys

# each benchmark's command line: a module with main(argv) -> exit status
BENCHMARKS = {"data": "segperf.bench.cli"}
USAGE = f"usage: python -m segperf.bench {{{','.join(BENCHMARKS)}}} [overrides]  (data: the loader benchmark)"


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if argv[:1] in (["--help"], ["-h"]):
        print(USAGE)
        return 0
    if not argv or argv[0] not in BENCHMARKS:
        print(USAGE, file=sys.stderr)
        return 2
    import importlib

    return importlib.import_module(BENCHMARKS[argv[0]]).main(argv[1:])


if __name__ == "__main__":
    from segperf.command_line import set_up_command

    set_up_command()
    sys.exit(main())
