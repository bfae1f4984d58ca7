"""Opening an image file the way a real photo library needs: every image workload's decode and
check goes through `read_image`, which

- refuses an image larger than `max_pixels` (data.max_image_pixels) from its header, before a
  byte of pixels is decoded: a 100k x 100k PNG would otherwise take 30 GB in a DataLoader worker;
- catches the image library's warnings (a TIFF tag larger than the file, an invalid APNG,
  DecompressionBombWarning, ...) per file and returns them with the file, so that they reach
  results.json and one console line instead of the console raw;
- catches what the decoders' C code prints straight to the process's stderr (libtiff's
  "TIFFFillStrip: Read error on strip 0; got 1136 bytes, expected 6022.", "Fax4Decode: Bad code
  word at line 7"), which no Python-level redirect sees: `printed_by_decoder` points fd 2 at a
  file of its own around each decode, and the lines become warnings of the kind "DecoderMessage"
  of that file (and part of its reason when it does not decode);
- turns whatever the decoder raises (OSError, SyntaxError, ValueError, EOFError, zlib.error,
  struct.error, DecompressionBombError) into one `UnreadableImage` with a reason in words.

Animated GIFs and APNGs and multi-page TIFFs are read at their first frame: PIL opens every one
of them there, and nothing here seeks.

`warnings.catch_warnings` swaps the interpreter's warning filters, which is not thread-safe: the
catch is taken under a lock, so the header check's threads and the prefetch thread take turns
(a header read is a few microseconds; a worker process has only one thread that decodes). The
fd 2 redirect is taken under the same lock: one decode at a time points it away.
"""

from __future__ import annotations

import os
import sys
import tempfile
import threading
import warnings
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import TypeVar

from PIL import Image

# PIL's own limit for an error (twice its warning limit, 89.5M pixels): a 13,000 x 13,000 scan passes
DEFAULT_MAX_PIXELS = 2 * 89_478_485
Result = TypeVar("Result")
_CATCH = threading.Lock()
MISSING = "missing: deleted or moved since the check (a folder still syncing?)"
DECODER_MESSAGE = "DecoderMessage"  # the kind of a line a decoder's C code printed, among the warnings
PRINTED_LINES_KEPT = 10  # of one decode (a broken fax scan prints a line per scanline)
PRINTED_BYTES_READ = 64 * 1024
_sink: tuple[int, int] | None = None  # (pid, fd): this process's file for what the decoders print


def _fresh_lock() -> None:  # a process forked while another thread held the lock must not inherit it held
    global _CATCH
    _CATCH = threading.Lock()


os.register_at_fork(after_in_child=_fresh_lock)


class UnreadableImage(Exception):
    """An image file that cannot be used: `reason` in words, `kind` for the counts ("corrupt",
    "too large", "missing", "changed", "unreadable"), and the warnings caught before it failed."""

    def __init__(self, reason: str, kind: str = "corrupt", caught: list[dict[str, str]] | None = None) -> None:
        super().__init__(reason)
        self.reason, self.kind = reason, kind
        self.caught = caught if caught is not None else []  # may be filled as the catch ends


def too_large(width: int, height: int, max_pixels: int) -> str | None:
    """The reason an image of this declared size is refused, or None."""
    if width * height <= max_pixels:
        return None
    return (
        f"too large: {width}x{height} = {width * height / 1e6:,.0f}M pixels declared, more than "
        f"data.max_image_pixels={max_pixels:,} (raise it if the image is real)"
    )


def _sink_fd() -> int:
    """This process's own unlinked temp file for fd 2's redirect (a forked DataLoader worker or
    check process makes its own: an inherited one would share its offset with the parent's)."""
    global _sink
    if _sink is None or _sink[0] != os.getpid():
        fd, name = tempfile.mkstemp(prefix="segperf-decoder-")
        os.unlink(name)
        _sink = (os.getpid(), fd)
    return _sink[1]


