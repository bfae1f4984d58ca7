"""The verdict names the dominant bottleneck, its evidence and segperf's options to try."""

from __future__ import annotations

import json

from segperf.perf.verdict import THRESHOLDS, verdict


def make_phases(**seconds: float) -> dict[str, dict]:
    """A phases table as the phase accounting produces it, from wall seconds per phase."""
    wall = sum(seconds.values())
    return {name: {"calls": 1, "wall_s": s, "fraction": s / wall} for name, s in seconds.items()}


BASE = {"define_model": 0.5, "setup": 1.0, "warmup": 2.0, "teardown": 0.5}


def test_a_big_data_wait_share_is_data_bound_naming_the_share_and_workers():
    phases = make_phases(**BASE, data_wait=61.0, batch_to_device=1.0, train_step=38.0, validation=2.0)
    v = verdict(phases, starved_fraction=0.8, gpu_util_mean=0.38, device_type="cuda")
    assert v["kind"] == "data-bound"
    assert "61%" in v["text"] and "38% busy" in v["text"] and "80% of steps starved" in v["text"]
    assert "workers=auto" in v["text"] and "pin=on" in v["text"]
    json.dumps(v)


def test_data_bound_on_a_cpu_gives_no_gpu_only_advice():
    phases = make_phases(**BASE, data_wait=40.0, train_step=60.0)
    v = verdict(phases, starved_fraction=None, gpu_util_mean=None, device_type="cpu")
    assert v["kind"] == "data-bound" and "workers=auto" in v["text"]
    assert "pin=on" not in v["text"] and "GPU" not in v["text"]


def test_gpu_utilization_in_percent_is_understood():
    phases = make_phases(**BASE, data_wait=50.0, train_step=50.0)
    v = verdict(phases, starved_fraction=0.5, gpu_util_mean=30.0, device_type="cuda")
    assert v["kind"] == "data-bound" and "30% busy" in v["text"]


def test_data_wait_with_a_busy_gpu_is_not_data_bound():
    # the host waited, but the GPU was still working through queued kernels
    phases = make_phases(**BASE, data_wait=30.0, train_step=70.0)
    v = verdict(phases, starved_fraction=0.1, gpu_util_mean=0.95, device_type="cuda")
    assert v["kind"] == "compute-bound"
    assert "precision=bf16" in v["text"]


def test_frequent_starved_steps_with_a_moderate_wait_are_data_bound():
    phases = make_phases(**BASE, data_wait=15.0, train_step=85.0)
    assert verdict(phases, starved_fraction=0.5, gpu_util_mean=None, device_type="cpu")["kind"] == "data-bound"
    assert verdict(phases, starved_fraction=0.1, gpu_util_mean=None, device_type="cpu")["kind"] == "compute-bound"


def test_a_big_train_step_share_on_cpu_is_compute_bound_mentioning_the_cpu():
    phases = make_phases(**BASE, data_wait=5.0, batch_to_device=0.1, train_step=93.0, logging=2.0)
    v = verdict(phases, starved_fraction=0.0, gpu_util_mean=None, device_type="cpu")
    assert v["kind"] == "compute-bound"
    assert "CPU" in v["text"] and "93%" in v["text"]
    assert "pin=on" not in v["text"] and "bf16" not in v["text"]


def test_a_big_batch_to_device_share_on_gpu_is_copy_bound():
    phases = make_phases(**BASE, data_wait=2.0, batch_to_device=30.0, train_step=68.0)
    v = verdict(phases, starved_fraction=0.0, gpu_util_mean=0.5, device_type="cuda")
    assert v["kind"] == "copy-bound" and "30%" in v["text"] and "pin=on" in v["text"]


def test_warm_up_dominating_the_run_is_warm_up_bound():
    phases = make_phases(define_model=1.0, setup=2.0, warmup=70.0, data_wait=1.0, train_step=26.0)
    v = verdict(phases, starved_fraction=0.0, gpu_util_mean=0.9, device_type="cuda")
    assert v["kind"] == "warm-up-bound"
    assert "70%" in v["text"] and "longer run" in v["text"]


def test_big_checkpoint_and_validation_is_overhead_bound():
    phases = make_phases(**BASE, data_wait=2.0, train_step=40.0, validation=35.0, checkpoint=20.0, logging=3.0)
    v = verdict(phases, starved_fraction=0.0, gpu_util_mean=None, device_type="cpu")
    assert v["kind"] == "overhead-bound"
    assert "validation" in v["text"] and "val_every_images" in v["text"]


