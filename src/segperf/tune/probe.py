"""What the search sees of one short measured run (a probe), and what it asks for.

The search (segperf.tune.search) never runs anything itself: it hands batches of candidate
configurations to a `Measure` callable and decides on the `Probe`s that come back. The tuner's
sweeper runs them as ordinary training jobs through the configured Hydra launcher and reads each
job's results.json; the tests hand it a fake workload with known speeds and seeded noise.
"""

from __future__ import annotations

import statistics
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

# A configuration is the tuple of Hydra override strings that sets it on top of the tune's start,
# sorted, e.g. ("compile=on", "precision=bf16"); () is the start itself.
Config = tuple[str, ...]


@dataclass(frozen=True)
class Probe:
    """One finished (or failed) short training run of `config`."""

    config: Config
    # training images/s of the steady state (results.json tune_probe.images_per_s: after a warm-up
    # the step times ended and the loader's queue; train.images_per_s for a run without it); None
    # when the run failed
    images_per_s: float | None
    # settings the machine could not honour: `key: reason` for each `adjusted` entry whose
    # used value differs from the requested one (results.json `adjusted.<key>`); empty = applied
    not_applied: tuple[str, ...] = ()
    # the run's quality, higher is better (the metric it is judged by, segperf.quality.of_results;
    # negated where its mode is min), if measured
    quality: float | None = None
    # which results.json metric that is
    quality_metric: str | None = None
    # the metric is lower-is-better (`mode: min`): `quality` is its value negated
    lower_is_better: bool = False
    # other processes kept the machine busy while it ran (segperf.report.flags.busy_during)
    busy: bool = False
    # wall time the probe took, start-up and warm-up included: what it cost of the budget
    wall_s: float = 0.0
    # stopped at the time limit (its images/s are of the steps it finished)
    cut: bool = False
    # stopped after its first timed steps for running below the screening floor (a fraction of the
    # best's images/s, segperf.callbacks.screen_out): its images/s are of those steps
    screened: bool = False
    # where its results.json is (None for a fake workload)
    run_dir: str | None = None
    # why it failed, one line (None when it finished)
    failed: str | None = None
    # the batch-mean training loss per logged step, for loss-curve comparisons (may be empty)
    losses: tuple[float, ...] = field(default_factory=tuple)
    # the steady-state steps its images/s are of, and their relative half-width at 95%
    # (segperf.callbacks.steady_probe; None for a run without it)
    timed_steps: int | None = None
    half_width: float | None = None
    # it failed for the shape the tuner gave the run (its size, validation, checkpoints), in the
    # user's own shape too: the tuner's problem, not a verdict on `config` (segperf.tune.probe_shape)
    tuners_own: bool = False
    # why it stopped before its rate was known to the probe's precision (its cap of timed steps,
    # the time limit): its images/s stand, less precise; None when it reached the precision
    imprecise: str | None = None

    @property
    def applied(self) -> bool:
        return not self.not_applied

    @property
    def partial(self) -> str | None:
        """Why it has no full run's images/s: "failed", "screened out" or "cut" (None: it has one,
        unless it has none at all). A screened probe's rate is of its first timed steps (a cold
        torch.compile's 5.9 images/s where its full runs make 270), a cut one's of the steps it
        finished before the limit: pooled with the rest, two screened probes of one preset widened
        an outside model's claim, 205 against 414 images/s four runs a side, to [0.77-5.40]."""
        if self.failed is not None:
            return "failed"
        return "screened out" if self.screened else ("cut" if self.cut else None)

    @property
    def full_run(self) -> bool:
        """It has a full run's images/s, as the search decides on them."""
        return self.images_per_s is not None and self.partial is None

    @property
    def metric_value(self) -> float | None:
        """The quality as the run logged it (an error of 4.05, not -4.05): what the guard says."""
        return -self.quality if self.quality is not None and self.lower_is_better else self.quality


# Runs each configuration of the batch once, in the order given (A B A B interleaving is the
# caller's: it passes [a, b, a, b]), and returns one Probe per entry, in the same order. The
# float is the most wall time one probe may take (None: no limit): a probe past it is stopped and
# reports the images/s of the steps it finished after warm-up (images_per_s None and `failed`
# saying so when it finished none), so that one pathological candidate (bf16 emulated on a CPU
# without bf16 instructions runs ~50x slower) cannot eat the budget. An optional third argument,
# passed only when there is one, is the screening floor in images/s: a probe whose images/s after
# its first timed steps are below it is stopped then, `screened` (segperf.callbacks.screen_out).
Measure = Callable[..., list[Probe]]


def config_of(overrides: Sequence[str]) -> Config:
    """The canonical form of a configuration: its override strings, without duplicates, sorted."""
    return tuple(sorted(set(overrides)))


def rates(probes: Sequence[Probe]) -> list[float | None]:
    """The images/s of `probes` (None for a failed one), as the decision rule takes them."""
    return [p.images_per_s for p in probes]


def full_runs(probes: Sequence[Probe]) -> list[Probe]:
    """Probes with a full run's images/s (Probe.full_run): not failed, not screened, not cut."""
    return [p for p in probes if p.full_run]


def median_rate(probes: Sequence[Probe]) -> float | None:
    """The median of the positive images/s of `probes` (None when there is none)."""
    values = [r for r in rates(probes) if r is not None and r > 0]
    return statistics.median(values) if values else None


def not_applied_of(probes: Sequence[Probe]) -> list[str]:
    """The `key: reason` entries of settings the machine did not honour in any of `probes`, once each."""
    return list(dict.fromkeys(entry for probe in probes for entry in probe.not_applied))
