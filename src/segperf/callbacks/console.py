"""segperf's messages on the console, as Lightning's reach it.

Lightning's package import gives its logger a handler of its own (lightning.pytorch's __init__);
segperf does the same, but only when a PerfMonitor sets up a fit, not at import: importing segperf
changes no handler the host process sees.
"""

from __future__ import annotations

import logging
import sys

log = logging.getLogger("segperf")


class _Stdout(logging.StreamHandler):
    """A handler on whatever sys.stdout is when it writes (a test's capture, a notebook's cell)."""

    @property
    def stream(self):  # type: ignore[override]
        return sys.stdout

    @stream.setter
    def stream(self, value) -> None:  # StreamHandler.__init__ sets it
        pass


def show_on_console() -> None:
    """segperf's messages at INFO, through a handler of its own unless the application configured
    logging (then they propagate to its handlers) or a level or handler was set on the "segperf"
    logger already."""
    if log.level == logging.NOTSET:
        log.setLevel(logging.INFO)
    if not log.handlers and not logging.getLogger().hasHandlers():
        handler = _Stdout()
        handler.setFormatter(logging.Formatter("%(message)s"))
        log.addHandler(handler)
        log.propagate = False
