"""The sections of report.md, each a list of markdown lines: the machines, the training table,
repeated timings, data-parallel scaling, inference, warnings, failed jobs and verdicts.

A section reads a sweep's configurations (segperf.report.sweep) and writes cells with
segperf.report.cells; segperf.report.markdown puts the sections in order with their notes.
"""

from __future__ import annotations

from collections import Counter

from segperf.perf.decision import LEVEL
from segperf.perf.formatting import fmt_num, fmt_pct, md_table
from segperf.report.cells import fmt_interval, fmt_mean_speedup, fmt_median_speedup, fmt_min_max, fmt_pm, fmt_range
from segperf.report.decide import CONFIRM, RULE, baseline_of, decide
from segperf.report.flags import Flag, quality_fell, quality_metric, quality_mode, warning_lines, worse_word
from segperf.report.mfu import mfu_cell, mfu_notes
from segperf.report.sweep import Configuration, Sweep

__all__ = ["baseline_of"]  # markdown takes it from here with the sections


def _runs_cell(config: Configuration) -> str:
    failed = len(config.failed_runs)
    return f"{len(config.ok_runs)}" + (f" (+{failed} failed)" if failed else "")


def _verdict_kind(config: Configuration) -> str:
    kinds = Counter(k for r in config.ok_runs if (k := r.get("verdict.kind")))
    return "/".join(kinds) if kinds else ("n/a (measurement off)" if not config.measured else "n/a")


def _measured(config: Configuration, text: str) -> str:
    return text if config.measured else "off"


def _machine_ids(sweep: Sweep) -> dict[str, str]:
    return {m: f"M{i + 1}" for i, m in enumerate(sweep.machines())}


def machine_section(sweep: Sweep) -> list[str]:
    """The hardware the numbers belong to; more than one machine is flagged loudly, because
    timings from different machines are not comparable."""
    ids = _machine_ids(sweep)
    jobs = {m: [r.job for r in sweep.runs if r.machine == m] for m in ids}
    unknown = [r.job for r in sweep.runs if r.machine is None]
    lines = ["## Machine", ""]
    if len(ids) > 1:
        lines += [
            f"> **⚠ MIXED MACHINES: these runs come from {len(ids)} different machines.** Timings are not "
            "comparable across machines; the table's `machine` column says where each configuration ran.",
            "",
        ]
    for m, i in ids.items():
        lines.append(f"- {f'**{i}** ' if len(ids) > 1 else ''}{m} (jobs {', '.join(map(str, jobs[m]))})")
    if not ids:
        lines.append("- not recorded by any run")
    if unknown and ids:
        lines.append(f"- not recorded (measurement off or no results) by jobs {', '.join(map(str, unknown))}")
    return [*lines, ""]


def _any_cold(configs: list[Configuration]) -> bool:
    return any("cold" in c.page_cache for c in configs)


def _quality_cell(config: Configuration, baseline: Configuration | None, path: str, mode: str) -> str:
    """ "0.900 [0.890–0.920]" over repeats ("0.970" for one run), "(lower)" when it fell below the
    baseline's beyond the spread across seeds ("(higher)" for a lower-is-better metric; segperf.report.
    flags.quality_fell)."""
    stat = config.stat(path)
    if stat.median is None:
        return "n/a"
    text = f"{stat.median:.3f}" + (f" [{stat.min:.3f}–{stat.max:.3f}]" if stat.n > 1 else "")
    return text + (f" ({worse_word(mode)})" if quality_fell(config, baseline, path, mode) else "")


