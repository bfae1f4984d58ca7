"""segperf: where does my training time go, and which optimization buys how much?

Importing segperf changes nothing the importing process can see: no environment variable, no
OmegaConf resolver, no Hydra config group. segperf's own commands set up what they need at their
entry (segperf.command_line.set_up_command); code of your own that composes segperf's configs
with Hydra's compose API calls `register_resolvers()` and `register_schema()` first.
"""

from segperf.config import register_resolvers
from segperf.schema import register_schema

__all__ = ["PerfMonitor", "register_resolvers", "register_schema"]


def __getattr__(name: str):
    """`from segperf import PerfMonitor`, imported on first use: torch and Lightning take seconds to
    import, which the command lines' --help and config checks need not wait for."""
    if name == "PerfMonitor":
        from segperf.callbacks.perf_monitor import PerfMonitor

        return PerfMonitor
    raise AttributeError(f"module 'segperf' has no attribute {name!r}")
