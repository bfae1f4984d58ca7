"""Reading finished runs: `python -m segperf.report <sweep dir>`.

`sweep` loads a sweep's results.json files and groups repeats into configurations, `stats`
summarizes repeats and says whether two configurations differ beyond noise, `comparability` says
which machines may be compared, `cells` writes one statistic as text, `tables` the sections of
report.md, `charts` draws, and `markdown` puts report.md together (`build_report`, and `main`,
the command). Nothing here imports the data, model or training code, nor torch: a report can be
made on any machine, long after the sweep.
"""

from segperf.report.markdown import build_report, main

__all__ = ["build_report", "main"]
