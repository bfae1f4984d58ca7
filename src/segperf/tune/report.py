"""tune_report.md: what a tune tried, what it kept and why, and the proof.

Made from the tune's record (what tune.json holds: the search's TuneResult as a dict, the machine,
the command), never by re-running anything, like segperf.report for a sweep. Every ratio is the
search's own decision (segperf.perf.decision.compare_throughput: the ratio of geometric means),
printed with the interval a later run of each side falls in at the tune's level (later_interval,
counting the machine's later-run noise the tune recorded); the final side by side's numbers are
segperf.tune.side_by_side's, the charts segperf.tune.report_charts'.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from segperf.perf.decision import busier_than_later
from segperf.perf.formatting import fmt_num, md_table
from segperf.perf.results import write_text_atomic
from segperf.report.stats import summarize
from segperf.tune.journal import probe_from_dict, probes_from_dicts
from segperf.tune.probe import Probe, full_runs, rates
from segperf.tune.report_charts import charts
from segperf.tune.search.verdicts import Verdict
from segperf.tune.side_by_side import final_noise, final_table, label, tuned_against_presets
from segperf.tune.space import without_keys


def final_cell(probes: Sequence[Mapping[str, Any]]) -> str:
    """A configuration's cell of the final side-by-side: its full runs' images/s (rate_cell), and
    how many probes gave none and why (`+2 screened out`)."""
    recorded = probes_from_dicts(probes)
    partial: dict[str, int] = {}
    for probe in recorded:
        if why := probe.partial:
            partial[why] = partial.get(why, 0) + 1
    counts = ", ".join(f"{n} {why}" for why, n in partial.items())
    full = full_runs(recorded)
    if not full:
        return counts or rate_cell(recorded)
    return rate_cell(full) + (f" (+{counts})" if counts else "")


def rate_cell(probes: Sequence[Probe]) -> str:
    """Median images/s with its range and the number of runs: `2.41 [2.30–2.52] ×3`."""
    stat = summarize(rates(probes))
    if stat.median is None:
        return "n/a" if not probes else "failed"
    spread = f" [{fmt_num(stat.min)}–{fmt_num(stat.max)}]" if stat.n > 1 else ""
    return f"{fmt_num(stat.median)}{spread} ×{stat.n}"


def ratio_cell(ratio: float | None, low: float | None, high: float | None, distinguishable: bool | None = None) -> str:
    if ratio is None:
        return "n/a"
    interval = f" [{low:.2f}–{high:.2f}]" if low is not None and high is not None else " (one run each)"
    sign = "~" if distinguishable is False else ""
    return f"{sign}{ratio:.2f}×{interval}"


def busy_warning(busy: int, runs: Any) -> str:
    """What a tune measured on a busy machine is worth: its answer may be the draw of another's load
    (a tune beside a test run answered "the start itself", its fastest preset screened out at 35
    images/s against 480-567 on a quiet machine)."""
    return (
        f"other processes kept the machine busy during {busy} of {runs} runs: their timings are not this "
        "machine's own, and the tuned configuration may be the draw of that load; run the tune again on a "
        "quiet machine"
    )


def cost_cell(step: Mapping[str, Any]) -> str:
    """What one decision cost: the probes run for it and their seconds, and the earlier probes it
    decided on as well (`+N reused`: the same runs, measured once)."""
    reused = f" +{step['reused']} reused" if step.get("reused") else ""
    return f"{step.get('probes_run', 0)}, {step.get('seconds', 0.0):.0f} s{reused}"


def cost_summary(result: Mapping[str, Any]) -> str:
    """Where the tune's probes and seconds went, per stage: the decisions and the rest (the final
    side-by-side's top-up and the learning runs)."""
    steps = result.get("steps") or []
    parts = []
    for stage in dict.fromkeys(s["stage"] for s in steps if s["stage"] != "quality"):
        mine = [s for s in steps if s["stage"] == stage]
        decided = sum(1 for s in mine if s.get("verdict") != "skipped: budget")
        probes, seconds = sum(s.get("probes_run", 0) for s in mine), sum(s.get("seconds", 0.0) for s in mine)
        parts.append(f"{stage}: {decided} decisions, {probes} probes, {seconds:.0f} s")
    spent = sum(s.get("seconds", 0.0) for s in steps if s["stage"] != "quality")
    rest = max(0.0, (result.get("elapsed_s") or 0.0) - spent)
    parts.append(f"final stage and learning runs: {rest:.0f} s")
    return "Cost: " + "; ".join(parts) + "."


