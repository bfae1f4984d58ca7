"""A folder of a user's own photos, one folder per class (`data=imagefolder`, ResNet-18).

Kept import-free so `python -m segperf.data.imagefolder.builtin` does not pull in torch and Lightning.
"""

from segperf.data import lazy_exports

__getattr__ = lazy_exports(__name__, {"ImageFolderDataModule": "segperf.data.imagefolder.datamodule"})
