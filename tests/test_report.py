"""The sweep reader groups repeats and summarizes them honestly, and the report names what it
compares, what failed and where it ran; all from results.json files, nothing is trained here."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

import pytest

from segperf.perf.decision import compare_throughput
from segperf.report import build_report, main
from segperf.report.stats import Spread, Stat, speedup, spread, summarize
from segperf.report.sweep import load_sweep

FIXTURES = Path(__file__).parent / "fixtures"
REPEATS = FIXTURES / "sweep_repeats"  # data.num_workers=0,1,2 x seed=0,1,2, seed-major job order
PNG_MAGIC = b"\x89PNG\r\n\x1a\n"
CHARTS = ["training_time_by_phase.png", "training_throughput.png", "quality.png", "jitter_utilization.png"]


def make_results(ips: float | None, *, seed: int = 0, workers: int = 0, host: str = "box", **extra) -> dict:
    """A training results.json as segperf.train writes it, cut to the keys the report reads."""
    results = {
        "status": "completed",
        "axes": {"workers": workers, "pin": False, "precision": "32-true", "batch_size": 4},
        "config": {"seed": seed},
        "train": {"images_per_s": ips},
        "phases": {"data_wait": {"wall_s": 1.0, "fraction": 0.1}, "train_step": {"wall_s": 9.0, "fraction": 0.9}},
        "jitter": {"data_wait": {"p50": 0.01, "p99": 0.02}},
        "resources": {"cpu_mean_percent": 150.0, "gpu_util_mean_percent": None},
        "quality": {"val_pixel_accuracy": 0.9, "val_dice": 0.8},
        "verdict": {"kind": "compute-bound", "text": "compute-bound: train_step dominates."},
        "machine": {"cpu_model": "Test CPU", "cpu_cores": 2, "cpu_threads": 2, "gpus": [], "hostname": host},
    }
    return results | extra


def write_sweep(root: Path, jobs: dict[str, dict | str | None]) -> Path:
    """One dir per job; a dict is written as results.json, a str verbatim, None leaves no file."""
    for name, results in jobs.items():
        (root / name).mkdir(parents=True)
        if results is not None:
            text = results if isinstance(results, str) else json.dumps(results)
            (root / name / "results.json").write_text(text)
    return root


def table_rows(report: str, title: str = "") -> dict[str, list[str]]:
    """The first table's body rows (after `title`, if given) by configuration label."""
    text = report.split(title, 1)[1] if title else report
    first = text[text.index("\n| ") + 1 :].split("\n\n", 1)[0]
    lines = [line for line in first.splitlines() if line.startswith("| ")][1:]
    cells = [[c.strip() for c in line.strip().strip("|").split(" | ")] for line in lines]
    return {row[0]: row for row in cells}


def test_summarize_takes_median_min_max_of_repeats_and_ignores_none():
    assert summarize([2.2, None, 2.0, 2.1]) == Stat(3, 2.1, 2.0, 2.2)
    assert summarize([4.0, 2.0]) == Stat(2, 3.0, 2.0, 4.0)
    assert summarize([None]) == Stat(0, None, None, None)


def test_spread_is_mean_and_sample_standard_deviation_over_repeats():
    assert spread([2.2, None, 2.0, 2.1]) == Spread(3, pytest.approx(2.1), pytest.approx(0.1), 2.0, 2.2)
    assert spread([3.0]) == Spread(1, 3.0, None, 3.0, 3.0)  # one run: no spread
    assert spread([]) == Spread(0, None, None, None, None)


def test_speedup_carries_its_uncertainty_like_hyperfine():
    # the seed's hyperfine numbers (seconds): baseline 19.232 ± 0.222, batch 512 10.468 ± 0.193 -> "1.84 ± 0.04"
    ratio, sigma = speedup(Spread(10, 19.232, 0.222, 0, 0), Spread(10, 10.468, 0.193, 0, 0))
    assert (round(ratio, 2), round(sigma, 2)) == (1.84, 0.04)
    assert speedup(Spread(1, 4.0, None, 4.0, 4.0), Spread(2, 2.0, 0.1, 1.9, 2.1)) == (2.0, None)
    assert speedup(Spread(0, None, None, None, None), Spread(2, 2.0, 0.1, 1.9, 2.1)) is None


def test_distinguishable_is_decided_by_the_noise_of_log_throughput_not_by_overlapping_ranges():
    # changed: the min-max overlap rule called any two single runs distinguishable; the decision
    # is the pooled-noise rule on log images/s at 95% and needs two runs a side (tests/test_stats.py)
    base = [2.0, 2.2, 2.1]
    assert compare_throughput([2.15, 2.3, 2.25], base).distinguishable is False  # noise
    assert compare_throughput([4.0, 4.4, 4.2], base).distinguishable is True
    assert compare_throughput([2.01], [2.0]).distinguishable is None  # one run a side: not decidable
    assert compare_throughput([], base).distinguishable is None


