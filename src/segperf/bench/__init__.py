"""Benchmarks of one part of the pipeline in isolation: `python -m segperf.bench <what>`.

`data`: the input pipeline alone, no model (segperf.bench.loader).
"""
