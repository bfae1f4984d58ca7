"""Memory creep on users' scripts written apart from the detector (tests/fixtures/leak_kept_masks.py:
a LightningModule that keeps its predictions in on_train_batch_end; leak_growing_cache.py: a
DataModule whose dataset memoizes samples that never hit, or a callback that keeps batches in a
dict): each leak's rate in results.json within 35% of what it keeps a step, a forecast, the warning
before fit returned; the same scripts without the leak report nothing; a leak on one DDP rank is
named; DataLoader workers restarted every epoch neither multiply a leak in the main process nor
look like creep themselves. Real subprocess runs of PerfMonitor alone, as a user writes them."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from segperf.perf.memory_trend import MIB

FIXTURES = Path(__file__).parent / "fixtures"
KEPT_MASKS, GROWING_CACHE = FIXTURES / "leak_kept_masks.py", FIXTURES / "leak_growing_cache.py"
HISTORY = FIXTURES / "leak_history.py"
MASK_BYTES = 8 * 96 * 100 * 4  # leak_kept_masks: the predictions one step keeps (307,200 bytes)
SAMPLES_BYTES = 8 * 3 * 128 * 256 * 4  # leak_growing_cache: a batch of cached samples (3 MiB)
# glibc's malloc raises its mmap threshold to the largest block freed so far, and then serves the
# step's temporaries from its heap around the kept tensors: the heap fragments, and a 300 KiB-a-step
# leak grows the process 1.4-2.1 MiB a step, in bursts (measured). The creep trend takes malloc's
# free-but-resident heap bytes off (segperf.perf.host_memory.HeapHoles), so each leak is tested
# under the default allocator and under a fixed threshold (a mapping each kept tensor: no holes).
EXACT_MALLOC = {"MALLOC_MMAP_THRESHOLD_": "131072"}
MALLOCS = pytest.mark.parametrize("env", [None, EXACT_MALLOC], ids=["default-malloc", "mmap-threshold"])

pytestmark = pytest.mark.slow


def run_script(script: Path, out: Path, *args: str, env: dict[str, str] | None = None) -> tuple[dict, str, float]:
    """The script's rank-0 results.json, its output, and when its fit returned (time.time())."""
    done = subprocess.run(
        [sys.executable, str(script), str(out), *args],
        capture_output=True,
        text=True,
        timeout=240,
        env={**os.environ, **(env or {})},
    )
    output = done.stdout + done.stderr
    assert done.returncode == 0, output[-3000:]
    (path,) = out.rglob("results.json")
    fit_returned = json.loads((out / "fit_end.json").read_text())["fit_returned"]
    return json.loads(path.read_text()), output, fit_returned


def assert_caught(results: dict, output: str, fit_returned: float, true_rate: int) -> None:
    """The must-hold of a leaking script: its rate within 35%, forecast, warned while it ran."""
    memory = results["memory"]
    creep = memory["creep"]
    assert creep["state"] == "confirmed", memory["trend"]["host"]
    assert 0.65 * true_rate <= creep["host_bytes_per_step"] <= 1.35 * true_rate, creep
    assert creep["out_of_memory_at_step"] > memory["steps"] and creep["out_of_memory_in_s"] > 0
    assert creep["room_from"] in ("available RAM", "cgroup memory limit")
    assert memory["warnings"] and memory["warnings"][0]["time"] < fit_returned  # said during the run
    assert "segperf: memory creep" in output and "runs out at step" in output


def assert_quiet(results: dict, output: str) -> None:
    memory = results["memory"]
    assert memory["trend"]["host"]["state"] == "flat", memory["trend"]["host"]  # judged, and found flat
    assert memory["creep"]["host_bytes_per_step"] is None and memory["creep"]["out_of_memory_at_step"] is None
    assert not memory["warnings"] and "memory creep" not in output


@MALLOCS
def test_a_module_that_keeps_its_predictions_is_caught_at_the_rate_it_keeps(tmp_path, env):
    results, output, fit_returned = run_script(KEPT_MASKS, tmp_path, env=env)
    assert_caught(results, output, fit_returned, true_rate=MASK_BYTES)
    host = results["memory"]["trend"]["host"]
    assert "mallinfo2" in host["measure"] and host["process_growth_bytes_per_step"] > 0  # both said


