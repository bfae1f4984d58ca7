"""PerfMonitor in a user's DDP script whose ranks meet inside the step (tests/fixtures/
user_ddp_meetings.py, 2 CPU processes, gloo): a conv net with BatchNorm (DDP broadcasts its
buffers at every forward) and a net without it that logs with sync_dist=True (an all-reduce in
training_step). A rank slow in its data makes the other wait inside its forward; it must be named
for its data and the run judged data-bound on it, never compute-bound."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

SCRIPT = Path(__file__).parent / "fixtures" / "user_ddp_meetings.py"
TIMEOUT_S = 240


def run(out: Path, *args: str) -> dict:
    done = subprocess.run(
        [sys.executable, str(SCRIPT), str(out), "--steps", "30", *args],
        capture_output=True,
        text=True,
        timeout=TIMEOUT_S,
    )
    text = done.stdout + done.stderr
    assert done.returncode == 0 and "Traceback" not in text, text[-3000:]
    assert text.count("Per-phase statistics") == 1  # the summary, once
    (path,) = out.rglob("results.json")
    return json.loads(path.read_text())


@pytest.mark.slow
@pytest.mark.serial  # alone: beside other tests' processes a rank's own steps stretch and hide part of the lag
@pytest.mark.parametrize(("net", "meeting"), [("bn", "fwd wait"), ("sync_dist", "fwd wait")])
def test_a_rank_slow_in_its_data_is_named_for_it_where_the_ranks_meet_in_the_forward(tmp_path, net, meeting):
    results = run(tmp_path, "--net", net, "--slow", "data", "--slow-rank", "1", "--delay", "0.08")
    dist = results["distributed"]
    found = dist["straggler"]
    assert (found["rank"], found["cause"]) == (1, "data"), found["text"]
    assert found["last_share"] >= 0.75 and found["lag_median_s"] > 0.04
    # rank 0 waited for rank 1's batch inside its forward: waiting, not its forward's compute
    zero = dist["ranks"][0]
    assert zero["forward_wait_mean_s"] > 0.04 and zero["forward_compute_mean_s"] < zero["forward_wait_mean_s"]
    assert meeting in found["text"]
    run_verdict = results["verdict"]
    assert run_verdict["kind"] == "data-bound" and run_verdict["rank"] == 1, run_verdict["text"]
    assert "compute-bound" not in run_verdict["text"] and "data" in run_verdict["text"]
    assert "num_workers" in run_verdict["text"]  # the advice is for rank 1's loader
    assert results["collective_wait"]["state"] == "measured"


@pytest.mark.slow
@pytest.mark.serial  # alone: beside other tests' processes one rank can be starved of CPU, a straggler in fact
def test_two_identical_batchnorm_ranks_name_nobody(tmp_path):
    results = run(tmp_path, "--net", "bn", "--slow", "none", "--work", "0.02")
    found = results["distributed"]["straggler"]
    assert found["rank"] is None and "no rank stands out" in found["text"]
    assert results["collective_wait"]["calls"].get("_broadcast_coalesced", 0) >= 30  # the buffers, every forward


@pytest.mark.slow
@pytest.mark.serial  # alone: beside other tests' processes a rank's own steps stretch and hide part of the lag
def test_a_batchnorm_nets_rank_slow_in_its_backward_is_named_for_its_backward(tmp_path):
    results = run(tmp_path, "--net", "bn", "--slow", "backward", "--slow-rank", "0", "--delay", "0.08")
    found = results["distributed"]["straggler"]
    assert (found["rank"], found["cause"]) == (0, "backward"), found["text"]
    assert results["verdict"]["rank"] == 0 and results["verdict"]["kind"] != "rank-wait-bound"


@pytest.mark.slow
@pytest.mark.serial  # alone: beside other tests' processes a rank's own steps stretch and hide part of the lag
@pytest.mark.parametrize(("between", "meeting"), [("fetch", "fetch wait"), ("callback", "betw. wait")])
def test_a_rank_waiting_between_the_steps_is_neither_data_bound_nor_overhead_bound(tmp_path, between, meeting):
    # rank 0 waits for rank 1's late batch inside its own fetch, or at a callback's barrier
    results = run(tmp_path, "--net", "bn", "--slow", "data", "--delay", "0.08", "--between", between)
    dist = results["distributed"]
    found = dist["straggler"]
    assert (found["rank"], found["cause"]) == (1, "data") and meeting in found["text"], found["text"]
    assert found["excess_s"]["data"] > 0.04  # against rank 0's own data time, not its wait
    zero = dist["ranks"][0]
    assert zero["data_own_mean_s"] < 0.04 < zero["data_wait_mean_s" if between == "fetch" else "between_wait_mean_s"]
    own = results["verdict"]["rank0"]  # rank 0's own verdict: its waiting is waiting
    assert own["kind"] not in ("data-bound", "overhead-bound", "compute-bound"), own["text"]
    assert results["verdict"]["kind"] == "data-bound" and results["verdict"]["rank"] == 1
