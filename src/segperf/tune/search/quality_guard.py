"""Stage 3, the quality guard (with a quality measure): the start's learning run first (its wall
time prices the reserve), the tuned configuration's at the end.

A tuned quality below the start's by more than the tolerance is confirmed before it is rejected:
one more learning run of it and of the start with the next seed (`seeds[1]`), decided on the mean
of both seeds each side, since one seed's draw can land beyond the tolerance. Still beyond it
rejects the configuration; the changes that alter what is learned (space.CHANGES_LEARNING:
precision first) are undone one at a time and re-checked the same way (the start's second-seed
run reused), and the start is the answer when none passes. The learning runs run past the budget
rather than answer with the start, which the search measured slower, and say so.
"""

from __future__ import annotations

from segperf.tune.journal import QUALITY, SPEED
from segperf.tune.probe import Config, Probe
from segperf.tune.search import budget
from segperf.tune.search.records import QualityCheck, Step
from segperf.tune.search.state import Search
from segperf.tune.search.verdicts import WORSE
from segperf.tune.space import merge, undo_learning_changes

# A short learning run's quality moves with the seed alone: size=quick over three seeds ends at Dice
# 0.982-0.989 (docs/BENCHMARKS.md, "Quality"), and size=demo at 64x96 (the guard's run) spreads by
# ~0.01; 0.02 is about three times the size=quick span. One draw can still land beyond it (an fp32
# upsample=deconv run: 0.948 against the start's 0.974, where its bf16 twin gave 0.965), so a run
# that fails is confirmed on a second seed, the start's too, and judged on the mean of both: the
# mean of two draws halves the variance of the difference.
QUALITY_TOLERANCE = 0.02


def measure_start(search: Search) -> None:
    """The start's learning run, before anything else: its wall time prices the guard's reserve."""
    if search.check is not None:
        search.at("quality")
        search.check.probes += search.ledger.probe(QUALITY, [search.start], ["start"], None)