def axes_tried(result: Mapping[str, Any]) -> str:
    """`9 of 10 (not reached within the budget: pin)`: the axes a comparison of the axes' stage
    reached, measured or known from an earlier probe ("" for a record without its axes)."""
    names = result.get("axes") or []
    if not names:
        return ""
    reached = {
        s.get("axis")
        for s in result.get("steps") or []
        if s.get("stage") in ("axes", "interactions") and s.get("verdict") != Verdict.SKIPPED
    }
    missed = [name for name in names if name not in reached]
    return f"{len(names) - len(missed)} of {len(names)}" + (
        f" (not reached within the budget: {', '.join(missed)})" if missed else ""
    )


def over_budget_text(result: Mapping[str, Any]) -> str:
    """By how much the tune ran past its budget and why: the stage and probes that crossed it, what
    they were priced at (the median of the probes measured before them) and what they took; "" within it."""
    over = (result.get("elapsed_s") or 0.0) - (result.get("budget_s") or 0.0)
    if over <= 0:
        return ""
    crossed = result.get("over_budget")
    if not crossed:
        return f" Over the budget by {over:.0f} s."
    probes = ", ".join(crossed.get("probes") or []) or "?"
    priced, took = crossed.get("priced_s") or 0.0, crossed.get("took_s") or 0.0
    return (
        f" Over the budget by {over:.0f} s: it was crossed in {crossed.get('where') or '?'}, by {probes} "
        f"(priced at {priced:.0f} s from the probes before them, took {took:.0f} s)."
    )


