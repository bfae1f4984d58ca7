"""The GPU check's harness on hand-made results (docs/GPU.md): its verdict rules, its probe, its
presets; fast, on any CPU. The rehearsal end to end is tests/gpu/test_rehearsal.py."""

from __future__ import annotations

import copy
import json
import warnings
from pathlib import Path

import pytest
import torch

from tests.conftest import REPO, compose_config
from tests.gpu import probe
from tests.gpu import verdicts as gv

CONF = Path(gv.__file__).parent / "conf"


H200_BF16_DENSE = 989.4e12


def gpu_results(**overrides) -> dict:
    """results.json of a completed +opt=all run on an H200, with what the probe records."""
    results = {
        "status": "completed",
        "device": "cuda:0",
        "precision": "bf16-mixed",
        "machine": {"gpus": [{"name": "NVIDIA H200"}], "torch": "2.11.0+cu130", "cuda": "13.0"},
        "config": {
            "data": {"pin_memory": True, "cache": "memory"},
            "model": {"compile": True},
            "trainer": {"precision": "bf16-mixed"},
        },
        "adjusted": {},
        "train": {"images_per_s": 800.0, "warmup_s": 60.0},
        "quality": {"val_loss": 0.3},
        "accounted": {"run_wall_s": 100.0},
        "phases": {"train_step": {"gpu_util_mean_percent": 85.0}, "data_wait": {"fraction": 0.01}},
        "resources": {"interval_s": 0.05, "samples": 1900, "gpu_util_max": 100.0, "gpu_mem_peak_bytes": 9 << 30},
        "jitter": {
            "data_wait": {"mean": 0.0005, "count": 98},
            "train_step": {"mean": 0.0070, "count": 98},
            "device_step": {"mean": 0.0072, "count": 98},
            "per_batch": {
                "warmup_steps": 2,
                "data_wait_s": [1.0, 0.1] + [0.0005] * 98,
                "train_step_s": [50, 1] + [0.007] * 98,
            },
        },
        "throughput": {"mfu": 0.3, "peak_flops_per_s": H200_BF16_DENSE, "measured_mfu": 0.37},
        "gpu_probe": {
            "device": "cuda:0",
            "loader": [
                {"class": "ResumableLoader", "is_dataloader": False},
                {"class": "DataLoader", "is_dataloader": True, "pin_memory": True, "num_workers": 16},
            ],
            "batches": [{"devices": ["cpu"], "pinned": [True, True]}] * 20,
            "autocast": [{"enabled": True, "dtype": "bfloat16"}] * 20,
            "compile": {
                "counters": {"stats": {"unique_graphs": 2}, "inductor_metrics": {"generated_kernel_count": 120}},
                "compiled_at_end": True,
                "fallback": None,
                "triton": "3.6.0",
            },
            "sync": {"counted": True, "why_not": None, "steps": 98, "syncs": 19, "steps_with_sync": 19, "where": {}},
        },
    }
    for dotted, value in overrides.items():
        node = results
        *parents, last = dotted.split("__")
        for part in parents:
            node = node.setdefault(part, {})
        node[last] = value
    return results


def run(opt: str, **overrides) -> object:
    return gv.Run(f"0_+opt={opt},size=gpu_check", opt, gpu_results(**overrides))


def baseline(**overrides):
    """The ladder's first step: data-bound, slow, fp32 eager, no pinning."""
    base = {
        "config__data__pin_memory": False,
        "config__model__compile": False,
        "config__trainer__precision": "32-true",
        "precision": "32-true",
        "train__images_per_s": 30.0,
        "throughput__peak_flops_per_s": 67e12,
        "throughput__mfu": 0.4,
        "gpu_probe__batches": [{"devices": ["cpu"], "pinned": [False, False]}] * 20,
        "gpu_probe__autocast": [{"enabled": False, "dtype": None}] * 20,
        "gpu_probe__compile": {"counters": {}, "compiled_at_end": False, "fallback": None, "triton": None},
        "jitter__per_batch__data_wait_s": [0.2] * 100,
        "jitter__per_batch__train_step_s": [0.05] * 100,
    }
    return run("0_baseline", **{**base, **overrides})


