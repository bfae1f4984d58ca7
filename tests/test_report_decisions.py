"""Numbers a user can act on: the report (and report.json beside it) never calls noise a speed-up,
shows settings the machine did not apply as not applied, and warns about busy machines, outlying
first jobs and quality that fell. All from hand-written results.json files."""

from __future__ import annotations

import json
from pathlib import Path

from segperf.report import build_report
from segperf.report.sweep import load_sweep
from tests.test_report import PNG_MAGIC, REPEATS, make_results, table_rows, write_sweep

PIN_CPU = Path(__file__).parent / "fixtures" / "sweep_pin_cpu"  # pin=off,on on a CPU, one run each
AXES = {"workers": 0, "pin": False, "precision": "32-true", "batch_size": 4}
NO_PIN = {"data.pin_memory": {"requested": True, "used": False, "reason": "no CUDA device"}}


def run(ips: float, seed: int = 0, **fields) -> dict:
    """make_results with axes changed by the `axes` dict, and any other top-level field."""
    axes = AXES | fields.pop("axes", {})
    return make_results(ips, seed=seed, axes=axes, **fields)


def report(sweep_dir: Path, out: Path, charts: bool = False) -> tuple[str, dict]:
    text = build_report(load_sweep(sweep_dir), out, charts_too=charts).read_text()
    return text, json.loads((out / "report.json").read_text())


def by_label(data: dict) -> dict[str, dict]:
    return {c["label"]: c for c in data["configurations"]}


def test_pin_on_without_cuda_is_not_applied_and_same_as_pin_off(tmp_path):
    text, data = report(PIN_CPU, tmp_path, charts=True)
    pin_off, pin_on = by_label(data)["pin=off"], by_label(data)["pin=on"]
    assert data["baseline"] == "pin=off"
    assert pin_on["images_per_s"]["median"] / pin_off["images_per_s"]["median"] > 1.1  # noise and job order
    assert (pin_on["applied"], pin_on["same_as"], pin_on["distinguishable"], pin_on["speedup"]) == (
        False,
        "pin=off",
        False,
        None,
    )
    assert pin_on["not_applied"]["pin"]["used"] is False and pin_on["runs"] == 1
    assert (pin_off["applied"], pin_off["same_as"]) == (True, None)
    assert table_rows(text, "## Training")["pin=on"][3] == "not applied: same as pin=off"
    assert "`pin=on`: pin was not applied (requested True, ran with False): no CUDA device" in text
    assert "×" not in table_rows(text, "## Training")["pin=on"][3]
    assert (tmp_path / "training_throughput.png").read_bytes()[:8] == PNG_MAGIC


def test_a_seed_sweep_with_one_run_each_finds_nothing_distinguishable(tmp_path):
    sweep = write_sweep(tmp_path / "s", {"0_seed=0": run(2.0, seed=0), "1_seed=1": run(2.3, seed=1)})
    text, data = report(sweep, tmp_path / "out")
    assert [(c["label"], c["runs"]) for c in data["configurations"]] == [("run", 2)]  # seeds are repeats
    assert not any(c["distinguishable"] for c in data["configurations"])
    assert "times faster" not in text and "Summary: one configuration, `run` (2 runs): nothing to compare." in text


def test_one_run_each_states_no_speedup_as_fact(tmp_path):
    sweep = write_sweep(tmp_path / "s", {"0_workers=off": run(2.0), "1_workers=auto": run(2.28, axes={"workers": 2})})
    text, data = report(sweep, tmp_path / "out")
    auto = by_label(data)["workers=auto"]
    assert (auto["distinguishable"], auto["unconfirmed"], round(auto["speedup"], 2)) == (None, True, 1.14)
    assert table_rows(text, "## Training")["workers=auto"][3] == "1.14× (unconfirmed)"
    assert "`workers=auto`: one run on a side, so its speed-up is unconfirmed" in text
    assert "`+repeat=0,1,2` confirms it" in text


