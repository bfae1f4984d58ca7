"""Opening an image file the way a real photo library needs: every image workload's decode and
check goes through `read_image`, which

- refuses an image larger than `max_pixels` (data.max_image_pixels) from its header, before a
  byte of pixels is decoded: a 100k x 100k PNG would otherwise take 30 GB in a DataLoader worker;
- catches the image library's warnings (a TIFF tag larger than the file, an invalid APNG,
  DecompressionBombWarning, ...) per file and returns them with the file, so that they reach
  results.json and one console line instead of the console raw;
- turns whatever the decoder raises (OSError, SyntaxError, ValueError, EOFError, zlib.error,
  struct.error, DecompressionBombError) into one `UnreadableImage` with a reason in words.

Animated GIFs and APNGs and multi-page TIFFs are read at their first frame: PIL opens every one
of them there, and nothing here seeks.

`warnings.catch_warnings` swaps the interpreter's warning filters, which is not thread-safe: the
catch is taken under a lock, so the header check's threads and the prefetch thread take turns
(a header read is a few microseconds; a worker process has only one thread that decodes).
"""

from __future__ import annotations

import os
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
    header), and the image library's warnings about the file; `expected` is the file's (size,
    mtime_ns) when it was checked. Raises UnreadableImage with the reason."""
    try:
        if expected is not None and stat_of(path) != tuple(expected):
            raise UnreadableImage("changed since the check (a folder still syncing?)", "changed")
    except FileNotFoundError:
        raise UnreadableImage(MISSING, "missing") from None
    except OSError as error:
        raise UnreadableImage(f"unreadable ({error.strerror or error})", "unreadable") from None
    allow_pixels(max_pixels)
    with caught_warnings() as caught:
        try:
            with Image.open(path) as im:
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
            raise UnreadableImage(str(error).strip() or type(error).__name__, "corrupt", caught) from None


def decode_fully(im: Image.Image) -> tuple[int, int]:
    """Every pixel of the first frame decoded (what `data.check=decode` does to each file)."""
    im.load()
    return im.size
