"""Carvana (Kaggle 2017): car photos with their GIF masks, the U-Net's segmentation workload.

Kept import-free so `python -m segperf.data.carvana.synthetic` does not pull in torch and Lightning.
"""

from segperf.data import lazy_exports

__getattr__ = lazy_exports(__name__, {"CarvanaDataModule": "segperf.data.carvana.datamodule"})
