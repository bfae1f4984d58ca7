"""`hydra/sweeper=segperf_tuner`: the sweeper of `python -m segperf.tune` (conf/tune.yaml).

A Hydra Sweeper decides which jobs to run and hands them to the configured launcher; this one
hands them to the tuner's search (segperf.tune.search), which asks for short training runs of
candidate configurations until it knows the fastest one. Each probe goes through
`self.launcher.launch(batch, initial_job_idx)`, so the basic launcher runs them one after another
in this process and `hydra/launcher=slurm` (or `local`) runs them as submitit jobs, as for any
sweep; every probe is an ordinary run folder under the sweep folder with its results.json.

Only Hydra is imported here: Hydra imports every plugin module at start-up, for every command
line; the tuner (segperf.tune.cli) is imported when a tune starts. (No `from __future__ import
annotations`: Hydra runs this module before it is in sys.modules, where dataclasses would look
the postponed annotations up.)
"""

from dataclasses import dataclass
from typing import Any

from hydra.core.config_store import ConfigStore
from hydra.plugins.sweeper import Sweeper


@dataclass
class SegperfTunerConf:
    _target_: str = "hydra_plugins.segperf_tuner.segperf_tuner.SegperfTuner"


ConfigStore.instance().store(group="hydra/sweeper", name="segperf_tuner", node=SegperfTunerConf, provider="segperf")


class SegperfTuner(Sweeper):
    def __init__(self) -> None:
        super().__init__()
        self.hydra_context = self.config = self.launcher = None

    def setup(self, *, hydra_context: Any, task_function: Any, config: Any) -> None:
        from hydra.core.plugins import Plugins

        self.hydra_context = hydra_context
        self.config = config
        self.launcher = Plugins.instance().instantiate_launcher(
            hydra_context=hydra_context, task_function=task_function, config=config
        )

    def sweep(self, arguments: list[str]) -> Any:
        """Tune from the configuration `arguments` give (the command line's overrides)."""
        from segperf.tune.cli import tune

        return tune(self.config, self.hydra_context.config_loader, self.launcher, arguments)
