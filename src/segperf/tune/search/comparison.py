"""One comparison: a candidate against the best, measured until the decision rule decides.

The candidate is measured one probe at a time (screened against the best's images/s), up to a
number of probes; the best only while it has fewer than `min_runs` full runs (then interleaved,
B A). Every probe of either run so far counts, whichever step measured it: nothing is measured
twice for the same decision.
"""

from __future__ import annotations

from segperf.tune.journal import SPEED
from segperf.tune.probe import Config, full_runs
from segperf.tune.search import budget
from segperf.tune.search.records import Step
from segperf.tune.search.state import Search, charge
from segperf.tune.search.verdicts import NOT_APPLIED, judge
from segperf.tune.space import SearchAxis


def decide(search: Search, step: Step, *, runs: int) -> bool:
    """Judge `step` on its probes (segperf.tune.search.verdicts.judge); True when it is decided."""
    versus = search.comparison(step.candidate_probes, step.against_probes)
    settings = search.settings
    return judge(
        step,
        versus,
        runs=runs,
        max_runs=settings.max_runs,
        screen_factor=settings.screen_factor,
        later=settings.later.relative,
        within=search.within(),
    )


def measure_until_decided(
    search: Search,
    stage: str,
    axis: SearchAxis,
    option: Config,
    candidate: Config,
    best: Config,
    max_runs: int | None = None,
    limit: float | None = None,
) -> Step:
    """`candidate` (the best with `option`) against `best` until decided, at most `max_runs`
    probes of the candidate (`limit`: each one's time limit, else the ledger's)."""
    step = Step(stage, axis.name, option, candidate, best)
    if known := known_not_applied(search, axis, option):
        step.verdict, step.note = NOT_APPLIED, f"{'; '.join(known)} (known from an earlier probe: not measured)"
        return step
    step.candidate_probes, step.against_probes = search.known(candidate), search.known(best)
    step.reused = len(step.candidate_probes) + len(step.against_probes)
    most = max_runs or search.settings.max_runs
    if step.candidate_probes and decide(search, step, runs=len(step.candidate_probes)):
        return step  # decided on what earlier steps measured
    while len(step.candidate_probes) < most:
        need_best = len(full_runs(step.against_probes)) < search.settings.min_runs
        configs = [best, candidate] if need_best else [candidate]
        if not budget.affords(search, configs * (1 if step.candidate_probes else first_round(search)), best):
            search.stopped = True
            if step.probes_run == 0:
                step.candidate_probes, step.against_probes = [], []  # nothing was decided on them
                return step  # skipped: budget
            step.note = "stopped by the budget before it was decided"
            break
        if not search.ledger.measured(SPEED):  # the tune's first probe: alone, it sets the time limit
            charge(step, search.start_alone())
            configs = [candidate]
        charge(step, search.speed(configs, ["best", " ".join(option)][-len(configs) :], best, limit))
        step.candidate_probes, step.against_probes = search.known(candidate), search.known(best)
        if decide(search, step, runs=len(step.candidate_probes)):
            return step
    decide(search, step, runs=search.settings.max_runs)
    return step


def first_round(search: Search) -> int:
    """How many probes of the candidate a comparison may need before it can be decided: one where
    the noise is known from the tune's other runs, else `min_runs`."""
    groups = [g for g in search.rate_groups() if len(g) >= 2]
    return 1 if sum(len(g) - 1 for g in groups) >= 3 else search.settings.min_runs


def known_not_applied(search: Search, axis: SearchAxis, option: Config) -> list[str]:
    """The `key: reason` entries an earlier probe with this option gave for this axis' keys: a
    setting the machine did not honour then will not be honoured now."""
    entries = [
        entry
        for probes in search.ledger.groups(SPEED)
        for probe in probes
        if set(option) <= set(probe.config)
        for entry in probe.not_applied
        if entry.split(":", 1)[0].strip() in axis.keys
    ]
    return list(dict.fromkeys(entries))
