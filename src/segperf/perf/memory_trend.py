"""Memory creep: a robust per-step trend of a memory series, judged while the run lives.

A leak (tensors kept across steps, a list that grows) raises memory steadily; a fill that a run
makes on purpose (DataLoader workers starting, the first validation, a pinned-memory pool, the
allocator growing to the step's working set) is a level shift that then stays flat. Both raise
the series; only the first is creep. So the judgement is of shape, not of height:

- Each block of `block_steps` steps keeps its floor (lowest reading, and its step): transient
  peaks (a validation's batches) go away again, a leak lifts the floor. Past MAX_POINTS blocks,
  adjacent ones merge (the lower floor stays) and blocks double in length: a run of a million
  steps keeps at most MAX_POINTS points, evenly over the run (the bounded-record promise).
- The slope is Theil-Sen's (the median of the pairwise slopes): one odd block moves it nowhere.
- A tail of the points after `settle_step` (warm-up, the first validation) is *rising* when its
  rise (slope x span) clears both a floor in bytes and six times the scatter of the points
  around the fitted line; it is *steady* when the slope of each of its halves is at least
  STEADY_SHARE of the whole tail's. A level shift fails both: the scatter around one line
  through a step is half the step, and one half of the tail is flat. Of the tails (the whole,
  then shorter ones) the longest steady rising one confirms creep: its slope is the rate, its
  first point `since_step`.

Nothing here imports Lightning or torch; segperf.callbacks.memory_watch feeds it.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache
from statistics import median
from typing import Any

import numpy as np

MAX_POINTS = 128  # block floors held per series: a few KB of results.json, whatever the run's length
FIT_POINTS = 64  # points one Theil-Sen fit reads (evenly chosen): 2,016 pairs, well under a millisecond
MIN_POINTS = 12  # a tail shorter than this is not judged
MIN_SPAN_STEPS = 24  # ... nor one over fewer steps
STEADY_SHARE = 0.4  # each half of a steady rise climbs at >= 40% of the whole tail's rate
NOISE_TIMES = 6.0  # a rise must clear 6x the points' scatter (1.4826 MAD) around the fitted line
RELATIVE_FLOOR = 0.01  # ... and 1% of the series' level
MIB = 2**20


@dataclass
class Fit:
    slope: float  # bytes per step
    since_step: int
    span_steps: int
    rise_bytes: float
    noise_bytes: float
    rising: bool
    steady: bool


@lru_cache(maxsize=FIT_POINTS + 1)
def _pairs(n: int) -> tuple[np.ndarray, np.ndarray]:
    return np.triu_indices(n, k=1)  # a fifth of a judgement's time when built each time


def theil_sen(x: np.ndarray, y: np.ndarray) -> float:
    """The median of the slopes of all point pairs with distinct x (Theil-Sen)."""
    i, j = _pairs(len(x))
    dx = x[j] - x[i]
    keep = dx > 0
    return float(np.median((y[j] - y[i])[keep] / dx[keep])) if keep.any() else 0.0


def _thin(x: np.ndarray, y: np.ndarray, n: int) -> tuple[np.ndarray, np.ndarray]:
    if len(x) <= n:
        return x, y
    pick = np.linspace(0, len(x) - 1, n).round().astype(int)
    return x[pick], y[pick]


def fit(points: list[tuple[int, int]], min_rise: float) -> Fit | None:
    """The judgement of one tail of floors (module doc); None when it is too short to judge."""
    if len(points) < MIN_POINTS or points[-1][0] - points[0][0] < MIN_SPAN_STEPS:
        return None
    x, y = _thin(*(np.asarray(v, dtype=float) for v in zip(*points, strict=True)), FIT_POINTS)
    slope = theil_sen(x, y)
    residual = y - (np.median(y - slope * x) + slope * x)
    noise = 1.4826 * float(np.median(np.abs(residual)))
    span = float(x[-1] - x[0])
    rise = slope * span
    rising = rise > max(min_rise, NOISE_TIMES * noise, RELATIVE_FLOOR * float(np.median(y)))
    half = len(x) // 2
    steady = rising and all(
        theil_sen(x[part], y[part]) >= STEADY_SHARE * slope for part in (slice(0, half + 1), slice(half, None))
    )
    return Fit(slope, int(points[0][0]), int(span), rise, noise, bool(rising), bool(steady))


class Trend:
    """One memory series (bytes) read at training steps: its floors, peak and judgement.

    `min_rise_bytes`: the least rise over a judged tail that can count as creep (allocator and
    interpreter noise stay under it)."""

    def __init__(self, name: str, min_rise_bytes: float, max_points: int = MAX_POINTS) -> None:
        self.name, self.min_rise, self.max_points = name, float(min_rise_bytes), max_points
        self.points: list[tuple[int, int]] = []  # (step, floor bytes) per closed block
        self.block_steps = 1
        self._block: list[int] | None = None  # [readings, floor step, floor bytes]
        self.settle_step = 0
        self.peak_bytes: int | None = None
        self.last: tuple[int, int] | None = None
        self.state = "not judged"  # "flat", "rising" (early), "confirmed"
        self.judged: Fit | None = None  # the latest confirmed (or rising) tail
        self.confirmed_at_step: int | None = None
        self.confirmed: Fit | None = None  # the last confirming fit, kept when the creep stops
        self._candidate: tuple[int, Fit] | None = None  # (step, fit) a steady rise was first seen at

    def add(self, step: int, value: int) -> None:
        self.last = (step, value)
        self.peak_bytes = value if self.peak_bytes is None else max(self.peak_bytes, value)
        block = self._block
        if block is None:
            self._block = [1, step, value]
        else:
            block[0] += 1
            if value < block[2]:
                block[1], block[2] = step, value
        if self._block[0] >= self.block_steps:
            self.points.append((self._block[1], self._block[2]))
            self._block = None
            if len(self.points) > self.max_points:  # fold: pairs merge, keeping the lower floor
                pairs = zip(self.points[::2], self.points[1::2], strict=False)
                merged = [min(a, b, key=lambda p: p[1]) for a, b in pairs]
                self.points = merged + ([self.points[-1]] if len(self.points) % 2 else [])
                self.block_steps *= 2

    def settle(self, step: int) -> None:
        """Judge only what comes after `step` (the end of warm-up, of the first validation)."""
        self.settle_step = max(self.settle_step, step)

    def judge(self) -> str:
        """Judge the tails after settle_step (module doc); returns and keeps the state."""
        judged = [p for p in self.points if p[0] >= self.settle_step]
        n, best, rising = len(judged), None, None
        for keep in sorted({n, n * 3 // 4, n // 2, n * 3 // 8, n // 4, n // 8}, reverse=True):
            tail = fit(judged[n - keep :], self.min_rise) if keep >= MIN_POINTS else None
            if tail is None:
                continue
            if tail.steady:
                best = tail
                break
            if tail.rising and rising is None:
                rising = tail
        if best is None and rising is None:
            self._candidate = None  # whatever rose has stopped
        step = self.last[0] if self.last else 0
        if best is not None and self.state != "confirmed":
            best = self._persisted(step, best)
        if best is not None:
            best.since_step = since_step(judged, best)
            if self.state != "confirmed":
                self.confirmed_at_step = step
            self.state, self.judged, self.confirmed = "confirmed", best, best
        elif rising is not None or self._candidate is not None:
            self.state, self.judged = "rising", rising or self._candidate[1]
        else:
            self.state, self.judged = ("flat" if n >= MIN_POINTS else "not judged"), None
        return self.state

    def _persisted(self, step: int, tail: Fit) -> Fit | None:
        """`tail` if the steady rise first seen earlier has gone on for half its span again (a fill
        that ends, a sawtooth's tooth, is a steady rise for a while); else None, and it waits."""
        candidate = self._candidate
        if candidate is None or tail.since_step > candidate[1].since_step + candidate[1].span_steps // 2:
            self._candidate = (step, tail)  # a new rise: from here
            return None
        first_seen, first = candidate
        if step - first_seen < max(MIN_SPAN_STEPS // 2, first.span_steps // 2):
            return None
        return tail

    def section(self) -> dict[str, Any]:
        """results.json's record of this series: the state, the rate, the folded floors."""
        shown = self.judged if self.state in ("confirmed", "rising") else None
        state = self.state
        if state != "confirmed" and self.confirmed is not None:
            state, shown = "stopped", self.confirmed  # it crept, then stopped: said, not forgotten
        return {
            "state": state,
            "bytes_per_step": None if shown is None else round(shown.slope, 1),
            "since_step": None if shown is None else shown.since_step,
            "over_steps": None if shown is None else shown.span_steps,
            "rise_bytes": None if shown is None else int(shown.rise_bytes),
            "noise_bytes": None if shown is None else int(shown.noise_bytes),
            "confirmed_at_step": self.confirmed_at_step,
            "judged_after_step": self.settle_step,
            "peak_bytes": self.peak_bytes,
            "last_bytes": None if self.last is None else self.last[1],
            "block_steps": self.block_steps,
            "floors": [[int(s), int(v)] for s, v in self.points],  # (step, lowest bytes) per block
        }


def since_step(points: list[tuple[int, int]], tail: Fit) -> int:
    """Where the rise of `tail` began: of the hinges (flat, then `tail.slope`) on its floors, the
    one the floors lie closest to (least absolute deviation). A tail longer than its rise (a leak
    that began late in a long run) starts earlier than the leak; the hinge finds the leak."""
    x, y = (np.asarray(v, dtype=float) for v in zip(*[p for p in points if p[0] >= tail.since_step], strict=True))
    x, y = _thin(x, y, FIT_POINTS)
    best, best_cost = tail.since_step, None
    for k in range(len(x) - MIN_POINTS // 2):
        model = np.maximum(0.0, tail.slope * (x - x[k]))
        cost = float(np.abs(y - model - np.median(y - model)).sum())
        if best_cost is None or cost < best_cost:
            best, best_cost = int(x[k]), cost
    return best


def forecast(step: int, bytes_per_step: float | None, room_bytes: int | None, seconds_per_step: float | None):
    """At `bytes_per_step` from `step`, the step at which `room_bytes` more are used, and how many
    seconds from now that is at `seconds_per_step`; (None, None) without a rise or a room."""
    if not bytes_per_step or bytes_per_step <= 0 or room_bytes is None:
        return None, None
    steps = room_bytes / bytes_per_step
    seconds = steps * seconds_per_step if seconds_per_step else None
    return int(step + steps), seconds


def size(num_bytes: float | None) -> str:
    """1536 -> '1.5 KiB'; 3 * 2**20 -> '3.0 MiB'; None -> 'n/a'."""
    if num_bytes is None:
        return "n/a"
    value, unit = float(num_bytes), "B"
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if abs(value) < 1024 or unit == "TiB":
            break
        value /= 1024
    return f"{value:,.0f} B" if unit == "B" else f"{value:,.1f} {unit}"


def duration(seconds: float | None) -> str:
    if seconds is None:
        return "n/a"
    if seconds < 90:
        return f"{seconds:.0f} s"
    if seconds < 5400:
        return f"{seconds / 60:.0f} min"
    if seconds < 2 * 86400:
        return f"{seconds / 3600:.1f} h"
    return f"{seconds / 86400:.1f} days"


def memory_row(results: dict[str, Any]) -> dict[str, Any]:
    """A rank's memory for its row under DDP (segperf.perf.ranks.rank_row)."""
    memory = results.get("memory") or {}
    creep, pressure = memory.get("creep") or {}, memory.get("pressure") or {}
    host, device = pressure.get("host") or {}, pressure.get("device") or {}
    return {
        "host_peak_bytes": host.get("peak_bytes"),
        "device_peak_bytes": device.get("peak_reserved_bytes") or device.get("peak_allocated_bytes"),
        "creep": creep.get("state"),
        "host_bytes_per_step": creep.get("host_bytes_per_step"),
        "device_bytes_per_step": creep.get("device_bytes_per_step"),
        "out_of_memory_at_step": creep.get("out_of_memory_at_step"),
    }


# a rank whose peak is this many times the median of the others', and by at least IMBALANCE_BYTES
IMBALANCE_RATIO = 1.25
IMBALANCE_BYTES = 256 * MIB


def rank_memory(rows: list[dict[str, Any]]) -> dict[str, Any]:
    """Across the ranks' rows: each one's peaks, the imbalance, and the ranks that creep, named."""
    mem = {row["rank"]: row.get("memory") or {} for row in rows}
    found: dict[str, Any] = {"creeping_ranks": [r for r, m in mem.items() if m.get("creep") == "confirmed"]}
    texts = []
    for r in found["creeping_ranks"]:
        parts = [
            f"{where} +{size(mem[r].get(key))} a step"
            for where, key in (("host", "host_bytes_per_step"), ("device", "device_bytes_per_step"))
            if mem[r].get(key)
        ]
        others = [o for o in mem if o != r and mem[o].get("creep") != "confirmed"]
        texts.append(f"rank {r} creeps ({', '.join(parts)})" + ("; the other ranks do not" if others else ""))
    for kind in ("host", "device"):
        peaks = {r: m.get(f"{kind}_peak_bytes") for r, m in mem.items() if m.get(f"{kind}_peak_bytes")}
        found[f"{kind}_peak_bytes"] = peaks
        if len(peaks) < 2:
            continue
        top = max(peaks, key=peaks.__getitem__)
        rest = median(v for r, v in peaks.items() if r != top)
        ratio = peaks[top] / rest if rest else None
        found[f"{kind}_imbalance"] = {"rank": top, "ratio": ratio}
        if ratio and ratio >= IMBALANCE_RATIO and peaks[top] - rest >= IMBALANCE_BYTES:
            texts.append(f"rank {top} peaks at {size(peaks[top])} {kind} memory, {ratio:.1f}x the others' median")
    found["text"] = "; ".join(texts) or None
    return found
