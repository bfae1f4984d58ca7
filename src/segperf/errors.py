"""Errors whose message already says what is wrong and what to do.

The command line prints these as one `segperf: error: ...` block and exits with status 2,
without a traceback: the traceback of a bad setting, a bad file or a full disk helps nobody.
"""

from __future__ import annotations

import errno
import re
import signal
from collections.abc import Iterator
from pathlib import Path

# DataLoader re-raises a worker's exception in the main process as
# "Caught <Type> in DataLoader worker process <n>.\nOriginal Traceback (most recent call last): ..."
_WORKER_ERROR = re.compile(r"^Caught (\w+) in DataLoader worker process (\d+)\.", re.MULTILINE)
# ... and a worker that died without an exception (killed from outside, e.g. by the kernel's
# out-of-memory killer) as "DataLoader worker (pid 123) is killed by signal: Killed." (torch's
# SIGCHLD handler) or "DataLoader worker (pid(s) 123) exited unexpectedly" (the queue's timeout)
_WORKER_KILLED = re.compile(r"DataLoader worker \(pid (\d+)\) is killed by signal: ([^.]+)\.")
_WORKER_EXITED = re.compile(
    r"DataLoader worker \(pid(?:\(s\))? ([\d, ]+)\) exited unexpectedly(?: with exit code (-?\d+))?"
)
# torch's weights-only unpickler refusing an object (a global, a class, a call), not a damaged stream
_NEEDS_CODE = re.compile(r"GLOBAL |add_safe_globals|allowlisted|unrecognized function")
_SIGNAL_NAMES = {signal.strsignal(s): s.name for s in signal.Signals if signal.strsignal(s)}

# what an OSError while writing means, in words; a full or read-only disk is never the file's fault
_FULL = {errno.ENOSPC: "no space left on device", errno.EDQUOT: "disk quota exceeded", errno.EFBIG: "file too large"}
_READ_ONLY = {errno.EROFS: "read-only file system"}
_DENIED = {errno.EACCES: "permission denied", errno.EPERM: "operation not permitted"}


class SegperfError(Exception):
    """Base of the errors shown to the user as they are (no traceback)."""


class DataLayoutError(SegperfError, FileNotFoundError):
    """`data.root` is missing, empty or not in Kaggle's layout."""


class DataSizeError(SegperfError, ValueError):
    """The run asks for more samples than the data has."""


class InputSizeError(SegperfError, ValueError):
    """An input size a net cannot take (each net checks its own rule): one line per setting, no traceback."""


class WriteError(SegperfError, OSError):
    """A file segperf could not write (a full disk, a read-only or foreign folder). Raised by the
    atomic writes, whose temp file is gone by then and whose previous file is untouched."""

    def __init__(
        self, path: str | Path, cause: BaseException, doing: str | None = None, setting: str | None = None
    ) -> None:
        super().__init__(getattr(cause, "errno", None), _cause_text(cause))
        self.path = Path(path)
        self.folder = self.path.parent
        self.cause = _cause_text(cause)
        self.doing = doing or f"writing {self.path.name}"
        self.setting = setting  # what chooses the folder, when the caller knows (else the run folder's)
        self.filename = str(path)

    def __str__(self) -> str:
        return f"{self.folder}: {self.cause} ({self.doing})"


def _cause_text(error: BaseException) -> str:
    number = getattr(error, "errno", None)
    known = {**_FULL, **_READ_ONLY, **_DENIED}
    if number in known:
        return known[number]
    return (getattr(error, "strerror", None) or str(error) or type(error).__name__).strip()


def chain(error: BaseException) -> Iterator[BaseException]:
    """`error` and what it was raised from or while handling, outermost first."""
    seen: set[int] = set()
    current: BaseException | None = error
    while current is not None and id(current) not in seen:
        seen.add(id(current))
        yield current
        current = current.__cause__ or current.__context__


def os_error_in(error: BaseException) -> OSError | None:
    """The OSError behind `error` (torch, for one, turns a failed write into a RuntimeError
    whose context is the OSError)."""
    return next((e for e in chain(error) if isinstance(e, OSError)), None)


