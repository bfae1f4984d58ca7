"""`python -m segperf.compare REF CAND`: a CI gate on throughput that knows run-to-run noise.

Reads finished runs (never re-runs anything), as segperf.report does, and decides with the
report's own rule (segperf.report.decide / segperf.perf.decision): see segperf.compare.cli.
"""