def test_deconv_with_three_repeats_is_a_distinguishable_speedup(tmp_path):
    jobs, i = {}, 0
    for repeat in range(3):  # upsample=upconv,deconv +repeat=0,1,2; axes without upsample, as older runs wrote
        for upsample, ips in (("upconv", [1.95, 2.03, 1.99]), ("deconv", [3.02, 2.91, 3.06])):
            jobs[f"{i}_+repeat={repeat},upsample={upsample}"] = run(ips[repeat], process_job=i)
            i += 1
    text, data = report(write_sweep(tmp_path / "s", jobs), tmp_path / "out")
    deconv = by_label(data)["upsample=deconv"]
    assert (deconv["runs"], deconv["distinguishable"], deconv["same_as"]) == (3, True, None)
    assert deconv["speedup_interval"][0] > 1.0 and round(deconv["speedup"], 2) == 1.52
    assert table_rows(text, "## Training")["upsample=deconv"][3] == "1.52×"
    assert table_rows(text, "## Repeated timings")["upsample=deconv"][4].startswith("1.5")
    assert "`upsample=deconv` ran **1.51 ± 0.05 times faster** than `upsample=upconv`." in text


def test_noise_is_never_summarized_as_faster(tmp_path):
    jobs = {}
    for seed, (a, b) in enumerate([(2.0, 2.15), (2.2, 2.3), (2.1, 2.25)]):
        jobs[f"{2 * seed}_seed={seed},workers=off"] = run(a, seed=seed)
        jobs[f"{2 * seed + 1}_seed={seed},workers=auto"] = run(b, seed=seed, axes={"workers": 2})
    text, data = report(write_sweep(tmp_path / "s", jobs), tmp_path / "out")
    assert by_label(data)["workers=auto"]["distinguishable"] is False
    assert table_rows(text, "## Training")["workers=auto"][3] == "~1.07×"
    assert table_rows(text, "## Repeated timings")["workers=auto"][4].startswith("~")
    assert "times faster" not in text
    assert "Summary: no configuration is distinguishable from `workers=off`" in text


def test_report_json_holds_the_contract_beside_report_md(tmp_path):
    text, data = report(REPEATS, tmp_path)
    contract = {"label", "overrides", "runs", "images_per_s", "speedup", "distinguishable", "applied", "same_as"}
    assert all(contract | {"quality"} <= set(c) for c in data["configurations"])
    assert data["baseline"] == "data.num_workers=0"
    first, noisy, fast = data["configurations"]
    assert first["images_per_s"] | {"mean": 0, "std": 0} == {"median": 2.1, "min": 2.0, "max": 2.2, "mean": 0, "std": 0}
    assert [c["distinguishable"] for c in data["configurations"]] == [False, False, True]
    assert fast["overrides"] == {"data.num_workers": "2", "train_images": "64"} and fast["speedup"] == 2.0
    assert fast["quality"]["worse_than_baseline"] is False  # judged (3 runs a side): not lower
    assert (fast["quality"]["metric"], fast["quality"]["median"]) == ("val_dice", 0.9)
    assert "Decision rule: a speed-up is distinguishable" in text and data["decision"]["level"] == 0.95
    assert "## Warnings\n\nNone." in text  # results.json from before machine_load/process_job load as before
    assert sorted(p.name for p in tmp_path.iterdir() if "report" in p.name) == ["report.json", "report.md"]


