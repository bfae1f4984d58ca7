"""A fast up-front check of every sample, before any training (real data sets are dirty).

With `data.check=header` (the default) nothing is decoded: each JPEG and GIF is opened lazily with
PIL for its header (format and size; one larger than data.max_image_pixels is refused here), and
the last bytes of each file are read for its end marker, which is what catches truncated
downloads. So the check costs a few small reads per file, not a decode, and runs in seconds on the
5,088 full-size Carvana images. `data.check=decode` then decodes every image and mask that passed,
on all cores, with verdicts cached (segperf.data.decodecheck). The image library's warnings are
caught per file (segperf.data.imagefiles) and kept in the report.

    report = check_layout(scan_layout(root), workers=2)
    samples, skipped = apply_policy(report.samples, report, policy="raise")  # or "skip"

Every problem is found in the one pass, whatever its kind — images without a mask (and masks
without an image) from the layout, truncated, corrupt, empty, unreadable files and image/mask
size mismatches from the files — so that the first error lists them all, grouped by kind.
"""

from __future__ import annotations

import os
import time
import warnings
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from PIL import Image

from segperf.data.carvana.layout import MASK_RE, Layout, Sample
from segperf.data.decodecheck import decode_check
from segperf.data.filechecks import BAD_FILES, WHOLE_LIST, BadDataError, check_each, tail
from segperf.data.imagefiles import DEFAULT_MAX_PIXELS, allow_pixels, caught_warnings, too_large

JPEG_SOI, JPEG_EOI = b"\xff\xd8", b"\xff\xd9"
GIF_MAGIC, GIF_TRAILER = b"GIF8", b"\x3b"


# the kinds of problem, in the order an error lists them, and how a count of each reads
KINDS = {
    "truncated": "truncated",
    "corrupt": "corrupt",
    "undecodable": "undecodable",
    "too large": "too large",
    "empty": "empty",
    "unreadable": "unreadable",
    "size mismatch": "image/mask size mismatch",
    "no mask": "without a mask",
}
NO_IMAGE_REASON = "mask without an image (not used)"


@dataclass
class BadSample:
    path: Path
    reason: str
    kind: str = "corrupt"  # one of KINDS
    image: Path | None = None  # the image of the sample it spoils (what `skip` leaves out)


@dataclass
class CheckReport:
    checked: int
    bad: list[BadSample]
    seconds: float
    orphan_masks: list[Path] = field(default_factory=list)  # masks without an image: a warning, not fatal
    root: Path | None = None  # the data set folder, for messages
    samples: list[Sample] = field(default_factory=list)  # the images with a mask, checked or not
    warnings: dict[Path, list[dict[str, str]]] = field(default_factory=dict)  # the image library's, per file
    decoded: int | None = None  # data.check=decode: files decoded now (the others' verdicts were cached)

    @property
    def bad_images(self) -> set[Path]:
        return {b.image or b.path for b in self.bad}

    def counts(self) -> str:
        """'1 truncated, 2 without a mask': the problems by kind, in KINDS' order."""
        found = [(sum(b.kind == kind for b in self.bad), words) for kind, words in KINDS.items()]
        return ", ".join(f"{n} {words}" for n, words in found if n)

    def listed(self) -> list[dict[str, str]]:
        """Every bad file as `{"path", "reason", "kind"}`, sorted by path: results.json's
        dataset.skipped under `skip`, and the error's whole list (dataset.bad_files) under `raise`."""
        return [{"path": str(b.path), "reason": b.reason, "kind": b.kind} for b in self.bad]


def _starts_but_not_ends(path: Path, size: int, magic: bytes, end: bytes) -> bool:
    """A file with the format's opening bytes but not its end marker: a cut-off download."""
    try:
        with open(path, "rb") as f:
            head = f.read(len(magic))
        return head == magic and not tail(path, size).endswith(end)
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


def _check_file(
    path: Path, kind: FileKind, max_pixels: int = DEFAULT_MAX_PIXELS, warned: dict | None = None
) -> tuple[str | None, str, tuple[int, int] | None]:
    """(reason or None, kind of problem, size or None) of one file, from its header and its last
    bytes only; the image library's warnings about it go into `warned`."""
    with caught_warnings() as caught:
        found = _check_header(path, kind, max_pixels)
    if caught and warned is not None:
        warned[path] = caught
    return found