def cpu(opt: str, **overrides):
    """A run of the CPU rehearsal: no CUDA, pin adjusted off, fake-NVML columns."""
    base = {
        "device": "cpu",
        "machine__gpus": [],
        "adjusted": {"data.pin_memory": {"requested": True, "used": False, "reason": "no CUDA device"}},
        "jitter__device_step": None,
        "throughput__mfu": None,
        "throughput__peak_flops_per_s": None,
        "gpu_probe__sync": {"counted": False, "why_not": "no CUDA device: torch.cuda.set_sync_debug_mode needs one"},
    }
    return run(opt, **{**base, **overrides})


def status(verdict) -> str:
    return verdict.status


# -- verdicts ---------------------------------------------------------------------------------
def test_cuda_only_claims_are_skipped_on_a_cpu_rehearsal_saying_why():
    runs = [cpu("0_baseline", config__data__pin_memory=False, config__model__compile=False), cpu("3_pin")]
    for check in (gv.check_cuda_events, gv.check_pin, gv.check_mfu, gv.check_host_sync):
        verdict = check(runs)
        assert verdict.status == "SKIP", verdict
    assert "no CUDA device" in gv.check_pin(runs).figure
    assert "set_sync_debug_mode" in gv.check_host_sync(runs).figure


def test_nvml_passes_with_driver_samples_every_50_ms_and_gpu_busy_in_training():
    verdict = gv.check_nvml([run("all")])
    assert verdict.status == "PASS"
    assert "52.6 ms" in verdict.figure and "85" in verdict.figure  # 100 s / 1,900 samples; util in train_step


@pytest.mark.parametrize(
    "change, why",
    [
        ({"resources__samples": 300}, "one sample every 333.3 ms"),  # the sampler fell behind
        ({"phases__train_step__gpu_util_mean_percent": 0.0}, "GPU util during train_step"),
        ({"resources__gpu_mem_peak_bytes": None}, "no GPU memory"),
        (
            {
                "resources__notes": [
                    "GPU util: nvmlDeviceGetSamples not supported (x); using nvmlDeviceGetUtilizationRates"
                ]
            },
            "no sub-second driver samples",
        ),
    ],
)
def test_nvml_fails_naming_the_run_and_what_is_wrong(change, why):
    verdict = gv.check_nvml([run("0_baseline"), run("all", **change)])
    assert verdict.status == "FAIL"
    assert f"+opt=all: {why}" in verdict.figure


def test_nvml_is_skipped_when_no_run_sampled_a_gpu():
    verdict = gv.check_nvml([cpu("all", resources__gpu_util_max=None)])
    assert verdict.status == "SKIP"


def test_device_step_times_must_exist_match_the_steps_and_not_exceed_the_host_loop():
    assert gv.check_cuda_events([run("all")]).status == "PASS"
    slow_device = gv.check_cuda_events([run("all", jitter__device_step={"mean": 0.02, "count": 98})])
    assert slow_device.status == "FAIL" and "device 20.0 ms vs host 7.5 ms" in slow_device.figure
    missing = gv.check_cuda_events([run("all", jitter__device_step=None)])
    assert missing.status == "FAIL" and "no device step times" in missing.figure
    short = gv.check_cuda_events([run("all", jitter__device_step={"mean": 0.007, "count": 50})])
    assert short.status == "FAIL" and "50 device steps vs 98 host steps" in short.figure


def test_pin_passes_when_pinned_batches_arrive_and_fails_otherwise():
    verdict = gv.check_pin([baseline(), run("3_pin")])
    assert verdict.status == "PASS" and "+opt=3_pin 20/20" in verdict.figure and "0 pinned" in verdict.figure
    unpinned = run("3_pin", gpu_probe__batches=[{"devices": ["cpu"], "pinned": [False, False]}] * 20)
    assert gv.check_pin([unpinned]).status == "FAIL"
    adjusted = run("3_pin", adjusted={"data.pin_memory": {"requested": True, "used": False, "reason": "x"}})
    assert "adjusted (x)" in gv.check_pin([adjusted]).figure


