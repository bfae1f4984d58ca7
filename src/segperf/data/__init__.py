"""Carvana data: layout and split (`layout`), decoding (`dataset`), the DataModule
(`datamodule`), prefetching (`prefetch`) and the built-in generator (`synthetic`).

Kept import-free so `python -m segperf.data.synthetic` does not pull in torch and Lightning.
"""