def _check_header(path: Path, kind: FileKind, max_pixels: int) -> tuple[str | None, str, tuple[int, int] | None]:
    try:
        size = os.path.getsize(path)
    except OSError as error:
        return f"unreadable {kind.noun} ({error.strerror or error})", "unreadable", None
    if size == 0:
        return "empty file (0 bytes)", "empty", None
    try:
        with Image.open(path) as im:
            fmt, dims = im.format, im.size
    except Image.DecompressionBombError as error:
        return f"too large: {error}", "too large", None
    except PermissionError as error:
        return f"unreadable {kind.noun} ({error.strerror or error})", "unreadable", None
    except Exception as error:  # PIL raises UnidentifiedImageError, SyntaxError, struct.error, ...
        if _starts_but_not_ends(path, size, kind.magic, kind.end):
            return f"{kind.truncated}; header unreadable)", "truncated", None
        return f"unreadable or corrupt {kind.noun} ({type(error).__name__}: {error})", "corrupt", None
    if fmt != kind.format:
        return f"{kind.wrong_format} (PIL reads it as {fmt})", "corrupt", None
    if reason := too_large(*dims, max_pixels):  # from the header: nothing decoded
        return reason, "too large", None
    try:
        if not tail(path, size).endswith(kind.end):
            return f"{kind.truncated})", "truncated", dims
    except OSError as error:
        return f"unreadable {kind.noun} ({error.strerror or error})", "unreadable", None
    return None, "", dims


def _check_one(
    sample: Sample | tuple[Path, Path], max_pixels: int = DEFAULT_MAX_PIXELS, warned: dict | None = None
) -> list[BadSample]:
    """A sample's problems; an (image, expected mask) pair is an image without its mask."""
    if isinstance(sample, tuple):
        image, mask = sample
        reason, kind, _ = _check_file(image, JPEG_IMAGE, max_pixels, warned)
        found = [BadSample(image, f"no mask ({mask} is missing)", "no mask", image)]
        return found + ([BadSample(image, reason, kind, image)] if reason else [])
    bad: list[BadSample] = []
    image_reason, image_kind, image_size = _check_file(sample.image, JPEG_IMAGE, max_pixels, warned)
    mask_reason, mask_kind, mask_size = _check_file(sample.mask, GIF_MASK, max_pixels, warned)
    if image_reason:
        bad.append(BadSample(sample.image, image_reason, image_kind, sample.image))
    if mask_reason:
        bad.append(BadSample(sample.mask, mask_reason, mask_kind, sample.image))
    if not bad and image_size != mask_size:
        (iw, ih), (mw, mh) = image_size, mask_size
        reason = f"size mismatch: image {iw}x{ih} but mask {mw}x{mh}"
        bad.append(BadSample(sample.mask, reason, "size mismatch", sample.image))
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


def check_samples(
    samples: list[Sample],
    workers: int = 1,
    no_mask: Iterable[tuple[Path, Path]] = (),
    orphan_masks: list[Path] | None = None,
    root: Path | None = None,
    check: str = "header",
    max_pixels: int = DEFAULT_MAX_PIXELS,
    cache_dir: Path | None = None,
    decoders: int = 1,
) -> CheckReport:
    """Check every sample's image and mask without decoding them, and the images of `no_mask`
    (image, expected mask) pairs; with `check="decode"` also decode every file that passed (in
    `decoders` processes, verdicts cached under `cache_dir`). `bad` is sorted by path. Masks
    without an image are found in the samples' mask folders unless given."""
    start = time.perf_counter()
    allow_pixels(max_pixels)
    items: list[Sample | tuple[Path, Path]] = [*samples, *no_mask]
    warned: dict[Path, list[dict[str, str]]] = {}  # each thread adds its own files' entries
    results = check_each(lambda item: _check_one(item, max_pixels, warned), items, workers)
    found = [b for r in results for b in r]
    decoded = None
    if check == "decode":
        found_in = {b.image or b.path for b in found}
        passed = [s for s in samples if s.image not in found_in]
        files = [p for s in passed for p in (s.image, s.mask)]
        decodes = decode_check(files, root or _root(samples) or Path("."), max_pixels, cache_dir, decoders)
        image_of = {p: s.image for s in passed for p in (s.image, s.mask)}
        found += [BadSample(p, reason, kind, image_of[p]) for p, (reason, kind) in decodes.problems.items()]
        warned |= decodes.warnings
        decoded = decodes.decoded
    bad = sorted(found, key=lambda b: (str(b.path), list(KINDS).index(b.kind)))
    return CheckReport(
        checked=len(items),
        bad=bad,
        seconds=time.perf_counter() - start,
        orphan_masks=_orphan_masks(samples) if orphan_masks is None else list(orphan_masks),
        root=root or _root(samples),
        samples=list(samples),
        warnings=warned,
        decoded=decoded,
    )


