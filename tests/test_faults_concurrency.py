"""Two processes preparing the same built-in data at the same moment (two sweeps started
together, the ranks of a data-parallel run) neither fail nor corrupt it: one builds, the other
waits and uses it."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

from segperf.data.carvana.checks import check_layout
from segperf.data.carvana.layout import scan_layout
from segperf.data.mnist.datamodule import read_splits
from tests.conftest import REPO

PREPARE = """
import json, os, sys, time
from pathlib import Path
from segperf.data.mnist.digits import ensure_builtin
from segperf.data.carvana.synthetic import ensure_synthetic
cache, go = Path(sys.argv[1]), Path(sys.argv[2])
print("ready", flush=True)
while not go.exists():
    time.sleep(0.001)
carvana = ensure_synthetic(cache, cars=2, seed=3, width=240, height=160)
mnist = ensure_builtin(cache, train=600, test=100, seed=3)
print(json.dumps([str(carvana), str(mnist)]), flush=True)
"""


def test_two_processes_preparing_the_same_built_in_data_at_once_build_it_once_and_both_use_it(tmp_path):
    cache, go = tmp_path / "cache", tmp_path / "go"
    env = {**os.environ, "NO_ALBUMENTATIONS_UPDATE": "1"}
    procs = [
        subprocess.Popen(
            [sys.executable, "-c", PREPARE, str(cache), str(go)],
            cwd=REPO,
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for _ in range(2)
    ]
    for proc in procs:  # both imported and waiting: they start preparing at the same moment
        assert proc.stdout.readline().strip() == "ready", proc.stderr.read()
    go.touch()
    deadline = time.monotonic() + 120
    outputs = [proc.communicate(timeout=max(1.0, deadline - time.monotonic())) for proc in procs]
    for proc, (_, err) in zip(procs, outputs, strict=True):
        assert proc.returncode == 0, err[-3000:]
    paths = [json.loads(out.strip().splitlines()[-1]) for out, _ in outputs]
    assert paths[0] == paths[1]
    carvana, mnist = (Path(p) for p in paths[0])
    printed = "".join(out for out, _ in outputs)
    assert printed.count(f"synthetic Carvana images into {carvana}") == 1  # built once, not twice
    assert printed.count(f"MNIST-format digits into {mnist}") == 1
    # complete and readable, and nothing half-made or left over beside them
    report = check_layout(scan_layout(carvana))
    assert (report.checked, report.bad, report.orphan_masks) == (32, [], [])
    splits = read_splits(mnist)
    assert (len(splits["train"][1]), len(splits["test"][1])) == (600, 100)
    assert sorted(p.name for p in cache.iterdir()) == sorted([carvana.name, mnist.name])