def test_configurations_group_repeats_by_all_but_seed_in_first_job_order():
    sweep = load_sweep(REPEATS)
    configs = sweep.configurations()
    assert [c.label for c in configs] == [f"data.num_workers={n}" for n in range(3)]  # train_images is constant
    assert [[r.job for r in c.runs] for c in configs] == [[0, 3, 6], [1, 4, 7], [2, 5, 8]]
    assert [r.get("config.seed") for r in configs[0].runs] == [0, 1, 2]
    assert all("seed" not in dict(c.key) for c in configs)
    assert configs[0].stat("train.images_per_s") == Stat(3, 2.1, 2.0, 2.2)
    assert configs[2].stat("phases.data_wait.fraction").median == pytest.approx(0.06)
    assert sweep.machines() == ["bench: Test CPU (8 cores, 16 threads), NVIDIA Test GPU 24 GiB, torch 2.13.0"]


def test_repeat_override_is_dropped_and_constant_overrides_stay_out_of_labels(tmp_path):
    jobs = {
        "0_pin=on,repeat=0,workers=auto": make_results(3.0, config={"seed": 0, "repeat": 0}),
        "1_pin=on,repeat=1,workers=auto": make_results(3.1, config={"seed": 0, "repeat": 1}),
        "2_pin=off,repeat=0,workers=auto": make_results(2.0, config={"seed": 0, "repeat": 0}),
        "10_pin=off,repeat=1,workers=auto": make_results(2.1, config={"seed": 0, "repeat": 1}),
    }
    sweep = load_sweep(write_sweep(tmp_path, jobs))
    assert [r.job for r in sweep.runs] == [0, 1, 2, 10]  # numeric, not lexical, job order
    assert [(c.label, [r.get("config.repeat") for r in c.runs]) for c in sweep.configurations()] == [
        ("pin=on", [0, 1]),
        ("pin=off", [0, 1]),
    ]


def test_report_table_has_one_row_per_configuration_with_ratios_and_valid_charts(tmp_path):
    report = build_report(load_sweep(REPEATS), tmp_path).read_text()
    rows = table_rows(report)
    assert list(rows) == ["data.num_workers=0", "data.num_workers=1", "data.num_workers=2"]
    base, noisy, fast = rows.values()
    assert base[1:4] == ["3", "2.10 [2.00–2.20]", "baseline"]
    assert noisy[3] == "~1.07×"  # 2.25 / 2.1, within noise (its 95% interval includes 1)
    assert fast[2:4] == ["4.20 [4.00–4.40]", "2.00×"]
    # quality shows its spread over the repeats (Dice 0.89, 0.91, 0.90)
    assert fast[4:] == ["6.0%", "84.0%", "12.0", "180", "90", "n/a", "0.900 [0.890–0.910]", "compute-bound"]
    assert base[6] == "420" and base[11] == "data-bound"
    assert "MIXED MACHINES" not in report and "NVIDIA Test GPU" in report
    for chart in CHARTS:
        assert f"]({chart})" in report
        assert (tmp_path / chart).read_bytes()[:8] == PNG_MAGIC
    assert not (tmp_path / "inference_throughput.png").exists()
    assert "None: every job completed." in report
    assert "- **data.num_workers=2**: compute-bound: workers=2 (hand-written fixture)." in report


def test_repeated_timings_show_mean_sigma_range_and_speedup_with_uncertainty(tmp_path):
    report = build_report(load_sweep(REPEATS), tmp_path, charts_too=False).read_text()
    rows = table_rows(report, "## Repeated timings")
    assert rows["data.num_workers=0"][1:] == ["3", "2.10 ± 0.10", "2.00 … 2.20", "baseline", "—"]
    assert rows["data.num_workers=2"][1:] == ["3", "4.20 ± 0.20", "4.00 … 4.40", "2.00 ± 0.13×", "1.83–2.19×"]
    # the mean ± σ table carries the same decision as the median table's `~`
    assert rows["data.num_workers=1"][4:] == ["~1.06 ± 0.06×", "0.98–1.16×"]
    assert "`data.num_workers=2` ran **2.00 ± 0.13 times faster** than `data.num_workers=0`." in report