def test_the_largest_of_several_bottlenecks_wins():
    phases = make_phases(**BASE, data_wait=45.0, train_step=30.0, validation=25.0)
    v = verdict(phases, starved_fraction=None, gpu_util_mean=None, device_type="cpu")
    assert v["kind"] == "data-bound"


def test_empty_phases_are_unknown_with_a_reason():
    v = verdict({}, starved_fraction=None, gpu_util_mean=None, device_type="cpu")
    assert v["kind"] == "unknown" and "no phase time" in v["text"]


def test_no_steady_state_steps_are_unknown():
    v = verdict(make_phases(define_model=1.0, setup=5.0), starved_fraction=None, gpu_util_mean=None, device_type="cpu")
    assert v["kind"] == "unknown" and "steady-state" in v["text"]


def test_zero_time_is_unknown():
    phases = {"train_step": {"calls": 0, "wall_s": 0.0, "fraction": 0.0}}
    assert verdict(phases, starved_fraction=None, gpu_util_mean=None, device_type="cpu")["kind"] == "unknown"


def test_thresholds_are_fractions_in_one_place():
    assert {"data_bound_fraction", "starved_fraction", "gpu_busy_low", "h2d_fraction", "overhead_fraction"} <= set(
        THRESHOLDS
    )
    assert all(0 < v < 1 for v in THRESHOLDS.values())


def split_of(forward: float, backward: float, optimizer_step: float) -> dict[str, dict]:
    return {
        part: {"calls": 10, "wall_s": share * 60.0, "fraction": share * 0.6, "of_train_step": share}
        for part, share in (("forward", forward), ("backward", backward), ("optimizer_step", optimizer_step))
    }


def test_a_compute_bound_verdict_names_the_steps_split():
    phases = make_phases(**BASE, data_wait=1.0, train_step=60.0)
    phases["train_step"]["split"] = split_of(0.3, 0.6, 0.1)
    v = verdict(phases, starved_fraction=0.0, gpu_util_mean=None, device_type="cpu")
    assert v["kind"] == "compute-bound"
    assert "forward 30%, backward 60%, optimizer step 10% of it" in v["text"]
    assert "fused" not in v["text"]


def test_an_optimizer_step_of_a_third_of_each_step_is_named_with_what_cuts_it():
    phases = make_phases(**BASE, data_wait=1.0, train_step=60.0)
    phases["train_step"]["split"] = split_of(0.2, 0.4, 0.4)
    v = verdict(phases, starved_fraction=0.0, gpu_util_mean=None, device_type="cpu")
    assert "optimizer step 40%" in v["text"] and "fused" in v["text"]


def test_a_users_own_workload_gets_advice_in_dataloader_and_trainer_arguments():
    settings = {
        "dataloader": {"num_workers": 0, "pin_memory": False, "persistent_workers": False, "batch_size": 32},
        "trainer": {"precision": "32-true", "log_every_n_steps": 50},
        "hints": {"workers": 4},
    }
    phases = make_phases(**BASE, data_wait=61.0, batch_to_device=1.0, train_step=38.0)
    v = verdict(
        phases, starved_fraction=0.9, gpu_util_mean=0.3, device_type="cuda", settings=settings, advice="dataloader"
    )
    assert v["kind"] == "data-bound"
    assert v["overrides"] == [
        "DataLoader(num_workers=4)",
        "DataLoader(pin_memory=True)",
        "DataLoader(persistent_workers=True)",
    ]
    compute = verdict(
        make_phases(**BASE, train_step=60.0), starved_fraction=0.0, gpu_util_mean=0.95, device_type="cuda",
        settings=settings, advice="dataloader",
    )  # fmt: skip
    assert compute["overrides"] == ["Trainer(precision='bf16-mixed')", "DataLoader(batch_size=64)"]


def test_short_steps_lost_in_the_frameworks_per_step_work_are_overhead_bound_with_larger_batches():
    # a 12 ms step with 3 ms of Lightning's hooks and bookkeeping around it (the CNN at batch 32 on 2 cores)
    phases = make_phases(**BASE, data_wait=1.0, train_step=12.0, framework=3.5)
    v = verdict(phases, starved_fraction=0.0, gpu_util_mean=None, device_type="cpu", settings={"batch_size": 32})
    assert v["kind"] == "overhead-bound"
    assert "framework 21%" in v["text"] and "fewer, larger steps" in v["text"]
    assert v["overrides"] == ["batch_size=64"]
    settings = {"dataloader": {"batch_size": 32}, "trainer": {}, "hints": {"workers": 2}}
    user = verdict(
        phases, starved_fraction=0.0, gpu_util_mean=None, device_type="cpu", settings=settings, advice="dataloader"
    )
    assert user["overrides"] == ["DataLoader(batch_size=64)"]


