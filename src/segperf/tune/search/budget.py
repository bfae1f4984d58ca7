"""The budget's arithmetic: what a round of probes costs, whether the time left pays for it, and
what is kept back for the stages after it (the reserve).

Every price is the ledger's: the median wall time of a configuration's probes so far (its first
left out once there are more: it pays the one-time costs), else the best's. The reserve is the
final stage's top-ups plus the tuned configuration's learning run with a margin, so the plans of
the final stage are made here too: their price is the reserve.
"""

from __future__ import annotations

from segperf.tune.journal import QUALITY, SPEED
from segperf.tune.probe import Config, full_runs
from segperf.tune.search.state import Search

# the quality check's reserve: the start's learning run times this (the tuned one may compile, and
# the probes before it may overrun their estimates; a 10-minute tune once left 30 s of the 36 needed)
QUALITY_MARGIN = 1.5
# the final stage stops topping up a configuration with this many probes that gave no full run's
# images/s (failed, screened out or cut; any stage)
FINAL_GIVE_UP_FAILURES = 2


def pays(search: Search, configs: list[Config], best: Config) -> bool:
    """Whether the time left pays for one probe of each of `configs` (nothing kept back)."""
    return search.ledger.cost(SPEED, configs, best) <= search.ledger.left()


def affords(search: Search, configs: list[Config], best: Config) -> bool:
    """Whether the time left pays for probes of `configs` and still for the reserve."""
    return search.ledger.cost(SPEED, configs, best) + reserve(search, best) <= search.ledger.left()


def reserve(search: Search, best: Config) -> float:
    """The final stage's top-ups and the quality check's learning run, the latter with a margin:
    it is priced by the start's, and the tuned configuration's may compile or run slower."""
    kept = search.ledger.cost(SPEED, top_up_plan(search, best), best)
    if search.settings.guards_quality:
        kept += QUALITY_MARGIN * search.ledger.estimate(QUALITY, best, search.start)
    return kept


def share(search: Search, best: Config, unvisited: int) -> int:
    """The candidate probes one axis' first comparison may take so that what is left of the budget
    (less the reserve) still reaches the `unvisited` axes: at least 1."""
    per_probe = search.ledger.estimate(SPEED, best, best)
    spendable = search.ledger.left() - reserve(search, best)
    most = search.settings.max_runs
    if per_probe <= 0 or not unvisited:
        return most
    return max(1, min(most, int(spendable / (unvisited * per_probe))))


def top_up_plan(search: Search, best: Config) -> list[Config]:
    """One interleaved round of the final side by side's runs (the start, the presets, `best`) that
    have fewer than `min_runs` full runs; not of one with FINAL_GIVE_UP_FAILURES probes without a
    full run's images/s (failed, screened out as far slower than the tuned one, or cut): a run
    that fails or is screened out again and again would take every top-up, and the budget, with it."""
    unique: list[Config] = []
    for config in [search.start, *search.settings.presets.values(), best]:
        if not any(search.ledger.same(config, other) for other in unique):
            unique.append(config)
    return [c for c in unique if _wants_more(search, c, search.settings.min_runs)]


def claim_plan(search: Search, best: Config) -> list[Config]:
    """One interleaved round of the start and the tuned configuration, each while it has fewer than
    `max_runs` full runs and has not given up (FINAL_GIVE_UP_FAILURES); nothing when the tuned
    configuration is the start."""
    if search.ledger.same(best, search.start):
        return []
    return [c for c in (search.start, best) if _wants_more(search, c, search.settings.max_runs)]


def _wants_more(search: Search, config: Config, runs: int) -> bool:
    probes = search.known(config)
    full = len(full_runs(probes))
    return full < runs and len(probes) - full < FINAL_GIVE_UP_FAILURES
