"""`python -m segperf.compare REF CAND [--max-slowdown 0.05]`: did CAND get slower than REF?

REF and CAND are run folders or sweep folders (a sweep's runs pooled as repeats of its side, see
segperf.compare.sides). The decision is the report's own (segperf.report.decide, whose statistics
live in segperf.perf.decision): the same runs left out (a first job that paid one-time costs, runs
another process kept busy), the same test, the same confidence level. CAND/REF's speed ratio comes
with its interval, and CAND is a regression only when the whole interval lies below
1 - max_slowdown: slower by more than the threshold *beyond run-to-run noise*. A plain delta of two
noisy numbers would fail CI on noise, or pass a real regression hidden in it.

Exit status: 1 slower beyond the threshold, 0 not, 2 the two cannot be compared (another machine,
another workload, a run that did not complete, too few runs to judge noise), with the reason.
The decision also goes to compare.json (in CAND's folder, or `--out`) for a CI job to keep.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

from segperf.command_line import override_key
from segperf.compare.memory import memory_comparison
from segperf.compare.sides import Incomparable, Side, check_comparable, load_side, unrecorded_workload
from segperf.perf.decision import MIN_RUNS, Comparison, compare_throughput
from segperf.report.decide import CONFIRM, decision_values

PROG = "python -m segperf.compare"
SLOWER, PASS, INCOMPARABLE = 1, 0, 2  # exit statuses


def regressed(test: Comparison, max_slowdown: float) -> bool:
    """CAND/REF is below 1 - max_slowdown over the whole of its confidence interval."""
    return test.high is not None and test.high < 1 - max_slowdown


def verdict(test: Comparison, max_slowdown: float) -> tuple[int, str]:
    """The exit status and the sentence that explains it."""
    bound = f"{1 - max_slowdown:.3g}x"
    if regressed(test, max_slowdown):
        return SLOWER, (
            f"SLOWER: CAND is slower than REF by more than {max_slowdown:.0%} beyond run-to-run noise "
            f"(the interval's upper end {test.high:.3f}x is below {bound})"
        )
    if test.distinguishable and test.ratio < 1:
        return PASS, (
            f"pass: CAND is slower than REF beyond noise, but not surely by more than {max_slowdown:.0%} "
            f"(the interval reaches {test.high:.3f}x, above {bound})"
        )
    if test.distinguishable:
        return PASS, "pass: CAND is faster than REF beyond run-to-run noise"
    return PASS, "pass: no difference beyond run-to-run noise"


def side_record(side: Side, values: list[Any]) -> dict[str, Any]:
    return {
        "path": str(side.path),
        "label": side.config.label,
        "runs": [str(run.path) for run in side.runs],
        "decided_on": len(values),  # runs the test used (see segperf.report.decide.decision_values)
        "images_per_s": vars(side.config.spread(side.throughput)),
    }


def compare(ref: Side, cand: Side, max_slowdown: float) -> dict[str, Any]:
    """The comparison's record (compare.json), `exit_status` included."""
    ref_values, cand_values = decision_values(ref.config, ref.throughput), decision_values(cand.config, cand.throughput)
    test = compare_throughput(cand_values, ref_values)
    record = {"throughput": ref.throughput, "ref": side_record(ref, ref_values), "cand": side_record(cand, cand_values)}
    record |= {"ratio": test.ratio, "low": test.low, "high": test.high, "level": test.level}
    record["max_slowdown"] = max_slowdown
    record["memory"] = memory_comparison(ref.runs, cand.runs, test.ratio)  # peaks per side: speed is not all
    if test.distinguishable is None:
        raise Incomparable(
            f"too few completed runs to judge run-to-run noise (REF {test.n_b}, CAND {test.n_a}; the report's "
            f"rule needs {MIN_RUNS} on each side): run each side as repeats, e.g. `-m {CONFIRM}`"
        )
    record["exit_status"], record["decision"] = verdict(test, max_slowdown)
    return record


