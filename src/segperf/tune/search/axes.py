"""Stage 2, the axes: coordinate ascent from the best, breadth first, so that a budget running out
still leaves every axis visited.

The passes, in order: each axis' first option the best does not have (the budget left, less the
reserve, shared among the axes not visited yet); then every axis' other options; then the
options this machine emulates (one probe each, stopped at the best's own probe time); then, as
"interactions", the axes where something was kept, again, against the final best (axes interact).
An option is kept only when it is faster beyond noise, ran as asked and did not fail; it then is
the best the next options are measured against. An option the best already has, or one that
composes the same run as the best, is not measured; neither is a pair measured against each
other before.
"""

from __future__ import annotations

from segperf.tune.journal import SPEED
from segperf.tune.probe import Config
from segperf.tune.search import budget
from segperf.tune.search.comparison import measure_until_decided
from segperf.tune.search.records import Step
from segperf.tune.search.state import Search
from segperf.tune.search.verdicts import KEPT, SKIPPED
from segperf.tune.space import SearchAxis, effective, setting, with_setting

Plan = list[tuple[SearchAxis, list[Config]]]


def run(search: Search, best: Config) -> Config:
    """The axes' stage from `best`; the best configuration it leaves."""
    axes, emulated = search.settings.axes, search.settings.is_emulated
    native: Plan = [(a, [o for o in a.options if not emulated(o)]) for a in axes]
    slow: Plan = [(a, [o for o in a.options if emulated(o)]) for a in axes]
    first: Plan = [(a, n + s) for (a, n), (_, s) in zip(native, slow, strict=True)]  # emulated last in its axis
    tried: set[frozenset] = set()  # pairs of runs (identities) measured against each other
    visited: set[str] = set()
    kept: list[SearchAxis] = []
    for stage, plan, first_only in [("axes", first, True), ("axes", native, False), ("axes", slow, False)]:
        best = _pass(search, stage, plan, best, tried, visited, kept, first_only)
    again: Plan = [(a, [o for o in a.options if not emulated(o)]) for a in kept]
    return _pass(search, "interactions", again, best, tried, visited, kept, False)


def _pass(
    search: Search,
    stage: str,
    plan: Plan,
    best: Config,
    tried: set[frozenset],
    visited: set[str],
    kept: list[SearchAxis],
    first_only: bool,
) -> Config:
    """One pass over `plan`: each axis' options against the best (`first_only`: the first one
    measured, at most its share of the budget), keeping what is faster."""
    for axis, options in plan:
        if first_only and axis.name in visited:
            continue
        share = (
            budget.share(search, best, len([a for a, o in plan if o and a.name not in visited])) if first_only else None
        )
        for option in options:
            step = _try(search, stage, axis, option, best, tried, share)
            if step is None:
                continue
            visited.add(axis.name)
            if step.verdict == KEPT:
                best = step.candidate
                kept += [axis] if stage == "axes" and axis not in kept else []
            if first_only:
                break
    return best


def _try(
    search: Search,
    stage: str,
    axis: SearchAxis,
    option: Config,
    best: Config,
    tried: set[frozenset],
    share: int | None,
) -> Step | None:
    """One option of an axis against the best, at most `share` candidate probes; None (nothing
    measured, no step) when the best has it already or the two runs were measured against each
    other before."""
    start = search.start
    # the start's own option is no override: one spelling per configuration
    start_own = set(option) == set(effective(start, axis, start))
    candidate = with_setting(best, axis, setting(start, axis) if start_own else option)
    pair = frozenset((search.ledger.identity(candidate), search.ledger.identity(best)))
    if search.ledger.same(candidate, best) or pair in tried:
        return None
    tried.add(pair)
    search.at(f"step {len(search.steps) + 1}, {stage} {axis.name}")
    brief = search.settings.is_emulated(option)
    # an emulated option: one probe, stopped at the best's own probe time (screening may not come
    # soon enough: its warm-up steps alone run at a tenth of the speed)
    limit = search.ledger.estimate(SPEED, best, best) if brief else None
    step = measure_until_decided(
        search, stage, axis, option, candidate, best, max_runs=1 if brief else share, limit=limit
    )
    if brief and step.verdict != SKIPPED:
        step.note = "; ".join(filter(None, [f"tried last and once: {search.settings.emulated[option[0]]}", step.note]))
    search.steps.append(step)
    return step
