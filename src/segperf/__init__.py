"""segperf: where does my training time go, and which optimization buys how much?"""

from segperf.config import register_resolvers, set_up_environment
from segperf.schema import register_schema

set_up_environment()  # before albumentations, torch and matplotlib are imported
register_resolvers()
register_schema()

__all__ = ["PerfMonitor", "register_resolvers", "register_schema"]


def __getattr__(name: str):
    """`from segperf import PerfMonitor`, imported on first use: torch and Lightning take seconds to
    import, which the command lines' --help and config checks need not wait for."""
    if name == "PerfMonitor":
        from segperf.callbacks.perf_monitor import PerfMonitor

        return PerfMonitor
    raise AttributeError(f"module 'segperf' has no attribute {name!r}")
