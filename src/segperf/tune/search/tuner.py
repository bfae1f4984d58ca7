"""The tuner: which configuration is fastest on this machine, decided on measured probes.

It reads top to bottom (docs/tuning.md, "How it searches"): the start's learning run, then

1. the presets (segperf.tune.search.presets): the start and each preset, interleaved, until each
   is decided; the fastest preset faster beyond noise is the best to beat;
2. the axes (segperf.tune.search.axes): coordinate ascent from that best, breadth first;
3. the quality guard (segperf.tune.search.quality_guard): the tuned configuration learns as well
   as the start, or a change that alters learning is undone;
4. the final side by side (segperf.tune.search.final): the start, the presets and the tuned
   configuration topped up interleaved, the claim with what the budget has left.

What is shared: the budget's arithmetic (segperf.tune.search.budget), one comparison measured
until decided (segperf.tune.search.comparison), the verdicts and their rules
(segperf.tune.search.verdicts), the state handed from stage to stage (segperf.tune.search.state).
Nothing is measured twice: configurations that compose the same run share their probes (the
ledger's identity), and a comparison decides on every probe of both runs so far. Every "faster
beyond noise" is segperf.perf.decision.compare_pooled: the ratio of geometric means with its interval,
the noise pooled over every run the tune measured, so a clear difference is decided on one probe
of the candidate. Checking after every probe is a sequential test, so a no-op is kept somewhat
more often than 2.5% (tests/test_tune_search.py measures it on a simulated workload).

Budget: a comparison starts only when the remaining budget pays for it at its minimum plus the
reserve for the quality and final stages. Each probe gets a time limit of `limit_factor` times the
best's probe wall time (at least `limit_floor_s`; a quarter of the budget before anything was
measured), so that a pathologically slow candidate (bf16 emulated on a CPU: ~50x) is cut; a cut on
a configuration's first run is run once more (a cold torch.compile cache costs minutes on 2 cores,
a warm one seconds), a second cut is judged slower. Time spent is the journal's: a rerun
continues the same budget.

Why by hand and not Optuna: the decision per candidate is a noise-aware A/B comparison against the
current best, and "not applied" and "cut" are verdicts of their own; Optuna's samplers optimise a
single scalar per trial and would rank two noisy trials of the same configuration apart.
"""

from __future__ import annotations

import time
from collections import Counter
from collections.abc import Callable, Hashable, Mapping
from dataclasses import asdict
from typing import Any

from segperf.tune.journal import QUALITY, SPEED, Journal
from segperf.tune.later_noise import NOT_COUNTED, LaterNoise
from segperf.tune.ledger import Ledger
from segperf.tune.probe import Config, Measure, config_of
from segperf.tune.search import axes, final, presets, quality_guard
from segperf.tune.search.records import TuneResult
from segperf.tune.search.state import Search, Settings
from segperf.tune.space import SearchAxis, merge


class Tuner:
    """The search over `axes` from `start`; `run()` returns its TuneResult.

    Configurations are override strings on top of what the tune composes; `presets` maps a name
    (`+opt=all`) to its overrides (segperf.tune.space.presets), applied on top of `start`.
    `screen_factor`: a probe below 1/screen_factor of the best's images/s after its first timed
    steps stops then (None or <= 1: no screening). `emulated`: override -> why this machine
    emulates it (segperf.tune.native), tried last, one probe. `seed`: the start's learning run's."""

    def __init__(
        self,
        start: Config,
        axes: list[SearchAxis],
        measure: Measure,
        *,
        budget_s: float,
        presets: dict[str, Config],
        journal: Journal | None = None,
        quality: Measure | None = None,
        clock: Callable[[], float] = time.monotonic,
        level: float = 0.95,
        min_runs: int = 2,
        max_runs: int = 4,
        progress: Callable[[str], None] | None = None,
        quality_tolerance: float = quality_guard.QUALITY_TOLERANCE,
        limit_factor: float = 3.0,
        limit_floor_s: float = 60.0,
        screen_factor: float | None = 2.0,
        emulated: Mapping[str, str] | None = None,
        identity: Callable[[Config], Hashable] | None = None,
        seed: int = 0,
        later: LaterNoise = NOT_COUNTED,
    ) -> None:
        start = config_of(start)
        self.settings = Settings(
            start=start,
            axes=list(axes),
            presets={name: merge(start, config) for name, config in presets.items()},
            level=level,
            min_runs=max(2, min_runs),
            max_runs=max(2, min_runs, max_runs),
            quality_tolerance=quality_tolerance,
            screen_factor=screen_factor if screen_factor and screen_factor > 1 else None,
            emulated=dict(emulated or {}),
            seeds=(int(seed), int(seed) + 1),
            guards_quality=quality is not None,
            later=later,
        )
        self.measures = {SPEED: measure, QUALITY: quality}
        self.budget_s, self.journal, self.clock, self.progress = float(budget_s), journal, clock, progress
        self.limits = dict(limit_factor=limit_factor, limit_floor_s=limit_floor_s)
        self.identity = identity

    def run(self) -> TuneResult:
        """The tune, from an empty search (or the journal's replay of an interrupted one)."""
        search = Search(self.settings, self._ledger())
        if self.journal is not None:
            self.journal.open_for({"start": list(self.settings.start)})
        quality_guard.measure_start(search)  # first: the start's learning run prices the guard's reserve
        best = presets.run(search)
        best = axes.run(search, best)
        best = quality_guard.run(search, best)
        final_probes, final_configs = final.run(search, best)
        return self._result(search, best, final_probes, final_configs)

    def _ledger(self) -> Ledger:
        return Ledger(
            self.measures,
            budget_s=self.budget_s,
            journal=self.journal,
            clock=self.clock,
            progress=self.progress,
            identity=self.identity,
            **self.limits,
        )

    def _result(self, search: Search, best: Config, probes: dict, configs: dict) -> TuneResult:
        taken = search.ledger.all_probes()
        return TuneResult(
            search.start,
            best,
            search.steps,
            probes,
            configs,
            search.check,
            search.stopped,
            search.ledger.elapsed(),
            self.budget_s,
            self.settings.level,
            failures=dict(Counter(p.failed for p in taken if p.failed is not None and not p.tuners_own).most_common()),
            tuner_problems=dict(Counter(p.failed for p in taken if p.tuners_own).most_common()),
            runs=len(taken),
            busy_runs=sum(1 for p in taken if p.busy),
            over_budget=search.ledger.crossed,
            axes=[axis.name for axis in self.settings.axes],
            later_noise=asdict(self.settings.later),
        )


def search_arguments(settings: Any) -> dict[str, Any]:
    """The search's settings, Tuner's keywords, from the tune's (conf/tune.yaml `tune.*`)."""
    return {
        "budget_s": settings.budget_minutes * 60,
        "level": settings.level,
        "min_runs": settings.min_runs,
        "max_runs": settings.max_runs,
        "quality_tolerance": settings.quality.tolerance,
        "limit_factor": settings.probe.time_limit_factor,
        "limit_floor_s": settings.probe.min_time_limit_s,
        "screen_factor": settings.probe.screen_factor or None,
    }
