"""Benchmarks of one part of the pipeline in isolation: `python -m segperf.bench <what> [overrides]`.

`data`: the input pipeline alone, no model (command line: segperf.bench.cli, config:
conf/bench.yaml, timed loops: segperf.bench.loader, what it prints: segperf.bench.table).
"""