def write_problem(
    error: BaseException, folder: str | Path | None = None, setting: str = "hydra.run.dir", kept: bool = True
) -> str | None:
    """One line for a run that stopped because it could not write — `<folder>: <cause> (...)` and
    what to do — or None when `error` is something else. The first of segperf's own failed writes
    in the chain is named (the one that stopped the run; a later one, such as the record's own
    write, follows from it), else another library's. `folder` is the run's folder, named when
    the failed write does not say where."""
    found: tuple[str, int | None] | None = None
    inner_first = list(chain(error))[::-1]
    ours = [e for e in inner_first if isinstance(e, WriteError)]  # they name the file and folder
    if ours:
        found, setting = (str(ours[0]), ours[0].errno), ours[0].setting or setting
    else:  # another library's write (TensorBoard, Lightning's folders): full or read-only only
        theirs = [e for e in inner_first if isinstance(e, OSError) and e.errno in {**_FULL, **_READ_ONLY}]
        if theirs:
            e = theirs[0]
            name = Path(e.filename) if e.filename else None
            text = f"{name.parent}: {_cause_text(e)} (writing {name.name})" if name else f"{folder}: {_cause_text(e)}"
            found = (text, e.errno)
    if found is None:
        return None
    text, number = found
    if number in _FULL:
        todo = f"free some space there, or write elsewhere ({setting}=<a folder on another disk>)"
    else:
        todo = f"choose a folder you can write to ({setting}=<folder>)"
    intact = "; files already finished (checkpoints, an earlier results.json) are intact" if kept else ""
    return f"{text}; {todo}{intact}"


def is_write_failure(error: BaseException) -> bool:
    """A run stopped by a write that failed (a full disk, a read-only folder), not by its data or code."""
    return write_problem(error) is not None


def needs_code(error: BaseException) -> bool:
    """torch.load(weights_only=True) refused a pickled object (a class, a function): loading it
    could run code. Its UnpicklingError also stands for a file that is merely damaged."""
    return any(_NEEDS_CODE.search(str(e)) for e in chain(error))


def unreadable_checkpoint(path: str | Path, error: BaseException) -> str:
    """`<file>: not a readable checkpoint (...)`, with torch's reason in its first line."""
    inner = [e for e in chain(error) if str(e).strip() and not str(e).startswith("Weights only load failed")]
    lines = str(inner[0] if inner else error).strip().splitlines()
    reason = lines[0].split(". ", 1)[0].rstrip(".") if lines else type(error).__name__  # torch's first sentence
    return (
        f"{path}: not a readable checkpoint; it is truncated or damaged (an interrupted copy or download), or "
        f"not a torch checkpoint ({reason})"
    )


def _worker_death(error: BaseException) -> str | None:
    """'a DataLoader worker (pid N) was killed by SIGKILL ...' for a worker that died without an
    exception, found anywhere in the chain (the queue's timeout error is raised from the signal's)."""
    texts = [str(e) for e in chain(error)]
    for text in texts:
        if match := _WORKER_KILLED.search(text):
            pid, description = match.group(1), match.group(2).strip()
            name = _SIGNAL_NAMES.get(description, description)
            how = f"was killed by signal {name} ({description})" if name != description else f"was killed by {name}"
            oom = ", most often the out-of-memory killer (see `dmesg`)" if name == "SIGKILL" else ""
            return f"a DataLoader worker (pid {pid}) {how}{oom}"
    for text in texts:
        if match := _WORKER_EXITED.search(text):
            code = f" with exit code {match.group(2)}" if match.group(2) else ""
            return f"a DataLoader worker (pid {match.group(1).strip()}) died{code} without an error of its own"
    return None


WORKER_DEATH_HINT = "try fewer workers (a smaller data.num_workers, or workers=off) or a smaller batch (batch_size=...)"


def explain(error: BaseException) -> str:
    """One message for a user: the error itself for segperf's own errors, the worker's last
    traceback line (which names the file) for an error raised inside a DataLoader worker, and
    which signal and what to try for a worker that was killed."""
    text = str(error)
    match = _WORKER_ERROR.search(text)
    if match:
        last = text.rstrip().splitlines()[-1]
        # "segperf.data.carvana.dataset.SomeError: could not decode ..." -> "could not decode ..."
        message = re.sub(r"^[\w.]+: ", "", last)
        return f"{message} (in DataLoader worker {match.group(2)})"
    death = _worker_death(error)
    if death is not None:
        return f"{death}; {WORKER_DEATH_HINT}"
    return text


class SettingsError(SegperfError, ValueError):
    """Settings that cannot run (segperf.schema.check_settings); the message has one line per
    problem, each naming the setting."""

    def __init__(self, problems: list[str]) -> None:
        self.problems = problems
        super().__init__("\n".join(problems))


def is_worker_error(error: BaseException) -> bool:
    """An error raised in a DataLoader worker, or a worker that died."""
    return bool(_WORKER_ERROR.search(str(error))) or _worker_death(error) is not None