def test_a_compile_that_fell_back_to_eager_is_shown_not_applied(tmp_path):
    fell_back = {"model.compile": {"requested": True, "used": False, "reason": "torch.compile failed"}}
    jobs = {
        "0_compile=off,workers=off": run(2.0, axes={"compile": False}),
        "1_compile=on,workers=auto": run(3.0, axes={"compile": True, "workers": 2}, adjusted=fell_back),
        "2_compile=off,workers=auto": run(2.9, axes={"compile": False, "workers": 2}),
    }
    text, data = report(write_sweep(tmp_path / "s", jobs), tmp_path / "out")
    on, off = by_label(data)["compile=on, workers=auto"], by_label(data)["compile=off, workers=auto"]
    assert (on["applied"], on["same_as"]) == (False, None)  # nothing ran its settings before it
    assert table_rows(text)["compile=on, workers=auto"][3] == "1.50× (unconfirmed) (compile not applied)"
    # the later configuration that asked for what actually ran is the same as it
    assert (off["same_as"], off["speedup"], off["distinguishable"]) == ("compile=on, workers=auto", None, None)
    assert table_rows(text)["compile=off, workers=auto"][3] == "same as compile=on, workers=auto"


def test_ladder_presets_compare_by_what_they_turned_on(tmp_path):
    workers = {"workers": 2, "prefetch": 2}
    jobs = {
        "0_+opt=0_baseline": run(2.0),
        "1_+opt=2_workers": run(2.2, axes=workers),
        "2_+opt=3_pin": run(2.4, axes=workers | {"pin": True}, adjusted=NO_PIN),
    }
    text, data = report(write_sweep(tmp_path / "s", jobs), tmp_path / "out")
    pin = by_label(data)["+opt=3_pin"]
    assert (pin["same_as"], pin["applied"], pin["speedup"], pin["distinguishable"]) == (
        "+opt=2_workers",
        False,
        None,
        None,  # the same as a configuration that is not the baseline: read that one's row
    )
    assert table_rows(text)["+opt=3_pin"][3] == "not applied: same as +opt=2_workers"


def test_onnxruntime_ignoring_compile_makes_it_the_same_as_without(tmp_path):
    def infer(ips: float, compile_: bool) -> dict:
        adjusted = {"compile": {"requested": True, "used": False, "reason": "own graph"}} if compile_ else {}
        return {
            "status": "completed",
            "kind": "inference",
            "axes": {"compile": compile_, "runtime": "onnxruntime", "precision": "32-true"},
            "adjusted": adjusted,
            "inference": {"end_to_end_images_per_s": ips, "model_images_per_s": ips * 3},
        }

    jobs = {
        "0_compile=off,runtime=onnxruntime": infer(10.0, False),
        "1_compile=on,runtime=onnxruntime": infer(11.0, True),
    }
    text, data = report(write_sweep(tmp_path / "s", jobs), tmp_path / "out")
    assert table_rows(text, "## Inference")["compile=on"][3] == "not applied: same as compile=off"
    assert data["inference"]["configurations"][1]["same_as"] == "compile=off"


def _machine_load(one_minute: float, job: int) -> dict:
    load = {"loadavg_start": [one_minute, 0.5, 0.3], "loadavg_end": [1.9, 1.0, 0.5], "cores": 2}
    return {"machine_load": load | {"cpu_mhz_start": 2450.0, "cpu_mhz_end": None}, "process_job": job}


def test_a_run_that_started_on_a_busy_machine_is_flagged_but_the_sweeps_own_load_is_not(tmp_path):
    long_job = {"resources": {"cpu_mean_percent": 190.0}, "accounted": {"run_wall_s": 300.0}}
    jobs = {
        "0_+repeat=0": run(2.0, **_machine_load(0.1, 0), **long_job),
        "1_+repeat=1": run(2.02, **_machine_load(1.95, 1), **long_job),  # job 0's own 1.9 cores, still in the average
        "2_+repeat=2": run(1.98, **_machine_load(4.2, 2), **long_job),  # ~2.3 more than the sweep itself
        "3_+repeat=3": run(2.01),  # recorded no load (an older results.json): not judged
    }
    text, data = report(write_sweep(tmp_path / "s", jobs), tmp_path / "out")
    runs = data["configurations"][0]["run_details"]
    assert [r["busy"] for r in runs] == [False, False, True, None]
    warnings = [w for w in data["warnings"] if w["kind"] == "busy"]
    assert [w["job"] for w in warnings] == [2]
    assert "job 2 (`run`) started on a busy machine: 1-minute load average 4.20 on 2 usable cores" in text
    assert "CPU clock 2,450 MHz at its start" in text


