"""Every override a verdict suggests can be pasted as it is: it composes for the run's workload
(the U-Net on Carvana, the CNN on MNIST) and changes the run, i.e. the run did not already use it."""

from __future__ import annotations

import pytest

from segperf.config import plain_config
from segperf.perf.verdict import verdict
from tests.conftest import compose_config


def make_phases(**seconds: float) -> dict[str, dict]:
    wall = sum(seconds.values())
    return {name: {"calls": 1, "wall_s": s, "fraction": s / wall} for name, s in seconds.items()}


BASE = {"define_model": 0.5, "setup": 1.0, "warmup": 2.0, "teardown": 0.5}
# (phases, starved fraction, mean GPU utilization, device): one run of each bottleneck the verdict names
SCENARIOS = {
    "data-bound on the CPU": (make_phases(**BASE, data_wait=60.0, train_step=40.0), 0.8, None, "cpu"),
    "data-bound on a GPU": (make_phases(**BASE, data_wait=60.0, train_step=40.0), 0.8, 0.3, "cuda"),
    "copy-bound": (make_phases(**BASE, batch_to_device=30.0, train_step=70.0), 0.0, 0.5, "cuda"),
    "warm-up-bound": (make_phases(setup=2.0, warmup=70.0, data_wait=1.0, train_step=27.0), 0.0, None, "cpu"),
    "validation overhead": (make_phases(**BASE, train_step=40.0, validation=50.0), 0.0, None, "cpu"),
    "logging overhead": (make_phases(**BASE, train_step=40.0, logging=50.0), 0.0, None, "cpu"),
    "checkpoint overhead": (make_phases(**BASE, train_step=40.0, checkpoint=50.0), 0.0, None, "cpu"),
    "compute-bound on the CPU": (make_phases(**BASE, data_wait=1.0, train_step=99.0), 0.0, None, "cpu"),
    "compute-bound on the host": (make_phases(**BASE, data_wait=1.0, train_step=99.0), 0.0, 0.3, "cuda"),
    "compute-bound on a GPU": (make_phases(**BASE, data_wait=1.0, train_step=99.0), 0.0, 0.95, "cuda"),
}
WORKLOADS = {"unet": [], "cnn": ["model=cnn", "data=mnist"]}
# every axis of the workload at its fast setting (the CNN has no upsample, decode or cache)
FAST = {
    "unet": ["+opt=all"],
    "cnn": ["workers=auto", "prefetch=on", "pin=on", "memory_format=channels_last", "compile=on", "precision=bf16"],
}


def settings_of(*overrides: str) -> dict:
    return plain_config(compose_config(*overrides, "paths.output_dir=/tmp/run"))


def verdicts(settings: dict) -> dict[str, dict]:
    return {
        name: verdict(phases, starved_fraction=starved, gpu_util_mean=gpu, device_type=device, settings=settings)
        for name, (phases, starved, gpu, device) in SCENARIOS.items()
    }


@pytest.mark.slow  # composes every suggested override of four runs: ~10 s of a fast tier kept to 2 minutes
@pytest.mark.parametrize("workload", sorted(WORKLOADS))
@pytest.mark.parametrize("fast", [False, True], ids=["baseline", "fast"])
def test_every_suggested_override_composes_and_changes_the_run(workload, fast):
    run = [*WORKLOADS[workload], *(FAST[workload] if fast else [])]
    settings = settings_of(*run)
    found = verdicts(settings)
    suggested = {override for v in found.values() for override in v["overrides"]}
    assert suggested, "no verdict suggests anything"
    for name, v in found.items():
        assert all(override in v["text"] for override in v["overrides"]), name
    for override in sorted(suggested):
        assert settings_of(*run, override) != settings, f"{override} is what the run already uses"


def test_the_cnn_is_never_told_to_change_what_it_does_not_have():
    suggested = {o for v in verdicts(settings_of(*WORKLOADS["cnn"])).values() for o in v["overrides"]}
    assert not {o for o in suggested if o.split("=")[0] in ("upsample", "decode", "cache")}
    assert {"workers=auto", "prefetch=on", "pin=on", "compile=on", "precision=bf16", "batch_size=8"} <= suggested


def test_a_run_that_already_uses_every_loader_option_is_not_told_to_set_workers():
    found = verdicts(settings_of(*FAST["unet"]))
    data_bound = found["data-bound on the CPU"]
    assert data_bound["kind"] == "data-bound" and data_bound["overrides"] == []
    assert "workers=auto" not in data_bound["text"] and "on already" in data_bound["text"]
    gpu = found["compute-bound on a GPU"]
    assert gpu["overrides"] == [] and "precision=bf16" not in gpu["text"]
    demo = compose_config().train_images  # size=demo, the default
    assert found["warm-up-bound"]["overrides"] == [f"train_images={4 * demo}", "compile=off"]


def test_sizes_are_suggested_as_numbers_from_the_runs_own():
    found = verdicts(settings_of("batch_size=6", "val_every_images=100", "val_images=60"))  # of train_images=320
    assert "batch_size=12" in found["compute-bound on the CPU"]["overrides"]
    assert found["validation overhead"]["overrides"] == ["val_every_images=200", "val_images=30"]
    assert found["logging overhead"]["overrides"] == ["trainer.log_every_n_steps=10"]
