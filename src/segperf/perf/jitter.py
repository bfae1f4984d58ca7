"""Per-batch jitter: how evenly the host fed the accelerator, batch by batch.

Phase totals say *how much* time went to waiting for data; they hide *how it was spread*. A run
whose loader is fast on average but stalls every 50th batch (a worker re-opening files, a GC
pause) has the same data_wait total as one that is uniformly slow, yet the fix differs. So the
per-batch timings are summarised as distributions (tail percentiles, coefficient of variation)
and as a count of *starved* steps. Everything here is a pure function of plain numbers and
returns JSON-ready dicts (Python floats/ints/None, never numpy scalars), except
`log_histograms`, which writes the raw values to TensorBoard so the shape can be looked at.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

# A training step is *starved* when the host waited for its batch longer than this fraction of the
# median train_step time: for that long the accelerator had nothing queued. 10% is small enough to
# catch real stalls and large enough to ignore the fixed cost of fetching an already-prefetched
# batch (microseconds against a step of milliseconds).
STARVED_FRACTION = 0.1

_DISTRIBUTION_KEYS = ("count", "mean", "p50", "p90", "p99", "max", "min", "std", "cv")


def distribution(values: Sequence[float]) -> dict[str, Any]:
    """count, mean, p50/p90/p99, max, min, population std and cv (= std/mean) of `values`.

    Percentiles interpolate linearly (numpy's default), so short runs still give a p99. The cv is
    the scale-free jitter number: 0.05 is steady, 1 means the spread is as large as the typical
    value. An empty sequence gives count 0 and None elsewhere (nothing measured is not zero);
    a zero mean gives cv None rather than a division by zero.
    """
    array = np.asarray(values, dtype=float).ravel()
    if array.size == 0:
        return {key: (0 if key == "count" else None) for key in _DISTRIBUTION_KEYS}
    p50, p90, p99 = np.percentile(array, [50, 90, 99])
    mean = float(array.mean())
    std = float(array.std())  # population std (ddof=0): the batches are the whole run, not a sample
    return {
        "count": int(array.size),
        "mean": mean,
        "p50": float(p50),
        "p90": float(p90),
        "p99": float(p99),
        "max": float(array.max()),
        "min": float(array.min()),
        "std": std,
        "cv": std / mean if mean != 0 else None,
    }


def starved_steps(
    data_wait_s: Sequence[float], step_s: Sequence[float], fraction: float = STARVED_FRACTION
) -> dict[str, Any]:
    """How many steps the accelerator sat idle waiting for their batch.

    `data_wait_s[i]` and `step_s[i]` belong to batch i. The threshold is `fraction` times the
    *median* train_step time: the median, not the mean, so a few slow (e.g. compiling) steps do not
    raise the bar. Returns `count` (starved steps), `steps`, `fraction` (count/steps) and
    `threshold_s`; with no steps, count and steps are 0 and the rest None.
    """
    if len(data_wait_s) != len(step_s):
        raise ValueError(
            f"data_wait_s has {len(data_wait_s)} values but step_s has {len(step_s)}: "
            "they must be per batch, one of each per training step"
        )
    if fraction < 0:
        raise ValueError(f"fraction={fraction}: must be >= 0")
    steps = len(step_s)
    if steps == 0:
        return {"count": 0, "steps": 0, "fraction": None, "threshold_s": None}
    threshold_s = fraction * float(np.median(np.asarray(step_s, dtype=float)))
    count = int(np.count_nonzero(np.asarray(data_wait_s, dtype=float) > threshold_s))
    return {"count": count, "steps": steps, "fraction": count / steps, "threshold_s": threshold_s}


def jitter_summary(data_wait_s: Sequence[float], step_s: Sequence[float]) -> dict[str, Any]:
    """The `jitter` section of results.json: both distributions plus the starved-step count."""
    return {
        "data_wait": distribution(data_wait_s),
        "train_step": distribution(step_s),
        "starved": starved_steps(data_wait_s, step_s),
    }


def log_histograms(
    experiment: Any,
    values_by_name: Mapping[str, Sequence[float]],
    global_step: int,
    prefix: str = "jitter/",
) -> None:
    """Write each named series as a TensorBoard histogram `prefix + name` at `global_step`.

    `experiment` is a `torch.utils.tensorboard.SummaryWriter` (Lightning's TensorBoardLogger
    `.experiment`). Empty series are skipped: TensorBoard rejects an empty histogram, and an
    absent one reads correctly as "not measured".
    """
    for name, values in values_by_name.items():
        array = np.asarray(values, dtype=float).ravel()
        if array.size:
            experiment.add_histogram(prefix + name, array, global_step)
