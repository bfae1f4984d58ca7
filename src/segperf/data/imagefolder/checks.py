"""The up-front check of an image folder, before any training, with Carvana's rules
(segperf.data.carvana.checks; both share segperf.data.filechecks): every problem found in one
pass and listed together, then either stop (`data.on_bad_sample=raise`) or leave the bad parts
out and record them (`skip`).

`data.check=header` (the default) decodes nothing: each image is opened lazily by PIL for its
header (is it an image at all, which format, which size: one larger than data.max_image_pixels is
refused here, before anything decodes it), and for the formats that have one, the end of the file
is read for its end marker (JPEG's end-of-image, PNG's IEND chunk, GIF's trailer), which is what
catches a download cut short. A few small reads per file, so thousands of images take seconds.
`data.check=decode` then decodes every file that passed, in parallel processes, with its verdict
cached (segperf.data.decodecheck): it finds the files whose pixels do not decode behind a good
header, which the quick check cannot see. The image library's warnings are caught per file
(segperf.data.imagefiles) and kept in the report, for results.json.

The problems, in the order an error lists them:

- of a file: `truncated`, `corrupt` (starts like an image, PIL cannot read its header),
  `undecodable` (its pixels do not decode: data.check=decode), `too large` (more pixels than
  data.max_image_pixels), `not an image` (an image extension on something else: a text file, an
  HTML error page), `empty` (0 bytes), `unreadable` (no permission, an I/O error);
- of a folder: `empty class` (a class folder without images), `no training class` (a class in
  val/ only), `single class` (fewer than two classes: nothing to classify).

`skip` leaves out the bad files and the empty class folders (which are not classes then), and
records each in results.json's dataset.skipped; fewer than two classes cannot be skipped.
"""

from __future__ import annotations

import os
import time
import warnings
from dataclasses import dataclass, field
from pathlib import Path

from PIL import Image

from segperf.data.decodecheck import decode_check
from segperf.data.filechecks import BAD_FILES, WHOLE_LIST, BadDataError, check_each, tail
from segperf.data.imagefiles import DEFAULT_MAX_PIXELS, allow_pixels, caught_warnings, too_large
from segperf.data.imagefolder.layout import FolderLayout, ImageSample

# PIL's format name -> (first bytes, end marker): a file with the first but not the second was cut off
END_MARKERS = {
    "JPEG": (b"\xff\xd8", b"\xff\xd9"),
    "PNG": (b"\x89PNG\r\n\x1a\n", b"IEND\xaeB`\x82"),
    "GIF": (b"GIF8", b"\x3b"),
}
# the kinds of problem in the order an error lists them, how a count of each reads, and what to do
KINDS = {
    "truncated": ("truncated", "replace the file (a download cut short?) or remove it"),
    "corrupt": ("corrupt", "replace the file or remove it"),
    "undecodable": ("undecodable", "replace the file or remove it"),
    "too large": ("too large", "remove it, or raise data.max_image_pixels if it is a real image"),
    "not an image": ("not an image", "remove it, or give it a name without an image extension"),
    "empty": ("empty", "replace the file or remove it"),
    "unreadable": ("unreadable", "make it readable or remove it"),
    "empty class": ("empty class folder", None),
    "no training class": ("class without training images", None),
    "single class": ("fewer than two classes", None),
}
FOLDER_KINDS = ("empty class", "no training class", "single class")
SHOWN_PER_KIND = 10


@dataclass(frozen=True)
class Problem:
    path: Path
    reason: str
    kind: str  # one of KINDS


@dataclass
class FolderReport:
    root: Path
    checked: int
    problems: list[Problem]
    seconds: float
    layout: FolderLayout | None = None
    samples: list[ImageSample] = field(default_factory=list)
    # the image library's warnings, per file ({"kind", "message"} each)
    warnings: dict[Path, list[dict[str, str]]] = field(default_factory=dict)
    decoded: int | None = None  # data.check=decode: files decoded now (the others' verdicts were cached)

    @property
    def bad_files(self) -> set[Path]:
        return {p.path for p in self.problems if p.kind not in FOLDER_KINDS}

    def listed(self) -> list[dict[str, str]]:
        """Every problem as `{"path", "reason", "kind"}`, in the order an error lists them: results.json's
        dataset.skipped under `skip`, and the error's whole list (dataset.bad_files) under `raise`."""
        return [{"path": str(p.path), "reason": p.reason, "kind": p.kind} for p in self.problems]

    def counts(self) -> str:
        """'2 truncated, 1 empty class folder': the problems by kind, in KINDS' order."""
        found = [(sum(p.kind == kind for p in self.problems), words) for kind, (words, _) in KINDS.items()]
        return ", ".join(f"{n} {words}" for n, words in found if n)


def _head(path: Path, n: int = 16) -> bytes:
    with open(path, "rb") as f:
        return f.read(n)


def check_image(path: Path, max_pixels: int = DEFAULT_MAX_PIXELS) -> Problem | None:
    """The problem of one image file, from its header and its last bytes only; None when fine."""
    return check_image_warned(path, max_pixels)[0]


def check_image_warned(path: Path, max_pixels: int = DEFAULT_MAX_PIXELS) -> tuple[Problem | None, list[dict]]:
    """check_image's answer, and the image library's warnings about the file."""
    with caught_warnings() as caught:
        problem = _check_image(path, max_pixels)
    return problem, caught


