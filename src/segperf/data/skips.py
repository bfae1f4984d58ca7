"""`data.on_bad_sample` after the up-front check: a file that passed the check and still does not
decode when it is read (pixels that do not decode behind a good header and end marker, a file
deleted or rewritten since the check by a folder still syncing).

`skip`: the sample is left out and the next good sample takes its place, so the batch keeps its
size. The replacement is made in the dataset's `__getitem__` (`BadSamples.fetch`), not by a
collate that refills: the DataLoader, its sampler, the resumable sampler's batch count, the
caches (filled by index) and DeviceBatches all stay as they are, and it works the same in a
worker, in the main process, in a prefetch thread and in a cache fill. The replacement is the
next index (wrapping around) that decodes: deterministic, the same in every worker and every
run, with no random state to seed.

Each left-out file is recorded with its reason and the stage that met it; a DataLoader worker is
a process of its own, so every process appends to its own file in the run's skip folder
(`SkipLog`, one JSON line per file), and the DataModule merges them into results.json's
`dataset.skipped` at the end. The image library's warnings about a file travel the same way.

`raise`: the run stops with one line naming the file, and the way to find every such file
before training (`data.check=decode`).
"""

from __future__ import annotations

import json
import os
import shutil
import tempfile
import weakref
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar

from PIL import Image
from torch.utils.data import get_worker_info

from segperf.data.filechecks import BadDataError
from segperf.data.imagefiles import DEFAULT_MAX_PIXELS, UnreadableImage, read_image, stat_of

Result = TypeVar("Result")
MAX_TRIES = 64  # replacements tried for one sample before the run says the data is mostly bad
FIND_ALL = "data.check=decode finds every such file before training; data.on_bad_sample=skip leaves them out"


class UndecodableSample(BadDataError, OSError):
    """A file that failed when read during the run, under `data.on_bad_sample=raise`: one line
    (a DataLoader worker's error reaches the user by its last line) naming the file."""


class BadFile(Exception):
    """A file of a sample that cannot be used: `path`, `noun` ("image", "mask") and why."""

    def __init__(self, path: Path, noun: str, error: UnreadableImage) -> None:
        super().__init__(f"{path}: {error.reason}")
        self.path, self.noun, self.error = path, noun, error


class SkipLog:
    """The files left out (and the image library's warnings) during a run, one JSON-lines file
    per process in `folder`, merged by `read`."""

    def __init__(self, folder: str | Path) -> None:
        self.folder = Path(folder)
        self.folder.mkdir(parents=True, exist_ok=True)

    def add(self, entry: dict[str, Any]) -> None:
        # one process per file: appends need no lock; a line is written whole by one write()
        with open(self.folder / f"{os.getpid()}.jsonl", "a") as f:
            f.write(json.dumps(entry) + "\n")

    def read(self) -> list[dict[str, Any]]:
        """Every entry of every process, each (event, path, stage) once, in path order."""
        seen: dict[tuple[str, str, str], dict[str, Any]] = {}
        for part in sorted(self.folder.glob("*.jsonl")):
            for line in part.read_text().splitlines():
                try:
                    entry = json.loads(line)
                except json.JSONDecodeError:  # a worker killed mid-write
                    continue
                seen.setdefault((entry["event"], entry["path"], entry.get("stage", "")), entry)
        return sorted(seen.values(), key=lambda e: (e["path"], e.get("stage", "")))


def current_process() -> str:
    info = get_worker_info()
    return "main process" if info is None else f"DataLoader worker {info.id}"


@dataclass
class BadSamples:
    """How a dataset reads its files and what it does with one that fails: `policy` is
    data.on_bad_sample, `log` where skips and warnings go (None: nowhere), `checked` each file's
    (size, mtime_ns) at the check, `stage` what the reads are for ("" while loading batches,
    "cache fill", "device cache fill")."""

    policy: str = "raise"
    log: SkipLog | None = None
    max_pixels: int = DEFAULT_MAX_PIXELS
    checked: dict[Path, tuple[int, int]] = field(default_factory=dict)
    stage: str = ""
    _bad: set[int] = field(default_factory=set, repr=False)  # this process's bad indices
    _warned: set[Path] = field(default_factory=set, repr=False)

    def where(self) -> str:
        process = current_process()
        return f"{self.stage} ({process})" if self.stage else process

    def read(self, path: Path, prepare: Callable[[Image.Image], Result], noun: str = "image") -> Result:
        """`prepare` of one file (segperf.data.imagefiles.read_image); its warnings go to the log."""
        try:
            result, caught = read_image(path, prepare, self.max_pixels, self.checked.get(path))
        except UnreadableImage as error:
            self._warn(path, error.caught)
            raise BadFile(path, noun, error) from None
        self._warn(path, caught)
        return result

    def _warn(self, path: Path, caught: list[dict[str, str]]) -> None:
        if caught and self.log is not None and path not in self._warned:
            self._warned.add(path)
            self.log.add({"event": "warnings", "path": str(path), "stage": self.where(), "warnings": caught})

    def fetch(self, index: int, n: int, load: Callable[[int], Result]) -> Result:
        """`load(index)`, or under `skip` that of the next index that loads (the batch keeps its
        size); each file that fails is logged once per process."""
        for tries in range(min(n, MAX_TRIES)):
            current = (index + tries) % n
            if current in self._bad:
                continue
            try:
                return load(current)
            except BadFile as bad:
                entry = {
                    "path": str(bad.path),
                    "reason": bad.error.reason,
                    "kind": bad.error.kind,
                    "stage": self.where(),
                }
                if self.policy != "skip":
                    raise UndecodableSample(
                        f"could not decode {bad.noun} {bad.path}: {bad.error.reason}; {FIND_ALL}", [entry]
                    ) from None
                self._bad.add(current)
                if self.log is not None:
                    self.log.add({"event": "skipped", **entry})
        raise BadDataError(
            f"data.on_bad_sample=skip: {min(n, MAX_TRIES)} samples in a row from index {index} do not decode; "
            f"the data is mostly unreadable ({FIND_ALL.split(';')[0]})"
        )