def check_layout(layout: Layout, workers: int = 1, **check: Any) -> CheckReport:
    """Every problem of a data folder in one pass: its layout's (an image without a mask, a mask
    without an image) and every file's; `check`: check_samples' check, max_pixels, cache_dir, decoders."""
    return check_samples(layout.samples, workers, layout.no_mask, layout.no_image, layout.root, **check)


def _first(items: list[str], limit: int) -> str:
    more = f"; and {len(items) - limit} more ({WHOLE_LIST})" if len(items) > limit else ""
    return "; ".join(items[:limit]) + more


def format_bad(report: CheckReport, limit: int = 5) -> str:
    """A headline with the counts by kind and the two ways out, then one line per kind naming
    its first `limit` files with their reasons (and how many more)."""
    n = len(report.bad_images)
    where = f" in {report.root}" if report.root is not None else ""
    noun = "sample" if n == 1 else "samples"
    lines = [
        f"{n} bad {noun}{where}: {report.counts()}. "
        "Fix or remove them, or set data.on_bad_sample=skip to leave them out."
    ]
    for kind, words in KINDS.items():
        found = [f"{b.path}: {b.reason}" for b in report.bad if b.kind == kind]
        if found:
            lines.append(f"- {words} ({len(found)}): {_first(found, limit)}")
    if report.orphan_masks:
        orphans = [str(p) for p in report.orphan_masks]
        lines.append(f"- mask without an image ({len(orphans)}; not used, not an error): {_first(orphans, limit)}")
    return "\n".join(lines)


def apply_policy(samples: list[Sample], report: CheckReport, policy: str = "raise") -> tuple[list[Sample], list[dict]]:
    """`raise`: BadDataError listing every problem if anything is bad. `skip`: leave out every
    sample with a problem of any kind, with one warning that counts them.

    Returns the samples to use and the files left out as `{"path", "reason", "kind"}` dicts (for
    results.json's dataset.skipped); masks without an image are among them (they are never used),
    whatever the policy. The policy arrives checked (segperf.schema's OnBadSample enum).
    """
    orphans = [{"path": str(p), "reason": NO_IMAGE_REASON, "kind": "no image"} for p in report.orphan_masks]
    where = f" in {report.root}" if report.root is not None else ""
    if not report.bad:
        if orphans:
            warnings.warn(
                f"{len(orphans)} mask(s) without an image{where}, not used (listed in results.json, "
                f"dataset.skipped); first: {orphans[0]['path']}",
                stacklevel=2,
            )
        return list(samples), orphans
    if policy == "raise":
        raise BadDataError(format_bad(report), report.listed())
    bad_images = report.bad_images
    kept = [s for s in samples if s.image not in bad_images]
    skipped = report.listed() + orphans
    total = report.checked
    if not kept:
        raise BadDataError(f"data.on_bad_sample=skip leaves no sample to use{where}.\n{format_bad(report)}", skipped)
    also = f"; and {len(orphans)} mask(s) without an image, not used" if orphans else ""
    warnings.warn(
        f"data.on_bad_sample=skip: left out {total - len(kept)} of {total} samples{where} ({report.counts()}){also}; "
        f"each is listed with its reason in results.json (dataset.skipped), its path in {BAD_FILES} in the run "
        f"folder. First: {report.bad[0].path}: "
        f"{report.bad[0].reason}",
        stacklevel=2,
    )
    return kept, skipped
