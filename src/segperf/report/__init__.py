"""Reading finished runs: `python -m segperf.report <sweep dir>`.

`sweep` loads a sweep's results.json files and groups repeats into configurations, `settings`
says what each ran with once the machine's adjustments are put in (and which ran the same thing),
`stats` summarizes repeats (whether two differ beyond noise is segperf.perf.decision's), `decide` makes the one
speed-up decision every table, chart and report.json shows, `flags` finds what to warn about
(settings not applied, busy machines, outlying first jobs, quality that fell), `comparability`
says which machines may be compared, `cells` writes one statistic as text, `tables` the sections
of report.md, `charts` draws, `export` writes report.json, and `markdown` puts report.md together
(`build_report`); `cli` is the command (`main`). Nothing here imports the data, model or training code,
nor torch: a report can be made on any machine, long after the sweep.
"""

__all__ = ["build_report", "main"]


def __getattr__(name: str):
    """`build_report` and `main`, imported on first use: the charts import matplotlib, which must
    not happen before `python -m segperf.report` has set MPLCONFIGDIR (segperf/report/__main__.py)."""
    if name == "build_report":
        from segperf.report.markdown import build_report

        return build_report
    if name == "main":
        from segperf.report.cli import main

        return main
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