def test_device_cache_needs_device_batches_and_no_dataloader():
    on_device = {
        "config__data__cache": "device",
        "gpu_probe__loader": [{"class": "ResumableLoader", "is_dataloader": False}, {"class": "DeviceBatches"}],
        "gpu_probe__batches": [{"devices": ["cuda:0"], "pinned": [False, False]}] * 20,
    }
    verdict = gv.check_device_cache([run("all_cache_device", **on_device)])
    assert verdict.status == "PASS" and "20/20 sampled batches already on cuda:0" in verdict.figure
    with_loader = {**on_device, "gpu_probe__loader": gpu_results()["gpu_probe"]["loader"]}
    assert gv.check_device_cache([run("all_cache_device", **with_loader)]).status == "FAIL"
    failed = run("all_cache_device", **on_device, status="failed", error="CUDA out of memory")
    verdict = gv.check_device_cache([failed])
    assert verdict.status == "FAIL" and "CUDA out of memory" in verdict.figure
    assert gv.check_device_cache([run("all")]).status == "SKIP"


def test_compile_fails_on_an_eager_fallback_on_nothing_compiled_and_without_triton():
    assert gv.check_compile([run("6_compile")]).status == "PASS"
    fallback = run("6_compile", adjusted={"model.compile": {"reason": "torch.compile failed: no Triton"}})
    assert "fell back to eager (torch.compile failed: no Triton)" in gv.check_compile([fallback]).figure
    nothing = run("6_compile", gpu_probe__compile__counters={})
    assert gv.check_compile([nothing]).status == "FAIL"
    cache_hit = run(
        "all", gpu_probe__compile__counters={"stats": {"unique_graphs": 2}, "inductor": {"fxgraph_cache_hit": 2}}
    )
    assert gv.check_compile([cache_hit]).status == "PASS"  # compiled from the FX graph cache: no new kernels
    no_triton = run("6_compile", gpu_probe__compile__triton=None)
    assert "Triton never imported" in gv.check_compile([no_triton]).figure
    assert gv.check_compile([baseline()]).status == "SKIP"


def test_reduced_precision_must_run_under_autocast_in_its_dtype():
    assert gv.check_precision([run("7_bf16")], "bf16-mixed", "bfloat16").status == "PASS"
    off = run("7_bf16", gpu_probe__autocast=[{"enabled": False, "dtype": None}] * 20)
    assert gv.check_precision([off], "bf16-mixed", "bfloat16").status == "FAIL"
    fp16 = {
        "config__trainer__precision": "16-mixed",
        "gpu_probe__autocast": [{"enabled": True, "dtype": "float16"}] * 4,
    }
    verdict = gv.check_precision(
        [run("all_fp16", **fp16, gpu_probe__grad_scaler={"scale": 65536.0})], "16-mixed", "float16"
    )
    assert verdict.status == "PASS" and "loss scale 65536.0" in verdict.figure
    assert gv.check_precision([run("all_fp16", **fp16)], "16-mixed", "float16").status == "FAIL"  # no scaler
    assert gv.check_precision([run("all")], "16-mixed", "float16").status == "SKIP"


def test_mfu_must_be_a_fraction_of_the_h200s_dense_peak():
    verdict = gv.check_mfu([baseline(), run("all")])
    assert verdict.status == "PASS" and verdict.figure.startswith("+opt=all: 30.0% of 989.4 TFLOP/s")
    sparse = gv.check_mfu([run("all", throughput__peak_flops_per_s=2e15, throughput__mfu=0.15)])
    assert sparse.status == "FAIL" and "with-sparsity" in sparse.figure
    over = gv.check_mfu([baseline(throughput__mfu=1.7)])  # fp32 convolutions on TF32 tensor cores
    assert over.status == "FAIL" and "not a fraction" in over.figure
    other = gv.check_mfu([run("all", machine__gpus=[{"name": "NVIDIA A100"}], throughput__peak_flops_per_s=312e12)])
    assert other.status == "PASS" and "not verified" in other.figure


def test_host_sync_fails_when_most_steady_steps_synchronize_and_ignores_fp16_loss_scaling():
    assert gv.check_host_sync([baseline(), run("all")]).status == "PASS"
    every_step = {"counted": True, "steps": 98, "syncs": 98, "steps_with_sync": 98, "where": {"x.py:1": 98}}
    verdict = gv.check_host_sync([run("all", gpu_probe__sync=every_step)])
    assert verdict.status == "FAIL" and "98 of 98 steps" in verdict.figure and "x.py:1 x98" in verdict.figure
    fp16 = run("all_fp16", gpu_probe__sync=every_step, config__trainer__precision="16-mixed")
    verdict = gv.check_host_sync([run("all"), fp16])
    assert verdict.status == "PASS"
    broken = run("all", gpu_probe__sync={"counted": False, "why_not": "failed: see errors"})
    assert gv.check_host_sync([broken]).status == "FAIL"  # not a SKIP: the device was there


