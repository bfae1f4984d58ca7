"""tune_report.md's charts: final.png (the final side by side, each configuration's range) and
steps.png (each comparison's ratio with its interval, coloured by verdict).

matplotlib's object API on the Agg canvas (no display, no pyplot state), as the sweep report's
charts do; matplotlib is imported when a chart is drawn (it takes a second to import).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from segperf.tune.side_by_side import final_table, label

VERDICT_COLORS = {"kept": "#2ca02c", "rejected: slower": "#d62728", "not distinguishable": "0.6"}


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
