"""The report's PNG charts, one function per question a sweep answers.

Figures are made with matplotlib's object API on the Agg canvas, never pyplot: no display is
needed, and no global backend state leaks into a notebook that imports the report. Bars are
horizontal because sweep labels ("workers=auto, pin=on") are long; configurations read top to
bottom in job order, the baseline first.
"""

from __future__ import annotations

from pathlib import Path

from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure

from segperf.perf.formatting import fmt_num
from segperf.perf.phase_names import PHASE_ORDER
from segperf.report.cells import fmt_median_speedup
from segperf.report.flags import quality_fell, quality_metric, quality_mode, worse_word
from segperf.report.sweep import Configuration

PHASES = list(PHASE_ORDER)
# one fixed colour per phase, so the same phase looks the same in every report
# matplotlib's cycle has ten colours: the framework's loop time is grey, darker than what is unaccounted
PHASE_COLORS = dict(zip([p for p in PHASES if p != "framework"], [f"C{i}" for i in range(10)], strict=True))
PHASE_COLORS |= {"framework": "0.45", "unaccounted": "0.75"}
EXTRA_COLORS = ["#393b79", "#637939", "#8c6d31", "#843c39", "#7b4173", "#3182bd"]  # phases added later


def _figure(configs: list[Configuration], n_bars: int, width: float = 9.0, right: float = 0.97) -> Figure:
    """Margins set from the label length: a layout engine would cost a second draw per chart."""
    height = 1.2 + 0.3 * max(n_bars, 1)
    left = min(0.25 + 0.09 * max((len(c.label) for c in configs), default=0), width / 2)
    fig = Figure(figsize=(width, height))
    fig.subplots_adjust(left=left / width, right=right, bottom=0.55 / height, top=1 - 0.35 / height, wspace=0.08)
    FigureCanvasAgg(fig)
    return fig


def _save(fig: Figure, path: Path) -> Path:
    fig.savefig(path, dpi=100)
    return path


def _grouped_barh(ax, labels: list[str], series: list[tuple[str, list, str]], errors=None, notes=None) -> None:
    """Horizontal bars, one group per configuration, one bar per series; None values are left
    out and marked "n/a" so a missing number is never drawn as zero."""
    height = 0.8 / len(series)
    for j, (name, values, color) in enumerate(series):
        ys = [i - 0.4 + height * (j + 0.5) for i in range(len(labels))]
        labelled = False
        for i, (y, v) in enumerate(zip(ys, values, strict=True)):
            if v is None:
                ax.text(0, y, f" {name}: n/a", va="center", fontsize=7, color="0.4")
                continue
            err = errors[j][i] if errors else None
            ax.barh(y, v, height, color=color, label=None if labelled else name, xerr=err, capsize=3)
            labelled = True
            note = notes[j][i] if notes else fmt_num(v)
            ax.text((err[1][0] + v) if err else v, y, f" {note}", va="center", fontsize=7)
    ax.set_yticks(range(len(labels)), labels)
    ax.set_ylim(len(labels) - 0.5, -0.5)  # first configuration on top; also keeps "n/a" notes inside
    # room on the right for the longest note beside its bar (about 1% of the axis per character
    # at this font size on the report's figure widths), so "1.58× (pin not applied)" is not cut off
    longest = max((len(str(n)) for row in notes or [] for n in row if n is not None), default=8)
    ax.margins(x=min(0.7, max(0.18, 0.05 + 0.011 * longest)))
    if len(series) > 1 and ax.get_legend_handles_labels()[1]:
        ax.legend(fontsize=7, loc="best")


def time_by_phase(configs: list[Configuration], out: Path) -> Path:
    """Where the wall time goes: per configuration, the median seconds of each phase, stacked."""
    fig = _figure(configs, 2 * len(configs), width=10, right=0.84)
    ax = fig.add_subplot()
    labels = [c.label for c in configs]
    names = [p for p in PHASES if any(c.stat(f"phases.{p}.wall_s").n for c in configs)]
    names += sorted({p for c in configs for r in c.ok_runs for p in r.results.get("phases") or {}} - set(names))
    lefts = [0.0] * len(configs)
    for name in [*names, "unaccounted"]:
        if name == "unaccounted":
            widths = [_unaccounted(c) for c in configs]
        else:
            widths = [c.stat(f"phases.{name}.wall_s").median for c in configs]
        if not any(widths):
            continue
        extra = names.index(name) if name in names else 0
        color = PHASE_COLORS.get(name, EXTRA_COLORS[extra % len(EXTRA_COLORS)])
        ax.barh(range(len(configs)), [w or 0.0 for w in widths], left=lefts, color=color, label=name)
        lefts = [left + (w or 0.0) for left, w in zip(lefts, widths, strict=True)]
    for i, c in enumerate(configs):
        note = f" {fmt_num(lefts[i])} s" if lefts[i] else " no phases"
        note = " all runs failed" if not c.ok_runs else (" measurement off" if not c.measured else note)
        ax.text(lefts[i], i, note, va="center", fontsize=7)
    ax.set_yticks(range(len(labels)), labels)
    ax.set_ylim(len(labels) - 0.5, -0.5)
    ax.margins(x=0.12)
    ax.set_xlabel("wall time, s (median over repeats of each phase)")
    ax.set_title("Training time by phase")
    if ax.get_legend_handles_labels()[1]:
        ax.legend(fontsize=7, loc="center left", bbox_to_anchor=(1.01, 0.5))
    return _save(fig, out / "training_time_by_phase.png")