def test_data_wait_share_and_images_per_s_compare_the_baseline_with_opt_all():
    runs = [baseline(), run("all")]
    verdict = gv.check_data_wait(runs)
    assert verdict.status == "PASS" and "baseline 80.0% -> +opt=all 6.7%" in verdict.figure
    report = {"configurations": [{"label": "+opt=all", "speedup": 26.7, "distinguishable": None}]}
    verdict = gv.check_images_per_s(runs, report)
    assert verdict.status == "PASS" and "26.67x" in verdict.figure and "report.json: speed-up 26.70x" in verdict.figure
    slower = [baseline(), run("all", train__images_per_s=10.0, jitter__per_batch__data_wait_s=[0.3] * 100)]
    assert gv.check_images_per_s(slower).status == "FAIL"
    assert gv.check_data_wait(slower).status == "FAIL"
    assert gv.check_data_wait([run("all")]).status == "SKIP"
    assert gv.check_images_per_s([baseline(status="failed"), run("all")]).status == "FAIL"


def test_speed_is_judged_on_a_gpu_only_a_slower_opt_all_on_a_cpu_is_no_fail():
    """On a CPU without bf16 instructions +opt=all is slower than the baseline (0.82x measured):
    true of that CPU, not a defect of the check, so the rehearsal passes on any CPU."""
    base = cpu("0_baseline", train__images_per_s=2.0, jitter__per_batch__data_wait_s=[0.01] * 100)
    slower = cpu("all", train__images_per_s=1.64, jitter__per_batch__data_wait_s=[0.3] * 100)
    for verdict in (gv.check_images_per_s([base, slower]), gv.check_data_wait([base, slower])):
        assert verdict.status == "SKIP" and verdict.figure.endswith("speed is judged on a GPU only)"), verdict
    assert "0.82x" in gv.check_images_per_s([base, slower]).figure  # what the CPU measured is still said


def test_runs_check_names_planned_runs_that_never_started_or_failed_and_the_probes_errors():
    runs = [baseline(), run("all", status="interrupted", error="interrupted by SIGTERM")]
    verdict = gv.check_runs(runs, ["0_baseline", "all", "all_fp16"])
    assert verdict.status == "FAIL"
    assert "never started (time limit?): all_fp16" in verdict.figure and "interrupted by SIGTERM" in verdict.figure
    assert gv.check_runs(runs[:1], ["0_baseline"]).status == "PASS"
    errors = gv.check_runs([baseline(gpu_probe__errors=["on_train_start: KeyError: 'x'"])], ["0_baseline"])
    assert "+opt=0_baseline: on_train_start: KeyError: 'x'" in errors.figure


def write_sweep(root: Path, runs) -> Path:
    for job, r in enumerate(runs):
        folder = root / f"{job}_+opt={r.opt},size=gpu_check"
        folder.mkdir(parents=True)
        (folder / "results.json").write_text(json.dumps(r.results))
    (root / f"{len(runs)}_+opt=all_fp16,size=gpu_check").mkdir()  # started, never wrote its results
    return root


def test_main_writes_a_verdict_per_claim_and_exits_3_on_a_fail(tmp_path, capsys):
    sweep = write_sweep(tmp_path / "sweep", [baseline(), run("all")])
    code = gv.main([str(sweep), "--out", str(tmp_path / "out"), "--planned", "0_baseline,all,all_fp16"])
    assert code == 3  # all_fp16 did not complete
    verdicts = json.loads((tmp_path / "out" / "verdicts.json").read_text())
    assert len(verdicts) == 12 and {v["status"] for v in verdicts} <= {"PASS", "FAIL", "SKIP"}
    assert [v["check"] for v in verdicts if v["status"] == "FAIL"] == ["runs completed"]
    text = (tmp_path / "out" / "verdicts.txt").read_text()
    assert "NVIDIA H200" in text and text.rstrip().endswith("RESULT: FAIL (9 pass, 1 fail, 2 skip)")
    assert capsys.readouterr().out == text
    assert gv.main([str(tmp_path / "empty-not-there")]) == 2