def render(data: Mapping[str, Any], charts: Sequence[str] = ()) -> str:
    """tune_report.md's text from the tune's record (tune.json's content)."""
    result, machine = data["result"], data.get("machine") or {}
    start, level = result.get("start") or [], result.get("level", 0.95)
    bf16 = "yes" if machine.get("avx512_bf16") or machine.get("amx_bf16") else "no"
    lines = [
        f"# Tune: {machine.get('hostname', '?')}",
        "",
        f"{machine.get('cpu_model', '?')}, {machine.get('cores', '?')} cores (bf16 instructions: {bf16}), "
        f"torch {machine.get('torch', '?')}.",
        "",
        f"Command: `{data.get('command', 'python -m segperf.tune')}`",
        "",
        f"Budget {result.get('budget_s', 0) / 60:.1f} min, took {result.get('elapsed_s', 0) / 60:.1f} min"
        + (" (stopped by the budget: some comparisons were not run)." if result.get("stopped_by_budget") else ".")
        + over_budget_text(result),
        "",
        "## Result",
        "",
        f"- start: `{' '.join(start) or 'the defaults'}`",
        f"- tuned: `{label(result.get('best') or [], start)}`",
    ]
    for row in final_table(result, level):
        if row["name"] == "tuned" and row["vs_start"] is not None:
            low, high = row["vs_start_interval"]
            lines.append(f"- tuned against the start: {ratio_cell(row['vs_start'], low, high, row['distinguishable'])}")
    if against := tuned_against_presets(result, level):
        cell = ratio_cell(against["ratio"], against["low"], against["high"])
        lines.append(f"- tuned against the fastest other configuration ({against['against']}): {cell}")
    if tried := axes_tried(result):
        lines.append(f"- axes tried: {tried}")
    lines.append(f"- quality: {quality_line(result.get('quality'))}")
    if failures := result.get("failures"):  # absent in a record from before failures were counted
        lines.append(f"- **failed runs: {sum(failures.values())} of {result.get('runs', '?')}**:")
        lines += [f"  - {count}x: {reason}" for reason, count in failures.items()]
    if problems := result.get("tuner_problems"):  # failed for the tuner's run shape: no verdict on a configuration
        lines.append(f"- **not measured, the tuner's problem: {sum(problems.values())} of {result.get('runs', '?')}**:")
        lines += [f"  - {count}x: {reason}" for reason, count in problems.items()]
    if busy := result.get("busy_runs"):
        lines.append(f"- **busy machine**: {busy_warning(busy, result.get('runs', '?'))}")
    if data.get("tuned_yaml"):
        lines += ["", f"`{data['tuned_yaml']}` (`python -m segperf.train +opt=tuned`):", "", "```yaml"]
        lines += [data.get("tuned_text", "").rstrip(), "```"]
    lines += ["", "## Path from start to tuned", ""]
    kept = [s for s in result.get("steps") or [] if s.get("verdict") == "kept"]
    lines += [
        f"{i}. {s['stage']}: {s['axis']} `{label(s.get('option') or [], start)}` "
        f"{ratio_cell(s.get('ratio'), s.get('low'), s.get('high'))}"
        for i, s in enumerate(kept, start=1)
    ] or ["Nothing was faster beyond noise: the start is the tuned configuration."]
    lines += [
        "",
        "## Final side by side (every full run of each, screened, cut or failed probes counted beside it; topped up"
        " to min_runs, interleaved, and the start and the tuned configuration to max_runs with the budget left)",
        "",
    ]
    rows = [
        [row["name"], label(row["config"], start), final_cell((result.get("final") or {})[row["name"]])]
        + [ratio_cell(row["vs_start"], *(row["vs_start_interval"] or [None, None]), row["distinguishable"])]
        for row in final_table(result, level)
    ]
    lines += md_table(["configuration", "overrides", "images/s median [min–max] ×runs", "vs start"], rows, {2, 3})
    lines += ["", "## Steps", ""]
    rows = [
        [str(i), s["stage"], s["axis"], label(s.get("option") or [], start)]
        + [rate_cell(probes_from_dicts(s.get("candidate_probes") or []))]
        + [rate_cell(probes_from_dicts(s.get("against_probes") or []))]
        + [ratio_cell(s.get("ratio"), s.get("low"), s.get("high")), s.get("verdict", "")]
        + [cost_cell(s), s.get("note", "")]
        for i, s in enumerate(result.get("steps") or [], start=1)
    ]
    headers = ["#", "stage", "axis", "option", "candidate images/s", "best images/s", "ratio", "verdict"]
    headers += ["probes, s", "note"]
    lines += md_table(headers, rows, {0, 4, 5, 6, 8}) if rows else ["No comparison ran."]
    lines += ["", cost_summary(result)]
    lines += ["", "## Quality check", "", quality_section(result.get("quality"), start)]
    if data.get("notes"):
        lines += ["", "## Notes", "", *[f"- {note}" for note in data["notes"]]]
    lines += ["", *[f"![{Path(c).stem}]({Path(c).name})" for c in charts]]
    lines.append("")
    lines.append(
        "Ratios are of geometric mean images/s; `~` marks one not distinguishable from 1 in this tune. "
        "Every probe is a run folder here: `python -m segperf.report` reads them."
    )
    lines += ["", intervals_note(result, level)]
    return "\n".join(lines) + "\n"


