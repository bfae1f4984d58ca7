"""The tune's ledger: every probe the search asks for, replayed from the journal or measured, the
time it cost, and what the next ones will cost.

Kept apart from the decisions (segperf.tune.search) so that those read as the strategy: the
ledger is the one place that calls a Measure, writes the journal, keeps the clock and prices a
plan against the budget. Time spent is the journal's: each record carries the tune's elapsed
seconds when it was made, so a rerun that replays it continues the same clock (and so takes the
same budget decisions the interrupted run took), then adds its own time.

The ledger also knows what was measured: configurations with the same `identity` (the run they
compose: workers=auto and data.num_workers=2 on 2 cores) share their speed probes (`known`), so
the search never measures again what an earlier probe measured.
"""

from __future__ import annotations

import statistics
from collections import Counter
from collections.abc import Callable, Hashable, Sequence
from dataclasses import replace
from typing import Any

from segperf.tune.journal import QUALITY, SPEED, Journal
from segperf.tune.probe import Config, Measure, Probe


class Ledger:
    def __init__(
        self,
        measures: dict[str, Measure | None],
        *,
        budget_s: float,
        journal: Journal | None,
        clock: Callable[[], float],
        progress: Callable[[str], None] | None,
        limit_factor: float,
        limit_floor_s: float,
        identity: Callable[[Config], Hashable] | None = None,
    ) -> None:
        self.measures, self.budget_s, self.journal, self.clock = measures, budget_s, journal, clock
        self.progress, self.limit_factor, self.limit_floor_s = progress, limit_factor, limit_floor_s
        self._repeats: Counter[tuple[str, Config]] = Counter()
        self._walls: dict[tuple[str, Config], list[float]] = {}
        self._base, self._mark = 0.0, clock()  # elapsed = base + (clock() - mark)
        self.identity = identity or (lambda config: config)
        self._known: dict[tuple[str, Hashable], list[Probe]] = {}  # by (kind, identity), in order
        self.where = ""  # the stage and step the progress lines name
        # where the budget was crossed, if it was: the stage, the probes that crossed it, what they
        # were priced at and what they took (the report says by how much and why)
        self.crossed: dict[str, Any] | None = None

    def elapsed(self) -> float:
        return self._base + (self.clock() - self._mark)

    def left(self) -> float:
        return self.budget_s - self.elapsed()

    def probe(
        self,
        kind: str,
        configs: Sequence[Config],
        labels: Sequence[str],
        limit: float | None,
        floor: float | None = None,
    ) -> list[Probe]:
        """Probes of `configs`, in order: replayed from the journal where it has this repeat of the
        configuration, the rest measured in one call, interleaved as given (with the screening
        `floor` in images/s when there is one), and journaled; one progress line per probe."""
        requests = []
        for config in configs:
            requests.append((config, self._repeats[(kind, config)]))
            self._repeats[(kind, config)] += 1
        found: list[Probe | None] = [None] * len(requests)
        for i, (config, repeat) in enumerate(requests):
            hit = self.journal.lookup(kind, config, repeat) if self.journal is not None else None
            if hit is not None:
                found[i] = hit[0]
                self._base, self._mark = max(self.elapsed(), hit[1]), self.clock()
        replayed = {i for i, probe in enumerate(found) if probe is not None}
        missing = [i for i in range(len(requests)) if i not in replayed]
        if missing:
            asked = [requests[i][0] for i in missing]
            measure = self.measures[kind]
            before, priced = self.elapsed(), self.cost(kind, asked, asked[0])
            measured = measure(asked, limit) if floor is None else measure(asked, limit, floor)
            if len(measured) != len(missing):
                raise RuntimeError(f"the tune's measure gave {len(measured)} probes for {len(missing)} configurations")
            now = self.elapsed()
            if self.crossed is None and before <= self.budget_s < now:
                what = [labels[i] for i in missing]
                self.crossed = {"where": self.where, "probes": what, "priced_s": priced, "took_s": now - before}
            for i, probe in zip(missing, measured, strict=True):
                config, repeat = requests[i]
                found[i] = probe if probe.config == config else replace(probe, config=config)
                if self.journal is not None:
                    self.journal.record(kind, repeat, found[i], now)
        for i, probe in enumerate(found):
            self._walls.setdefault((kind, requests[i][0]), []).append(probe.wall_s)
            self._known.setdefault(self._key(kind, requests[i][0]), []).append(probe)
            self._report(kind, labels[i], probe, i in replayed)
        return found

    def _key(self, kind: str, config: Config) -> tuple[str, Hashable]:
        return (kind, self.identity(config) if kind == SPEED else config)

    def known(self, kind: str, config: Config) -> list[Probe]:
        """Every probe so far of `config` or of a configuration that composes the same run."""
        return list(self._known.get(self._key(kind, config), []))

    def same(self, a: Config, b: Config) -> bool:
        """Whether two configurations train the same run (the same identity)."""
        return a == b or self.identity(a) == self.identity(b)

    def groups(self, kind: str) -> list[list[Probe]]:
        """The probes so far, one list per run measured (by identity)."""
        return [list(probes) for (k, _), probes in self._known.items() if k == kind]

    def all_probes(self) -> list[Probe]:
        """Every probe taken, of either kind, each once (an alias shares its run's list)."""
        lists = {id(probes): probes for probes in self._known.values()}
        return [probe for probes in lists.values() for probe in probes]

    def measured(self, kind: str) -> bool:
        """Whether any probe of the kind was taken (replayed or measured)."""
        return any(k == kind for k, _ in self._walls)

    def alias(self, kind: str, config: Config, like: Config) -> None:
        """Take `like`'s probes as `config`'s (a preset without a setting the machine ignored ran as
        it): its price, and what is known of its speed."""
        if (kind, config) not in self._walls:
            self._walls[(kind, config)] = list(self._walls.get((kind, like), []))
        if self._key(kind, config) not in self._known:
            self._known[self._key(kind, config)] = self._known.setdefault(self._key(kind, like), [])

    def estimate(self, kind: str, config: Config, reference: Config) -> float:
        """A probe's expected wall time: the median of its own so far, else the reference's (an
        untried candidate costs about what the best does), else that of every probe of the kind."""
        walls = self._walls.get((kind, config)) or self._walls.get((kind, reference))
        if walls and len(walls) > 1:
            # a configuration's first probe pays its one-time costs (a cold torch.compile cache:
            # ~2 min on 2 cores, then ~10 s), which its later probes do not: priced by those
            walls = walls[1:]
        if not walls:
            walls = [w for (k, _), ws in self._walls.items() if k == kind for w in ws] or [0.0]
        return statistics.median(walls)

    def cost(self, kind: str, configs: Sequence[Config], reference: Config) -> float:
        return sum(self.estimate(kind, config, reference) for config in configs)

    def limit(self, kind: str, reference: Config) -> float:
        """The most wall time one probe may take: `limit_factor` times the reference's (the best's)
        probe, at least `limit_floor_s` (compilation is a warm-up the first steps pay); before any
        probe of the kind, a quarter of the budget."""
        if not self.measured(kind):
            return max(self.limit_floor_s, self.budget_s / 4)
        return max(self.limit_floor_s, self.limit_factor * self.estimate(kind, reference, reference))

    def _report(self, kind: str, label: str, probe: Probe, replayed: bool) -> None:
        if self.progress is None:
            return
        if probe.failed is not None and not probe.cut:
            outcome = f"failed: {probe.failed}"
        elif kind == QUALITY:
            outcome = f"quality {_said(probe)}" if probe.quality is not None else "no quality"
        else:
            outcome = f"{probe.images_per_s:.3g} images/s" if probe.images_per_s is not None else "no images/s"
            outcome += f" ±{probe.half_width:.0%}" if probe.half_width is not None and probe.images_per_s else ""
        flags = (
            ("cut at the time limit", probe.cut),
            ("screened out", probe.screened),
            # which settings: beside a failure, a bare "not applied" read as the failure's cause
            (f"{', '.join(n.split(':')[0] for n in probe.not_applied)} not applied", probe.not_applied),
        )
        extras = [word for word, on in flags if on] + ([probe.imprecise] if probe.imprecise else [])
        extras += ["from the journal"] if replayed else []
        tail = f" ({', '.join(extras)})" if extras else ""
        clock = f"{self.elapsed() / 60:.1f}/{self.budget_s / 60:.1f} min"
        self.progress(f"[{self.where}, {clock}] {label}: {outcome}{tail}")


__all__ = ["Ledger", "QUALITY", "SPEED"]


def _said(probe: Probe) -> str:
    """A learning run's quality as logged, its direction where lower is better: `4.050 val_mae (lower is better)`."""
    return f"{probe.metric_value:.3f}" + (f" {probe.quality_metric} (lower is better)" if probe.lower_is_better else "")
