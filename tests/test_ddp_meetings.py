"""segperf's own data-parallel runs (trainer=ddp: the U-Net with BatchNorm, 2 CPU processes, gloo)
where the ranks meet inside the step: DDP broadcasts BatchNorm's running statistics at every
forward, so a rank that waits for a late one waits in its forward. The rank rows carry the wait
in each meeting; one rank slow in its data (tests/fixtures/slow_rank_storage.py) is named for its
data and the run judged data-bound on it; two identical ranks name nobody. The same rules as a
user's own script (tests/test_monitor_ddp_meetings.py), through segperf's own run record."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.conftest import NARROW_UNET, TINY, run_cli

ROOT = Path(__file__).resolve().parents[1]
DDP_BN = ["trainer=ddp", "trainer.accelerator=cpu", "trainer.devices=2", "warmup_steps=1", "model.net.norm=batch"]
# 8 steps a rank; validation only at the end
SIZE = ["train_images=64", "val_every_images=1000", *NARROW_UNET]
SLOW_DATA = "data._target_=tests.fixtures.slow_rank_storage.SlowRankCarvana"


def run(tmp_path: Path, data_root: Path, *args: str, env: dict | None = None) -> dict:
    done = run_cli(
        [*TINY, f"data.root={data_root}", *DDP_BN, *SIZE, *args, "hydra.run.dir=run"],
        cwd=tmp_path,
        timeout=240,
        env={"PYTHONPATH": str(ROOT), **(env or {})},
    )
    assert done.returncode == 0, done.stderr[-3000:]
    results = json.loads((tmp_path / "run" / "results.json").read_text())
    assert results["status"] == "completed" and results["collective_wait"]["state"] == "measured"
    assert results["collective_wait"]["calls"].get("_broadcast_coalesced", 0) >= 8  # BatchNorm's buffers
    return results


@pytest.mark.slow
@pytest.mark.serial  # alone: beside other tests' processes one rank can be starved of CPU, a straggler in fact
def test_segperfs_own_batchnorm_ranks_carry_their_waits_and_two_alike_name_nobody(tmp_path, tiny_carvana):
    results = run(tmp_path, tiny_carvana)
    dist = results["distributed"]
    for row in dist["ranks"]:  # where each waited for the other, per step
        assert row["forward_wait_mean_s"] is not None and row["allreduce_wait_mean_s"] is not None
        assert row["meeting_wait_mean_s"] is not None and row["forward_compute_mean_s"] > 0
    assert dist["slowest_by"].startswith("meeting_wait_mean_s")
    found = dist["straggler"]
    assert found["rank"] is None and "no rank stands out" in found["text"], found["text"]
    assert "fwd wait" in (tmp_path / "run" / "summary.txt").read_text()


@pytest.mark.slow
@pytest.mark.serial  # alone: beside other tests' processes a rank's own steps stretch and hide part of the lag
def test_segperfs_own_rank_slow_in_its_data_is_named_for_it_and_the_run_is_data_bound_on_it(tmp_path, tiny_carvana):
    results = run(tmp_path, tiny_carvana, SLOW_DATA, env={"SLOW_RANK": "1", "SLOW_RANK_BATCH_DELAY_S": "0.25"})
    dist = results["distributed"]
    found = dist["straggler"]
    assert (found["rank"], found["cause"]) == (1, "data"), found["text"]
    zero = dist["ranks"][0]  # rank 0 waited for rank 1's batch in DDP's buffer broadcast, inside its forward
    assert zero["forward_wait_mean_s"] > 0.1 and zero["forward_compute_mean_s"] < zero["forward_wait_mean_s"]
    verdict = results["verdict"]
    assert verdict["kind"] == "data-bound" and verdict["rank"] == 1, verdict["text"]
    assert "compute-bound" not in verdict["text"] and "waiting for data" in verdict["text"]
    assert "workers=auto" in verdict["overrides"]  # the advice is for rank 1's loader, in segperf's knobs