def merge_skips(checked: list[dict[str, Any]], log: SkipLog | None) -> tuple[list[dict[str, Any]], list[dict]]:
    """results.json's `dataset.skipped` (the check's, each with stage "check", then the run's)
    and `dataset.image_warnings` ({"path", "stage", "warnings"} per file)."""
    entries = log.read() if log is not None else []
    skipped = [{"stage": "check", **s} for s in checked]
    skipped += [{k: v for k, v in e.items() if k != "event"} for e in entries if e["event"] == "skipped"]
    warned = [{k: v for k, v in e.items() if k != "event"} for e in entries if e["event"] == "warnings"]
    return skipped, warned


def warnings_line(warned: list[dict[str, Any]]) -> str | None:
    """One console line for the image library's warnings: how many, about how many files, of
    which kinds (the commonest first); None without any."""
    kinds: dict[str, int] = {}
    for entry in warned:
        for caught in entry["warnings"]:
            kinds[caught["kind"]] = kinds.get(caught["kind"], 0) + 1
    if not kinds:
        return None
    n = sum(kinds.values())
    listed = ", ".join(f"{count} {kind}" for kind, count in sorted(kinds.items(), key=lambda item: -item[1]))
    files = len({entry["path"] for entry in warned})
    return (
        f"the image library warned {n} time{'s' if n != 1 else ''} about {files} file{'s' if files != 1 else ''} "
        f"({listed}); each with its file in results.json (dataset.image_warnings)"
    )


class RunSkips:
    """A DataModule's account of what it left out: the check's skips and warnings, and the log
    its datasets' readers write during the run (in a temporary folder of its own, removed with it)."""

    def __init__(self, policy: str = "raise", max_pixels: int = DEFAULT_MAX_PIXELS) -> None:
        self.policy, self.max_pixels = policy, max_pixels
        self.folder = Path(tempfile.mkdtemp(prefix="segperf-skips-"))
        weakref.finalize(self, shutil.rmtree, self.folder, True)
        self.log = SkipLog(self.folder)
        self.checked: list[dict[str, Any]] = []  # the check's dataset.skipped entries
        self.check_warnings: list[dict[str, Any]] = []  # {"path", "stage", "warnings"}
        self.stats: dict[Path, tuple[int, int]] = {}

    def after_check(self, skipped: list[dict[str, Any]], warned: dict[Path, list[dict]], paths: list[Path]) -> None:
        """Keep what the check found, and each used file's (size, mtime_ns) now, so that a file
        rewritten before it is read is caught; print the warnings' one line."""
        self.checked = list(skipped)
        self.check_warnings = [{"path": str(p), "stage": "check", "warnings": w} for p, w in warned.items()]
        self.stats = {}
        for path in paths:
            try:
                self.stats[path] = stat_of(path)
            except OSError:  # gone already: its read will say so
                pass
        if line := warnings_line(self.check_warnings):
            print(f"segperf: note: {line}.")

    def reader(self, stage: str = "") -> BadSamples:
        return BadSamples(self.policy, self.log, self.max_pixels, self.stats, stage)

    def summary(self) -> dict[str, Any]:
        """results.json's `dataset.skipped` (every file left out, with its reason, kind and stage),
        `dataset.bad_files` (the same without the masks that have no image, which are not used but
        not bad: segperf.data.filechecks' whole list) and, when the image library warned,
        `dataset.image_warnings`."""
        skipped, warned = merge_skips(self.checked, self.log)
        seen = {entry["path"] for entry in self.check_warnings}
        warned = self.check_warnings + [entry for entry in warned if entry["path"] not in seen]
        bad = [entry for entry in skipped if entry.get("kind") != "no image"]
        return {"skipped": skipped, "bad_files": bad} | ({"image_warnings": warned} if warned else {})