def test_an_outlying_first_job_of_a_sweep_process_is_flagged(tmp_path):
    def sweep(name: str, first: float) -> Path:
        jobs = {f"{i}_+repeat={i}": run(ips, process_job=i) for i, ips in enumerate([first, 2.0, 2.05])}
        return write_sweep(tmp_path / name, jobs)

    text, data = report(sweep("slow", 1.4), tmp_path / "out")
    assert data["configurations"][0]["first_job_outlier"] == 0
    assert "job 0 (`run`), the first job of its sweep process, ran 1.40 images/s, 31% slower than the median" in text
    text, data = report(sweep("steady", 1.97), tmp_path / "out2")  # within noise of the others
    assert data["configurations"][0]["first_job_outlier"] is None and "first job of its sweep process" not in text


def test_quality_that_fell_beyond_the_spread_of_repeats_is_marked(tmp_path):
    jobs, i = {}, 0
    dice = {"workers=off": [0.90, 0.91, 0.89], "workers=auto": [0.80, 0.82, 0.81], "workers=4": [0.90, 0.89, 0.905]}
    for seed in range(3):
        for label, (workers, values) in zip(dice, enumerate(dice.values()), strict=True):
            quality = {"val_pixel_accuracy": 0.9, "val_dice": values[seed]}
            jobs[f"{i}_seed={seed},{label}"] = run(2.0 + workers, seed=seed, axes={"workers": workers}, quality=quality)
            i += 1
    text, data = report(write_sweep(tmp_path / "s", jobs), tmp_path / "out", charts=True)
    rows = table_rows(text, "## Training")
    assert rows["workers=auto"][10] == "0.810 [0.800–0.820] (lower)"
    assert rows["workers=4"][10] == "0.900 [0.890–0.905]"  # within the baseline's spread: not marked
    assert [c["quality"]["worse_than_baseline"] for c in data["configurations"]] == [None, True, False]
    assert "`workers=auto`: val Dice 0.810 [0.800–0.820] is lower than the baseline's 0.900" in text
    assert (tmp_path / "out" / "quality.png").read_bytes()[:8] == PNG_MAGIC


def test_a_lower_is_better_quality_is_judged_worse_when_it_rose_and_labelled_so(tmp_path):
    # an outside regression model (quality: {metric: val_mae, mode: min}): its better lr was marked
    # "(lower)" with "the speed may have cost quality", its worse one left unmarked
    jobs, i = {}, 0
    mae = {"model.lr=3e-4": [12.2, 11.8, 12.6], "model.lr=3e-3": [4.9, 4.0, 7.0], "model.lr=3e-5": [14.0, 13.5, 14.6]}
    for seed in range(3):
        for n, (label, values) in enumerate(mae.items()):
            quality = {"val_mae": values[seed], "val_loss": 0.1, "metric": "val_mae", "mode": "min"}
            jobs[f"{i}_seed={seed},{label}"] = run(2.0 + n, seed=seed, axes={"workers": n}, quality=quality)
            i += 1
    text, data = report(write_sweep(tmp_path / "s", jobs), tmp_path / "out", charts=True)
    rows = table_rows(text, "## Training")
    assert "val_mae (lower is better)" in text.split("## Training", 1)[1].splitlines()[2]  # the header
    assert rows["model.lr=3e-3"][10] == "4.900 [4.000–7.000]"  # better: not marked
    assert rows["model.lr=3e-5"][10] == "14.000 [13.500–14.600] (higher)"
    quality = by_label(data)["model.lr=3e-5"]["quality"]
    assert (quality["mode"], quality["worse_than_baseline"]) == ("min", True)
    assert by_label(data)["model.lr=3e-3"]["quality"]["worse_than_baseline"] is False
    assert "`model.lr=3e-5`: val_mae 14.000 [13.500–14.600] is higher than the baseline's" in text
    assert "`model.lr=3e-3`" not in text.split("## Warnings", 1)[1].split("## Failed", 1)[0]
    assert (tmp_path / "out" / "quality.png").read_bytes()[:8] == PNG_MAGIC