def _unaccounted(config: Configuration) -> float | None:
    run_wall, accounted = config.stat("accounted.run_wall_s").median, config.stat("accounted.wall_s").median
    return max(run_wall - accounted, 0.0) if run_wall is not None and accounted is not None else None


def _ratio_chart(configs, baseline, out: Path, paths: list[tuple[str, str, str]], title: str, xlabel: str) -> Path:
    fig = _figure(configs, len(configs) * max(len(paths), 2))
    ax = fig.add_subplot()
    stats = [[c.stat(path) for c in configs] for _, path, _ in paths]
    series = [(name, [s.median for s in row], color) for (name, _, color), row in zip(paths, stats, strict=True)]
    errors = [[None if s.median is None else ([s.median - s.min], [s.max - s.median]) for s in row] for row in stats]
    notes = [
        [f"{fmt_num(s.median)}  {fmt_median_speedup(c, baseline, path)}" for c, s in zip(configs, row, strict=True)]
        for (_, path, _), row in zip(paths, stats, strict=True)
    ]
    _grouped_barh(ax, [c.label for c in configs], series, errors, notes)
    ax.set_xlabel(xlabel)
    ax.set_title(title)
    return _save(fig, out)


def throughput(configs: list[Configuration], baseline: Configuration | None, out: Path) -> Path:
    """Training images/s, median with min–max bars, and the speed-up against the baseline."""
    return _ratio_chart(
        configs,
        baseline,
        out / "training_throughput.png",
        [("train images/s", "train.images_per_s", "C0")],
        "Training throughput (~ = within noise of the baseline; unconfirmed = 1 run)",
        "images/s (median, bars: min–max over repeats)",
    )


def inference_throughput(configs: list[Configuration], out: Path) -> Path:
    """End-to-end vs model-only inference images/s, each with its ratio against the first."""
    return _ratio_chart(
        configs,
        configs[0],
        out / "inference_throughput.png",
        [
            ("end-to-end", "inference.end_to_end_images_per_s", "C0"),
            ("model only", "inference.model_images_per_s", "C1"),
        ],
        "Inference throughput (ratio vs the first configuration)",
        "images/s (median, bars: min–max over repeats)",
    )


def quality(configs: list[Configuration], baseline: Configuration | None, out: Path) -> Path:
    """Validation quality with its min–max over repeats: did a faster setting cost accuracy? The
    sweep's quality (Dice; accuracy for the classifier) first, pixel accuracy beside it; a
    configuration whose quality fell below the baseline's beyond that spread is marked "lower"."""
    fig = _figure(configs, 2 * len(configs))
    ax = fig.add_subplot()
    main, name = quality_metric(configs)
    mode = quality_mode(configs)
    paths = [(name, main, "C4"), ("val pixel accuracy", "quality.val_pixel_accuracy", "C2")]
    paths = [p for p in paths if p[1] == main or any(c.stat(p[1]).n for c in configs)]
    stats = [[c.stat(path) for c in configs] for _, path, _ in paths]
    series = [(label, [s.median for s in row], color) for (label, _, color), row in zip(paths, stats, strict=True)]
    errors = [[None if s.median is None else ([s.median - s.min], [s.max - s.median]) for s in row] for row in stats]
    notes = [
        [
            None
            if s.median is None
            else f"{s.median:.3f}"
            + (f"  {worse_word(mode)}" if path == main and quality_fell(c, baseline, path, mode) else "")
            for c, s in zip(configs, row, strict=True)
        ]
        for (_, path, _), row in zip(paths, stats, strict=True)
    ]
    _grouped_barh(ax, [c.label for c in configs], series, errors, notes)
    highest = max((s.max for row in stats for s in row if s.max is not None), default=1.0)
    if highest <= 1.0:  # Dice, accuracy: on their 0-1 scale
        ax.set_xlim(0, 1.25)
        ax.set_xlabel("median over repeats, bars: min–max (1 = perfect)")
    else:  # a user's loss or error, on its own scale (an MAE of 4 ran off a 0-1 axis)
        ax.set_xlim(0, highest * 1.25)
        ax.set_xlabel("median over repeats, bars: min–max" + (" (lower is better)" if mode == "min" else ""))
    worse = "above" if mode == "min" else "below"
    ax.set_title(f"Validation quality ({worse_word(mode)} = {worse} the baseline beyond the spread of seeds)")
    return _save(fig, out / "quality.png")


def jitter_utilization(configs: list[Configuration], out: Path) -> Path:
    """Data-wait jitter (p50/p99 ms) next to CPU/GPU utilization: starving or saturated?"""
    fig = _figure(configs, 2 * len(configs), width=11)
    left, right = fig.subplots(1, 2, sharey=True)
    labels = [c.label for c in configs]

    def ms(path: str) -> list:
        return [None if (m := c.stat(path).median) is None else m * 1000 for c in configs]

    _grouped_barh(left, labels, [("p50", ms("jitter.data_wait.p50"), "C0"), ("p99", ms("jitter.data_wait.p99"), "C3")])
    left.set_xlabel("data wait per step, ms (median over repeats)")
    left.set_title("Data wait jitter")
    cpu = [c.stat("resources.cpu_mean_percent").median for c in configs]
    gpu = [c.stat("resources.gpu_util_mean_percent").median for c in configs]
    _grouped_barh(right, labels, [("CPU % (100 = one core)", cpu, "C1"), ("GPU %", gpu, "C2")])
    right.set_xlabel("mean utilization, %")
    right.set_title("Utilization")
    return _save(fig, out / "jitter_utilization.png")
