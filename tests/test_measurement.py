"""Every run tells where its time went: phases, resources, jitter, throughput, verdict."""

import json
import time

import pytest
from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

from segperf.data.carvana.dataset import CarvanaDataset
from segperf.perf.summary import format_run_summary
from segperf.training.run import train

SEED_PHASES = {
    "define_model",
    "setup",
    "warmup",
    "data_wait",
    "batch_to_device",
    "train_step",
    "validation",
    "logging",
    "checkpoint",
}


@pytest.fixture(scope="module")
def measured_run(tmp_path_factory, tiny_carvana):
    from tests.conftest import NARROW_UNET, TINY, compose_config

    run_dir = tmp_path_factory.mktemp("measured")
    run_size = ["train_images=24", "val_every_images=12", "perf.peak_probe=true"]
    cfg = compose_config(*TINY, *NARROW_UNET, f"data.root={tiny_carvana}", *run_size)
    with pytest.MonkeyPatch.context() as patch:  # the peak is measured into an empty cache, not the user's
        patch.setenv("SEGPERF_CACHE", str(tmp_path_factory.mktemp("cache")))
        return run_dir, train(cfg, run_dir)


def test_phases_cover_the_seed_table_and_account_for_at_least_95_percent(measured_run):
    run_dir, results = measured_run
    assert SEED_PHASES <= results["phases"].keys()
    fractions = sum(p["fraction"] for p in results["phases"].values())
    assert fractions >= 0.95
    assert results["accounted"]["fraction"] == pytest.approx(fractions)
    assert results["phases"]["warmup"]["calls"] == 2
    assert results["phases"]["train_step"]["calls"] >= 4
    for row in results["phases"].values():
        assert row["cpu_mean_percent"] is not None and row["rss_peak_bytes"] > 0
        assert row["gpu_util_mean_percent"] is None  # no GPU here: n/a, nothing fails
    saved = json.loads((run_dir / "results.json").read_text())
    assert saved["phases"] == json.loads(json.dumps(results["phases"]))


def test_summary_has_the_seed_tables_and_says_how_much_is_accounted(measured_run):
    run_dir, results = measured_run
    text = (run_dir / "summary.txt").read_text()
    for heading in ("Resources", "Top-line statistics", "Per-phase statistics", "Jitter", "Throughput", "Verdict"):
        assert heading in text
    assert "accounted" in text and f"{results['accounted']['fraction']:.1%}" in text
    assert "of 200%" in text or "cores busy" in text
    assert (run_dir / "fit-lightning-profile.txt").is_file()  # Lightning's own profiler report too


def test_resources_jitter_throughput_and_verdict_are_numbers(measured_run):
    _, results = measured_run
    resources = results["resources"]
    # the sampler ran through the whole run: it starts with the run's clock and stops after it (PerfMonitor.begin,
    # .record), one sample per interval, so a run of any length has about run_wall_s / interval_s of them (at least
    # half of those on a busy machine, whose scheduler may wake the thread late; the last sample is taken at stop)
    assert resources["interval_s"] == 0.05
    expected = results["accounted"]["run_wall_s"] / resources["interval_s"]
    assert resources["samples"] >= max(2, expected / 2)
    assert resources["cpu_mean_percent"] > 0 and resources["rss_peak_bytes"] > 0
    assert resources["gpu_util_p50"] is None and resources["peak_allocated_bytes"] is None
    assert resources["sampler_overhead_fraction"] < 0.05
    jitter = results["jitter"]
    assert jitter["train_step"]["count"] == results["train"]["steps"] - 2
    per_batch = jitter["per_batch"]  # every batch kept, warm-up included
    assert len(per_batch["data_wait_s"]) == len(per_batch["train_step_s"]) == results["train"]["steps"]
    assert per_batch["warmup_steps"] == 2
    assert jitter["data_wait"]["p99"] >= jitter["data_wait"]["p50"] >= 0
    assert 0 <= jitter["starved"]["fraction"] <= 1
    throughput = results["throughput"]
    assert throughput["train_flops_per_image"] > throughput["val_flops_per_image"] > 0
    assert throughput["mfu"] is None  # no spec-sheet peak for a CPU
    assert results["train"]["images_per_s"] > 0 and results["train"]["val_images_per_s"] > 0
    assert results["verdict"]["kind"] in {"compute-bound", "overhead-bound", "warm-up-bound", "data-bound"}
    assert results["machine"]["cpu_available"] >= 1


def test_mfu_on_the_cpu_is_against_the_peak_measured_on_this_machine(measured_run):
    run_dir, results = measured_run
    throughput = results["throughput"]
    peak = throughput["measured_peak"]
    assert peak["source"] == "measured" and peak["cached"] is False  # an empty cache: measured by this run
    assert peak["flops_per_s"] > 0 and peak["method"].startswith(("torch.matmul", "conv2d 3x3"))
    assert "best of: " in peak["method"]  # the kernels it beat, named
    text = (run_dir / "summary.txt").read_text()
    if throughput["measured_mfu_reason"]:  # a busy machine's probe can read below the run: n/a, never > 100%
        assert throughput["measured_mfu"] is None
        assert f"MFU (measured peak)     n/a ({throughput['measured_mfu_reason']})" in text
        return
    assert throughput["measured_mfu"] == pytest.approx(throughput["achieved_train_flops_per_s"] / peak["flops_per_s"])
    assert 0 < throughput["measured_mfu"] <= 1
    assert f"MFU (measured peak)     {throughput['measured_mfu']:.1%}" in text


