"""`data.check=decode`: every file decoded fully before training, so that a file whose header and
end marker are fine but whose pixels do not decode (a broken zlib stream in a PNG, a TIFF strip
cut short, a JPEG scan damaged in the middle) is found with all the others, not mid-run.

The decodes run in a pool of processes, one per core the run may use (decoding is CPU work; the
interpreter lock would serialize threads). Each file's verdict (its problem or none, and the
image library's warnings about it) is kept in segperf's cache folder, keyed by the file's path,
size and modification time and by the pixel limit, and written atomically: a second run decodes
only the files that are new or changed since, which makes its check a matter of stat() calls.
"""

from __future__ import annotations

import hashlib
import json
import os
import tempfile
import time
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from segperf.data.imagefiles import UnreadableImage, decode_fully, read_image, stat_of

VERDICTS_FOLDER = "decode-checks"


@dataclass
class DecodeReport:
    problems: dict[Path, tuple[str, str]]  # path -> (reason, kind)
    warnings: dict[Path, list[dict[str, str]]]  # path -> the image library's warnings
    checked: int
    decoded: int  # the others' verdicts came from the cache
    seconds: float
    stats: dict[Path, tuple[int, int]] = field(default_factory=dict)  # (size, mtime_ns) as checked


def _decode_one(item: tuple[str, int]) -> dict[str, Any]:
    """One file's verdict (in a pool process): its (size, mtime_ns) before the decode, so that a
    file rewritten meanwhile is decoded again next time."""
    path, max_pixels = Path(item[0]), item[1]
    try:
        size, mtime_ns = stat_of(path)
    except OSError as error:
        reason = "missing" if isinstance(error, FileNotFoundError) else f"unreadable ({error.strerror or error})"
        return {"path": str(path), "size": -1, "mtime_ns": -1, "reason": reason, "kind": "unreadable", "warnings": []}
    verdict = {"path": str(path), "size": size, "mtime_ns": mtime_ns, "reason": None, "kind": None}
    try:
        _, caught = read_image(path, decode_fully, max_pixels)
    except UnreadableImage as error:
        kind = {"corrupt": "undecodable", "too large": "too large"}.get(error.kind, "unreadable")
        reason = f"pixels do not decode ({error.reason})" if kind == "undecodable" else error.reason
        return {**verdict, "reason": reason, "kind": kind, "warnings": error.caught}
    return {**verdict, "warnings": caught}


def verdicts_file(cache_dir: Path, root: Path, max_pixels: int) -> Path:
    key = hashlib.sha256(json.dumps([str(Path(root).resolve()), max_pixels]).encode()).hexdigest()[:16]
    return Path(cache_dir) / VERDICTS_FOLDER / f"{key}.json"


def _load(path: Path) -> dict[str, dict[str, Any]]:
    try:
        return json.loads(path.read_text())
    except (OSError, ValueError):  # none yet, or unreadable: decode everything
        return {}


def _save(path: Path, verdicts: dict[str, dict[str, Any]]) -> None:
    """Atomically (a temp file renamed over it); a cache folder that cannot be written costs
    only the next run's speed, never this run."""
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.")
        with os.fdopen(fd, "w") as f:
            json.dump(verdicts, f)
        os.replace(tmp, path)
    except OSError:
        pass


def decode_check(
    paths: list[Path], root: Path, max_pixels: int, cache_dir: Path | None, workers: int = 1
) -> DecodeReport:
    """Decode every file of `paths` not already judged (same path, size and mtime) in the verdict
    cache under `cache_dir` (None: no cache), `workers` processes at a time."""
    start = time.perf_counter()
    store = verdicts_file(cache_dir, root, max_pixels) if cache_dir is not None else None
    cached = _load(store) if store is not None else {}
    verdicts: dict[str, dict[str, Any]] = {}
    todo: list[str] = []
    for path in paths:
        old = cached.get(str(path))
        try:
            now = stat_of(path)
        except OSError:
            now = None
        if old is not None and now is not None and (old["size"], old["mtime_ns"]) == now:
            verdicts[str(path)] = old
        else:
            todo.append(str(path))
    items = [(p, max_pixels) for p in todo]
    if workers > 1 and len(items) > 1:
        with ProcessPoolExecutor(max_workers=min(workers, len(items))) as pool:
            fresh = list(pool.map(_decode_one, items, chunksize=max(1, len(items) // (workers * 8))))
    else:
        fresh = [_decode_one(item) for item in items]
    verdicts |= {v["path"]: v for v in fresh}
    if store is not None and fresh:
        _save(store, cached | {p: v for p, v in verdicts.items() if v["size"] >= 0})
    report = DecodeReport({}, {}, len(paths), len(todo), 0.0)
    for path in paths:
        verdict = verdicts[str(path)]
        if verdict["reason"] is not None:
            report.problems[path] = (verdict["reason"], verdict["kind"])
        if verdict["warnings"]:
            report.warnings[path] = verdict["warnings"]
        if verdict["size"] >= 0:
            report.stats[path] = (verdict["size"], verdict["mtime_ns"])
    report.seconds = time.perf_counter() - start
    return report