def _training_table(sweep: Sweep, configs: list[Configuration], baseline: Configuration | None) -> list[str]:
    ids = _machine_ids(sweep)
    headers = ["configuration", "runs", "images/s median [min–max]", "speed-up", "data_wait share", "train_step share"]
    quality_path, quality_name = quality_metric(configs)
    mode = quality_mode(configs)
    quality_header = f"{quality_name} (lower is better)" if mode == "min" else quality_name
    headers += ["p99 data wait ms", "CPU %", "GPU %", "MFU", quality_header, "verdict"]
    rows = []
    for c in configs:
        p99 = c.stat("jitter.data_wait.p99").median
        row = [
            c.label,
            _runs_cell(c),
            fmt_range(c.stat("train.images_per_s")),
            fmt_median_speedup(c, baseline, "train.images_per_s"),
            _measured(c, fmt_pct(c.stat("phases.data_wait.fraction").median)),
            _measured(c, fmt_pct(c.stat("phases.train_step.fraction").median)),
            _measured(c, fmt_num(None if p99 is None else p99 * 1000)),
            _measured(c, fmt_num(c.stat("resources.cpu_mean_percent").median, 2)),
            _measured(c, fmt_num(c.stat("resources.gpu_util_mean_percent").median, 2)),
            mfu_cell(c),
            _quality_cell(c, baseline, quality_path, mode),
            _verdict_kind(c),
        ]
        if len(ids) > 1:
            row.append("+".join(dict.fromkeys(ids[r.machine] for r in c.ok_runs if r.machine in ids)) or "n/a")
        rows.append(row)
    if len(ids) > 1:
        headers.append("machine")
    right = set(range(1, 11))
    if _any_cold(configs):  # cold reads are slower by design: say which rows had them, next to the count
        headers.insert(2, "page cache")
        for row, c in zip(rows, configs, strict=True):
            row.insert(2, c.page_cache)
        right = {1} | set(range(3, 12))
    return md_table(headers, rows, right=right)


def training_section(
    sweep: Sweep, configs: list[Configuration], baseline: Configuration | None, ratios: bool
) -> list[str]:
    """One row per configuration: images/s with its range and speed-up, where the time went, utilization,
    quality and verdict; speed-ups only where `ratios` (the runs' machines may be compared)."""
    lines = ["## Training", "", *_training_table(sweep, configs, baseline)]
    lines += [
        "",
        (
            f"Speed-up: ratio of median images/s to the baseline, `{baseline.label if baseline else 'n/a'}`. "
            if ratios
            else "Speed-up: not computed, the runs come from different machines (see the warning above). "
        )
        + f"`~`: not distinguishable from run-to-run noise; `(unconfirmed)`: one run on a side, `{CONFIRM}` "
        "confirms it; `same as X`: ran X's effective settings (a setting not applied on this machine). "
        + "Quality: median [min–max] over repeats, `(lower)` below the baseline's (`(higher)` above it, for a "
        "lower-is-better metric) beyond the spread across seeds (judged with two seeds or more a side, "
        "`seed=0,1,2`: repeats of one seed train alike). "
        "Shares: of the run's wall time; `off`: the run's measurement was off. "
        "MFU: median model FLOPs utilisation against the peak measured on the machine (never above 100%: "
        "a run that beat its peak probe shows `n/a`, and why, below). "
        + (
            "Page cache: `cold` runs dropped the data files from the OS page cache before starting "
            "(`cold_cache=true`), `warm` runs may have read them from memory."
            if _any_cold(configs)
            else "Page cache: warm in every run (the data files may have been read from memory; "
            "`cold_cache=true` drops them first)."
        ),
        "",
        *([*notes, ""] if (notes := mfu_notes(configs)) else []),
        f"Decision rule: {RULE}",
        "",
    ]
    return lines


def _summary_line(configs: list[Configuration], baseline: Configuration | None, path: str) -> list[str]:
    """hyperfine's "X ran N ± σ times faster than Y" for the fastest configuration, said only when
    the decision supports it; otherwise what the evidence does support."""
    others = [c for c in configs if c is not baseline and c.same_as is None and c.spread(path).mean is not None]
    fastest = max(others, key=lambda c: c.spread(path).mean, default=None)
    if baseline is None or baseline.spread(path).mean is None:
        return []
    if fastest is None and any(c.same_as for c in configs):
        return [f"Summary: the other configurations ran `{baseline.label}`'s settings (same as): no speed-up.", ""]
    if fastest is None:  # one configuration (e.g. a sweep of seeds only: its runs are repeats)
        runs = baseline.spread(path).n
        return [
            f"Summary: one configuration, `{baseline.label}` ({runs} run{'s' * (runs != 1)}): nothing to compare.",
            "",
        ]
    if fastest.spread(path).mean <= baseline.spread(path).mean:
        return [f"Summary: no configuration has a higher mean images/s than the baseline, `{baseline.label}`.", ""]
    decision, ratio = decide(fastest, baseline, path), fmt_mean_speedup(fastest, baseline, path).lstrip("~")
    ratio = ratio.removesuffix(" (unconfirmed)").rstrip("×")
    if decision.distinguishable:
        line = (
            f"Summary: `{fastest.label}` ran **{ratio} times faster** than `{baseline.label}`. "
            f"{LEVEL:.0%} confidence interval of the ratio: {fmt_interval(fastest, baseline, path)}."
        )
    elif decision.distinguishable is None:
        line = (
            f"Summary: `{fastest.label}` has the highest mean, {ratio} times `{baseline.label}`'s, unconfirmed: "
            f"one run on a side (`{CONFIRM}` confirms it)."
        )
    else:
        line = (
            f"Summary: no configuration is distinguishable from `{baseline.label}`: the fastest mean, "
            f"`{fastest.label}`'s, is {ratio} times the baseline's, within run-to-run noise "
            f"({LEVEL:.0%} interval {fmt_interval(fastest, baseline, path)} includes 1)."
        )
    return [line, ""]


