"""Reading finished runs: `python -m segperf.report <sweep dir>`.

`sweep` loads a sweep's results.json files into configurations, `comparability` says which
machines may be compared, `charts` draws, `markdown` writes report.md. Nothing here imports the
data, model or training code: a report can be made on any machine, long after the sweep.
"""

from segperf.report.markdown import build_report, main

__all__ = ["build_report", "main"]
