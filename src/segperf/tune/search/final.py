"""Stage 4, the final side by side: the start, each preset and the tuned configuration with every
probe of each so far, topped up interleaved to `min_runs` where one has fewer (the comparison the
report shows); then, with the budget left, the start and the tuned configuration, the tune's
claim, topped up side by side to `max_runs` each (a search that converged early otherwise claims
on two noisy probes of the tuned one: 1.82x [1.36-2.43] on an outside CNN with 3.4 of 6 minutes
unspent). Every probe is a steady-state probe (segperf.callbacks.steady_probe), so the claim is
of the steady state of both, measured in the same minutes.
"""

from __future__ import annotations

from segperf.tune.probe import Config, Probe
from segperf.tune.search import budget
from segperf.tune.search.state import Search


def run(search: Search, best: Config) -> tuple[dict[str, list[Probe]], dict[str, Config]]:
    """The final stage; each final configuration's probes and the configurations, by name."""
    search.at("final")
    configs = {"start": search.start, **search.settings.presets, "tuned": best}
    while plan := budget.top_up_plan(search, best):
        if not budget.pays(search, plan, best):
            search.stopped = True
            break
        _round(search, plan, configs, best)
    while not search.stopped and (plan := budget.claim_plan(search, best)):
        if not budget.pays(search, plan, best):
            break
        _round(search, plan, configs, best)
    return {name: search.known(config) for name, config in configs.items()}, configs


def _round(search: Search, plan: list[Config], configs: dict[str, Config], best: Config) -> None:
    """One round of `plan`: the start and the tuned configuration unscreened, the presets screened.
    The claim reads the first two, so a start under 1/screen_factor of the tuned speed (a 2x gain)
    must run in full; a preset that slow is only a row of the report."""
    same = search.ledger.same
    claimed = [c for c in plan if same(c, search.start) or same(c, best)]
    for part, screen in ((claimed, False), ([c for c in plan if c not in claimed], True)):
        if part:
            names = [next(n for n, c in configs.items() if c == config) for config in part]
            search.speed(part, names, best, screen=screen)
