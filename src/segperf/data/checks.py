"""A fast up-front check of every sample, before any training (real data sets are dirty).

Nothing is decoded: each JPEG and GIF is opened lazily with PIL for its header (format and size),
and the last bytes of each file are read for its end marker, which is what catches truncated
downloads. So the check costs a few small reads per file, not a decode, and runs in seconds on the
5,088 full-size Carvana images.

    report = check_samples(samples, workers=2)
    samples, skipped = apply_policy(samples, report, policy="raise")  # or "skip"
"""

from __future__ import annotations

import os
import time
import warnings
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path

from PIL import Image

from segperf.data.layout import MASK_RE, Sample
from segperf.errors import SegperfError

_TAIL_BYTES = 64
_PADDING = b"\x00 \t\r\n"  # some writers pad a file after its end marker
JPEG_SOI, JPEG_EOI = b"\xff\xd8", b"\xff\xd9"
GIF_MAGIC, GIF_TRAILER = b"GIF8", b"\x3b"


class BadDataError(SegperfError, ValueError):
    """Samples that cannot be read; the message names them and the two ways out."""


@dataclass
class BadSample:
    path: Path
    reason: str


@dataclass
class CheckReport:
    checked: int
    bad: list[BadSample]
    seconds: float
    orphan_masks: list[Path] = field(default_factory=list)  # masks without an image: a warning, not fatal
    root: Path | None = None  # the data set folder, for messages

    @property
    def bad_paths(self) -> set[Path]:
        return {b.path for b in self.bad}


def _tail(path: Path, size: int) -> bytes:
    with open(path, "rb") as f:
        f.seek(max(0, size - _TAIL_BYTES))
        return f.read().rstrip(_PADDING)


def _starts_but_not_ends(path: Path, size: int, magic: bytes, end: bytes) -> bool:
    """A file with the format's opening bytes but not its end marker: a cut-off download."""
    try:
        with open(path, "rb") as f:
            head = f.read(len(magic))
        return head == magic and not _tail(path, size).endswith(end)
    except OSError:
        return False


@dataclass(frozen=True)
class FileKind:
    """What one kind of file must look like, and how its problems are worded."""

    noun: str  # "image" / "mask"
    format: str  # PIL's format name
    magic: bytes  # first bytes
    end: bytes  # end marker: missing means the file was cut off
    truncated: str  # reason text, without the closing parenthesis
    wrong_format: str  # reason text before "(PIL reads it as ...)"


JPEG_IMAGE = FileKind("image", "JPEG", JPEG_SOI, JPEG_EOI, "truncated JPEG (no end-of-image marker", "not a JPEG")
GIF_MASK = FileKind("mask", "GIF", GIF_MAGIC, GIF_TRAILER, "truncated GIF mask (no trailer byte", "mask is not a GIF")


def _check_file(path: Path, kind: FileKind) -> tuple[str | None, tuple[int, int] | None]:
    """(reason or None, size or None) of one file, from its header and its last bytes only."""
    try:
        size = os.path.getsize(path)
    except OSError as error:
        return f"unreadable {kind.noun} ({error.strerror or error})", None
    if size == 0:
        return "empty file (0 bytes)", None
    try:
        with Image.open(path) as im:
            fmt, dims = im.format, im.size
    except Exception as error:  # PIL raises UnidentifiedImageError, SyntaxError, struct.error, ...
        if _starts_but_not_ends(path, size, kind.magic, kind.end):
            return f"{kind.truncated}; header unreadable)", None
        return f"unreadable or corrupt {kind.noun} ({type(error).__name__}: {error})", None
    if fmt != kind.format:
        return f"{kind.wrong_format} (PIL reads it as {fmt})", None
    try:
        if not _tail(path, size).endswith(kind.end):
            return f"{kind.truncated})", dims
    except OSError as error:
        return f"unreadable {kind.noun} ({error.strerror or error})", None
    return None, dims


def _check_one(sample: Sample) -> list[BadSample]:
    bad: list[BadSample] = []
    image_reason, image_size = _check_file(sample.image, JPEG_IMAGE)
    mask_reason, mask_size = _check_file(sample.mask, GIF_MASK)
    if image_reason:
        bad.append(BadSample(sample.image, image_reason))
    if mask_reason:
        bad.append(BadSample(sample.mask, mask_reason))
    if not bad and image_size != mask_size:
        (iw, ih), (mw, mh) = image_size, mask_size
        bad.append(BadSample(sample.mask, f"size mismatch: image {iw}x{ih} but mask {mw}x{mh}"))
    return bad


def _orphan_masks(samples: list[Sample]) -> list[Path]:
    """Masks in the samples' mask folders that no sample uses (find_samples pairs every image with its mask)."""
    used = {s.mask for s in samples}
    orphans: list[Path] = []
    for folder in sorted({s.mask.parent for s in samples}):
        orphans += [p for p in folder.iterdir() if MASK_RE.match(p.name) and p not in used and p.is_file()]
    return sorted(orphans)


def _root(samples: list[Sample]) -> Path | None:
    roots = {s.image.parent.parent for s in samples}
    return roots.pop() if len(roots) == 1 else None


def check_samples(samples: list[Sample], workers: int = 1) -> CheckReport:
    """Check every sample's image and mask without decoding them; `bad` is sorted by path."""
    start = time.perf_counter()
    if workers > 1 and len(samples) > 1:
        with ThreadPoolExecutor(max_workers=workers, thread_name_prefix="segperf-check") as pool:
            results = list(pool.map(_check_one, samples))
    else:
        results = [_check_one(s) for s in samples]
    bad = sorted((b for r in results for b in r), key=lambda b: str(b.path))
    orphans = _orphan_masks(samples)
    return CheckReport(
        checked=len(samples),
        bad=bad,
        seconds=time.perf_counter() - start,
        orphan_masks=orphans,
        root=_root(samples),
    )


def format_bad(report: CheckReport, limit: int = 5) -> str:
    """One paragraph naming the first `limit` bad files with their reasons, and the two ways out."""
    n = len(report.bad)
    where = f" in {report.root}" if report.root is not None else ""
    shown = report.bad[:limit]
    listing = "; ".join(f"{b.path}: {b.reason}" for b in shown)
    more = f"; and {n - limit} more" if n > limit else ""
    noun = "sample" if n == 1 else "samples"
    return (
        f"{n} bad {noun}{where} (first {len(shown)}): {listing}{more}. "
        "Fix or remove them, or set data.on_bad_sample=skip to leave them out."
    )


def apply_policy(samples: list[Sample], report: CheckReport, policy: str = "raise") -> tuple[list[Sample], list[dict]]:
    """`raise`: BadDataError if anything is bad. `skip`: drop every sample with a bad image or mask.

    Returns the samples to use and the skipped files as `{"path", "reason"}` dicts (for results.json).
    The policy arrives checked (segperf.schema's OnBadSample enum).
    """
    if not report.bad:
        return list(samples), []
    if policy == "raise":
        raise BadDataError(format_bad(report))
    bad_paths = report.bad_paths
    kept = [s for s in samples if s.image not in bad_paths and s.mask not in bad_paths]
    skipped = [{"path": str(b.path), "reason": b.reason} for b in report.bad]
    n_dropped = len(samples) - len(kept)
    warnings.warn(
        f"data.on_bad_sample=skip: left out {n_dropped} of {len(samples)} samples with a bad image or mask "
        f"({len(report.bad)} bad files; first: {report.bad[0].path}: {report.bad[0].reason}).",
        stacklevel=2,
    )
    return kept, skipped