def test_single_runs_get_no_repeated_timings_and_a_classifier_shows_accuracy(tmp_path):
    cnn = {"quality": {"val_accuracy": 0.97, "val_loss": 0.1}}
    jobs = {"0_batch_size=64": make_results(500.0, **cnn), "1_batch_size=512": make_results(900.0, **cnn)}
    report = build_report(load_sweep(write_sweep(tmp_path, jobs)), tmp_path, charts_too=False).read_text()
    assert "## Repeated timings" not in report
    assert "| val accuracy |" in report and table_rows(report)["batch_size=512"][10] == "0.970"


def test_failed_and_missing_results_are_named_while_the_rest_is_reported(tmp_path):
    failed = make_results(None, seed=0, workers=2, status="failed", error="RuntimeError: CUDA out of memory")
    jobs = {
        "0_seed=0,workers=off": make_results(2.0, seed=0),
        "1_seed=1,workers=off": make_results(2.2, seed=1),
        "2_seed=0,workers=auto": failed,
        "3_seed=1,workers=auto": None,
        "4_seed=2,workers=auto": "{not json",
    }
    sweep = load_sweep(write_sweep(tmp_path / "sweep", jobs))
    assert [(r.job, r.error.split(":")[0]) for r in sweep.failed] == [
        (2, "RuntimeError"),
        (3, "no results.json"),
        (4, "corrupt results.json"),
    ]
    report = build_report(sweep, tmp_path / "out", charts_too=False).read_text()
    rows = table_rows(report)
    assert rows["workers=off"][1:3] == ["2", "2.10 [2.00–2.20]"]
    assert rows["workers=auto"][1:4] == ["0 (+3 failed)", "n/a", "n/a"]  # the crashed jobs join their siblings
    failures = report.split("## Failed jobs")[1]
    assert "`2_seed=0,workers=auto` (failed): RuntimeError: CUDA out of memory" in failures
    assert "`3_seed=1,workers=auto` (failed): no results.json" in failures
    assert "`4_seed=2,workers=auto` (failed): corrupt results.json" in failures


def test_a_sweep_of_only_failed_jobs_still_gets_a_report(tmp_path):
    sweep = load_sweep(write_sweep(tmp_path, {"0_workers=off": None, "1_workers=auto": None}))
    report = build_report(sweep, tmp_path).read_text()
    assert "**No run completed**: none of the 2 jobs completed" in report
    assert "`0_workers=off` (failed): no results.json" in report and "`1_workers=auto`" in report


def test_runs_from_two_machines_and_unmeasured_runs_are_flagged(tmp_path):
    unmeasured = make_results(2.4, workers=1, measurement="off")
    for key in ("phases", "jitter", "resources", "verdict", "machine"):
        del unmeasured[key]
    jobs = {
        "0_workers=off": make_results(2.0),
        "1_workers=auto": make_results(4.0, workers=2, host="other"),
        "2_perf.measure=false": unmeasured,
    }
    sweep = load_sweep(write_sweep(tmp_path, jobs))
    assert len(sweep.machines()) == 2
    report = build_report(sweep, tmp_path, charts_too=False).read_text()
    assert not list(tmp_path.glob("*.png"))
    assert "MIXED MACHINES" in report and "**M1** box:" in report and "**M2** other:" in report
    rows = table_rows(report)
    assert [row[-1] for row in rows.values()] == ["M1", "M2", "n/a"]
    assert rows["perf.measure=false"][4:9] == ["off"] * 5
    assert "1 run, no spread" in rows["workers=off"][2]
    assert "- **perf.measure=false**: no verdict (measurement off)." in report


def test_inference_runs_get_their_own_table_and_chart(tmp_path):
    def infer(e2e: float, model: float) -> dict:
        return {
            "status": "completed",
            "kind": "inference",
            "axes": {"precision": "32-true" if e2e < 20 else "bf16-mixed"},
            "inference": {"end_to_end_images_per_s": e2e, "model_images_per_s": model, "wall_s": 5.0},
            "quality": {"agreement_vs_fp32": 1.0 if e2e < 20 else 0.9991, "dice_vs_fp32": 1.0},
        }

    sweep = load_sweep(
        write_sweep(tmp_path, {"0_precision=fp32": infer(10.0, 40.0), "1_precision=bf16": infer(25.0, 120.0)})
    )
    report = build_report(sweep, tmp_path).read_text()
    assert "## Training" not in report and "## Inference" in report
    rows = table_rows(report)
    assert rows["precision=bf16"][2:8] == [  # one run each: ratios shown, not stated as fact
        "25.0 (1 run, no spread)",
        "2.50× (unconfirmed)",
        "120 (1 run, no spread)",
        "3.00× (unconfirmed)",
        "0.9991",
        "1.0000",
    ]
    assert (tmp_path / "inference_throughput.png").read_bytes()[:8] == PNG_MAGIC