def test_validating_less_often_is_advised_only_to_a_run_that_validates_before_its_end():
    """A run with val_every_images >= train_images validates once, at its end: a larger
    val_every_images cannot cut that, fewer validation images can."""
    phases = make_phases(**BASE, data_wait=2.0, train_step=40.0, validation=35.0, logging=3.0)
    sizes = {"train_images": 1024, "val_images": 256, "batch_size": 32}
    on_cpu = {"starved_fraction": 0.0, "gpu_util_mean": None, "device_type": "cpu"}
    once = verdict(phases, **on_cpu, settings={**sizes, "val_every_images": 1024})
    assert "val_images=128" in once["overrides"] and not any("val_every_images" in o for o in once["overrides"])
    often = verdict(phases, **on_cpu, settings={**sizes, "val_every_images": 256})
    assert "val_every_images=512" in often["overrides"] and "val_images=128" in often["overrides"]


# a CPU run whose step is most of the loop, as the outside model with 2 PIL workers measured
CONTENDED_PHASES = make_phases(**BASE, data_wait=2.0, train_step=90.0, logging=1.0)


def cpu_cores(workers_cores: float, torch_threads: int = 2, cores: int = 2) -> dict:
    return {"cores": cores, "torch_threads": torch_threads, "workers_cores": workers_cores}


def test_busy_workers_beside_all_of_torchs_threads_on_a_cpu_are_cpu_contended_with_fewer_threads_to_try():
    v = verdict(CONTENDED_PHASES, starved_fraction=0.0, gpu_util_mean=None, device_type="cpu", cores=cpu_cores(0.94))
    assert v["kind"] == "cpu-contended"
    assert "0.94 cores" in v["text"] and "2 threads on 2 cores" in v["text"]
    assert v["overrides"] == ["num_threads=1"]
    # a user's own script gets it in torch's own call
    mine = verdict(
        CONTENDED_PHASES,
        starved_fraction=0.0,
        gpu_util_mean=None,
        device_type="cpu",
        advice="dataloader",
        settings={"dataloader": {"num_workers": 2}, "trainer": {}, "hints": {"workers": 2}},
        cores=cpu_cores(0.94),
    )
    assert mine["kind"] == "cpu-contended" and mine["overrides"] == ["torch.set_num_threads(1)"]
    # 8 cores, workers using 3.4 of them beside 8 threads: 5 threads leave them theirs
    wide = verdict(
        CONTENDED_PHASES,
        starved_fraction=0.0,
        gpu_util_mean=None,
        device_type="cpu",
        cores=cpu_cores(3.4, torch_threads=8, cores=8),
    )
    assert wide["overrides"] == ["num_threads=5"]


def test_light_workers_or_threads_that_leave_them_room_are_not_contended():
    for cores in (cpu_cores(0.29), cpu_cores(1.2, torch_threads=1), cpu_cores(1.5, torch_threads=2, cores=4), None):
        v = verdict(CONTENDED_PHASES, starved_fraction=0.0, gpu_util_mean=None, device_type="cpu", cores=cores)
        assert v["kind"] == "compute-bound" and "num_threads" not in v["text"], cores
    # on a GPU the step does not run on the cores the workers use
    gpu = verdict(CONTENDED_PHASES, starved_fraction=0.0, gpu_util_mean=0.9, device_type="cuda", cores=cpu_cores(0.94))
    assert gpu["kind"] == "compute-bound" and "num_threads" not in gpu["text"]


def test_contention_beside_another_bottleneck_is_added_as_a_note():
    phases = make_phases(**BASE, data_wait=40.0, train_step=60.0)
    v = verdict(phases, starved_fraction=None, gpu_util_mean=None, device_type="cpu", cores=cpu_cores(1.1))
    assert v["kind"] == "data-bound"
    assert "Also: the DataLoader workers kept 1.10 cores busy" in v["text"] and v["overrides"][-1] == "num_threads=1"
