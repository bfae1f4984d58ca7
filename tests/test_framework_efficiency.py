"""scripts/framework_efficiency.py: segperf's own run and a hand-written loop train the same
workload for the same steps, and the comparison is printed and written. What the ratio comes to is
measured, never asserted (docs/BENCHMARKS.md records it)."""

from __future__ import annotations

import importlib.util
import json
import sys

import pytest

from tests.conftest import MNIST_TINY, NARROW_UNET, REPO, TINY

# the MNIST run's sizes and quiet settings, without its model/data choice (--workload cnn makes it)
CNN_TINY = [o for o in MNIST_TINY if not o.startswith(("model=", "data=", "train_images="))]


@pytest.fixture(scope="module")
def script():
    spec = importlib.util.spec_from_file_location("framework_efficiency", REPO / "scripts" / "framework_efficiency.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


def test_both_sides_train_the_same_steps_and_images_and_the_ratio_is_printed_and_written(script, tiny_mnist, tmp_path):
    cfg = script.compose_config("cnn", [*CNN_TINY, f"data.root={tiny_mnist}"], steps=5)
    printed: list[str] = []
    summary = script.compare(cfg, repeats=2, out=tmp_path, report=printed.append, warmup_rounds=0, busy_cores=99.0)

    runs = summary["runs"]
    assert [(r["repeat"], r["side"]) for r in runs] == [(0, "segperf"), (0, "raw"), (1, "raw"), (1, "segperf")]
    assert {(r["steps"], r["images"], r["warmup_steps"]) for r in runs} == {(5, 5 * 32, 2)}
    assert all(r["images_per_s"] > 0 for r in runs)
    assert all(0 < r["accounted_fraction"] <= 1 for r in runs if r["side"] == "segperf")
    if sys.platform == "linux":  # /proc/stat: both sides say how busy the machine was during them
        assert all(r["others_cores"] is not None for r in runs)
    assert (tmp_path / "segperf-0" / "results.json").is_file()  # (a) is the real run, with its record
    assert summary["ratio"] == pytest.approx(
        summary["median_images_per_s"]["segperf"] / summary["median_images_per_s"]["raw"]
    )
    assert any(line.startswith("segperf / raw = ") for line in printed)
    assert any(line.startswith("pairs: ") and "geometric mean" in line for line in printed)
    written = json.loads((tmp_path / "framework_efficiency.json").read_text())
    assert written["ratio"] == pytest.approx(summary["ratio"])
    assert written["config"]["batch_size"] == 32 and written["config"]["train_images"] == 5 * 32


def test_the_raw_loop_steps_the_runs_own_lr_schedule_over_the_same_steps(script, tiny_carvana, tmp_path):
    from segperf.training.workload import build_workload

    cfg = script.compose_config("unet", [*TINY, *NARROW_UNET, f"data.root={tiny_carvana}"], steps=7)
    module = build_workload(script.OmegaConf.create(script.resolved(cfg, tmp_path))).module
    optimizer, schedules = script.optimizer_of(module, steps=7)

    assert type(optimizer).__name__ == "Adam" and optimizer.param_groups[0]["params"]
    assert [type(s).__name__ for s in schedules] == ["OneCycleLR"]  # size=demo's schedule, every step
    assert schedules[0].total_steps == 7
    assert module._trainer is None  # lent for the call only: the module's self.log stays trainer-free


def test_too_few_steps_to_leave_warm_up_out_is_refused_with_the_flag_to_change(script):
    with pytest.raises(SystemExit, match="--steps"):
        script.compose_config("cnn", CNN_TINY, steps=2)


def test_a_precision_the_raw_loop_cannot_reproduce_is_refused_by_name(script):
    import torch

    with pytest.raises(SystemExit, match="trainer.precision=16-true"):
        script.autocast_for("16-true", torch.device("cpu"))


def test_a_run_with_measurement_off_has_a_ratio_and_no_accounted_share(script):
    runs = [
        {"side": "segperf", "images_per_s": 9.0, "accounted_fraction": None},  # perf.measure=false
        {"side": "raw", "images_per_s": 10.0},
    ]
    summary = script.summarize(runs)

    assert summary["ratio"] == pytest.approx(0.9)
    assert summary["accounted_fraction"] is None


def fake_sides(script, monkeypatch, others: dict[str, list[float]]):
    """Both sides as instant fakes: each call gives the next machine load of its side's list, and is logged."""
    calls: list[tuple[str, str]] = []

    def side(name: str):
        def run(cfg, run_dir):
            calls.append((name, run_dir.name))
            load = others[name].pop(0) if others[name] else 0.0
            return {
                "side": name,
                "run_dir": str(run_dir),
                "steps": 5,
                "images": 10,
                "warmup_steps": 2,
                "images_per_s": 100.0 if name == "raw" else 90.0,
                "others_cores": load,
            }

        return run

    monkeypatch.setitem(script.SIDES, "segperf", side("segperf"))
    monkeypatch.setitem(script.SIDES, "raw", side("raw"))
    monkeypatch.setattr(script, "resolved", lambda cfg, out: {})
    return calls


def test_warm_up_rounds_run_both_sides_first_and_are_not_counted(script, monkeypatch, tmp_path):
    calls = fake_sides(script, monkeypatch, {"segperf": [], "raw": []})
    summary = script.compare(None, repeats=2, out=tmp_path, report=lambda line: None, warmup_rounds=1)

    assert calls[:2] == [("segperf", "warmup-segperf-0"), ("raw", "warmup-raw-0")]
    assert [folder for _, folder in calls[2:]] == ["segperf-0", "raw-0", "raw-1", "segperf-1"]
    assert [r["run_dir"].rsplit("/", 1)[-1] for r in summary["runs"]] == ["segperf-0", "raw-0", "raw-1", "segperf-1"]
    assert summary["warmup_rounds"] == 1


def test_a_run_on_a_busy_machine_is_run_again_and_the_last_attempt_counts(script, monkeypatch, tmp_path):
    # raw's first attempt shares the machine (0.8 cores busy), its second is quiet; segperf is busy throughout
    calls = fake_sides(script, monkeypatch, {"segperf": [0.9, 0.9, 0.9], "raw": [0.8, 0.0]})
    printed: list[str] = []
    summary = script.compare(
        None, repeats=1, out=tmp_path, report=printed.append, warmup_rounds=0, busy_cores=0.1, retries=2
    )

    assert calls == [
        ("segperf", "segperf-0"), ("segperf", "segperf-0-again-1"), ("segperf", "segperf-0-again-2"),
        ("raw", "raw-0"), ("raw", "raw-0-again-1"),
    ]  # fmt: skip
    segperf, raw = summary["runs"]
    assert segperf["busy_attempts"] == [0.9, 0.9] and segperf["others_cores"] == 0.9  # retries spent: counted, as read
    assert raw["busy_attempts"] == [0.8] and raw["others_cores"] == 0.0
    assert sum("running it again" in line for line in printed) == 3


def test_the_pairs_are_each_repeats_ratio_with_their_geometric_mean_and_interval(script):
    runs = [
        {"repeat": 0, "side": "segperf", "images_per_s": 90.0},
        {"repeat": 0, "side": "raw", "images_per_s": 100.0},
        {"repeat": 1, "side": "raw", "images_per_s": 100.0},
        {"repeat": 1, "side": "segperf", "images_per_s": 110.0},
    ]
    pairs = script.summarize(runs)["pairs"]

    assert pairs["ratios"] == pytest.approx([0.9, 1.1])
    assert pairs["geomean"] == pytest.approx((0.9 * 1.1) ** 0.5)
    assert pairs["low"] < 0.9 and pairs["high"] > 1.1  # two pairs that far apart: a wide interval around both
    one = script.paired_ratios(runs[:2])
    assert one["ratios"] == pytest.approx([0.9]) and one["low"] is None and one["high"] is None


def test_the_lightning_arm_trains_the_same_steps_under_a_bare_trainer_and_its_ratio_is_printed(
    script, tiny_mnist, tmp_path
):
    cfg = script.compose_config("cnn", [*CNN_TINY, f"data.root={tiny_mnist}"], steps=5)
    printed: list[str] = []
    summary = script.compare(
        cfg, repeats=1, out=tmp_path, report=printed.append, warmup_rounds=0, busy_cores=99.0,
        sides=("segperf", "raw", "lightning"),
    )  # fmt: skip

    runs = {r["side"]: r for r in summary["runs"]}
    assert set(runs) == {"segperf", "raw", "lightning"}
    assert (runs["lightning"]["steps"], runs["lightning"]["images"], runs["lightning"]["warmup_steps"]) == (5, 160, 2)
    assert runs["lightning"]["images_per_s"] > 0
    assert not (tmp_path / "lightning-0" / "results.json").exists()  # nothing of segperf's in this arm
    medians = summary["median_images_per_s"]
    assert summary["lightning_ratio"] == pytest.approx(medians["lightning"] / medians["raw"])
    assert summary["lightning_pairs"]["ratios"] == pytest.approx([summary["lightning_ratio"]])
    assert any(line.startswith("lightning / raw = ") for line in printed)
