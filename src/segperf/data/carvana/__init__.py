"""Carvana (Kaggle 2017): car photos with their GIF masks, the U-Net's segmentation workload.

Kept import-free so `python -m segperf.data.carvana.synthetic` does not pull in torch and Lightning.
"""