def intervals_note(result: Mapping[str, Any], level: float) -> str:
    """What the printed intervals are of. A tune's own intervals are of its minutes: a calibration
    study found its probes scattering 2.3% run to run within them and 4.5-5.8% over the next hour,
    and intervals of the tune's minutes held a later long run's ratio for 10 of 15 decisions
    (docs/BENCHMARKS.md). The printed ones count the later-run noise; the decisions do not."""
    noise, later = final_noise(result.get("final") or {}), result.get("later_noise") or {}
    within = f"in which one run's images/s scattered by {noise.relative:.1%}" if noise else "whose scatter is not known"
    minutes = f"this tune's {(result.get('elapsed_s') or 0.0) / 60:.0f} minutes, {within}"
    if not later.get("relative"):
        return (
            f"The intervals ({level:.0%}) are of {minutes}; a run made later, or on a busier machine, "
            'scatters more (docs/tuning.md, "How far a probe can be trusted").'
        )
    busier = ""
    if noise and busier_than_later(later["relative"], noise.relative):
        busier = " (this tune's runs scattered more than that, so a later run is counted at their scatter)"
    return (
        f"The intervals ({level:.0%}) are where a later run of each configuration will put the ratio: they "
        f"count {minutes}, and {later['relative']:.1%} run-to-run scatter between runs made at other "
        f"times ({later.get('source', 'tune.later_noise')}){busier}. The decisions (kept, slower, not "
        "distinguishable) are of the tune's minutes: the note says where a later run may find the two even."
    )


def quality_line(check: Mapping[str, Any] | None) -> str:
    if not check:
        return "not checked"
    return f"{check.get('verdict', 'not checked')}" + (f" ({check['reason']})" if check.get("reason") else "")


def quality_section(check: Mapping[str, Any] | None, start: Sequence[str]) -> str:
    """The quality check: the verdict, then one row per configuration checked with each seed's
    quality (the second seed's only where the first run failed the guard and was confirmed) and
    the mean the guard decided on. A record from before the confirming runs has one column."""
    if not check:
        return "Not checked (tune.quality.enabled=false, or no learning run is set for this model)."
    seeds = check.get("seeds") or []
    confirmations = {_unseeded(p.get("config") or []): p for p in check.get("confirmations") or []}
    rows = []
    for probe in check.get("probes") or []:
        key = _unseeded(probe.get("config") or [])
        runs = [probe, *([confirmations[key]] if key in confirmations else [])]
        qualities = [probe_from_dict(p).metric_value for p in runs]  # as logged, not negated
        mean = sum(qualities) / 2 if len(runs) == 2 and None not in qualities else None
        seeded = [fmt_num(qualities[1]) if len(runs) == 2 else "", fmt_num(mean) if mean is not None else ""]
        rows.append(
            [label(key, _unseeded(start)), fmt_num(qualities[0]), *(seeded if len(seeds) == 2 else [])]
            + [_metric_cell(probe), "; ".join(p["failed"] for p in runs if p.get("failed"))]
            + [", ".join(p["run_dir"] for p in runs if p.get("run_dir"))]
        )
    lines = [f"Verdict: **{quality_line(check)}**; tolerance {check.get('tolerance')}.", ""]
    headers = ["configuration", "quality", "metric", "failed", "run folder"]
    if len(seeds) == 2:
        first, second = seeds
        headers = ["configuration", f"quality (seed {first})", f"quality (seed {second})", "mean"] + headers[2:]
        lines += [
            f"A configuration below the start's quality by more than the tolerance on its first run (seed "
            f"{first}) is learned again with seed {second}, as the start is (once), and judged on the mean "
            "of both seeds.",
            "",
        ]
    numbers = set(range(1, len(headers) - 3))
    return "\n".join([*lines, *(md_table(headers, rows, numbers) if rows else [])])


def _metric_cell(probe: Mapping[str, Any]) -> str:
    metric = probe.get("quality_metric") or ""
    return f"{metric} (lower is better)" if metric and probe.get("lower_is_better") else metric


def _unseeded(config: Sequence[str]) -> tuple[str, ...]:
    """A configuration without its seed= override: the second-seed run of a configuration is the
    same configuration, learned with another seed."""
    return tuple(without_keys(config, ["seed"]))


def write_report(data: Mapping[str, Any], out: Path) -> Path:
    drawn = charts(data, Path(out))
    return write_text_atomic(Path(out) / "tune_report.md", render(data, [str(p) for p in drawn]))