def test_a_single_run_dir_reads_as_a_one_run_sweep(tmp_path):
    (tmp_path / "results.json").write_text(json.dumps(make_results(2.0)))
    sweep = load_sweep(tmp_path)
    assert [(r.job, r.label) for r in sweep.runs] == [(0, "run")]
    assert [c.label for c in sweep.configurations()] == ["run"]


@pytest.mark.slow  # a subprocess; the in-process report tests are fast
def test_cli_prints_the_report_path_last(tmp_path):
    done = subprocess.run(
        [sys.executable, "-m", "segperf.report", str(REPEATS), "--out", str(tmp_path)],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip().splitlines()[-1] == str(tmp_path / "report.md")


def test_cli_on_a_folder_without_runs_fails_with_one_clear_line(tmp_path, capsys):
    done = subprocess.run([sys.executable, "-m", "segperf.report", str(tmp_path)], capture_output=True, text=True)
    assert done.returncode == 2 and not done.stdout
    assert done.stderr.startswith("segperf.report: error: no runs in") and len(done.stderr.splitlines()) == 1
    assert main([str(tmp_path / "missing")]) == 2
    assert "is not a directory" in capsys.readouterr().err


@pytest.mark.slow  # a subprocess; test_architecture checks the imports fast
def test_the_report_runs_without_torch_or_the_data_model_and_training_code():
    # a report can be made on a laptop without a GPU stack, long after the sweep
    probe = (
        "import sys, segperf.report, segperf.report.__main__; "
        "heavy = ('torch', 'lightning', 'albumentations', 'segperf.data', 'segperf.model', 'segperf.training'); "
        "print(sorted(m for m in sys.modules if m.startswith(heavy)))"
    )
    done = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "[]"


def test_repeats_that_reach_one_verdict_in_other_figures_show_it_once_and_disagreeing_kinds_each(tmp_path):
    def verdict(kind: str, share: int) -> dict:
        return {"kind": kind, "text": f"{kind}: {share}% of steady-state time in train_step."}

    jobs = {
        "0_workers=off,+repeat=0": make_results(2.0, verdict=verdict("compute-bound", 96)),
        "1_workers=off,+repeat=1": make_results(2.1, verdict=verdict("compute-bound", 97)),
        "2_workers=off,+repeat=2": make_results(2.0, verdict=verdict("compute-bound", 96)),
        "3_workers=auto,+repeat=0": make_results(4.0, workers=2, verdict=verdict("data-bound", 40)),
        "4_workers=auto,+repeat=1": make_results(4.1, workers=2, verdict=verdict("compute-bound", 70)),
    }
    report = build_report(load_sweep(write_sweep(tmp_path, jobs)), tmp_path, charts_too=False).read_text()
    verdicts = [line for line in report.split("## Verdicts", 1)[1].splitlines() if line.startswith("- ")]
    assert verdicts == [
        "- **workers=off** (the figures of one of 3 runs): compute-bound: 96% of steady-state time in train_step.",
        "- **workers=auto** (1 of 2 runs): data-bound: 40% of steady-state time in train_step.",
        "- **workers=auto** (1 of 2 runs): compute-bound: 70% of steady-state time in train_step.",
    ]


def test_a_job_folder_name_cut_to_length_is_read_in_full_from_its_hydra_record(tmp_path):
    from segperf.config import MAX_JOB_DIRNAME, job_dirname

    long = ",".join(f"model.option_{i}=value_{i}" for i in range(12))
    assert job_dirname(3, "workers=auto") == "3_workers=auto"  # a short name as Hydra makes it
    names = {job_dirname(0, f"{long},workers={w}") for w in ("off", "auto")}
    assert len(names) == 2 and all(len(n.encode()) <= MAX_JOB_DIRNAME and re.search(r"~[0-9a-f]{8}$", n) for n in names)
    # Hydra's own name for these jobs stopped a sweep: "OSError: [Errno 36] File name too long"
    jobs = {}
    for num, workers in enumerate(("off", "auto")):
        listed = f"{long},workers={workers}"
        jobs[job_dirname(num, listed)] = make_results(2.0 + num, workers=2 * num)
    root = write_sweep(tmp_path, jobs)
    for name, workers in zip(jobs, ("off", "auto"), strict=True):
        (root / name / ".hydra").mkdir()
        (root / name / ".hydra" / "hydra.yaml").write_text(
            f"hydra:\n  job:\n    override_dirname: {long},workers={workers}\n"
        )
    sweep = load_sweep(root)
    assert sorted(c.label for c in sweep.configurations()) == ["workers=auto", "workers=off"]
