"""The tuner's search: which configuration is fastest on this machine, decided on measured probes.

Strategy (docs/tuning.md, "How it searches"):

1. **Presets.** The start and each preset (`+opt=all`, `+opt=all compile=off`, spelt out as group
   overrides by segperf.tune.space.presets, and without a precision this machine emulates:
   segperf.tune.native gives `+opt=all precision=fp32` there) are measured interleaved, A B C
   A B C, until each preset is decided against the start or has `max_runs` probes. The fastest
   preset that is distinguishably faster becomes the current best, so the tuned result starts
   from, and never ends below, the best preset. A preset setting the machine did not honour
   (pin=on without a GPU) is dropped from it first: what ran is the preset without it.
2. **Coordinate ascent, breadth first.** From the current best: each axis' first option the best
   does not have (space.axes' order; the budget left, less the reserve, shared among the axes not
   visited yet, so that every axis is visited), then every axis' other options, then the options
   this machine emulates (once, with the best's own probe time as its limit), then the axes where
   something was kept, again, against the final best (axes interact). An option is kept only when
   it is faster beyond noise, ran as asked (nothing in `not_applied`) and did not fail; it then is
   the best the next options are measured against. An option the best already has, or one that
   composes the same run as the best, is not measured; an option an earlier probe showed the
   machine does not honour is not measured again.
3. **Quality guard** (with `quality`): the start's learning run is done first (its wall time
   prices the reserve below), the tuned configuration's at the end. A tuned quality below the
   start's by more than `quality_tolerance` is confirmed before it is rejected: one more learning
   run of it and of the start with the next seed (`seed` + 1), decided on the mean of both seeds
   each side, since one seed's draw can land beyond the tolerance. Still beyond it rejects the
   configuration; the changes that alter what is learned (space.CHANGES_LEARNING: precision
   first) are undone one at a time and re-checked the same way (the start's second-seed run
   reused), and the start is the answer when none passes.
4. **Final.** The start, each preset and the tuned configuration with every probe of each, topped
   up side by side to `min_runs` where one has fewer: the comparison the report shows (from full
   runs: segperf.tune.report leaves screened, cut and failed probes out of its ratios). With the
   budget left after that, the start and the tuned configuration (the tune's claim) are topped up
   side by side to `max_runs` each.

Nothing is measured twice: configurations that compose the same run (the ledger's identity)
share their probes, and a comparison decides on every probe of both runs so far; the candidate
is measured one probe at a time and the best only while it has fewer than `min_runs`. Every
"faster beyond noise" is segperf.tune.decision.compare: the ratio of geometric means with its
interval, the noise pooled over every run the tune measured, so a clear difference is decided on
one probe of the candidate; a comparison stops as soon as it is decided. Screening: a probe whose
images/s after its first timed steps are below 1/`screen_factor` of the best's is stopped then
(segperf.callbacks.screen_out) and judged slower; in the final stage only the presets are, since
the claim reads the start's and the tuned configuration's probes (a start under half the tuned
speed would be screened every time). Checking after every probe is a sequential test, so a no-op
is kept somewhat more often than 2.5% (tests/test_tune_search.py measures it on a simulated
workload). Each decision records the probes it ran and their seconds (Step.probes_run,
Step.seconds) and how many earlier probes it reused.

Why by hand and not Optuna: the decision per candidate is a noise-aware A/B comparison against the
current best, and "not applied" and "cut" are verdicts of their own; Optuna's samplers optimise a
single scalar per trial and would rank two noisy trials of the same configuration apart.

Budget: a comparison starts only when the remaining budget pays for it at its minimum plus the
reserve for the quality and final stages, all priced by the median wall time of the probes of
each configuration measured so far (its first probe left out once there are more: it pays the
one-time costs); the presets' first `min_runs` rounds come before that reserve, since they decide
what the tuned result is held to. Each probe gets a time limit of `limit_factor` times the best's
probe wall time (at least `limit_floor_s`; a quarter of the budget before anything was measured),
so that a pathologically slow candidate (bf16 emulated on a CPU: ~50x) is cut (after the step that
passes the limit; a single step past three times the limit is stopped inside it: fp16 emulated on
a Xeon took 177 s for one step against a 7 s limit, segperf.tune.runner); a cut on a
configuration's first run is run once more (a cold torch.compile cache costs minutes on 2 cores,
a warm one seconds), a second cut is judged slower and not measured again. Time spent is the
journal's: a rerun continues the same budget.
"""

from __future__ import annotations

import time
from collections import Counter
from collections.abc import Callable, Hashable, Mapping
from dataclasses import asdict, dataclass, field
from typing import Any

