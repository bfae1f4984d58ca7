"""Stage 1, the presets: the start and each preset measured interleaved, A B C A B C, until each
preset is decided against the start or has `max_runs` probes; the fastest preset that is faster
beyond noise becomes the best, so the tuned result starts from, and never ends below, it.

A preset far slower than the start after its first timed steps is screened out then. The presets'
first `min_runs` rounds come before the budget's reserve: they decide what the tuned result is
held to. A preset setting the machine did not honour (pin=on without a GPU) is taken out of it
when it is adopted: what ran is the preset without it.
"""

from __future__ import annotations

from segperf.perf.decision import later_interval
from segperf.tune.journal import SPEED
from segperf.tune.probe import Config, full_runs, not_applied_of
from segperf.tune.search import budget
from segperf.tune.search.comparison import decide
from segperf.tune.search.records import Step
from segperf.tune.search.state import Search, charge
from segperf.tune.search.verdicts import (
    EVEN_LATER,
    KEPT,
    NOT_APPLIED,
    SAME,
    SLOWER,
    UNCOMPILED_TIE,
    ratio_text,
    stops_compiling,
)
from segperf.tune.space import without_settings


def run(search: Search) -> Config:
    """The presets' stage; the best configuration it leaves (the start when no preset is faster)."""
    search.at("presets")
    start, settings = search.start, search.settings
    steps = {
        name: Step("presets", name, config, config, start)
        for name, config in settings.presets.items()
        if not search.ledger.same(config, start)
    }
    search.steps.extend(steps.values())
    open_ = list(steps)
    for round_ in range(settings.max_runs):
        if not open_:
            break
        configs = [steps[name].candidate for name in open_]
        # the start as in any comparison: only while it has fewer than min_runs full runs (a start
        # measured on, round after round, beside presets still open was measured again for the
        # same decision)
        again = [start] if len(full_runs(search.known(start))) < settings.min_runs else []
        if round_ == 0:
            charge(steps[open_[0]], search.start_alone() if not search.known(start) else [])
            probes = search.speed(configs, open_, start)
        elif not _pays_for(search, [*again, *configs], round_):
            search.stopped = True
            break
        else:
            probes = search.speed([*again, *configs], ["start"] * len(again) + open_, start)
            charge(steps[open_[0]], probes[: len(again)])
            probes = probes[len(again) :]
        for name, probe in zip(list(open_), probes, strict=True):
            step = steps[name]
            charge(step, [probe])
            step.candidate_probes, step.against_probes = search.known(step.candidate), search.known(start)
            if decide(search, step, runs=round_ + 1):
                open_.remove(name)
    for name in open_:
        decide(search, steps[name], runs=settings.max_runs)
    return adopt(search, list(steps.values()))


def _pays_for(search: Search, configs: list[Config], round_: int) -> bool:
    """Whether the budget pays for this round: the first `min_runs` rounds come before the
    reserve (they decide what the tuned result is held to), the later ones after it."""
    if round_ < search.settings.min_runs:
        return budget.pays(search, configs, search.start)
    return budget.affords(search, configs, search.start)


def adopt(search: Search, steps: list[Step]) -> Config:
    """The fastest preset faster beyond noise, without the settings the machine did not honour
    (that is what ran), becomes the best; the other faster ones are held against it, and a tie
    goes to the one that does not compile."""
    for step in (s for s in steps if s.verdict == KEPT):
        ignored = not_applied_of(step.candidate_probes)
        stripped, dropped = without_settings(step.candidate, ignored, search.settings.axes, search.start)
        if dropped is None:
            step.verdict, step.note = NOT_APPLIED, f"sets what this machine cannot honour: {'; '.join(ignored)}"
        elif dropped:
            step.note = f"taken without {' '.join(dropped)}, not applied here ({'; '.join(ignored)})"
            search.ledger.alias(SPEED, stripped, step.candidate)
            step.candidate = stripped
    faster = sorted((s for s in steps if s.verdict == KEPT), key=lambda s: -(s.ratio or 0.0))
    if not faster:
        return search.start
    best, later = faster[0], (search.settings.later.relative, search.within())
    for other in faster[1:]:
        versus = search.comparison(other.candidate_probes, faster[0].candidate_probes)
        other.verdict = SLOWER if versus.distinguishable else SAME
        other.note = f"faster than the start, but {ratio_text(versus, *later)} of {faster[0].axis}, side by side"
        if other.verdict == SLOWER and (low := later_interval(versus, *later)[0]) is not None and low <= 1:
            other.note += f"; slower beyond this tune's noise only ({versus.low:.2f}-{versus.high:.2f}): {EVEN_LATER}"
        if other.verdict == SAME and best is faster[0] and stops_compiling(other.candidate, best.candidate):
            other.verdict, other.note = KEPT, f"{UNCOMPILED_TIE} ({ratio_text(versus, *later)} of {best.axis})"
            best.verdict, best.note = SAME, f"as fast as {other.axis}, which does not compile"
            best = other
    return best.candidate