def repeats_section(configs: list[Configuration], baseline: Configuration | None) -> list[str]:
    """images/s the way hyperfine reports repeated timings: mean ± σ, min … max, and each
    configuration's speed-up over the baseline with its uncertainty and the interval that decides
    it; then a summary line for the fastest configuration. Only where some configuration was repeated."""
    path = "train.images_per_s"
    if not any(c.spread(path).n > 1 for c in configs):
        return []
    headers = ["configuration", "runs", "images/s mean ± σ", "min … max", "speed-up ± σ", f"{LEVEL:.0%} interval"]
    rows = [
        [c.label, _runs_cell(c), fmt_pm(c.spread(path).mean, c.spread(path).std), fmt_min_max(c.spread(path))]
        + [fmt_mean_speedup(c, baseline, path), fmt_interval(c, baseline, path)]
        for c in configs
    ]
    lines = ["## Repeated timings", "", *md_table(headers, rows, right={1, 2, 3, 4, 5}), ""]
    lines += _summary_line(configs, baseline, path)
    lines += [
        "Mean ± sample standard deviation over each configuration's completed runs (hyperfine's "
        '"mean ± σ"); speed-up: ratio of mean images/s to the baseline\'s, its σ propagated from both '
        "sides, r·√((σa/a)² + (σb/b)²). A configuration with one run has no σ. Interval: of the ratio of "
        "geometric means, by the decision rule below; `~`, `(unconfirmed)` and the summary are the "
        "training table's one decision (its decision rule), never a second opinion.",
        "",
    ]
    return lines


def _ranks(config: Configuration) -> int:
    """Processes per run: distributed.world_size, 1 for a single-process run."""
    return int(config.stat("distributed.world_size").median or 1)


def data_parallel_section(configs: list[Configuration], baseline: Configuration | None) -> list[str]:
    """What more devices bought: total and per-rank images/s, speed-up over the baseline, scaling
    efficiency (speed-up per rank added: 100% is perfect linear scaling) and the straggler."""
    if not any(c.stat("distributed.world_size").n for c in configs):
        return []
    headers = ["configuration", "ranks", "images/s (all ranks)", "per rank", "speed-up", "scaling efficiency"]
    headers += ["slowest rank", "its lag ms"]
    base_ranks = _ranks(baseline) if baseline else None
    rows = []
    for c in configs:
        ranks, throughput = _ranks(c), c.stat("train.images_per_s")
        ips, ratio = throughput.median, decide(c, baseline).speedup
        efficiency = None if ratio is None else ratio / (ranks / base_ranks)
        slowest = Counter(r for r in c.values("distributed.slowest_rank") if r is not None)
        lag = c.stat("distributed.slowest_lag_s").median
        if slowest:
            (rank, n), runs = slowest.most_common(1)[0], len(c.ok_runs)
            slowest_text = f"{rank}" + (f" ({n} of {runs} runs)" if runs > 1 else "")
        else:
            slowest_text = "n/a"
        rows.append(
            [
                c.label,
                str(ranks),
                fmt_num(ips),
                fmt_num(None if ips is None else ips / ranks),
                "1.00×" if c is baseline else fmt_median_speedup(c, baseline),
                "n/a" if efficiency is None else f"{efficiency:.0%}",
                slowest_text,
                fmt_num(None if lag is None else lag * 1000, 2),
            ]
        )
    lines = ["## Data-parallel scaling", "", *md_table(headers, rows, right=set(range(1, 8))), ""]
    lines += [
        "images/s: median over repeats, all ranks together; per rank: that over the ranks. Scaling efficiency: "
        f"speed-up over `{baseline.label if baseline else 'n/a'}` divided by the ratio of their rank counts "
        "(100%: N ranks are N times as fast). Slowest rank: the one that reaches the gradient all-reduce last "
        "(data wait + forward), the one the others wait for; its lag: how much later, per step, than the median "
        "of the others.",
        "",
    ]
    return lines