from segperf.errors import SegperfError
from segperf.report.stats import Comparison
from segperf.tune.decision import compare
from segperf.tune.journal import QUALITY, SPEED, Journal
from segperf.tune.ledger import Ledger
from segperf.tune.probe import Config, Measure, Probe, config_of
from segperf.tune.space import Axis, effective, merge, setting, undo_learning_changes, with_setting, without_settings

KEPT, SLOWER, SAME = "kept", "rejected: slower", "not distinguishable"
# the quality check's reserve: the start's learning run times this (the tuned one may compile, and
# the probes before it may overrun their estimates; a 10-minute tune once left 30 s of the 36 needed)
QUALITY_MARGIN = 1.5
NOT_APPLIED, FAILED, SKIPPED, WORSE = "not applied", "failed", "skipped: budget", "rejected: quality"
# the final stage stops topping up a configuration with this many probes that gave no full run's
# images/s (failed, screened out or cut; any stage)
FINAL_GIVE_UP_FAILURES = 2
# A short learning run's quality moves with the seed alone: size=quick over three seeds ends at Dice
# 0.982-0.989 (docs/BENCHMARKS.md, "Quality"), and size=demo at 64x96 (the guard's run) spreads by
# ~0.01; 0.02 is about three times the size=quick span. One draw can still land beyond it (an fp32
# upsample=deconv run: 0.948 against the start's 0.974, where its bf16 twin gave 0.965), so a run
# that fails is confirmed on a second seed, the start's too, and judged on the mean of both
# (Tuner._guard): the mean of two draws halves the variance of the difference.
QUALITY_TOLERANCE = 0.02


class TuneError(SegperfError, RuntimeError):
    """A tune that cannot go on: its start does not run."""


@dataclass
class Step:
    """One comparison: `candidate` (the best with `option` applied) against `against`, the best at
    the time; both sides' probes, the ratio of geometric mean images/s with its interval at the
    tune's level, and the verdict (one of the module's verdict strings), with why in `note`."""

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
    verdict: str = SKIPPED
    note: str = ""
    # what this decision cost: the probes run for it (not those it reused) and their wall seconds
    probes_run: int = 0
    seconds: float = 0.0
    reused: int = 0  # probes of earlier steps it decided on as well (the same runs, measured once)


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
    runs: int = 0
    # runs that other processes kept the machine busy during (their timings are not this machine's own)
    busy_runs: int = 0
    # where the tune crossed its budget, if it did (segperf.tune.ledger.Ledger.crossed): the stage,
    # the probes that crossed it, what they were priced at and what they took
    over_budget: dict[str, Any] | None = None

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


