"""What a tune records: each comparison (`Step`), the quality guard (`QualityCheck`), and the
whole tune (`TuneResult`, tune.json's `result`)."""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any

from segperf.errors import SegperfError
from segperf.tune.probe import Config, Probe
from segperf.tune.search.verdicts import SKIPPED, Verdict


class TuneError(SegperfError, RuntimeError):
    """A tune that cannot go on: its start does not run."""


@dataclass
class Step:
    """One comparison: `candidate` (the best with `option` applied) against `against`, the best at
    the time; both sides' probes, the ratio of geometric mean images/s with its interval at the
    tune's level, and the verdict (segperf.tune.search.verdicts), with why in `note`."""

    stage: str  # "presets" | "axes" | "interactions" | "quality"
    axis: str  # the axis' name, or the preset's
    option: Config
    candidate: Config
    against: Config
    candidate_probes: list[Probe] = field(default_factory=list)
    against_probes: list[Probe] = field(default_factory=list)
    ratio: float | None = None
    low: float | None = None
    high: float | None = None
    verdict: Verdict = SKIPPED
    note: str = ""
    # what this decision cost: the probes run for it (not those it reused) and their wall seconds
    probes_run: int = 0
    seconds: float = 0.0
    reused: int = 0  # probes of earlier steps it decided on as well (the same runs, measured once)
    # low and high are where a later run of each side will put the ratio (they count the machine's
    # later-run noise: segperf.perf.decision.later_interval); these, the decision's interval, are of
    # the tune's own minutes
    tune_low: float | None = None
    tune_high: float | None = None


@dataclass
class QualityCheck:
    """The quality guard: the start's learning run first, then each configuration checked; a
    configuration that fails on its first run is confirmed with a second seed (`confirmations`)."""

    tolerance: float
    # the first learning run (seed `seeds[0]`) of the start, then of each configuration checked
    probes: list[Probe] = field(default_factory=list)
    verdict: str = "not checked"  # "passed" | "rejected: quality" | "not checked" | "same as start"
    reason: str = ""  # which configuration, its quality against the start's (each seed's), and why
    fallback: Config | None = None  # what the tune chose instead of a rejected configuration
    # the seed of the first learning runs and of the confirming ones (the composed start's seed, + 1)
    seeds: list[int] = field(default_factory=list)
    # the second-seed learning runs, in order: the start's (run once, with the first configuration
    # confirmed), then each confirmed configuration's; their configs carry `seed=<seeds[1]>`
    confirmations: list[Probe] = field(default_factory=list)


@dataclass
class TuneResult:
    start: Config
    best: Config
    steps: list[Step]
    final: dict[str, list[Probe]]  # "start", each preset's name, "tuned": the final side by side
    final_configs: dict[str, Config]
    quality: QualityCheck | None
    stopped_by_budget: bool
    elapsed_s: float
    budget_s: float
    level: float
    # runs that failed, by their one-line reason (each speed and learning run counts once)
    failures: dict[str, int] = field(default_factory=dict)
    # runs that failed for the tuner's own run shape, not their configuration (Probe.tuners_own), by reason
    tuner_problems: dict[str, int] = field(default_factory=dict)
    runs: int = 0
    # runs that other processes kept the machine busy during (their timings are not this machine's own)
    busy_runs: int = 0
    # where the tune crossed its budget, if it did (segperf.tune.ledger.Ledger.crossed): the stage,
    # the probes that crossed it, what they were priced at and what they took
    over_budget: dict[str, Any] | None = None
    # the axes searched, in the order they were visited (axes_tried in segperf.tune.report reads
    # which of them a comparison reached)
    axes: list[str] = field(default_factory=list)
    # the later-run noise the printed intervals count, and where it came from (segperf.tune.later_noise)
    later_noise: dict[str, Any] | None = None

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)
