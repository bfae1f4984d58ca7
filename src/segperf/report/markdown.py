"""`python -m segperf.report <sweep dir> [--out DIR]`: report.md, report.json and charts for a sweep.

`build_report` puts the sections (segperf.report.tables) and charts (segperf.report.charts) in
order and writes report.json beside them (segperf.report.export); segperf.report.cli is the command. It
reads only the jobs' results.json files and never runs anything, so it can be re-run any time
(and on another machine) after a sweep. Configurations are compared by one decision
(segperf.report.decide): a speed-up within run-to-run noise is marked "~", one from single runs
"(unconfirmed)", a configuration that ran another's effective settings "same as X": on a busy
machine a 5% "gain" between single runs is often noise, and the report should say so. Runs from
machines that differ (host, GPU, driver, library versions) are flagged at the top, and no
speed-up is computed across them unless `--allow-mixed-machines` is given.
"""

from __future__ import annotations

from pathlib import Path

from segperf.report import charts, flags
from segperf.report.comparability import mixed_machines_warning
from segperf.report.export import write_report_json
from segperf.report.memory import memory_section
from segperf.report.sweep import Sweep
from segperf.report.tables import (
    baseline_of,
    data_parallel_section,
    failed_section,
    inference_section,
    machine_section,
    repeats_section,
    training_section,
    verdict_section,
    verdict_texts,
    warnings_section,
)


def build_report(
    sweep: Sweep, out_dir: str | Path, charts_too: bool = True, allow_mixed_machines: bool = False
) -> Path:
    """Write report.md, report.json and the charts into out_dir; return report.md's path.
    `charts_too=False` writes no charts (a quick look from a notebook, or tests of the tables).
    Speed-ups across runs from different machines are n/a unless `allow_mixed_machines`."""
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    train = sweep.configurations("train")
    infer = sweep.configurations("inference")
    n_ok = len(sweep.runs) - len(sweep.failed)
    lines = [f"# Sweep report: {sweep.path.resolve()}", ""]
    differences = sweep.machine_differences()
    ratios = allow_mixed_machines or not differences
    lines += mixed_machines_warning(differences, allow_mixed_machines)
    lines += [
        f"{len(sweep.runs)} jobs ({n_ok} completed, {len(sweep.failed)} failed) in "
        f"{len(train) + len(infer)} configurations; read from results.json files, nothing was re-run.",
        "",
    ]
    lines += machine_section(sweep)
    if not n_ok:
        lines += [
            f"**No run completed**: none of the {len(sweep.runs)} jobs completed (see Failed jobs), "
            "so there is nothing to compare.",
            "",
        ]
    warnings = []
    if any(c.ok_runs for c in train):
        baseline = baseline_of(train) if ratios else None
        warnings += flags.collect(sweep, train, baseline)
        lines += training_section(sweep, train, baseline, ratios)
        lines += repeats_section(train, baseline)
        lines += data_parallel_section(train, baseline)
        lines += memory_section(train, baseline)
        if charts_too:
            made = [
                ("Training time by phase", charts.time_by_phase(train, out)),
                ("Training throughput", charts.throughput(train, baseline, out)),
                ("Validation quality", charts.quality(train, baseline, out)),
                ("Data-wait jitter and utilization", charts.jitter_utilization(train, out)),
            ]
            lines += [line for title, path in made for line in (f"![{title}]({path.name})", "")]
    if any(c.ok_runs for c in infer):
        lines += inference_section(infer, ratios)
        warnings += flags.collect(sweep, infer, None)
        if charts_too:
            lines += [f"![Inference throughput]({charts.inference_throughput(infer, out).name})", ""]
    if any(c.ok_runs for c in train + infer):
        lines += warnings_section(warnings, train, baseline_of(train) if ratios else None)
    lines += failed_section(sweep)
    lines += verdict_section([c for c in train if c.runs] + [c for c in infer if verdict_texts(c)])
    path = out / "report.md"
    path.write_text("\n".join(lines))
    write_report_json(sweep, out, allow_mixed_machines)
    return path