def print_record(record: dict[str, Any]) -> None:
    for name in ("ref", "cand"):
        side = record[name]
        spread = side["images_per_s"]
        sigma = f" ± {spread['std']:.3g}" if spread["std"] is not None else ""
        label = f" [{side['label']}]" if side["label"] != "run" else ""
        runs = len(side["runs"])
        print(f"{name.upper():4} {side['path']}{label}: {spread['mean']:.4g}{sigma} images/s ({runs} runs)")
    print(
        f"speed CAND/REF: {record['ratio']:.3f}x "
        f"({record['level']:.0%} interval {record['low']:.3f}x – {record['high']:.3f}x)"
    )
    print(record["decision"])
    if (record.get("memory") or {}).get("text"):
        print(f"memory: {record['memory']['text']}")


def write_record(record: dict[str, Any], folder: Path) -> Path | None:
    """compare.json in `folder`; None (and a note) where it cannot be written: the exit status
    still says the decision."""
    try:
        folder.mkdir(parents=True, exist_ok=True)
        path = folder / "compare.json"
        path.write_text(json.dumps(record, indent=2) + "\n")
        return path
    except OSError as error:
        print(f"segperf.compare: note: compare.json not written ({error})", file=sys.stderr)
        return None


def parse_where(items: list[str], option: str) -> list[tuple[str, str]]:
    pairs = []
    for item in items:
        key, sep, value = item.partition("=")
        if not sep or not key:
            raise Incomparable(f"{option} {item!r}: expected KEY=VALUE, e.g. {option} workers=auto")
        pairs.append((override_key(key), value))
    return pairs


def parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog=PROG,
        description="Exit 1 when CAND is slower than REF by more than --max-slowdown beyond run-to-run noise, "
        "0 when not, 2 when the two cannot be compared.",
    )
    parser.add_argument("ref", type=Path, help="the reference: a run folder, or a sweep folder of its repeats")
    parser.add_argument("cand", type=Path, help="the candidate: a run folder, or a sweep folder of its repeats")
    parser.add_argument("--max-slowdown", type=float, default=0.05, help="tolerated slowdown (default 0.05: 5%%)")
    parser.add_argument("--ref-where", action="append", default=[], metavar="KEY=VALUE", help="REF's runs with this")
    parser.add_argument("--cand-where", action="append", default=[], metavar="KEY=VALUE", help="CAND's runs with this")
    parser.add_argument("--out", type=Path, default=None, help="folder for compare.json (default: CAND's folder)")
    parser.add_argument(
        "--allow-mixed-machines", action="store_true", help="compare runs from machines that differ anyway"
    )
    return parser


def main(argv: list[str] | None = None) -> int:
    args = parser().parse_args(argv)
    if not 0 <= args.max_slowdown < 1:
        print(f"{PROG}: error: --max-slowdown {args.max_slowdown}: expected a fraction in [0, 1)", file=sys.stderr)
        return INCOMPARABLE
    out = args.out or (args.cand if args.cand.is_dir() else None)
    try:
        ref = load_side("REF", args.ref, parse_where(args.ref_where, "--ref-where"))
        cand = load_side("CAND", args.cand, parse_where(args.cand_where, "--cand-where"))
        check_comparable(ref, cand, args.allow_mixed_machines)
        record = compare(ref, cand, args.max_slowdown)
    except Incomparable as reason:
        print(f"{PROG}: cannot compare: {reason}", file=sys.stderr)
        if out is not None:
            write_record({"exit_status": INCOMPARABLE, "decision": "cannot compare", "reason": str(reason)}, out)
        return INCOMPARABLE
    notes = []
    if unknown := unrecorded_workload(ref.runs + cand.runs):
        notes.append(
            f"{len(unknown)} of {len(ref.runs) + len(cand.runs)} runs recorded no workload (no config in "
            f"results.json, as from PerfMonitor in a script: {unknown[0].path}); taken to be the same model"
        )
    if shared := {run.path.resolve() for run in ref.runs} & {run.path.resolve() for run in cand.runs}:
        notes.append(
            f"{len(shared)} runs are on both sides (e.g. {min(shared)}): their ratio is 1 by construction; "
            "for a check of the noise, compare two sets of repeats run apart"
        )
    if notes:
        record["notes"] = notes
        for note in notes:
            print(f"{PROG}: note: {note}", file=sys.stderr)
    print_record(record)
    if out is not None and (path := write_record(record, out)):
        print(f"compare.json: {path}")
    return record["exit_status"]
