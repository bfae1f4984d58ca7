"""One decision per configuration: its speed-up over the baseline, and whether that is more than noise.

Every place the report states a speed-up (the training table's `~`, the hyperfine-style mean ± σ
table and its summary line, the charts, report.json) reads `decide`, so they cannot disagree:

- the baseline is "baseline";
- a configuration that ran the same effective settings as an earlier one (a setting adjusted
  away, segperf.report.settings) is "same as X" and gets no speed-up;
- with fewer than MIN_RUNS completed runs on a side the ratio is shown but unconfirmed
  (`distinguishable` None): `+repeat=0,1,2` confirms it;
- otherwise segperf.perf.decision.compare_throughput decides, with the run-to-run noise pooled
  over every configuration of the sweep (`sweep_noise`): distinguishable when the LEVEL interval
  of the ratio of geometric means excludes 1. A first
  job of a sweep process flagged as an outlier (segperf.report.flags: it paid one-time costs) is
  left out of the test, never out of the tables: the order jobs ran in must not decide. So are
  runs that other processes kept busy, as measured during them (`machine_load.others_cores`),
  while MIN_RUNS quiet runs remain on that side: a neighbour's job must not decide either (with
  fewer, every run stays in and the warning says to re-run on a quiet machine).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from segperf.perf.decision import LEVEL, MIN_RUNS, Comparison, Noise, compare_throughput, pooled_noise
from segperf.report.flags import first_job_outlier, measured_busy
from segperf.report.stats import median_ratio, speedup
from segperf.report.sweep import Configuration

THROUGHPUT = "train.images_per_s"
CONFIRM = "+repeat=0,1,2"
RULE = (
    "a speed-up is distinguishable from run-to-run noise when the "
    f"{LEVEL:.0%} confidence interval of the ratio of geometric means of images/s excludes 1. The noise is "
    "measured on log images/s, pooled over every configuration of the sweep (they ran on one machine), "
    "and each configuration's own spread is shrunk toward that pool, weighted by degrees of freedom, so a "
    "noisier configuration keeps part of its spread; the interval uses Student's t with the pool's degrees "
    f"of freedom. It needs {MIN_RUNS} completed runs on each side; with fewer the "
    f"ratio is unconfirmed (`{CONFIRM}` confirms it). A first job of a sweep process that is an outlier "
    "(one-time costs) and runs that other processes kept busy (measured during the run; while two quiet runs "
    "remain) are left out of the test (see Warnings)."
)


@dataclass(frozen=True)
class Decision:
    """`config` against the baseline on one throughput path. `speedup`: ratio of medians (the
    tables' number); `mean_speedup`: hyperfine's ratio of means with its propagated σ; `test`:
    the comparison that decides; `distinguishable`: True/False, None = cannot be decided."""

    kind: str  # "baseline" | "same" | "ratio" | "n/a"
    speedup: float | None = None
    mean_speedup: tuple[float, float | None] | None = None
    test: Comparison | None = None
    distinguishable: bool | None = None
    same_as: str | None = None

    @property
    def unconfirmed(self) -> bool:
        return self.kind == "ratio" and self.distinguishable is None and self.speedup is not None


def baseline_of(configs: list[Configuration], path: str = THROUGHPUT) -> Configuration | None:
    """The first configuration with a throughput: by convention sweeps list the baseline first."""
    return next((c for c in configs if c.stat(path).median is not None), None)


def decision_values(config: Configuration, path: str = THROUGHPUT) -> list[Any]:
    """The values the test compares: the completed runs', less a first job flagged as an outlier
    and, while MIN_RUNS others remain, less the runs measured busy."""
    outlier = first_job_outlier(config, path)
    runs = [r for r in config.ok_runs if outlier is None or r is not outlier[0]]
    quiet = [r for r in runs if not measured_busy(r)]
    return [r.get(path) for r in (quiet if len(quiet) >= MIN_RUNS else runs)]


def sweep_noise(configs: list[Configuration], path: str = THROUGHPUT) -> Noise | None:
    """The run-to-run noise of `path` pooled over `configs` (the values each decision compares)."""
    return pooled_noise([decision_values(c, path) for c in configs])


def decide(config: Configuration, baseline: Configuration | None, path: str = THROUGHPUT) -> Decision:
    """The decision for `config` (see the module docstring); "n/a" without a baseline (none, or
    runs from machines that may not be compared) or without a measured throughput."""
    if baseline is None:
        return Decision("n/a")
    if config is baseline:
        return Decision("baseline", speedup=1.0, distinguishable=False)
    if config.same_as is not None:
        # it ran what `same_as` ran: no difference to decide, whatever the timings say
        same_as_baseline = config.same_as == baseline.label
        return Decision("same", distinguishable=False if same_as_baseline else None, same_as=config.same_as)
    ratio = median_ratio(config.stat(path), baseline.stat(path))
    if ratio is None:
        return Decision("n/a")
    noise = sweep_noise(config.peers or [config, baseline], path)
    test = compare_throughput(decision_values(config, path), decision_values(baseline, path), noise)
    mean = speedup(config.spread(path), baseline.spread(path))
    return Decision("ratio", ratio, mean, test, test.distinguishable)