def _check_image(path: Path, max_pixels: int) -> Problem | None:
    try:
        size = os.path.getsize(path)
        if size == 0:
            return Problem(path, "empty file (0 bytes)", "empty")
        head = _head(path)
    except OSError as error:
        return Problem(path, f"unreadable ({error.strerror or error})", "unreadable")
    starts_like = next((fmt for fmt, (magic, _) in END_MARKERS.items() if head.startswith(magic)), None)
    try:
        with Image.open(path) as im:
            fmt, width, height = im.format, *im.size
    except Image.DecompressionBombError as error:
        return Problem(path, f"too large: {error}", "too large")
    except PermissionError as error:
        return Problem(path, f"unreadable ({error.strerror or error})", "unreadable")
    except Exception as error:  # PIL raises UnidentifiedImageError, SyntaxError, struct.error, ...
        if starts_like is None:
            return Problem(
                path, f"not an image (PIL cannot identify it) despite its {path.suffix} name", "not an image"
            )
        try:
            cut = not tail(path, size).endswith(END_MARKERS[starts_like][1])
        except OSError:
            cut = False
        if cut:
            return Problem(path, f"truncated {starts_like} (header unreadable, no end marker)", "truncated")
        return Problem(path, f"corrupt {starts_like} ({type(error).__name__}: {error})", "corrupt")
    if width < 1 or height < 1:
        return Problem(path, f"corrupt {fmt} (size {width}x{height})", "corrupt")
    if reason := too_large(width, height, max_pixels):  # from the header: nothing decoded
        return Problem(path, reason, "too large")
    if fmt in END_MARKERS:
        try:
            if not tail(path, size).endswith(END_MARKERS[fmt][1]):
                return Problem(path, f"truncated {fmt} (no end marker: the file was cut short)", "truncated")
        except OSError as error:
            return Problem(path, f"unreadable ({error.strerror or error})", "unreadable")
    return None


def check_folder(
    layout: FolderLayout,
    workers: int = 1,
    check: str = "header",
    max_pixels: int = DEFAULT_MAX_PIXELS,
    cache_dir: Path | None = None,
    decoders: int = 1,
) -> FolderReport:
    """Every problem of an image folder in one pass: its folders' (from the layout) and every
    image's (`check`: "header", or "decode" as well, in `decoders` processes with its verdicts
    cached under `cache_dir`); `problems` is sorted by kind, then path."""
    start = time.perf_counter()
    allow_pixels(max_pixels)
    samples = layout.samples
    paths = [s.path for s in samples]
    found = check_each(lambda path: check_image_warned(path, max_pixels), paths, workers)
    problems = [p for p, _ in found if p is not None]
    caught = {path: w for path, (_, w) in zip(paths, found, strict=True) if w}
    decoded = None
    if check == "decode":
        passed = [path for path, (p, _) in zip(paths, found, strict=True) if p is None]
        decodes = decode_check(passed, layout.root, max_pixels, cache_dir, decoders)
        problems += [Problem(path, reason, kind) for path, (reason, kind) in decodes.problems.items()]
        caught |= decodes.warnings
        decoded = decodes.decoded
    problems += [Problem(p.path, p.reason, p.kind) for p in layout.problems]
    problems.sort(key=lambda p: (list(KINDS).index(p.kind) if p.kind in KINDS else len(KINDS), str(p.path)))
    seconds = time.perf_counter() - start
    return FolderReport(layout.root, len(paths), problems, seconds, layout, samples, caught, decoded)


def format_problems(report: FolderReport, limit: int = SHOWN_PER_KIND) -> str:
    """A headline with the counts by kind and the ways out, then one line per problem (the first
    `limit` of each kind, then how many more), each naming its file or folder and what to do."""
    skippable = not any(p.kind == "single class" for p in report.problems)
    n = len(report.problems)
    ways = (
        "Fix them, or set data.on_bad_sample=skip to leave the bad images and empty class folders out."
        if skippable
        else "Fix them (data.on_bad_sample=skip cannot make a second class)."
    )
    lines = [f"{n} problem{'s' if n != 1 else ''} with the image folder {report.root}: {report.counts()}. {ways}"]
    for kind, (_, todo) in KINDS.items():
        found = [p for p in report.problems if p.kind == kind]
        for problem in found[:limit]:
            lines.append(f"- {problem.path}: {problem.reason}" + (f"; {todo}" if todo else ""))
        if len(found) > limit:
            lines.append(f"- ... and {len(found) - limit} more {KINDS[kind][0]} ({WHOLE_LIST})")
    return "\n".join(lines)


def apply_policy(report: FolderReport, policy: str = "raise") -> tuple[list[ImageSample], list[dict[str, str]]]:
    """`raise`: BadDataError listing every problem, if there is one. `skip`: the samples without
    the bad files (empty class folders are not classes anyway), with one warning that counts
    them; and the `{"path", "reason", "kind"}` of each left out, for results.json."""
    samples = list(report.samples)
    if not report.problems:
        return samples, []
    if policy == "raise" or any(p.kind == "single class" for p in report.problems):
        raise BadDataError(format_problems(report), report.listed())
    bad = report.bad_files
    kept = [s for s in samples if s.path not in bad]
    skipped = report.listed()
    if not kept:
        raise BadDataError(
            f"data.on_bad_sample=skip leaves no image to use in {report.root}.\n{format_problems(report)}", skipped
        )
    first = report.problems[0]
    warnings.warn(
        f"data.on_bad_sample=skip: left out {len(samples) - len(kept)} of {len(samples)} images in {report.root} "
        f"({report.counts()}); each is listed with its reason in results.json (dataset.skipped), its path in "
        f"{BAD_FILES} in the run folder. "
        f"First: {first.path}: {first.reason}",
        stacklevel=2,
    )
    return kept, skipped
