"""Every GPU claim segperf makes, one test each, judged on the GPU check's sweep (docs/GPU.md).

Skipped without a CUDA GPU, unless GPU_CHECK_REHEARSE=1 runs the check's rehearsal on this CPU:
then the claims only a GPU can show skip with the reason (no CUDA device, no run of that kind,
speed measured on a CPU), and the others are judged on the CPU's runs and a fake NVML.
A verdict's SKIP is a skipped test, its FAIL a failed one, with the figure behind it.
"""

from __future__ import annotations

import pytest

from tests.gpu.run_if import RunIf
from tests.gpu.verdicts import PASS, SKIP

pytestmark = RunIf(min_gpus=1, rehearsable=True)


def judge(check, name: str) -> None:
    verdict = check.verdicts[name]
    if verdict.status == SKIP:
        pytest.skip(f"{verdict.check}: {verdict.figure}")
    assert verdict.status == PASS, f"{verdict.check}: {verdict.figure}"


def test_every_planned_run_completed(check):
    judge(check, "runs")


def test_nvml_samples_gpu_utilization_every_50_ms_and_it_is_busy_in_training(check):
    judge(check, "nvml")


def test_cuda_event_step_times_agree_with_the_host_phases(check):
    judge(check, "cuda_events")


def test_pin_on_hands_over_pinned_host_batches(check):
    judge(check, "pin")


def test_the_device_cache_makes_batches_on_the_device_without_a_dataloader(check):
    judge(check, "device_cache")


def test_compile_runs_compiled_with_triton_and_no_eager_fallback(check):
    judge(check, "compile")


def test_bf16_runs_under_bfloat16_autocast(check):
    judge(check, "bf16")


def test_fp16_runs_under_float16_autocast_with_loss_scaling(check):
    judge(check, "fp16")


def test_mfu_is_a_fraction_of_the_gpus_dense_peak(check):
    judge(check, "mfu")


def test_no_host_synchronization_in_most_steady_steps(check):
    judge(check, "host_sync")


def test_opt_all_waits_a_smaller_share_of_each_step_for_data_than_the_baseline(check):
    judge(check, "data_wait")


def test_opt_all_trains_more_images_per_s_than_the_baseline(check):
    judge(check, "images_per_s")
