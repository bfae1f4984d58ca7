"""The command line of `python -m segperf.report <sweep dir> [--out DIR]`: report.md, report.json
and charts for a sweep (segperf.report.markdown builds them)."""

from __future__ import annotations

import argparse
from pathlib import Path

from segperf.command_line import problems
from segperf.report.markdown import build_report
from segperf.report.sweep import SweepError, load_sweep


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m segperf.report",
        description="Write report.md and charts for a sweep (or one run) from its results.json files.",
    )
    parser.add_argument("sweep_dir", type=Path, help="multirun/<date>/<time> folder, or one run's folder")
    parser.add_argument("--out", type=Path, default=None, help="where to write (default: the sweep folder)")
    parser.add_argument(
        "--allow-mixed-machines",
        action="store_true",
        help="compute speed-ups even when the runs come from different machines (host, GPU, driver, versions)",
    )
    args = parser.parse_args(argv)
    try:
        sweep = load_sweep(args.sweep_dir)
        path = build_report(sweep, args.out or args.sweep_dir, allow_mixed_machines=args.allow_mixed_machines)
    except (SweepError, OSError) as exc:
        return problems("segperf.report", str(exc))
    print(f"{len(sweep.runs)} jobs, {len(sweep.failed)} failed")
    print(path)
    return 0