class Tuner:
    """The search over `axes` from `start` (module docstring); `run()` returns its TuneResult.

    Configurations are override strings on top of what the tune composes; `presets` maps a name
    (`+opt=all`) to its overrides (segperf.tune.space.presets), applied on top of `start`."""

    def __init__(
        self,
        start: Config,
        axes: list[Axis],
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
        quality_tolerance: float = QUALITY_TOLERANCE,
        limit_factor: float = 3.0,
        limit_floor_s: float = 60.0,
        screen_factor: float | None = 2.0,
        emulated: Mapping[str, str] | None = None,
        identity: Callable[[Config], Hashable] | None = None,
        seed: int = 0,
    ) -> None:
        self.start, self.axes, self.quality = config_of(start), list(axes), quality
        self.presets = {name: merge(self.start, config) for name, config in presets.items()}
        self.budget_s, self.journal, self.clock, self.level = float(budget_s), journal, clock, level
        self.min_runs, self.max_runs = max(2, min_runs), max(2, min_runs, max_runs)
        self.measure, self.quality_tolerance, self._about = measure, quality_tolerance, (self.budget_s, level)
        self._ledger = dict(journal=journal, clock=clock, progress=progress, limit_factor=limit_factor)
        self._ledger |= dict(limit_floor_s=limit_floor_s, budget_s=self.budget_s, identity=identity)
        # a probe below 1/screen_factor of the best's images/s after its first timed steps stops then
        self.screen_factor = screen_factor if screen_factor and screen_factor > 1 else None
        # override -> why this machine emulates it (segperf.tune.native): tried last, one probe
        self.emulated = dict(emulated or {})
        # the seed the start's learning run trains with (the composed start's `seed`), and the one
        # the guard's confirming runs train with
        self.seeds = (int(seed), int(seed) + 1)

    # -- the stages -------------------------------------------------------------------------
    def run(self) -> TuneResult:
        self.ledger = Ledger({SPEED: self.measure, QUALITY: self.quality}, **self._ledger)
        self.steps: list[Step] = []
        self.stopped = False
        self.check = QualityCheck(self.quality_tolerance, seeds=list(self.seeds)) if self.quality is not None else None
        if self.journal is not None:
            self.journal.open_for({"start": list(self.start)})
        if self.check is not None:  # first: the start's learning run prices the guard's reserve
            self.ledger.where = "quality"
            self.check.probes += self.ledger.probe(QUALITY, [self.start], ["start"], None)
        best = self._guard(self._ascend(self._presets()))
        final, configs = self._final(best)
        elapsed = self.ledger.elapsed()
        probes = self.ledger.all_probes()
        failures = dict(Counter(p.failed for p in probes if p.failed is not None).most_common())
        return TuneResult(
            self.start,
            best,
            self.steps,
            final,
            configs,
            self.check,
            self.stopped,
            elapsed,
            *self._about,
            failures=failures,
            runs=len(probes),
            busy_runs=sum(1 for p in probes if p.busy),
            over_budget=self.ledger.crossed,
        )

    def _presets(self) -> Config:
        """Stage 1: the start and the presets, interleaved, until each preset is decided; a preset
        far slower than the start after its first timed steps is screened out then."""
        self.ledger.where = "presets"
        steps = {
            n: Step("presets", n, c, c, self.start)
            for n, c in self.presets.items()
            if not self.ledger.same(c, self.start)
        }
        self.steps.extend(steps.values())
        open_ = list(steps)
        for round_ in range(self.max_runs):
            if not open_:
                break
            configs = [steps[name].candidate for name in open_]
            # the start as in any comparison: only while it has fewer than min_runs usable probes (a
            # start measured on, round after round, beside presets still open was measured again for
            # the same decision)
            start = [self.start] if len(_usable(self.ledger.known(SPEED, self.start))) < self.min_runs else []
            if round_ == 0:
                first = self._first_probe() if not self.ledger.known(SPEED, self.start) else []
                self._charge(steps[open_[0]], first)
                probes = self._speed(configs, open_, self.start)
            elif not self._affords([*start, *configs], self.start, reserve=round_ >= self.min_runs):
                self.stopped = True
                break
            else:
                probes = self._speed([*start, *configs], ["start"] * len(start) + open_, self.start)
                self._charge(steps[open_[0]], probes[: len(start)])
                probes = probes[len(start) :]
            for name, probe in zip(list(open_), probes, strict=True):
                self._charge(steps[name], [probe])
                steps[name].candidate_probes = self.ledger.known(SPEED, steps[name].candidate)
                steps[name].against_probes = self.ledger.known(SPEED, self.start)
                if self._judge(steps[name], runs=round_ + 1):
                    open_.remove(name)
        for name in open_:
            self._judge(steps[name], runs=self.max_runs)
        return self._adopt(list(steps.values()))

    def _adopt(self, steps: list[Step]) -> Config:
        """The fastest distinguishably faster preset, without the settings the machine did not
        honour (that is what ran), becomes the best; the other faster ones are held against it."""
        for step in (s for s in steps if s.verdict == KEPT):
            ignored = "; ".join(_not_applied(step.candidate_probes))
            stripped, dropped = without_settings(
                step.candidate, _not_applied(step.candidate_probes), self.axes, self.start
            )
            if dropped is None:
                step.verdict, step.note = NOT_APPLIED, f"sets what this machine cannot honour: {ignored}"
            elif dropped:
                step.note = f"taken without {' '.join(dropped)}, not applied here ({ignored})"
                self.ledger.alias(SPEED, stripped, step.candidate)
                step.candidate = stripped
        faster = sorted((s for s in steps if s.verdict == KEPT), key=lambda s: -(s.ratio or 0.0))
        if not faster:
            return self.start
        best = faster[0]
        for other in faster[1:]:
            versus = self._comparison(other.candidate_probes, faster[0].candidate_probes)
            other.verdict = SLOWER if versus.distinguishable else SAME
            other.note = f"faster than the start, but {_ratio_text(versus)} of {faster[0].axis}, side by side"
            if other.verdict == SAME and best is faster[0] and _stops_compiling(other.candidate, best.candidate):
                other.verdict, other.note = KEPT, f"{UNCOMPILED_TIE} ({_ratio_text(versus)} of {best.axis})"
                best.verdict, best.note = SAME, f"as fast as {other.axis}, which does not compile"
                best = other
        return best.candidate

    def _ascend(self, best: Config) -> Config:
        """Stage 2, breadth first so that a budget running out still leaves every axis visited:
        each axis' first option the best does not have (the budget left shared among the axes not
        visited yet), then every axis' other options, then the options this machine emulates (one
        probe each, with a short time limit; first only for an axis that has no other), then the
        axes that changed, again."""
        tried: set[frozenset] = set()  # runs (identities) measured against each other
        kept_axes: list[Axis] = []
        native = [(a, [o for o in a.options if not self._is_emulated(o)]) for a in self.axes]
        slow = [(a, [o for o in a.options if self._is_emulated(o)]) for a in self.axes]
        first = [(a, n + s) for (a, n), (_, s) in zip(native, slow, strict=True)]  # emulated last in its axis
        passes = [("axes", first, True), ("axes", native, False), ("axes", slow, False)]
        visited: set[str] = set()
        for stage, plan, first_only in [*passes, ("interactions", None, False)]:
            if plan is None:  # the axes where something was kept, against the final best
                plan = [(a, [o for o in a.options if not self._is_emulated(o)]) for a in kept_axes]
            for axis, options in plan:
                if first_only and axis.name in visited:
                    continue
                share = self._share(best, [a for a, o in plan if o and a.name not in visited]) if first_only else None
                for option in options:
                    step = self._try(stage, axis, option, best, tried, share)
                    if step is None:
                        continue
                    visited.add(axis.name)
                    if step.verdict == KEPT:
                        best = step.candidate
                        kept_axes += [axis] if stage == "axes" and axis not in kept_axes else []
                    if first_only:
                        break
        return best

    def _share(self, best: Config, unvisited: list[Axis]) -> int:
        """The candidate probes one axis' first comparison may take so that what is left of the
        budget (less the reserve) still reaches every axis not visited yet: at least 1."""
        per_probe = self.ledger.estimate(SPEED, best, best)
        spendable = self.ledger.left() - self._reserve(best)
        if per_probe <= 0 or not unvisited:
            return self.max_runs
        return max(1, min(self.max_runs, int(spendable / (len(unvisited) * per_probe))))

    def _try(
        self, stage: str, axis: Axis, option: Config, best: Config, tried: set[frozenset], share: int | None = None
    ) -> Step | None:
        """One option of an axis against the best, at most `share` candidate probes, unless the best
        has it already or the two runs were measured against each other before (None then)."""
        # the start's own option is no override: one spelling per configuration
        start_own = set(option) == set(effective(self.start, axis, self.start))
        candidate = with_setting(best, axis, setting(self.start, axis) if start_own else option)
        pair = frozenset((self.ledger.identity(candidate), self.ledger.identity(best)))
        if self.ledger.same(candidate, best) or pair in tried:
            return None
        tried.add(pair)
        self.ledger.where = f"step {len(self.steps) + 1}, {stage} {axis.name}"
        brief = self._is_emulated(option)
        # an emulated option: one probe, stopped at the best's own probe time (screening may not
        # come soon enough: its warm-up steps alone run at a tenth of the speed)
        limit = self.ledger.estimate(SPEED, best, best) if brief else None
        step = self._compare(stage, axis, option, candidate, best, max_runs=1 if brief else share, limit=limit)
        if brief and step.verdict != SKIPPED:
            step.note = "; ".join(filter(None, [f"tried last and once: {self.emulated[option[0]]}", step.note]))
        self.steps.append(step)
        return step

    def _is_emulated(self, option: Config) -> bool:
        return any(o in self.emulated for o in option)

    def _guard(self, best: Config) -> Config:
        """Stage 3: the tuned configuration's learning run against the start's; fall back on a loss.

        A configuration whose run is below the start's by more than the tolerance is confirmed
        before it is rejected (one seed's draw is not evidence): one more learning run of it and of
        the start with the next seed, judged on the mean quality of both seeds each side. The
        start's second-seed run is made once, with the first configuration confirmed, and reused
        for the fallbacks after it. A run that gave no quality at all is rejected unconfirmed:
        a crash is not the seed's noise."""
        check = self.check
        if check is None:
            return best
        self.ledger.where = "quality"
        start_probe = check.probes[0]
        if best == self.start:
            check.verdict, check.reason = "same as start", "the tuned configuration is the start"
            return best
        if start_probe.quality is None:
            check.reason = f"the start's learning run gave no quality ({start_probe.failed or 'none recorded'})"
            return best
        notes: list[str] = []
        for candidate in undo_learning_changes(best, self.axes, self.start):
            if candidate == self.start:
                break
            label = " ".join(candidate)
            self._note_overrun(notes, f"the learning run of {label}", [(candidate, self.start)], candidate, best)
            probe = self.ledger.probe(QUALITY, [candidate], [label], self.ledger.limit(QUALITY, self.start))[0]
            check.probes.append(probe)
            runs, start_runs = [probe], [start_probe]
            loss = self._quality_loss(runs, start_runs)
            if loss is None:
                notes.append(f"{label}: {self._qualities(runs, start_runs)}")
            elif probe.quality is not None:  # short on one seed: confirmed on a second before it is rejected
                runs, start_runs = self._confirm(candidate, probe, best, notes)
                loss = self._quality_loss(runs, start_runs)
                if loss is None:
                    mean_loss = _mean_quality(start_runs) - _mean_quality(runs)
                    notes.append(
                        f"{label}: {self._qualities(runs, start_runs)}: worse by {mean_loss:.3f}, within the "
                        f"tolerance of {self.quality_tolerance} on the mean of two seeds (seed {self.seeds[0]} "
                        f"alone: worse by {start_probe.quality - probe.quality:.3f})"
                    )
            if loss is None:
                check.reason = "; ".join(notes)
                if candidate == best:
                    check.verdict = "passed"
                else:
                    check.fallback = candidate
                return candidate
            check.verdict = WORSE
            notes.append(f"{label}: {loss}")
            self.steps.append(Step("quality", "quality", candidate, candidate, self.start, runs, start_runs))
            self.steps[-1].verdict, self.steps[-1].note = WORSE, loss
        check.verdict, check.fallback = WORSE, self.start
        check.reason = "; ".join([*notes, "the start is the answer"])
        return self.start

    def _confirm(
        self, candidate: Config, first: Probe, best: Config, notes: list[str]
    ) -> tuple[list[Probe], list[Probe]]:
        """The second-seed learning runs of `candidate` and of the start (the start's only while
        it has none), asked for in one ledger call, interleaved, so that they are journaled and
        replayed on a rerun like every probe; each side's runs, first seed first."""
        check = self.check
        assert check is not None  # only the guard confirms
        reseed = (f"seed={self.seeds[1]}",)
        # (the run, the run that prices it): the start's, then the candidate's, priced by its first run
        plan = [(merge(candidate, reseed), candidate)]
        if not check.confirmations:
            plan.insert(0, (merge(self.start, reseed), self.start))
        what = f"the second-seed learning runs of {' '.join(candidate)}"
        self._note_overrun(notes, what, plan, candidate, best)
        labels = [" ".join(run) for run, _ in plan]
        if len(plan) == 2:
            labels[0] = f"start seed={self.seeds[1]}"
        probes = self.ledger.probe(QUALITY, [run for run, _ in plan], labels, self.ledger.limit(QUALITY, self.start))
        check.confirmations += probes
        return [first, probes[-1]], [check.probes[0], check.confirmations[0]]

    def _note_overrun(
        self, notes: list[str], what: str, plan: list[tuple[Config, Config]], candidate: Config, best: Config
    ) -> None:
        """Say so when the learning runs of `plan` ((run, the run whose wall time prices it) pairs)
        and the final stage after them cost more than the budget has left. They run all the same:
        the check runs past the budget rather than answer with the start, which the search measured
        slower (a learning run late beats a tune that undoes itself); the chain is short, one
        candidate for each learning axis the best changed, and at most two confirming runs each."""
        final = self.ledger.cost(SPEED, self._final_plan(candidate), best)
        needed = sum(self.ledger.estimate(QUALITY, run, like) for run, like in plan) + final
        left = self.ledger.left()
        if needed > left:
            self.stopped = True
            notes.append(f"{what} ran past the budget (about {needed:.0f} s needed, {max(left, 0):.0f} s left)")

    def _final(self, best: Config) -> tuple[dict[str, list[Probe]], dict[str, Config]]:
        """Stage 4: the start, the presets and the tuned configuration with every probe of each so
        far, topped up side by side (interleaved) to `min_runs` where one has fewer."""
        self.ledger.where = "final"
        configs = {"start": self.start, **self.presets, "tuned": best}
        while plan := self._final_plan(best):
            if self.ledger.cost(SPEED, plan, best) > self.ledger.left():
                self.stopped = True
                break
            self._final_round(plan, configs, best)
        # the claim (tuned against the start) on up to `max_runs` probes a side, with what the budget
        # has left: a search that converged early otherwise claims on two noisy probes of the tuned
        # one (1.82x [1.36-2.43] on an outside CNN with 3.4 of 6 minutes unspent)
        while not self.stopped and (plan := self._claim_plan(best)):
            if self.ledger.cost(SPEED, plan, best) > self.ledger.left():
                break
            self._final_round(plan, configs, best)
        return {name: self.ledger.known(SPEED, config) for name, config in configs.items()}, configs

    def _final_round(self, plan: list[Config], configs: dict[str, Config], best: Config) -> None:
        """One round of `plan`: the start and the tuned configuration unscreened, the presets
        screened. The claim reads the first two, so a start under 1/`screen_factor` of the tuned
        speed (a 2x gain) must run in full; a preset that slow is only a row of the report."""
        claimed = [c for c in plan if self.ledger.same(c, self.start) or self.ledger.same(c, best)]
        for part, screen in ((claimed, False), ([c for c in plan if c not in claimed], True)):
            if part:
                self._speed(
                    part, [next(n for n, c in configs.items() if c == config) for config in part], best, screen=screen
                )

    def _final_plan(self, best: Config) -> list[Config]:
        """One interleaved round of the final stage's runs that have fewer than `min_runs` usable
        probes; not of one that has FINAL_GIVE_UP_FAILURES probes without a full run's images/s
        (failed, screened out as far slower than the tuned one, or cut at the time limit): a run
        that fails or is screened out again and again would take every top-up, and the budget, with it."""
        unique: list[Config] = []
        for config in [self.start, *self.presets.values(), best]:
            if not any(self.ledger.same(config, other) for other in unique):
                unique.append(config)
        plan = []
        for config in unique:
            probes = self.ledger.known(SPEED, config)
            usable = len(_usable(probes))
            if usable < self.min_runs and len(probes) - usable < FINAL_GIVE_UP_FAILURES:
                plan.append(config)
        return plan

    def _claim_plan(self, best: Config) -> list[Config]:
        """One interleaved round of the start and the tuned configuration, each while it has fewer
        than `max_runs` usable probes and has not given up (FINAL_GIVE_UP_FAILURES); nothing when
        the tuned configuration is the start."""
        if self.ledger.same(best, self.start):
            return []
        plan: list[Config] = []
        for config in (self.start, best):
            probes = self.ledger.known(SPEED, config)
            usable = len(_usable(probes))
            if usable < self.max_runs and len(probes) - usable < FINAL_GIVE_UP_FAILURES:
                plan.append(config)
        return plan

    # -- one comparison ---------------------------------------------------------------------
    def _compare(
        self,
        stage: str,
        axis: Axis,
        option: Config,
        candidate: Config,
        best: Config,
        max_runs: int | None = None,
        limit: float | None = None,
    ) -> Step:
        """`candidate` against `best` until decided, on every probe of either run so far: the
        candidate is measured one probe at a time (screened against the best's images/s; `limit`:
        its time limit, else the ledger's), up to `max_runs`; the best only while it has fewer than
        `min_runs` usable probes (then interleaved, B A)."""
        step = Step(stage, axis.name, option, candidate, best)
        if known := self._known_not_applied(axis, option):
            step.verdict, step.note = NOT_APPLIED, f"{'; '.join(known)} (known from an earlier probe: not measured)"
            return step
        step.candidate_probes = self.ledger.known(SPEED, candidate)
        step.against_probes = self.ledger.known(SPEED, best)
        step.reused = len(step.candidate_probes) + len(step.against_probes)
        most = max_runs or self.max_runs
        if step.candidate_probes and self._judge(step, runs=len(step.candidate_probes)):
            return step  # decided on what earlier steps measured
        while len(step.candidate_probes) < most:
            need_best = len(_usable(step.against_probes)) < self.min_runs
            configs = [best, candidate] if need_best else [candidate]
            if not self._affords(configs * (1 if step.candidate_probes else self._first_round(best)), best):
                self.stopped = True
                if step.probes_run == 0:
                    step.candidate_probes, step.against_probes = [], []  # nothing was decided on them
                    return step  # skipped: budget
                step.note = "stopped by the budget before it was decided"
                break
            if not self.ledger.measured(SPEED):  # the tune's first probe: alone, it sets the time limit
                self._charge(step, self._first_probe())
                configs = [candidate]
            probes = self._speed(configs, ["best", " ".join(option)][-len(configs) :], best, limit)
            self._charge(step, probes)
            step.candidate_probes = self.ledger.known(SPEED, candidate)
            step.against_probes = self.ledger.known(SPEED, best)
            if self._judge(step, runs=len(step.candidate_probes)):
                return step
        self._judge(step, runs=self.max_runs)
        return step

    def _first_round(self, best: Config) -> int:
        """How many probes of the candidate a comparison may need before it can be decided: one
        where the noise is known from the tune's other runs, else `min_runs`."""
        groups = [g for g in self._rate_groups() if len(g) >= 2]
        return 1 if sum(len(g) - 1 for g in groups) >= 3 else self.min_runs

    def _known_not_applied(self, axis: Axis, option: Config) -> list[str]:
        """The `key: reason` entries an earlier probe with this option gave for this axis' keys:
        a setting the machine did not honour then will not be honoured now."""
        entries = [
            entry
            for probes in self.ledger.groups(SPEED)
            for probe in probes
            if set(option) <= set(probe.config)
            for entry in probe.not_applied
            if entry.split(":", 1)[0].strip() in axis.keys
        ]
        return list(dict.fromkeys(entries))

    def _judge(self, step: Step, *, runs: int) -> bool:
        """Set the step's ratio and verdict from its probes; True when it is decided (no more runs)."""
        versus = self._comparison(step.candidate_probes, step.against_probes)
        step.ratio, step.low, step.high = versus.ratio, versus.low, versus.high
        last = step.candidate_probes[-1]
        if last.screened:
            best = _median_rate(step.against_probes)
            step.ratio = (last.images_per_s / best) if last.images_per_s and best else step.ratio
            step.low = step.high = None  # decided by screening, not by an interval around this ratio
            step.verdict = SLOWER
            step.note = (
                f"screened out after its first timed steps: {last.images_per_s or 0:.3g} images/s, under "
                f"1/{self.screen_factor:g} of the best's {best or 0:.3g}"
            )
            return True
        if last.cut and runs == 1 and runs < self.max_runs:
            # its first run: a cut may be a one-time cost (torch.compile's cold cache takes minutes
            # on 2 cores, a warm one seconds), so it runs once more before it is judged
            step.verdict, step.note = SAME, f"cut at the time limit after {last.wall_s:.0f} s on its first run"
            return False
        if last.cut:
            step.verdict = SLOWER
            step.note = f"cut at the time limit after {last.wall_s:.0f} s: judged slower, not measured again"
            return True
        if last.failed is not None or last.images_per_s is None:
            step.verdict, step.note = FAILED, last.failed or "no images/s recorded"
            return True
        # a preset's are taken out of it when adopted; a probe of the preset reused for the preset
        # without them (it ran so) is not a verdict on the candidate
        if last.not_applied and step.stage != "presets" and last.config == step.candidate:
            step.verdict, step.note = NOT_APPLIED, "; ".join(last.not_applied)
            return True
        if versus.distinguishable:
            step.verdict = KEPT if (versus.ratio or 0) > 1 else SLOWER
            return True
        step.verdict = SAME
        decided = runs >= self.max_runs
        if decided and step.stage != "presets" and _stops_compiling(step.candidate, step.against):
            step.verdict, step.note = KEPT, UNCOMPILED_TIE
        return decided

    def _comparison(self, candidate: list[Probe], against: list[Probe]) -> Comparison:
        """The tune's one decision rule (segperf.tune.decision), on the sides' images/s, with the
        run-to-run noise of every run measured so far."""
        return compare(_rates(candidate), _rates(against), self.level, self._rate_groups())

    def _rate_groups(self) -> list[list[float]]:
        """Each run's usable images/s (screened and cut probes are of a few steps: not noise)."""
        return [_rates(_usable(probes)) for probes in self.ledger.groups(SPEED)]

    def _quality_loss(self, runs: list[Probe], start_runs: list[Probe]) -> str | None:
        """Why a configuration's learning runs (`runs`, one per seed, first seed first) fail the
        guard against the start's runs of the same seeds, or None when they pass: the mean quality
        of each side (a start run that gave none is left out of its side's mean). Quality is higher
        is better (a `mode: min` metric is negated by the runner), so a loss is start - candidate."""
        for i, probe in enumerate(runs):
            if probe.failed is not None or probe.quality is None:
                which = f" with seed {self.seeds[i]}" if i else ""
                return f"its learning run{which} gave no quality ({probe.failed or 'none recorded'})"
        loss = _mean_quality(start_runs) - _mean_quality(runs)
        if loss > self.quality_tolerance:
            return (
                f"{self._qualities(runs, start_runs)}: worse by {loss:.3f}, "
                f"beyond the tolerance of {self.quality_tolerance}"
            )
        return None

    def _qualities(self, runs: list[Probe], start_runs: list[Probe]) -> str:
        """Both sides' qualities as the report says them: each seed's and their mean where there are two."""
        direction = f" ({runs[0].quality_metric}, lower is better)" if runs[0].lower_is_better else ""
        if len(runs) == 1:
            return f"quality {runs[0].metric_value:.3f} against the start's {start_runs[0].metric_value:.3f}{direction}"
        return (
            f"quality {_per_seed(runs, self.seeds)}, against the start's {_per_seed(start_runs, self.seeds)}{direction}"
        )

    # -- helpers ----------------------------------------------------------------------------
    def _first_probe(self) -> list[Probe]:
        """The start, alone: its wall time sets the time limit of the probes after it."""
        probes = self._speed([self.start], ["start"], self.start)
        if probes[0].images_per_s is None:
            raise TuneError(
                f"the tune's start ({' '.join(self.start) or 'the defaults'}) did not run: "
                f"{probes[0].failed or 'no images/s recorded'}; fix that run first"
            )
        return probes

    def _speed(
        self,
        configs: list[Config],
        labels: list[str],
        reference: Config,
        limit: float | None = None,
        screen: bool = True,
    ) -> list[Probe]:
        limit = limit or self.ledger.limit(SPEED, reference)
        return self.ledger.probe(SPEED, configs, labels, limit, self._floor(reference) if screen else None)

    def _floor(self, reference: Config) -> float | None:
        """The screening floor: 1/screen_factor of the reference's median images/s (None before it
        has a usable probe, or with screening off)."""
        rate = _median_rate(_usable(self.ledger.known(SPEED, reference)))
        return rate / self.screen_factor if rate and self.screen_factor else None

    def _charge(self, step: Step, probes: list[Probe]) -> None:
        step.probes_run += len(probes)
        step.seconds += sum(p.wall_s for p in probes)

    def _affords(self, configs: list[Config], best: Config, reserve: bool = True) -> bool:
        """Whether the budget left pays for probes of `configs` and still for the reserve: the final
        stage's top-up (start, presets, this best) and the tuned configuration's learning run.
        `reserve=False`: the presets' first `min_runs` rounds, which decide what the tuned result is
        held to, come before the reserve (the final stage then runs what is left of it)."""
        if not reserve:
            return self.ledger.cost(SPEED, configs, best) <= self.ledger.left()
        return self.ledger.cost(SPEED, configs, best) + self._reserve(best) <= self.ledger.left()

    def _reserve(self, best: Config) -> float:
        """The final stage's top-ups and the quality check's learning run, the latter with a
        margin: it is priced by the start's, and the tuned configuration's may compile or run slower."""
        reserve = self.ledger.cost(SPEED, self._final_plan(best), best)
        if self.quality is not None:
            reserve += QUALITY_MARGIN * self.ledger.estimate(QUALITY, best, self.start)
        return reserve


