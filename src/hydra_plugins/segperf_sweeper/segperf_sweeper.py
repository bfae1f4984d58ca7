"""`hydra/sweeper=segperf`: Hydra's basic sweeper, with repeats run as passes over the grid.

Hydra's BasicSweeper runs the cartesian product with the last override varying fastest, so
`-m pin=off,on +repeat=0,1,2` runs A A A B B B: each configuration's repeats back to back. Then
whatever drifts during a sweep (a neighbour's job starting, the CPU warming up and throttling,
caches filling, the first job's one-time costs) lands on one configuration and reads as a
speed-up. This sweeper runs the same jobs with the `slowest` keys (`repeat`, also given as
`+repeat`) varying slowest: every configuration once, then all of them again (A B A B A B), so
drift spreads over all configurations and shows as spread between repeats instead.

Everything else is the basic sweeper's: the same parsing, the same job numbers in order
(`hydra.job.num`, the run folders' prefix), batches of `max_batch_size` handed to whatever
launcher is configured (`self.launcher.launch`: the basic one, submitit's local or SLURM one).
Only Hydra is imported here: Hydra imports every plugin module at start-up. (No `from __future__
import annotations`: Hydra runs this module before it is in sys.modules, where dataclasses would
look the postponed annotations up.)
"""

from collections.abc import Sequence
from dataclasses import dataclass, field

from hydra._internal.core_plugins.basic_sweeper import BasicSweeper
from hydra.core.config_store import ConfigStore
from hydra.core.override_parser.types import Override
from hydra.plugins.sweeper import Sweeper

from segperf.command_line import override_key


@dataclass
class SegperfSweeperConf:
    _target_: str = "hydra_plugins.segperf_sweeper.segperf_sweeper.SegperfSweeper"
    max_batch_size: int | None = None
    params: dict[str, str] | None = None
    # keys that vary slowest, in this order (a `+` or `++` in front of a key does not matter)
    slowest: list[str] = field(default_factory=lambda: ["repeat"])


ConfigStore.instance().store(group="hydra/sweeper", name="segperf", node=SegperfSweeperConf, provider="segperf")


def slowest_first(jobs: Sequence[Sequence[str]], slowest: Sequence[str]) -> list[list[str]]:
    """`jobs` (override lists in Hydra's order) reordered so the `slowest` keys vary slowest.

    A stable sort on the position of each job's value of those keys in its sweep: the jobs of
    the first repeat come first, in Hydra's order, then those of the second, and so on. Each
    job's own overrides are left as they are, so its `override_dirname` does not change.
    """
    values: dict[str, list[str]] = {key: [] for key in slowest}  # each key's values, in sweep order
    for job in jobs:
        for override in job:
            seen = values.get(override_key(override))
            if seen is not None and override not in seen:
                seen.append(override)

    def rank(job: Sequence[str]) -> tuple[int, ...]:
        by_key = {override_key(o): o for o in job}
        return tuple(values[key].index(by_key[key]) if key in by_key else 0 for key in slowest)

    return [list(job) for job in sorted(jobs, key=rank)]


class SegperfSweeper(BasicSweeper):
    def __init__(
        self,
        max_batch_size: int | None = None,
        params: dict[str, str] | None = None,
        slowest: Sequence[str] = ("repeat",),
    ) -> None:
        # BasicSweeper.__init__'s own state, set here: it calls super(BasicSweeper, self), which looks
        # the class up by name, and Hydra's plugin scan may run basic_sweeper.py again after this
        # class was made, so that name can be a newer class than the one this one derives from
        Sweeper.__init__(self)
        self.overrides = None
        self.batch_index = 0
        self.max_batch_size = max_batch_size
        self.params = params or {}
        self.hydra_context = self.config = self.launcher = None
        self.slowest = [override_key(key) for key in slowest]

    def split_arguments(self, overrides: list[Override], max_batch_size: int | None) -> list[list[list[str]]]:
        """BasicSweeper's batches of jobs, from the reordered list of all jobs."""
        (jobs,) = BasicSweeper.split_arguments(overrides, None)  # every job, in Hydra's order
        jobs = slowest_first(jobs, self.slowest)
        size = len(jobs) if max_batch_size in (None, -1) else max_batch_size
        return [jobs[i : i + size] for i in range(0, len(jobs), size)]
