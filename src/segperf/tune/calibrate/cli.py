"""`python -m segperf.tune calibrate TUNE_DIR [options]`: the study's command line (segperf.tune.calibrate)."""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from segperf.command_line import problems
from segperf.tune import later_noise
from segperf.tune.calibrate.runs import measure
from segperf.tune.calibrate.study import machine_noise, study_noises, visited
from segperf.tune.calibrate.tables import write

PROG = "python -m segperf.tune calibrate"
NAME = "segperf.tune calibrate"  # how its error lines start


def main(argv: list[str] | None = None) -> int:
    """The study of a finished tune (its folder's tune.json); the exit status (2: no such tune)."""
    parser = argparse.ArgumentParser(
        prog=PROG, description="a finished tune's probes against long runs of the configurations it visited"
    )
    parser.add_argument("tune_dir", type=Path, help="a finished tune's folder (its tune.json)")
    parser.add_argument("--rounds", type=int, default=2, help="interleaved rounds of probe + long run (2)")
    parser.add_argument("--long-steps", type=int, default=64, help="timed steps of a long run (64)")
    parser.add_argument(
        "--claim-rounds", type=int, default=3, help="long runs of each final configuration for the claims (3)"
    )
    parser.add_argument("--only", type=int, default=0, help="study only the first N configurations (0: all)")
    parser.add_argument("--timeout", type=float, default=1800.0, help="seconds one run may take (1800)")
    parser.add_argument("--out", type=Path, default=Path("outputs/probe-calibration"))
    parser.add_argument(
        "--tables-only", action="store_true", help="run nothing: the tables again from --out's calibration.json"
    )
    args = parser.parse_args(argv)
    try:
        record = json.loads((args.tune_dir / "tune.json").read_text())
    except (OSError, ValueError) as error:
        why = "no tune.json" if isinstance(error, FileNotFoundError) else f"unreadable tune.json ({error})"
        return problems(NAME, f"{args.tune_dir}: {why}; give the folder of a finished python -m segperf.tune")
    configs = visited(record)
    if args.only:
        configs = dict(list(configs.items())[: args.only])
    args.out.mkdir(parents=True, exist_ok=True)
    if args.tables_only:
        done = json.loads((args.out / "calibration.json").read_text())["configurations"]
        probes = {row["configuration"]: row["probes"] for row in done}
        longs = {row["configuration"]: row["long_runs"] for row in done}
        print(write(args, record, configs, probes, longs, study_noises(record, probes, longs)))
        return 0
    probes, longs = measure(args, record, configs)
    noises = study_noises(record, probes, longs)
    print(write(args, record, configs, probes, longs, noises))
    if noise := machine_noise(noises):
        path = later_noise.remember(noise.relative, noise.df, args.out.resolve())
        print(f"This machine's later-run noise: {noise.relative:.1%} ({noise.df} df), recorded in {path}")
    return 0