def test_the_machine_load_around_the_run_is_recorded(measured_run):
    run_dir, results = measured_run
    load = results["machine_load"]
    assert len(load["loadavg_start"]) == len(load["loadavg_end"]) == 3 and load["cores"] >= 1
    assert isinstance(results["process_job"], int)
    assert "1-min load" in (run_dir / "summary.txt").read_text()


def test_tensorboard_gets_phase_and_resource_scalars_jitter_histograms_and_hparams(measured_run):
    run_dir, _ = measured_run
    events = EventAccumulator(str(run_dir), size_guidance={"histograms": 0, "scalars": 0}).Reload()
    scalars = set(events.Tags()["scalars"])
    assert {"phases/train_step_s", "phases/data_wait_fraction", "resources/cpu_percent"} <= scalars
    # the HParams table's metrics: a sweep's runs compare side by side
    assert {"hp/images_per_s", "hp/val_dice", "hp/data_wait_fraction"} <= scalars
    assert {"jitter/data_wait", "jitter/train_step"} <= set(events.Tags()["histograms"])
    hparams = events.PluginTagToContent("hparams")
    assert hparams, "no HParams summary"
    assert any(b"workers" in content for content in hparams.values())


@pytest.mark.slow
def test_a_slow_loader_shows_as_data_wait_and_a_data_bound_verdict(tmp_path, tiny_cfg, monkeypatch):
    decode = CarvanaDataset.__getitem__

    def slow_decode(self, index):
        # a slow disk or decoder: 2 s per batch of 4, far above a step of this narrow net even on a
        # busy 2-core machine (where a step of the full-width tiny net has taken up to 1.6 s)
        time.sleep(0.5)
        return decode(self, index)

    monkeypatch.setattr(CarvanaDataset, "__getitem__", slow_decode)
    narrow = ["model.net.stem_channels=8", "model.net.level_channels=[8,16,32,64,128]"]
    # one warm-up step: with the usual two, the warm-up (two batches' waits) came to 42% of this short
    # run on a quiet machine, close to the verdict's 50% for "warm-up-bound", and passed it in a full run
    results = train(tiny_cfg("train_images=16", "val_every_images=1000", "warmup_steps=1", *narrow), tmp_path)
    phases = results["phases"]
    assert phases["data_wait"]["wall_s"] > phases["train_step"]["wall_s"]
    assert results["jitter"]["starved"]["fraction"] == 1.0
    assert results["verdict"]["kind"] == "data-bound"
    assert "workers=auto" in results["verdict"]["text"]


def test_measurement_off_keeps_only_the_throughput(tmp_path, tiny_cfg):
    results = train(tiny_cfg("train_images=12", "perf.measure=false"), tmp_path)
    assert results["measurement"] == "off"
    assert results["train"]["images"] == 12 and results["train"]["images_per_s"] > 0
    assert "phases" not in results
    assert "not measured" in (tmp_path / "summary.txt").read_text()


def test_summary_shows_gpu_columns_when_there_are_gpu_numbers():
    gib = 2**30
    results = {
        "status": "completed",
        "machine": {"cpu_model": "X", "cpu_cores": 6, "cpu_threads": 12, "cpu_available": 12, "ram_mib": 15932,
                    "gpus": [{"name": "NVIDIA GeForce RTX 2060", "memory_mib": 6144, "index": 0}]},
        "resources": {"samples": 4105, "interval_s": 0.05, "cpu_mean_percent": 126.0, "rss_peak_bytes": 1896 * 2**20,
                      "gpu_util_p50": 80.0, "gpu_util_p90": 90.0, "gpu_util_max": 100.0,
                      "gpu_mem_peak_bytes": 6070 * 2**20, "peak_allocated_bytes": int(2.6 * gib),
                      "peak_reserved_bytes": int(3.5 * gib)},
        "phases": {"train_step": {"calls": 500, "wall_s": 148.3, "fraction": 0.682, "cpu_mean_percent": 139.0,
                                  "rss_peak_bytes": 1812 * 2**20, "gpu_util_mean_percent": 80.0,
                                  "gpu_mem_peak_bytes": 2548 * 2**20}},
        "accounted": {"wall_s": 148.3, "fraction": 0.682, "run_wall_s": 217.5},
        "train": {}, "quality": {}, "dataset": {},
    }  # fmt: skip
    text = format_run_summary(results)
    assert "126% of 1,200% (1.3 of 12 cores busy)" in text
    assert "80%/90%/100%" in text
    assert "6,070 / 6,144 MiB (99%), incl. other processes" in text
    assert "1,896 / 15,932 MiB (12%)" in text  # peak RSS against the RAM, as the seed prints it
    assert "NVIDIA GeForce RTX 2060" in text
    assert "train_step" in text and "2,548 MiB" in text and "68.2%" in text


@pytest.mark.slow  # torch.profiler over a run (~1.5 s)
def test_profile_ops_writes_the_top_operator_table_and_a_trace(tmp_path, tiny_cfg):
    results = train(tiny_cfg("train_images=20", "val_every_images=1000", "profile=ops"), tmp_path)
    ops = results["ops"]
    assert ops["steps"] == 3 and ops["first_step"] == 3  # after the 2 warm-up steps
    names = [row["name"] for row in ops["top"]]
    assert any("conv" in name for name in names), names
    assert all(row["self_cpu_s"] >= 0 for row in ops["top"])
    assert list((tmp_path / "ops").glob("*.pt.trace.json"))
    assert "Torch operations over 3 steps" in (tmp_path / "summary.txt").read_text()