# -- the probe --------------------------------------------------------------------------------
def test_loader_chain_follows_wrappers_without_their_attribute_delegation():
    class Wrapper:
        def __init__(self, loader):
            self.loader = loader

        def __getattr__(self, name):  # as ResumableLoader and ThreadPrefetchLoader delegate
            return getattr(self.loader, name)

    loader = torch.utils.data.DataLoader(list(range(4)), batch_size=2, pin_memory=False)
    chain = probe.loader_chain(Wrapper(Wrapper(loader)))
    assert [x["class"] for x in chain] == ["Wrapper", "Wrapper", "DataLoader"]
    assert chain[-1] == {"class": "DataLoader", "is_dataloader": True, "pin_memory": False, "num_workers": 0}


def test_the_probe_never_stops_a_run_it_records_what_broke():
    class Broken:
        @property
        def strategy(self):
            raise RuntimeError("no strategy")

    gpu_probe = probe.GpuProbe()
    gpu_probe.on_train_start(Broken(), None)
    results = {}
    gpu_probe.record(results)
    assert results["gpu_probe"]["errors"] == ["on_train_start: RuntimeError: no strategy"]


def test_sync_counter_counts_torchs_sync_warnings_per_step_and_passes_others_through(monkeypatch):
    modes = []
    monkeypatch.setattr(torch.cuda, "set_sync_debug_mode", modes.append)
    shown = []
    monkeypatch.setattr(warnings, "showwarning", lambda message, *args, **kwargs: shown.append(str(message)))
    counter = probe.SyncCounter()
    for syncs in (0, 2, 1):
        counter.new_step()
        counter.start()
        for _ in range(syncs):
            warnings.warn("called a synchronizing CUDA operation", UserWarning, stacklevel=1)
    warnings.warn("something else", UserWarning, stacklevel=1)
    counter.stop()
    summary = counter.summary()
    assert summary["per_step"] == [0, 2, 1] and summary["steps_with_sync"] == 2 and summary["syncs"] == 3
    assert list(summary["where"]) == [f"gpu/{Path(__file__).name}:{_line_of('called a synchronizing')}"]
    assert shown == ["something else"] and modes == ["warn", "default"]


def _line_of(text: str) -> int:
    lines = Path(__file__).read_text().splitlines()
    return next(i for i, line in enumerate(lines, 1) if text in line and "warnings.warn" in line)


# -- the presets ------------------------------------------------------------------------------
SEARCHPATH = f"hydra.searchpath=[file://{CONF}]"


def test_the_check_size_is_the_seeds_run_with_600_images_and_the_probe():
    cfg = compose_config("size=gpu_check", SEARCHPATH)
    assert (cfg.train_images, cfg.val_images, cfg.batch_size, cfg.val_every_images) == (600, 60, 6, 500)
    assert cfg.callbacks.gpu_probe._target_ == "tests.gpu.probe.GpuProbe"
    assert cfg.data.synthetic.cars == 20  # 4 held-out cars: 64 validation images for the seed's 60


def test_the_extra_presets_are_opt_all_with_one_change():
    base = compose_config("+opt=all", "size=gpu_check", SEARCHPATH)
    for preset, changed in [
        ("all_cache_device", {("data", "cache"): "device"}),
        ("all_fp16", {("trainer", "precision"): "16-mixed", ("model", "compile"): False}),
    ]:
        cfg = compose_config(f"+opt={preset}", "size=gpu_check", SEARCHPATH)
        expected = copy.deepcopy(base)
        for (group, key), value in changed.items():
            expected[group][key] = value
        assert cfg == expected, preset


def test_the_docs_name_the_wheels_the_makefile_pins_and_the_folder_git_ignores():
    makefile = (REPO / "Makefile").read_text()
    pins = [
        pin
        for line in makefile.splitlines()
        if line.startswith(("GPU_WHEELS ", "GPU_SDISTS "))
        for pin in line.split(":=", 1)[1].split()
    ]
    assert len(pins) == 9  # hydra-core and its three, pytest and its three
    doc = (REPO / "docs" / "GPU.md").read_text()
    assert [pin for pin in pins if f"`{pin}`" not in doc] == []
    assert (
        "GPU_WHEELS_DIR ?= .whl\n" in makefile
        and "WHEELS=${GPU_WHEELS_DIR:-.whl}" in (REPO / "scripts" / "gpu_check.sh").read_text()
    )
    assert "| extra (ignored) paths to send along | `.whl`" in doc
    assert ".whl/" in (REPO / ".gitignore").read_text().splitlines()
