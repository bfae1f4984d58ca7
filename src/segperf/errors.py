"""Errors whose message already says what is wrong and what to do.

The command line prints these as one `segperf: error: ...` block and exits with status 2,
without a traceback: the traceback of a bad setting or a bad file helps nobody.
"""

from __future__ import annotations

import re

# DataLoader re-raises a worker's exception in the main process as
# "Caught <Type> in DataLoader worker process <n>.\nOriginal Traceback (most recent call last): ..."
_WORKER_ERROR = re.compile(r"^Caught (\w+) in DataLoader worker process (\d+)\.", re.MULTILINE)


class SegperfError(Exception):
    """Base of the errors shown to the user as they are (no traceback)."""


class DataLayoutError(SegperfError, FileNotFoundError):
    """`data.root` is missing, empty or not in Kaggle's layout."""


class DataSizeError(SegperfError, ValueError):
    """The run asks for more samples than the data has."""


def explain(error: BaseException) -> str:
    """One message for a user: the error itself for segperf's own errors, the worker's last
    traceback line (which names the file) for an error raised inside a DataLoader worker."""
    text = str(error)
    match = _WORKER_ERROR.search(text)
    if match:
        last = text.rstrip().splitlines()[-1]
        # "segperf.data.dataset.SomeError: could not decode ..." -> "could not decode ..."
        message = re.sub(r"^[\w.]+: ", "", last)
        return f"{message} (in DataLoader worker {match.group(2)})"
    return text


def is_worker_error(error: BaseException) -> bool:
    return bool(_WORKER_ERROR.search(str(error)))
