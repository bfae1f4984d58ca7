"""The tune's console shows its own progress lines: a probe's logging goes to its output.txt."""

from __future__ import annotations

import io
import logging
import sys

from segperf.tune.probe_job import console_handlers_to


def test_a_console_handler_bound_before_the_probe_writes_into_the_probes_log_and_is_restored_after(capsys):
    """Lightning binds a StreamHandler to stderr when imported, before any redirect: a probe's
    'Seed set to 0' and 'max_steps reached' lines must still land in its log, not among the
    tune's progress lines."""
    logger = logging.getLogger("segperf-test.console")
    handler = logging.StreamHandler(sys.stderr)
    logger.addHandler(handler)
    logger.propagate, logger.level = False, logging.INFO
    try:
        log = io.StringIO()
        with console_handlers_to(log):
            logger.info("Seed set to 0")
        logger.info("after the probe")
    finally:
        logger.removeHandler(handler)
    assert log.getvalue() == "Seed set to 0\n"
    assert capsys.readouterr().err == "after the probe\n"