def run(search: Search, best: Config) -> Config:
    """The guard: `best` when it learns as well as the start, else the first configuration without
    its learning changes that does, else the start. A run that gave no quality at all is rejected
    unconfirmed: a crash is not the seed's noise."""
    check = search.check
    if check is None:
        return best
    search.at("quality")
    start, start_probe = search.start, check.probes[0]
    if best == start:
        check.verdict, check.reason = "same as start", "the tuned configuration is the start"
        return best
    if start_probe.quality is None:
        check.reason = f"the start's learning run gave no quality ({start_probe.failed or 'none recorded'})"
        return best
    notes: list[str] = []
    for candidate in undo_learning_changes(best, search.settings.axes, start):
        if candidate == start:
            break
        label = " ".join(candidate)
        _note_overrun(search, notes, f"the learning run of {label}", [(candidate, start)], candidate, best)
        probe = search.ledger.probe(QUALITY, [candidate], [label], search.ledger.limit(QUALITY, start))[0]
        check.probes.append(probe)
        runs, start_runs = [probe], [start_probe]
        loss = _loss(check, runs, start_runs)
        if loss is None:
            notes.append(f"{label}: {_qualities(check, runs, start_runs)}")
        elif probe.quality is not None:  # short on one seed: confirmed on a second before it is rejected
            runs, start_runs = _confirm(search, candidate, probe, best, notes)
            loss = _loss(check, runs, start_runs)
            if loss is None:
                notes.append(
                    f"{label}: {_qualities(check, runs, start_runs)}: worse by "
                    f"{_mean(start_runs) - _mean(runs):.3f}, within the tolerance of {check.tolerance} on the mean "
                    f"of two seeds (seed {check.seeds[0]} alone: worse by {start_probe.quality - probe.quality:.3f})"
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
        search.steps.append(Step("quality", "quality", candidate, candidate, start, runs, start_runs))
        search.steps[-1].verdict, search.steps[-1].note = WORSE, loss
    check.verdict, check.fallback = WORSE, start
    check.reason = "; ".join([*notes, "the start is the answer"])
    return start


def _confirm(
    search: Search, candidate: Config, first: Probe, best: Config, notes: list[str]
) -> tuple[list[Probe], list[Probe]]:
    """The second-seed learning runs of `candidate` and of the start (the start's only while it
    has none), asked for in one ledger call, interleaved, so that they are journaled and replayed
    on a rerun like every probe; each side's runs, first seed first."""
    check = search.check
    assert check is not None  # only the guard confirms
    reseed = (f"seed={check.seeds[1]}",)
    # (the run, the run that prices it): the start's, then the candidate's, priced by its first run
    plan = [(merge(candidate, reseed), candidate)]
    if not check.confirmations:
        plan.insert(0, (merge(search.start, reseed), search.start))
    _note_overrun(search, notes, f"the second-seed learning runs of {' '.join(candidate)}", plan, candidate, best)
    labels = [" ".join(run) for run, _ in plan]
    if len(plan) == 2:
        labels[0] = f"start seed={check.seeds[1]}"
    limit = search.ledger.limit(QUALITY, search.start)
    probes = search.ledger.probe(QUALITY, [run for run, _ in plan], labels, limit)
    check.confirmations += probes
    return [first, probes[-1]], [check.probes[0], check.confirmations[0]]


def _note_overrun(
    search: Search, notes: list[str], what: str, plan: list[tuple[Config, Config]], candidate: Config, best: Config
) -> None:
    """Say so when the learning runs of `plan` ((run, the run whose wall time prices it) pairs)
    and the final stage after them cost more than the budget has left. They run all the same: a
    learning run late beats a tune that undoes itself; the chain is short, one candidate for each
    learning axis the best changed, and at most two confirming runs each."""
    final = search.ledger.cost(SPEED, budget.top_up_plan(search, candidate), best)
    needed = sum(search.ledger.estimate(QUALITY, run, like) for run, like in plan) + final
    left = search.ledger.left()
    if needed > left:
        search.stopped = True
        notes.append(f"{what} ran past the budget (about {needed:.0f} s needed, {max(left, 0):.0f} s left)")


def _loss(check: QualityCheck, runs: list[Probe], start_runs: list[Probe]) -> str | None:
    """Why a configuration's learning runs (`runs`, one per seed, first seed first) fail the guard
    against the start's runs of the same seeds, or None when they pass: the mean quality of each
    side (a start run that gave none is left out of its side's mean). Quality is higher is better
    (a `mode: min` metric is negated by the runner), so a loss is start - candidate."""
    for i, probe in enumerate(runs):
        if probe.failed is not None or probe.quality is None:
            which = f" with seed {check.seeds[i]}" if i else ""
            return f"its learning run{which} gave no quality ({probe.failed or 'none recorded'})"
    loss = _mean(start_runs) - _mean(runs)
    if loss > check.tolerance:
        return f"{_qualities(check, runs, start_runs)}: worse by {loss:.3f}, beyond the tolerance of {check.tolerance}"
    return None


def _qualities(check: QualityCheck, runs: list[Probe], start_runs: list[Probe]) -> str:
    """Both sides' qualities as the report says them: each seed's and their mean where there are two."""
    direction = f" ({runs[0].quality_metric}, lower is better)" if runs[0].lower_is_better else ""
    if len(runs) == 1:
        return f"quality {runs[0].metric_value:.3f} against the start's {start_runs[0].metric_value:.3f}{direction}"
    seeds = check.seeds
    return f"quality {_per_seed(runs, seeds)}, against the start's {_per_seed(start_runs, seeds)}{direction}"


def _mean(probes: list[Probe]) -> float:
    """The mean quality of the runs that gave one (the guard checks there is at least one)."""
    qualities = [p.quality for p in probes if p.quality is not None]
    return sum(qualities) / len(qualities)


def _per_seed(probes: list[Probe], seeds: list[int]) -> str:
    """`0.948 (seed 0) and 0.969 (seed 1), mean 0.959`: a side's learning runs, one per seed."""
    each = [
        f"{p.metric_value:.3f} (seed {seed})"
        if p.quality is not None
        else f"none (seed {seed}: {p.failed or 'no quality'})"
        for seed, p in zip(seeds, probes, strict=False)
    ]
    logged = [p.metric_value for p in probes if p.metric_value is not None]
    return f"{' and '.join(each)}, mean {sum(logged) / len(logged):.3f}"
