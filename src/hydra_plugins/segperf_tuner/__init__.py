"""segperf's tuner as Hydra plugins: the sweeper behind `python -m segperf.tune`
(`hydra/sweeper=segperf_tuner`) and the search path that makes `+opt=tuned` find the newest
tune's preset. See segperf_tuner.py and search_path.py."""
