"""A folder of a user's own photos, one folder per class (`data=imagefolder`, ResNet-18).

Kept import-free so `python -m segperf.data.imagefolder.builtin` does not pull in torch and Lightning.
"""
