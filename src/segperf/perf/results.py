"""results.json and summary.txt: the run's record, written atomically.

The key names of results.json are a public interface: the report, the tuner and users' scripts read
them, so a key may be added but is changed only together with its readers.
"""

from __future__ import annotations

import json
import os
import tempfile
import traceback
from collections.abc import Callable
from pathlib import Path
from typing import IO, Any

from segperf.errors import WriteError, os_error_in


def write_atomic(path: str | Path, write: Callable[[IO[bytes]], None]) -> Path:
    """Call `write` on a temp file in the same folder, fsync, then rename over the target: a
    reader (or a crash) never sees half a file, and the previous file stays until the rename.

    A write that fails for an OSError (a full disk, a read-only or foreign folder; also when the
    writer, such as torch.save, wraps it in its own error) raises WriteError naming the file,
    its folder and the cause; the temp file is removed first and the previous file is intact."""
    path = Path(path)
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    except OSError as error:
        raise WriteError(path, error) from error
    try:
        with os.fdopen(fd, "wb") as f:
            write(f)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException as error:
        Path(tmp).unlink(missing_ok=True)
        cause = os_error_in(error) if isinstance(error, Exception) else None
        if cause is not None and not isinstance(error, WriteError):
            raise WriteError(path, cause) from error
        raise
    return path


def write_text_atomic(path: str | Path, text: str) -> Path:
    return write_atomic(path, lambda f: f.write(text.encode()))


def write_json_atomic(path: str | Path, data: Any) -> Path:
    return write_text_atomic(path, json.dumps(data, indent=2, sort_keys=False, default=str) + "\n")


def write_record(folder: str | Path, results: dict[str, Any], summary: str) -> Path:
    """A run's record: results.json and summary.txt in `folder`, each atomically (results.json
    first: a reader that finds summary.txt finds the record it summarizes). The one writer of
    both, for PerfMonitor in a user's Trainer and for segperf's own runs."""
    folder = Path(folder)
    write_json_atomic(folder / "results.json", results)
    write_text_atomic(folder / "summary.txt", summary)
    return folder / "results.json"


def record_failure(results: dict[str, Any], error: BaseException) -> None:
    """Status, one-line error and traceback of a run that ended by an exception (Ctrl-C counts as
    interrupted), so that results.json says what happened even when the run did not finish."""
    results["status"] = "interrupted" if isinstance(error, KeyboardInterrupt) else "failed"
    results["error"] = f"{type(error).__name__}: {error}"
    results["traceback"] = traceback.format_exc()
