"""The GPU check's rehearsal on this CPU, end to end: the wheels, `scripts/gpu_check.sh
--rehearse`, its pytest session and the files it leaves. It checks the harness (the check runs,
its runs record what the verdicts read, its files come back), not this CPU's speed: it passes on
any CPU, with or without bf16 instructions."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import tarfile

import pytest

from tests.conftest import REPO

# what the rehearsal can show: the CPU path and the check's reading are real, NVML is a fake
PASS_ON_A_CPU = (
    "runs completed",
    "NVML utilization sampled every 50 ms",
    "cache=device: batches made on the device",
    "bfloat16 autocast ran",
)


@pytest.mark.slow
def test_rehearsal_installs_the_wheels_runs_the_check_and_leaves_its_files(tmp_path):
    wheels = tmp_path / "wheels"
    made = subprocess.run(
        ["make", "gpu-wheels", f"GPU_WHEELS_DIR={wheels}"], cwd=REPO, capture_output=True, text=True, timeout=300
    )
    assert made.returncode == 0, made.stdout + made.stderr
    names = sorted(p.name.split("-")[0].lower() for p in wheels.glob("*.whl"))
    expected = ["antlr4_python3_runtime", "hydra_core", "iniconfig", "omegaconf", "packaging", "pluggy", "pygments"]
    assert names == [*expected, "pytest", "pyyaml"]
    assert sum(p.stat().st_size for p in wheels.iterdir()) <= 40 << 20
    out = tmp_path / "out"
    env = {**os.environ, "OUT": str(out), "GPU_WHEELS_DIR": str(wheels), "SEGPERF_CACHE": str(tmp_path / "cache")}
    env |= {"GPU_CHECK_WORK": str(tmp_path / "work"), "PYTHON": sys.executable}
    done = subprocess.run(
        ["bash", "scripts/gpu_check.sh", "--rehearse"], cwd=REPO, env=env, capture_output=True, text=True, timeout=600
    )
    log = done.stdout + done.stderr
    assert done.returncode == 0, log  # no FAIL, on any CPU: speed is judged on a GPU only
    files = sorted(p.name for p in out.iterdir())
    assert 2 <= len(files) <= 8 and all(p.is_file() for p in out.iterdir()), files
    assert {"verdicts.txt", "verdicts.json", "results.tar.gz", "gpu_check.log", "report.md"} <= set(files), log
    verdicts = {v["check"]: v["status"] for v in json.loads((out / "verdicts.json").read_text())}
    assert len(verdicts) == 12
    by_start = {name.split(" (")[0].split(",")[0]: status for name, status in verdicts.items()}
    assert {name: by_start[name] for name in PASS_ON_A_CPU} == dict.fromkeys(PASS_ON_A_CPU, "PASS")
    assert {status for name, status in by_start.items() if name not in PASS_ON_A_CPU} == {"SKIP"}
    assert (out / "verdicts.txt").read_text().rstrip().endswith("RESULT: PASS (4 pass, 0 fail, 8 skip)")
    # one test per claim: the four above passed, the eight only a GPU can show skipped with the reason
    assert re.search(r"4 passed, 8 skipped", log), log
    assert "speed is judged on a GPU only" in log
    assert re.search(r"hydra +1\.3\.8 +wheel", log)  # imported from the installed wheels, not the venv
    assert "install for CPython 3.12 / manylinux x86-64" in log
    with tarfile.open(out / "results.tar.gz") as archive:
        results = [n for n in archive.getnames() if n.endswith("results.json")]
    assert len(results) == 4
