"""The tune's journal: every probe it measured, one JSON line each, so that Ctrl-C loses nothing.

The search is deterministic given its probes (segperf.tune.search), so a rerun that hands the
tuner the same journal replays the recorded probes in the order it asks for them instead of
measuring them again: it re-walks the same path and goes on measuring where the last run stopped.
A probe is found again by what the search asked for: its kind ("speed" or "quality"), its
configuration and the index of that configuration's repeat (the 3rd probe of `compile=on` is
repeat 2, whichever step asked for it).

Why JSON lines and not one JSON file rewritten atomically: a record is appended with one write
and fsync'd, so an interrupted tune keeps every probe that finished, and a line torn by a kill
mid-write is the last one, which is dropped (and cut off the file) when the journal is read.
A damaged line anywhere else is a journal someone edited: that stops the tune with one line
naming the file and the line, since replaying half of it would silently change the search.
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterable, Mapping
from dataclasses import asdict, fields
from pathlib import Path
from typing import Any

from omegaconf import OmegaConf

from segperf.errors import SegperfError, WriteError
from segperf.perf.results import write_json_atomic
from segperf.tune.probe import Config, Probe

SPEED = "speed"  # a short throughput run (the search's Measure)
QUALITY = "quality"  # a learning run (the quality guard's Measure)


class JournalError(SegperfError, ValueError):
    """A journal that cannot be replayed: damaged before its last line, or another tune's."""


def probe_to_dict(probe: Probe) -> dict[str, Any]:
    return {**asdict(probe), "config": list(probe.config), "not_applied": list(probe.not_applied)}


def probe_from_dict(data: dict[str, Any]) -> Probe:
    """A Probe from its record; fields a later Probe added take their defaults."""
    known = {f.name for f in fields(Probe)}
    values = {key: value for key, value in data.items() if key in known}
    for key in ("config", "not_applied", "losses"):
        values[key] = tuple(values.get(key) or ())
    values.setdefault("images_per_s", None)
    return Probe(**values)


def probes_from_dicts(records: Iterable[Mapping[str, Any]]) -> list[Probe]:
    """Probes from their records (tune.json's, the journal's), as the search held them."""
    return [probe_from_dict(dict(record)) for record in records]


