"""tune_report.md and its charts: what a tune tried, what it kept and why, and the proof.

Made from the tune's record (what tune.json holds: the search's TuneResult as a dict, the machine,
the command), never by re-running anything, like segperf.report for a sweep. Every ratio is the
search's own decision (segperf.report.stats.compare_throughput: the ratio of geometric means),
printed with the interval a later run of each side falls in at the tune's level (later_interval,
counting the machine's later-run noise the tune recorded); the final side-by-side is computed here
the same way.
Charts use matplotlib's object API on the Agg canvas (no display, no pyplot state), as the
sweep report's do.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from segperf.perf.formatting import fmt_num, md_table
from segperf.perf.results import write_text_atomic
from segperf.report.stats import (
    Noise,
    busier_than_later,
    compare_throughput,
    later_interval,
    pooled_noise,
    summarize,
)
from segperf.tune.journal import probe_from_dict
from segperf.tune.search.verdicts import Verdict
from segperf.tune.space import without_keys

VERDICT_COLORS = {"kept": "#2ca02c", "rejected: slower": "#d62728", "not distinguishable": "0.6"}


def label(config: Sequence[str], start: Sequence[str]) -> str:
    """A configuration as what it changes on the start ("start" for the start itself)."""
    changed = [o for o in config if o not in set(start)]
    return " ".join(changed) if changed else "start"


def rates(probes: Sequence[Mapping[str, Any]]) -> list[float | None]:
    return [p.get("images_per_s") for p in probes]


def full_runs(probes: Sequence[Mapping[str, Any]]) -> list[Mapping[str, Any]]:
    """The recorded probes with a full run's images/s, by the search's own rule (Probe.full_run)."""
    return [p for p in probes if probe_from_dict(dict(p)).full_run]


def final_cell(probes: Sequence[Mapping[str, Any]]) -> str:
    """A configuration's cell of the final side-by-side: its full runs' images/s (rate_cell), and
    how many probes gave none and why (`+2 screened out`)."""
    partial: dict[str, int] = {}
    for probe in probes:
        if why := probe_from_dict(dict(probe)).partial:
            partial[why] = partial.get(why, 0) + 1
    counts = ", ".join(f"{n} {why}" for why, n in partial.items())
    full = full_runs(probes)
    if not full:
        return counts or rate_cell(probes)
    return rate_cell(full) + (f" (+{counts})" if counts else "")


def rate_cell(probes: Sequence[Mapping[str, Any]]) -> str:
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


def later_of(result: Mapping[str, Any]) -> float:
    """The later-run noise the tune's printed intervals count (0 for a record from before it)."""
    return float((result.get("later_noise") or {}).get("relative") or 0.0)


def relative(noise: Noise | None) -> float:
    return noise.relative if noise is not None else 0.0


def final_noise(final: Mapping[str, Any]) -> Noise | None:
    """The run-to-run noise pooled over every configuration of the final side-by-side (its full runs)."""
    return pooled_noise([rates(full_runs(probes)) for probes in final.values()])


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


def final_table(result: Mapping[str, Any], level: float) -> list[dict[str, Any]]:
    """The final side-by-side: each configuration's images/s and its ratio to the start's."""
    final, configs = result.get("final") or {}, result.get("final_configs") or {}
    start, noise = rates(full_runs(final.get("start") or [])), final_noise(final)
    rows = []
    for name, probes in final.items():
        mine = rates(full_runs(probes))
        stat = summarize(mine)
        versus = compare_throughput(mine, start, noise, level)
        low, high = later_interval(versus, later_of(result), relative(noise))
        rows.append(
            {
                "name": name,
                "config": list(configs.get(name) or []),
                "runs": stat.n,
                "images_per_s": {"median": stat.median, "min": stat.min, "max": stat.max},
                "vs_start": None if name == "start" else versus.ratio,
                "vs_start_interval": None if name == "start" else [low, high],
                # the interval of the tune's own minutes (the one `distinguishable` reads)
                "vs_start_own_interval": None if name == "start" else [versus.low, versus.high],
                "distinguishable": None if name == "start" else versus.distinguishable,
            }
        )
    return rows


