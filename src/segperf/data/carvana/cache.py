"""The key of a Carvana cache (segperf.data.cache): each sample's image and mask file, so a
cache is never served for other files, or for files that changed since it was filled."""

from __future__ import annotations

from pathlib import Path

from segperf.data.cache import cache_key as files_key
from segperf.data.carvana.layout import Sample


def cache_key(root: str | Path, height: int, width: int, decode: str, samples: list[Sample]) -> str:
    return files_key(root, height, width, decode, [p for s in samples for p in (s.image, s.mask)])
