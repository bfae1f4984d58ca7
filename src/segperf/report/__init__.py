"""Reading finished runs: `python -m segperf.report <sweep dir>`.

`sweep` loads a sweep's results.json files and groups repeats into configurations, `settings`
says what each ran with once the machine's adjustments are put in (and which ran the same thing),
`stats` summarizes repeats and tests whether two differ beyond noise, `decide` makes the one
speed-up decision every table, chart and report.json shows, `flags` finds what to warn about
(settings not applied, busy machines, outlying first jobs, quality that fell), `comparability`
says which machines may be compared, `cells` writes one statistic as text, `tables` the sections
of report.md, `charts` draws, `export` writes report.json, and `markdown` puts report.md together
(`build_report`); `cli` is the command (`main`). Nothing here imports the data, model or training code,
nor torch: a report can be made on any machine, long after the sweep.
"""

from segperf.report.cli import main
from segperf.report.markdown import build_report

__all__ = ["build_report", "main"]
