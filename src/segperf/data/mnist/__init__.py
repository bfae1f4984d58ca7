"""MNIST's IDX files or the built-in digits (`data=mnist`), the CPU study's workload.

Kept import-free so `python -m segperf.data.mnist.digits` does not pull in torch and Lightning.
"""

from segperf.data import lazy_exports

__getattr__ = lazy_exports(__name__, {"MnistDataModule": "segperf.data.mnist.datamodule"})
