"""Importing segperf, or PerfMonitor into a user's own script, changes nothing that script can see:
no environment variable (their torch.compile cache stays where it was), no OmegaConf resolver or
Hydra config group in their own Hydra app, no logging handler. segperf's commands set up what they
need at their entry (segperf.command_line.set_up_command)."""

from __future__ import annotations

import os
import subprocess
import sys

from segperf.config import TOOL_CACHES
from tests.conftest import REPO

# run in a fresh interpreter: this test process has set segperf up, as a command does
USERS_SCRIPT = """
import logging, os
import lightning, torch  # the user's own imports come first; they set variables of their own
before = dict(os.environ)
def handlers():
    loggers = [logging.getLogger(), *logging.Logger.manager.loggerDict.values()]
    return {(getattr(l, "name", None), h) for l in loggers for h in getattr(l, "handlers", [])}
handlers_before = handlers()

import segperf
from segperf import PerfMonitor
import segperf.data.carvana, segperf.data.mnist, segperf.data.imagefolder  # the DataModules, for a script

from hydra.core.config_store import ConfigStore
from omegaconf import OmegaConf
changed = sorted(k for k in before.keys() | os.environ.keys() if before.get(k) != os.environ.get(k))
print("environment:", changed)
print("resolvers:", [r for r in ("cores_per_rank", "segperf_cache_dir", "job_dirname") if OmegaConf.has_resolver(r)])
print("config store:", sorted(k for k in ConfigStore.instance().repo if "schema" in k))
print("config groups:", sorted(k for g in ("data", "model") for k in ConfigStore.instance().repo.get(g, {})))
print("handlers:", sorted(str(name) for name, _ in handlers() - handlers_before))
"""


def test_importing_segperf_and_perf_monitor_leaves_the_users_process_as_it_was():
    # the shell of a user who never ran a segperf command: none of the variables those set
    env = {k: v for k, v in os.environ.items() if k not in {"NO_ALBUMENTATIONS_UPDATE", *TOOL_CACHES}}
    env.pop("PYTHONPATH", None)
    shown = subprocess.run(
        [sys.executable, "-c", USERS_SCRIPT], cwd=REPO, env=env, capture_output=True, text=True, timeout=120
    )
    assert shown.returncode == 0, shown.stderr
    assert shown.stdout.splitlines() == [
        "environment: []",
        "resolvers: []",
        "config store: []",
        "config groups: []",
        "handlers: []",
    ]
