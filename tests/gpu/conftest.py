"""The GPU check's session: one sweep, run the first time a test asks for `check`, judged once.

Set by the environment (scripts/gpu_check.sh sets them): GPU_CHECK_REHEARSE=1 (the CPU rehearsal),
GPU_CHECK_OUT (where verdicts.txt, report.md, charts and results.tar.gz go; default: the work
folder's out/), GPU_CHECK_WORK (the sweep's folder; default: a pytest temp folder),
GPU_CHECK_BUDGET_S (the whole check's seconds: 480 on a GPU, 300 rehearsed), GPU_CHECK_SITE (the
folder the wheels were installed into: the imports are checked to come from there), GPU_CHECK_ARGS
(Hydra overrides added to every run, e.g. `train_images=300` when the check ran out of time).
"""

from __future__ import annotations

import os
import time
from dataclasses import replace
from pathlib import Path

import pytest

from tests.gpu.run_if import rehearsing
from tests.gpu.sweep import Check, gpu_plan, rehearsal_plan, run_check, write_files


@pytest.fixture(scope="session")
def check(tmp_path_factory) -> Check:
    started = time.monotonic()
    rehearsal = rehearsing()
    budget = float(os.environ.get("GPU_CHECK_BUDGET_S") or (300 if rehearsal else 480))
    plan = rehearsal_plan(budget) if rehearsal else gpu_plan(budget)
    plan = replace(plan, extra=(*plan.extra, *os.environ.get("GPU_CHECK_ARGS", "").split()))
    work = Path(os.environ.get("GPU_CHECK_WORK") or tmp_path_factory.mktemp("gpu-check"))
    judged = run_check(plan, work, started, os.environ.get("GPU_CHECK_SITE") or None)
    out = Path(os.environ.get("GPU_CHECK_OUT") or work / "out")
    files = write_files(judged, out)
    print("\n".join([*judged.log, f"files in {out}: {' '.join(files)}"]))
    return judged
