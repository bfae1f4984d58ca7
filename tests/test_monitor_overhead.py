"""scripts/monitor_overhead.py: what PerfMonitor costs on a user's model, side by side and directly."""

import re
import subprocess
import sys

import pytest

from tests.conftest import REPO


@pytest.mark.slow
def test_the_script_alternates_measured_and_unmeasured_runs_and_prints_both_figures(tmp_path):
    done = subprocess.run(
        [sys.executable, "scripts/monitor_overhead.py", "--repeats", "2", "--steps", "6", "--batch-size", "4"]
        + ["--out", str(tmp_path)],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    order = re.findall(r"repeat (\d) measure=(True|False)", done.stdout)
    # each repeat runs both, the second with the other one first
    assert order == [("0", "True"), ("0", "False"), ("1", "False"), ("1", "True")]
    assert re.search(r"measured / unmeasured = \d+\.\d{4}", done.stdout)
    assert re.search(r"measured directly \(results.json measurement_cost.fraction\), median: \d+\.\d\d%", done.stdout)
    assert {p.name for p in tmp_path.iterdir()} == {"measured-0", "unmeasured-0", "measured-1", "unmeasured-1"}
