"""The data sources, one subpackage each (`carvana`, `imagefolder`, `mnist`), beside what they
share: the base DataModule (`base`), the decoded-sample cache (`cache`), cold reads (`cold`),
the prefetch thread (`prefetch`), resumable loading (`resumable`) and built-in data folders
(`folders`).

Kept import-free so `python -m segperf.data.carvana.synthetic` does not pull in torch and Lightning.
"""