def inference_section(configs: list[Configuration], ratios: bool) -> list[str]:
    """End-to-end and model-only images/s with their ratios to the first configuration, and the
    agreement with fp32 (lower precisions must not change the masks much)."""
    headers = ["configuration", "runs", "end-to-end images/s", "ratio", "model-only images/s", "ratio"]
    headers += ["agreement vs fp32", "Dice vs fp32"]
    rows = []
    for c in configs:
        row = [c.label, _runs_cell(c)]
        for path in ("inference.end_to_end_images_per_s", "inference.model_images_per_s"):
            row += [fmt_range(c.stat(path)), fmt_median_speedup(c, configs[0] if ratios else None, path)]
        for path in ("quality.agreement_vs_fp32", "quality.dice_vs_fp32"):
            v = c.stat(path).median
            row.append("n/a" if v is None else f"{v:.4f}")
        rows.append(row)
    return ["## Inference", "", *md_table(headers, rows, right=set(range(1, 8))), ""]


def warnings_section(flags: list[Flag], configs: list[Configuration], baseline: Configuration | None) -> list[str]:
    """What may make a number mean less than it seems (segperf.report.flags), as hyperfine warns:
    settings not applied, runs on a busy machine, an outlying first job, quality that fell, and
    speed-ups that one run cannot confirm."""
    lines = ["## Warnings", ""]
    lines += [f"- {line}" for line in warning_lines(flags)]
    unconfirmed = [c.label for c in configs if decide(c, baseline).unconfirmed]
    if unconfirmed:
        names = ", ".join(f"`{label}`" for label in unconfirmed)
        lines.append(
            f"- {names}: one run on a side, so {'its speed-up is' if len(unconfirmed) == 1 else 'their speed-ups are'} "
            f"unconfirmed, shown as `(unconfirmed)`; `{CONFIRM}` confirms {'it' if len(unconfirmed) == 1 else 'them'}."
        )
    return [*lines, *([] if len(lines) > 2 else ["None."]), ""]


def failed_section(sweep: Sweep) -> list[str]:
    lines = ["## Failed jobs", ""]
    for r in sweep.failed:
        error = " ".join(str(r.error).split())
        lines.append(f"- job {r.job} `{r.name}` ({r.status}): {error[:400]}")
    return [*lines, *([] if sweep.failed else ["None: every job completed."]), ""]


def verdict_texts(config: Configuration) -> Counter:
    return Counter(t for r in config.ok_runs if (t := r.get("verdict.text")))


def verdict_section(configs: list[Configuration]) -> list[str]:
    """Each configuration's verdict, one line per verdict kind its runs reached. Repeats that reach
    the same kind differ only in their figures (96% or 97% in train_step), so the kind is shown once
    in its most common wording, marked as one run's figures; repeats that disagree on the kind show
    each kind with its count."""
    lines = ["## Verdicts", ""]
    for c in configs:
        texts = verdict_texts(c)
        if not texts:
            why = "measurement off" if not c.measured else ("no completed run" if not c.ok_runs else "none recorded")
            lines.append(f"- **{c.label}**: no verdict ({why}).")
        by_kind: dict[str, Counter] = {}
        for r in c.ok_runs:
            if text := r.get("verdict.text"):
                by_kind.setdefault(r.get("verdict.kind") or text, Counter())[text] += 1
        for wordings in by_kind.values():
            text, runs = wordings.most_common(1)[0][0], wordings.total()
            notes = [f"{runs} of {len(c.ok_runs)} runs"] if len(by_kind) > 1 else []
            if len(wordings) > 1:  # the same verdict in other figures
                notes.append("the figures of one" if notes else f"the figures of one of {runs} runs")
            lines.append(f"- **{c.label}**" + (f" ({', '.join(notes)})" if notes else "") + f": {text}")
    return [*lines, ""]