@pytest.mark.parametrize(
    ("args", "true_rate"),
    [
        (("--style", "tensor"), 300 * 1024),  # history.append(loss.detach().clone().repeat(N))
        (("--style", "bytearray", "--leak-bytes", str(MIB)), MIB),
        (("--style", "numpy", "--leak-bytes", str(MIB)), MIB),
    ],
    ids=["tensor-300KiB", "bytearray-1MiB", "numpy-1MiB"],
)
def test_a_callback_keeping_a_history_is_caught_under_the_default_malloc(tmp_path, args, true_rate):
    assert_caught(*run_script(HISTORY, tmp_path, *args), true_rate=true_rate)


def test_the_history_without_the_leak_reports_no_creep_under_the_default_malloc(tmp_path):
    assert_quiet(*run_script(HISTORY, tmp_path, "--leak-bytes", "0")[:2])


def test_the_module_without_the_leak_reports_no_creep(tmp_path):
    assert_quiet(*run_script(KEPT_MASKS, tmp_path, "--keep-every", "0")[:2])


@pytest.mark.parametrize(
    ("args", "true_rate"),
    [
        ((), SAMPLES_BYTES),  # 3 MiB a step in the main process
        (("--cache-rate", "0.1"), SAMPLES_BYTES // 10),  # 300 KiB a step
        (("--workers", "2"), SAMPLES_BYTES),  # in two persistent workers, half each
    ],
    ids=["3MiB", "300KiB", "in-workers"],
)
@MALLOCS
def test_a_dataset_cache_that_never_hits_is_caught_at_its_rate(tmp_path, args, true_rate, env):
    assert_caught(*run_script(GROWING_CACHE, tmp_path, *args, env=env), true_rate=true_rate)


def test_the_dataset_without_its_cache_reports_no_creep(tmp_path):
    assert_quiet(*run_script(GROWING_CACHE, tmp_path, "--cache-rate", "0", "--workers", "2")[:2])


NON_PERSISTENT = ("--workers", "2", "--no-persistent", "--epoch-steps", "40", "--steps", "320")


@MALLOCS
def test_workers_restarted_every_epoch_do_not_multiply_a_leak_in_the_main_process(tmp_path, env):
    # each new worker is a fork of a main process that grew: summed over the tree, the leak counted 3x
    args = [*NON_PERSISTENT, "--main-leak-bytes", str(MIB)]
    results, output, fit_returned = run_script(GROWING_CACHE, tmp_path, *args, env=env)
    assert_caught(results, output, fit_returned, true_rate=MIB)
    assert len(results["memory"]["warnings"]) == 1  # the forecast did not halve: said once
    host = results["memory"]["pressure"]["host"]
    assert host["tree_private_peak_bytes"] > host["peak_private_bytes"]  # the tree's sum, said apart


def test_workers_starting_at_each_epoch_are_not_creep(tmp_path):
    results, output, _ = run_script(GROWING_CACHE, tmp_path, *NON_PERSISTENT, "--cache-rate", "0")
    assert_quiet(results, output)


@MALLOCS
def test_a_leak_on_one_ddp_rank_of_an_unseen_script_names_that_rank(tmp_path, env):
    args = ("--devices", "2", "--leak-rank", "1", "--steps", "300")
    results, output, _ = run_script(KEPT_MASKS, tmp_path, *args, env=env)
    assert "memory creep on rank 1" in output and "memory creep on rank 0" not in output
    rows = {row["rank"]: row["memory"] for row in results["distributed"]["ranks"]}
    assert rows[1]["creep"] == "confirmed" and rows[0]["creep"] != "confirmed"
    assert 0.65 * MASK_BYTES <= rows[1]["host_bytes_per_step"] <= 1.35 * MASK_BYTES
    assert "rank 1 creeps" in next(tmp_path.rglob("summary.txt")).read_text()


@MALLOCS
def test_a_cache_that_restarting_workers_fill_each_epoch_is_not_warned_as_creep(tmp_path, env):
    # 3 MiB a step into each epoch's workers, freed when they stop: it grows only while the epoch lasts
    results, output, _ = run_script(GROWING_CACHE, tmp_path, *NON_PERSISTENT, env=env)
    assert not results["memory"]["warnings"] and "memory creep" not in output