@contextmanager
def printed_by_decoder() -> Iterator[list[str]]:
    """The lines C code prints to the process's fd 2 inside the block (libtiff's default handlers
    write there with fprintf: Python's sys.stderr and contextlib.redirect_stderr never see them), in
    the list it gives (filled when the block ends, also by an exception); none on the console.

    fd 2 is pointed at this process's temp file with os.dup2 for the block, then back at whatever
    it was (a terminal, a log, pytest's capfd). Costs 2.9 µs a decode (dup, two dup2, close and
    a seek: `timeit` on a 2-core CPU, 20,000 calls), 0.007% of a 1918x1280 JPEG's 43 ms and 0.8%
    of a 96x96 JPEG's 0.34 ms: cheap enough for every decode, so no format is singled out. Call
    under `_CATCH` (read_image does): fd 2 is the process's, so two threads must not redirect at
    once. Another thread's own stderr writes in the window land here too (none of segperf's write
    there while a decode runs; a DataLoader worker decodes in its only thread)."""
    found: list[str] = []
    try:
        sys.stderr.flush()  # Python's pending text goes where it was meant to, before the switch
    except (AttributeError, ValueError, OSError):
        pass
    try:
        sink, saved = _sink_fd(), os.dup(2)
    except OSError:  # no fd 2 (a daemon), or no temp folder: nothing to catch, or nowhere to put it
        yield found
        return
    os.dup2(sink, 2)
    try:
        yield found
    finally:
        os.dup2(saved, 2)
        os.close(saved)
        if size := os.lseek(sink, 0, os.SEEK_CUR):  # fd 2 shared the sink's offset: what was written
            text = os.pread(sink, min(size, PRINTED_BYTES_READ), 0).decode(errors="replace")
            os.ftruncate(sink, 0)
            os.lseek(sink, 0, os.SEEK_SET)
            lines = [line.strip() for line in text.splitlines() if line.strip()]
            more = len(lines) - PRINTED_LINES_KEPT
            found += lines[:PRINTED_LINES_KEPT] + ([f"... and {more} more lines"] if more > 0 else [])


def _caught(records: list[warnings.WarningMessage]) -> list[dict[str, str]]:
    return [{"kind": r.category.__name__, "message": str(r.message)} for r in records]


@contextmanager
def caught_warnings() -> Iterator[list[dict[str, str]]]:
    """The image library's warnings inside the block, as `{"kind", "message"}` in the list it
    gives (filled when the block ends, also by an exception), and none of them on the console."""
    found: list[dict[str, str]] = []
    with _CATCH, warnings.catch_warnings(record=True) as records:
        warnings.simplefilter("always")
        try:
            yield found
        finally:
            found.extend(_caught(records))


def allow_pixels(max_pixels: int) -> None:
    """PIL warns beyond its own limit and raises DecompressionBombError beyond twice it, at open:
    the setting decides instead. segperf checks every declared size itself (`too_large`, right
    after the header is read, before any pixel is decoded), with words that name the setting."""
    Image.MAX_IMAGE_PIXELS = None


def stat_of(path: Path) -> tuple[int, int]:
    """(size, mtime_ns): what tells a file changed since it was checked."""
    st = os.stat(path)
    return st.st_size, st.st_mtime_ns


def read_image(
    path: Path,
    prepare: Callable[[Image.Image], Result],
    max_pixels: int = DEFAULT_MAX_PIXELS,
    expected: tuple[int, int] | None = None,
) -> tuple[Result, list[dict[str, str]]]:
    """`prepare(image)` of the file's first frame (it decodes, converts, resizes, or only reads the
    header), and the image library's warnings about the file, what its C decoders printed among
    them; `expected` is the file's (size, mtime_ns) when it was checked. Raises UnreadableImage
    with the reason (with what the decoder printed: PIL's own words for libtiff's failures are
    "decoder error -2")."""
    try:
        if expected is not None and stat_of(path) != tuple(expected):
            raise UnreadableImage("changed since the check (a folder still syncing?)", "changed")
    except FileNotFoundError:
        raise UnreadableImage(MISSING, "missing") from None
    except OSError as error:
        raise UnreadableImage(f"unreadable ({error.strerror or error})", "unreadable") from None
    allow_pixels(max_pixels)
    printed: list[str] = []
    with caught_warnings() as caught:
        try:
            with printed_by_decoder() as printed, Image.open(path) as im:
                if reason := too_large(*im.size, max_pixels):
                    raise UnreadableImage(reason, "too large", caught)
                return prepare(im), caught
        except UnreadableImage:
            raise
        except FileNotFoundError:
            raise UnreadableImage(MISSING, "missing", caught) from None
        except PermissionError as error:
            raise UnreadableImage(f"unreadable ({error.strerror or error})", "unreadable", caught) from None
        except Image.DecompressionBombError as error:
            raise UnreadableImage(f"too large: {error}", "too large", caught) from None
        except MemoryError:
            raise UnreadableImage("too large to decode in the memory available", "too large", caught) from None
        except Exception as error:  # OSError, SyntaxError, ValueError, EOFError, zlib.error, struct.error, ...
            reason = str(error).strip() or type(error).__name__
            said = f"; the decoder printed: {' / '.join(printed)}" if printed else ""
            raise UnreadableImage(reason + said, "corrupt", caught) from None
        finally:  # the block has ended (printed is filled): the lines join the file's warnings
            caught.extend({"kind": DECODER_MESSAGE, "message": line} for line in printed)


def decode_fully(im: Image.Image) -> tuple[int, int]:
    """Every pixel of the first frame decoded (what `data.check=decode` does to each file)."""
    im.load()
    return im.size