def tuned_against_presets(result: Mapping[str, Any], level: float) -> dict[str, Any] | None:
    """The tuned configuration against the fastest other one of the final side-by-side."""
    final = result.get("final") or {}
    tuned = full_runs(final.get("tuned") or [])
    others = {n: full_runs(p) for n, p in final.items() if n != "tuned" and full_runs(p)}
    if not tuned or not others:
        return None
    best = max(others, key=lambda n: summarize(rates(others[n])).median)
    noise = final_noise(final)
    versus = compare_throughput(rates(tuned), rates(others[best]), noise, level)
    low, high = later_interval(versus, later_of(result), relative(noise))
    return {"against": best, "ratio": versus.ratio, "low": low, "high": high, "own": [versus.low, versus.high]}


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
        + [rate_cell(s.get("candidate_probes") or []), rate_cell(s.get("against_probes") or [])]
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


def _figure(labels: Sequence[str], rows: int):
    """A figure with room on the left for `labels` (margins from the label length, as the sweep
    report's charts: a layout engine cannot fit long override labels and warns)."""
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    width, height = 10.0, 1.3 + 0.32 * max(rows, 1)
    left = min(0.3 + 0.075 * max((len(t) for t in labels), default=0), width * 0.6)
    fig = Figure(figsize=(width, height))
    fig.subplots_adjust(left=left / width, right=0.97, bottom=0.6 / height, top=1 - 0.4 / height)
    FigureCanvasAgg(fig)
    return fig, fig.add_subplot()


def charts(data: Mapping[str, Any], out: Path) -> list[Path]:
    """final.png (the side-by-side, with each configuration's range) and steps.png (each
    comparison's ratio with its interval, coloured by verdict)."""
    result = data["result"]
    start, level, written = result.get("start") or [], result.get("level", 0.95), []
    rows = [r for r in final_table(result, level) if r["images_per_s"]["median"] is not None]
    if rows:
        fig, ax = _figure([r["name"] for r in rows], len(rows))
        stats = [r["images_per_s"] for r in rows]
        errors = [[x["median"] - x["min"] for x in stats], [x["max"] - x["median"] for x in stats]]
        ax.barh(range(len(rows)), [x["median"] for x in stats], xerr=errors, color="C0", capsize=3)
        ax.set_yticks(range(len(rows)), [r["name"] for r in rows])
        ax.invert_yaxis()
        ax.set_xlabel("training images/s (median, min–max)")
        ax.set_title("Final side by side")
        written.append(out / "final.png")
        fig.savefig(written[-1], dpi=100)
    steps = [s for s in result.get("steps") or [] if s.get("ratio") is not None]
    if steps:
        ticks = [f"{s['axis']}: {label(s.get('option') or [], start)}"[:60] for s in steps]
        fig, ax = _figure(ticks, len(steps))
        for i, s in enumerate(steps):
            low, high = s.get("low") or s["ratio"], s.get("high") or s["ratio"]
            ax.errorbar(
                s["ratio"],
                i,
                # an interval need not hold the ratio (a screened probe's has none): never a negative bar
                xerr=[[max(0.0, s["ratio"] - low)], [max(0.0, high - s["ratio"])]],
                fmt="o",
                color=VERDICT_COLORS.get(s.get("verdict"), "#ff7f0e"),
                capsize=3,
            )
        ax.axvline(1.0, color="0.3", linewidth=0.8)
        ax.set_yticks(range(len(steps)), ticks)
        ax.invert_yaxis()
        ax.set_xscale("log")
        ax.set_xlabel(f"images/s against the best at the time ({level:.0%} interval): green kept, red slower")
        written.append(out / "steps.png")
        fig.savefig(written[-1], dpi=100)
    return written


def write_report(data: Mapping[str, Any], out: Path) -> Path:
    drawn = charts(data, Path(out))
    return write_text_atomic(Path(out) / "tune_report.md", render(data, [str(p) for p in drawn]))