class Journal:
    """Append-only record of a tune's probes at `path` (created on the first record).

    `header` is the tune's identity (its start configuration): the first line of a new journal,
    and checked against the recorded one when a rerun opens an existing journal."""

    def __init__(self, path: str | Path) -> None:
        self.path = Path(path)
        self._recorded: dict[tuple[str, Config, int], tuple[Probe, float]] = {}
        self._header: dict[str, Any] | None = None
        self._load()

    def __len__(self) -> int:
        return len(self._recorded)

    def recorded(self) -> list[tuple[str, Config, int]]:
        """What the journal holds: (kind, configuration, repeat) of each probe."""
        return list(self._recorded)

    def lookup(self, kind: str, config: Config, repeat: int) -> tuple[Probe, float] | None:
        """The recorded probe for this request and the tune's elapsed seconds when it was
        recorded, or None when it was never measured."""
        return self._recorded.get((kind, tuple(config), repeat))

    def open_for(self, header: dict[str, Any]) -> None:
        """Bind the journal to the tune described by `header`: write it as the first line of a
        new journal; refuse a journal recorded for another tune (its probes would be of other
        configurations under the same override strings)."""
        if self._header is None:
            self._header = header
            self._append({"tune": header})
        elif self._header != header:
            raise JournalError(
                f"{self.path}: this journal is of another tune ({_describe(self._header)}; this one: "
                f"{_describe(header)}): use another tune folder (hydra.sweep.dir=...) or delete the file"
            )

    def record(self, kind: str, repeat: int, probe: Probe, elapsed_s: float) -> None:
        """Append one probe: its kind, configuration, repeat index, fields and the elapsed seconds."""
        key = (kind, probe.config, repeat)
        self._recorded[key] = (probe, elapsed_s)
        self._append(
            {"kind": kind, "config": list(probe.config), "repeat": repeat, "elapsed_s": elapsed_s}
            | {"probe": probe_to_dict(probe)}
        )

    def _append(self, entry: dict[str, Any]) -> None:
        line = json.dumps(entry, sort_keys=True) + "\n"
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            # one write of the whole line, then fsync: a kill leaves at most this line torn
            with self.path.open("a", encoding="utf-8") as f:
                f.write(line)
                f.flush()
                os.fsync(f.fileno())
        except OSError as error:
            raise WriteError(self.path, error, doing="appending to the tune's journal") from error

    def _load(self) -> None:
        if not self.path.exists():
            return
        raw = self.path.read_bytes()
        lines = raw.split(b"\n")
        if lines[-1] == b"":  # the file ends with a newline: no partial line after it
            lines.pop()
        kept = 0  # bytes of the whole, readable lines
        for number, line in enumerate(lines, start=1):
            entry = _parse(line)
            if entry is None:
                if number == len(lines):
                    break  # the torn last line of an interrupted write: cut off below
                raise JournalError(
                    f"{self.path}, line {number}: not a journal record ({line[:60]!r}); "
                    "delete the file to start the tune afresh"
                )
            kept += len(line) + 1
            if "tune" in entry:
                self._header = entry["tune"]
            else:
                key = (entry["kind"], tuple(entry["config"]), int(entry["repeat"]))
                self._recorded[key] = (probe_from_dict(entry["probe"]), float(entry["elapsed_s"]))
        if kept != len(raw):  # cut a torn tail off (or end the last line), so the next record starts its own line
            try:
                with self.path.open("r+b") as f:
                    f.truncate(min(kept, len(raw)))
                    if kept > len(raw):
                        f.seek(0, os.SEEK_END)
                        f.write(b"\n")
            except OSError as error:
                raise WriteError(self.path, error, doing="cutting a torn line off the tune's journal") from error


def open_tune_folder(config: Any, settings: Any) -> Journal:
    """The tune's folder (Hydra's sweep folder: made, the composed config in multirun.yaml as Hydra
    writes it for a sweep) and its journal, once a rerun into it is known to be of the same probes
    (check_same_tune: tune.probe.*, tune.quality.*)."""
    sweep_dir = Path(str(config.hydra.sweep.dir))
    sweep_dir.mkdir(parents=True, exist_ok=True)
    OmegaConf.save(config, sweep_dir / "multirun.yaml")
    probe = OmegaConf.to_container(settings.probe, resolve=True)
    check_same_tune(sweep_dir, {"probe": probe, "quality": OmegaConf.to_container(settings.quality)})
    return Journal(sweep_dir / "journal.jsonl")


def check_same_tune(sweep_dir: Path, identity: dict) -> None:
    """A rerun into a tune folder replays its journal: refuse one whose probes were of another
    size (tune.probe.*, tune.quality.*), which the journal's own check (the start) cannot see."""
    path = sweep_dir / "tune_probe.json"
    if path.exists():
        recorded = json.loads(path.read_text())
        if recorded != json.loads(json.dumps(identity)):
            raise SegperfError(
                f"{path}: this tune folder holds probes of other tune.probe / tune.quality settings "
                f"({recorded}); give the same settings, or another folder (hydra.sweep.dir=...)"
            )
    else:
        write_json_atomic(path, identity)


def _parse(line: bytes) -> dict[str, Any] | None:
    """A journal line as its record, None when it is not one (torn, edited)."""
    try:
        entry = json.loads(line)
    except (json.JSONDecodeError, UnicodeDecodeError):
        return None
    if not isinstance(entry, dict):
        return None
    if isinstance(entry.get("tune"), dict):
        return entry
    if {"kind", "config", "repeat", "elapsed_s", "probe"} <= entry.keys() and isinstance(entry["probe"], dict):
        return entry
    return None


def _describe(header: dict[str, Any]) -> str:
    start = header.get("start") or []
    return "start: " + (" ".join(start) if start else "the defaults")
