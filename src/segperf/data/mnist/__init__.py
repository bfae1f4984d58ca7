"""MNIST's IDX files or the built-in digits (`data=mnist`), the CPU study's workload.

Kept import-free so `python -m segperf.data.mnist.digits` does not pull in torch and Lightning.
"""