def test_quality_of_single_runs_is_not_judged(tmp_path):
    jobs = {"0_workers=off": run(2.0), "1_workers=auto": run(3.0, axes={"workers": 2}, quality={"val_dice": 0.5})}
    text, data = report(write_sweep(tmp_path / "s", jobs), tmp_path / "out")
    assert by_label(data)["workers=auto"]["quality"]["worse_than_baseline"] is None
    assert table_rows(text)["workers=auto"][10] == "0.500"


def test_a_slow_first_job_is_left_out_of_the_decision_not_out_of_the_table(tmp_path):
    # upconv's first job paid the sweep's one-time costs; with it in, upconv's spread (1.4-2.02)
    # would hide deconv's 1.25x in noise
    values = {"upconv": [1.40, 2.00, 2.02], "deconv": [2.50, 2.52, 2.48]}
    jobs, i = {}, 0
    for repeat in range(3):
        for upsample, ips in values.items():
            jobs[f"{i}_+repeat={repeat},upsample={upsample}"] = run(ips[repeat], process_job=i)
            i += 1
    text, data = report(write_sweep(tmp_path / "s", jobs), tmp_path / "out")
    upconv, deconv = by_label(data)["upsample=upconv"], by_label(data)["upsample=deconv"]
    assert upconv["first_job_outlier"] == 0 and upconv["images_per_s"]["min"] == 1.4  # still shown
    assert deconv["distinguishable"] is True and deconv["runs"] == 3
    assert "is left out of the speed-up decision" in text


def test_repeated_pin_runs_on_a_busy_cpu_get_no_speedup_and_one_busy_warning(tmp_path):
    jobs = {}
    for i, (pin, ips) in enumerate([("off", 65.0), ("on", 129.0), ("off", 66.8), ("on", 62.9)]):
        fields = {"axes": {"pin": True}, "adjusted": NO_PIN} if pin == "on" else {}
        jobs[f"{i}_+repeat={i // 2},pin={pin}"] = run(ips, **fields, **_machine_load(4.2, i))
    text, data = report(write_sweep(tmp_path / "s", jobs), tmp_path / "out")
    assert "Summary: the other configurations ran `pin=off`'s settings (same as): no speed-up." in text
    assert "times faster" not in text and by_label(data)["pin=on"]["distinguishable"] is False
    assert [w["job"] for w in data["warnings"] if w["kind"] == "busy"] == [0, 1, 2, 3]  # each run, for programs
    busy_lines = [line for line in text.splitlines() if "started on a busy machine" in line]
    assert busy_lines == [
        "- jobs 0 (`pin=off`), 1 (`pin=on`), 2 (`pin=off`), 3 (`pin=on`) started on a busy machine: 1-minute load "
        "average 4.20 on 2 usable cores, about 4.2 of it from other processes (over 1.5: half the cores + 0.5). "
        "Their timings may be low: re-run them on a quiet machine."
    ]


def _measured_load(others: float, one_minute: float = 1.9, steal: float = 0.0) -> dict:
    """machine_load as a run records it now: others' cores measured during the run beside the load average."""
    load = {"loadavg_start": [one_minute, 1.0, 0.5], "loadavg_end": [1.9, 1.0, 0.5], "cores": 2}
    return {"machine_load": load | {"others_cores": others, "steal_cores": steal, "cpu_mhz_start": None}}


