"""segperf's Hydra sweeper (`hydra/sweeper=segperf`, the default of conf/train.yaml): Hydra's basic
sweeper with the repeats interleaved. See segperf_sweeper.py."""