UNCOMPILED_TIE = (
    "not distinguishable from the best, which compiles: taken without torch.compile, whose warm-up "
    "costs minutes on a cold cache and whose failure costs a run"
)


def _stops_compiling(candidate: Config, against: Config) -> bool:
    """`candidate` is `against` without torch.compile, every other setting the same (a tie then goes
    to the one that does not compile)."""
    differ = set(candidate) ^ set(against)
    return "compile=on" in against and "compile=on" not in candidate and differ <= {"compile=on", "compile=off"}


def _mean_quality(probes: list[Probe]) -> float:
    """The mean quality of the runs that gave one (the guard checks there is at least one)."""
    qualities = [p.quality for p in probes if p.quality is not None]
    return sum(qualities) / len(qualities)


def _per_seed(probes: list[Probe], seeds: tuple[int, int]) -> str:
    """`0.948 (seed 0) and 0.969 (seed 1), mean 0.959`: a side's learning runs, one per seed."""
    each = [
        f"{p.metric_value:.3f} (seed {seed})"
        if p.quality is not None
        else f"none (seed {seed}: {p.failed or 'no quality'})"
        for seed, p in zip(seeds, probes, strict=False)
    ]
    logged = [p.metric_value for p in probes if p.metric_value is not None]
    return f"{' and '.join(each)}, mean {sum(logged) / len(logged):.3f}"


def _usable(probes: list[Probe]) -> list[Probe]:
    """Probes with a full run's images/s: not failed, not screened, not cut."""
    return [p for p in probes if p.images_per_s is not None and not p.screened and not p.cut and p.failed is None]


def _rates(probes: list[Probe]) -> list[float]:
    return [p.images_per_s for p in probes if p.images_per_s is not None]


def _median_rate(probes: list[Probe]) -> float | None:
    import statistics

    rates = [r for r in _rates(probes) if r > 0]
    return statistics.median(rates) if rates else None


def _not_applied(probes: list[Probe]) -> list[str]:
    return list(dict.fromkeys(entry for probe in probes for entry in probe.not_applied))


def _ratio_text(versus: Comparison) -> str:
    if versus.ratio is None:
        return "not comparable with it"
    spread = f" [{versus.low:.2f}-{versus.high:.2f}]" if versus.low is not None else ""
    return f"{versus.ratio:.2f}x{spread}"