def test_busy_is_judged_by_what_other_processes_used_during_the_run_not_by_the_lagging_load_average(tmp_path):
    jobs = {
        # the 1-minute load average still holds the previous job's DataLoader workers: no one else ran
        "0_+repeat=0": run(2.0, process_job=0, **_measured_load(0.02, one_minute=3.9)),
        "1_+repeat=1": run(1.6, process_job=1, **_measured_load(0.85, one_minute=0.2)),  # a neighbour started
        "2_+repeat=2": run(1.8, process_job=2, **_measured_load(0.1, steal=0.3)),  # the hypervisor took 0.3 cores
    }
    text, data = report(write_sweep(tmp_path / "s", jobs), tmp_path / "out")
    assert [r["busy"] for r in data["configurations"][0]["run_details"]] == [False, True, True]
    assert "job 0" not in text.split("## Warnings", 1)[1].split("##", 1)[0]
    assert (
        "- jobs 1 (`run`), 2 (`run`) ran on a busy machine: other processes kept 0.40–0.85 of their 2 usable cores "
        "busy during them (over 0.20). Their timings may be low: re-run them on a quiet machine. They are left out "
        "of the speed-up decision while their configuration has two quiet runs."
    ) in text


def test_quality_is_not_judged_from_repeats_of_one_seed_which_train_alike(tmp_path):
    jobs, i = {}, 0
    for repeat in range(3):  # +repeat=0,1,2 of seed 0: each side's Dice identical across its repeats
        for upsample, dice in (("upconv", 0.973), ("deconv", 0.956)):
            quality = {"val_pixel_accuracy": 0.98, "val_dice": dice}
            jobs[f"{i}_+repeat={repeat},upsample={upsample}"] = run(
                2.0 if upsample == "upconv" else 2.4, quality=quality
            )
            i += 1
    text, data = report(write_sweep(tmp_path / "s", jobs), tmp_path / "out")
    assert by_label(data)["upsample=deconv"]["quality"]["worse_than_baseline"] is None
    assert table_rows(text, "## Training")["upsample=deconv"][10] == "0.956 [0.956–0.956]"
    assert "cost quality" not in text and "judged with two seeds or more a side, `seed=0,1,2`" in text


def test_a_run_measured_busy_is_left_out_of_the_decision_while_two_quiet_runs_remain(tmp_path):
    # upconv's job 6 shared the cores with a neighbour's job: with it, deconv's steady 1.2x would be
    # within the noise it adds (interval 0.91-2.05x); without it, 1.18-1.23x: distinguishable
    values = {"upconv": [2.0, 2.02, 1.98, 1.2], "deconv": [2.4, 2.42, 2.38, 2.41]}
    jobs, i = {}, 0
    for repeat in range(4):
        for upsample, ips in values.items():
            busy = upsample == "upconv" and repeat == 3
            load = _measured_load(0.9 if busy else 0.01)
            jobs[f"{i}_+repeat={repeat},upsample={upsample}"] = run(ips[repeat], process_job=i, **load)
            i += 1
    text, data = report(write_sweep(tmp_path / "s", jobs), tmp_path / "out")
    upconv, deconv = by_label(data)["upsample=upconv"], by_label(data)["upsample=deconv"]
    assert upconv["images_per_s"]["min"] == 1.2 and upconv["runs"] == 4  # still in the tables
    assert deconv["distinguishable"] is True and deconv["speedup_interval"][0] > 1.1
    assert "job 6 (`upsample=upconv`) ran on a busy machine" in text
    # all but one run busy: too few quiet runs to decide on, so every run stays in the test
    for name in list(jobs)[::2][:3]:
        jobs[name]["machine_load"]["others_cores"] = 0.9
    _, data = report(write_sweep(tmp_path / "s2", jobs), tmp_path / "out2")
    assert by_label(data)["upsample=deconv"]["distinguishable"] is False
