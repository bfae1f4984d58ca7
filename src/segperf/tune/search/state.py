"""One tune's settings (`Settings`, fixed when it starts) and its state while it runs (`Search`):
the ledger of probes, the comparisons so far, whether the budget stopped anything, the quality
check, and the few ways every stage measures (speed probes, the screening floor, the decision rule).

Words: a *probe* is one short measured training run (segperf.tune.probe.Probe) and nothing else;
a *configuration* is a tuple of override strings; a *step* is one comparison of two configurations.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

from segperf.perf.decision import Comparison, compare_pooled, pooled_noise
from segperf.tune.journal import SPEED
from segperf.tune.later_noise import NOT_COUNTED, LaterNoise
from segperf.tune.ledger import Ledger
from segperf.tune.probe import Config, Probe, full_runs, median_rate, rates
from segperf.tune.search.records import QualityCheck, Step, TuneError
from segperf.tune.space import SearchAxis


@dataclass(frozen=True)
class Settings:
    """What a tune was asked for (segperf.tune.search.tuner.Tuner's arguments, checked)."""

    start: Config
    axes: list[SearchAxis]
    presets: dict[str, Config]  # name -> the preset applied on top of the start
    level: float
    min_runs: int
    max_runs: int
    quality_tolerance: float
    # a probe below 1/screen_factor of the best's images/s after its first timed steps stops then
    screen_factor: float | None
    # override -> why this machine emulates it (segperf.tune.native): tried last, one probe
    emulated: Mapping[str, str] = field(default_factory=dict)
    # the seed of the start's learning run (the composed start's `seed`), and of the guard's confirming runs
    seeds: tuple[int, int] = (0, 1)
    guards_quality: bool = False
    # how much one run scatters between runs made at other times here: printed intervals count it
    # (segperf.tune.later_noise); the decisions are of the tune's own minutes
    later: LaterNoise = NOT_COUNTED

    def is_emulated(self, option: Config) -> bool:
        return any(o in self.emulated for o in option)


class Search:
    """A tune's state while it runs, handed to each stage in turn."""

    def __init__(self, settings: Settings, ledger: Ledger) -> None:
        self.settings, self.ledger = settings, ledger
        self.steps: list[Step] = []
        self.stopped = False  # the budget stopped a comparison, a round or a top-up
        self.check = (
            QualityCheck(settings.quality_tolerance, seeds=list(settings.seeds)) if settings.guards_quality else None
        )

    @property
    def start(self) -> Config:
        return self.settings.start

    def at(self, where: str) -> None:
        """Name the stage (and step) the progress lines and the budget report say."""
        self.ledger.where = where

    # -- measuring ---------------------------------------------------------------------------
    def speed(
        self,
        configs: list[Config],
        labels: list[str],
        reference: Config,
        limit: float | None = None,
        screen: bool = True,
    ) -> list[Probe]:
        """Speed probes of `configs`, in order, each limited to `limit` (else the ledger's limit for
        `reference`) and screened against `reference`'s images/s unless `screen` is off."""
        limit = limit or self.ledger.limit(SPEED, reference)
        return self.ledger.probe(SPEED, configs, labels, limit, self.floor(reference) if screen else None)

    def floor(self, reference: Config) -> float | None:
        """The screening floor: 1/screen_factor of the reference's median images/s (None before it
        has a usable probe, or with screening off)."""
        rate = median_rate(full_runs(self.ledger.known(SPEED, reference)))
        factor = self.settings.screen_factor
        return rate / factor if rate and factor else None

    def start_alone(self) -> list[Probe]:
        """The start's first speed probe, alone: its wall time sets the time limit of those after it."""
        probes = self.speed([self.start], ["start"], self.start)
        if probes[0].images_per_s is None:
            raise TuneError(
                f"the tune's start ({' '.join(self.start) or 'the defaults'}) did not run: "
                f"{probes[0].failed or 'no images/s recorded'}; fix that run first"
            )
        return probes

    def known(self, config: Config) -> list[Probe]:
        """Every speed probe so far of `config` or of a configuration that composes the same run."""
        return self.ledger.known(SPEED, config)

    # -- deciding ----------------------------------------------------------------------------
    def comparison(self, candidate: list[Probe], against: list[Probe]) -> Comparison:
        """The tune's one decision rule (segperf.perf.decision.compare_pooled), on the sides' images/s, with the
        run-to-run noise of every run measured so far."""
        return compare_pooled(rates(candidate), rates(against), self.settings.level, self.rate_groups())

    def within(self) -> float:
        """How much one run scattered among the tune's runs so far (their pooled noise, log scale; 0
        before any configuration ran twice): the part of the later-run noise the tune has seen."""
        noise = pooled_noise(self.rate_groups())
        return noise.relative if noise is not None else 0.0

    def rate_groups(self) -> list[list[float | None]]:
        """Each run's full-run images/s (screened and cut probes are of a few steps: not noise)."""
        return [rates(full_runs(probes)) for probes in self.ledger.groups(SPEED)]


def charge(step: Step, probes: list[Probe]) -> None:
    """Count `probes` (and their wall time) as what `step` cost."""
    step.probes_run += len(probes)
    step.seconds += sum(p.wall_s for p in probes)
