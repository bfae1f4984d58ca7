"""`python -m segperf.compare REF CAND`: the CI gate's exit status is its contract.

Run folders are made from the sweep fixtures (three seeds each of data.num_workers=0, 1, 2 at
about 2.1, 2.2 and 4.2 images/s), edited where a test needs another machine, workload or outcome.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from segperf.compare.cli import main
from tests.conftest import REPO

SWEEP = REPO / "tests" / "fixtures" / "sweep_repeats"


def side(tmp_path: Path, name: str, workers: int) -> Path:
    """A sweep folder holding the three repeats of data.num_workers=`workers`."""
    folder = tmp_path / name
    folder.mkdir()
    for run in SWEEP.glob(f"*_data.num_workers={workers},*"):
        shutil.copytree(run, folder / run.name)
    return folder


def edit_runs(folder: Path, change) -> None:
    for path in folder.glob("*/results.json"):
        results = json.loads(path.read_text())
        change(results)
        path.write_text(json.dumps(results))


def compare_json(folder: Path) -> dict:
    return json.loads((folder / "compare.json").read_text())


def test_a_candidate_slower_beyond_noise_fails_with_exit_1_and_says_so(tmp_path, capsys):
    ref, cand = side(tmp_path, "ref", workers=2), side(tmp_path, "cand", workers=0)
    assert main([str(ref), str(cand)]) == 1
    out = capsys.readouterr().out
    assert "speed CAND/REF: 0.500x (95% interval" in out
    assert "SLOWER" in out and "by more than 5% beyond run-to-run noise" in out
    record = compare_json(cand)
    assert record["exit_status"] == 1
    assert record["ratio"] == pytest.approx(0.5, rel=0.01)
    assert record["high"] < 0.95
    assert len(record["ref"]["runs"]) == len(record["cand"]["runs"]) == 3


def test_the_same_runs_on_both_sides_pass_with_exit_0(tmp_path, capsys):
    ref, cand = side(tmp_path, "ref", workers=0), side(tmp_path, "cand", workers=0)
    assert main([str(ref), str(cand)]) == 0
    assert "no difference beyond run-to-run noise" in capsys.readouterr().out
    assert compare_json(cand)["ratio"] == pytest.approx(1.0)


def test_the_very_same_runs_given_as_both_sides_pass_with_a_note_that_says_so(tmp_path, capsys):
    ref = side(tmp_path, "ref", workers=0)
    assert main([str(ref), str(ref)]) == 0
    captured = capsys.readouterr()
    assert "3 runs are on both sides" in captured.err and "ratio is 1 by construction" in captured.err
    assert compare_json(ref)["notes"] == [captured.err.split("note: ", 1)[1].strip()]


def test_a_slowdown_within_noise_passes(tmp_path, capsys):
    # 2.10 against 2.23 images/s: 6% slower on the medians, but the interval reaches above 0.95
    ref, cand = side(tmp_path, "ref", workers=1), side(tmp_path, "cand", workers=0)
    assert main([str(ref), str(cand)]) == 0
    record = compare_json(cand)
    assert record["ratio"] < 0.95 < record["high"]


def test_a_larger_threshold_lets_a_real_slowdown_pass(tmp_path, capsys):
    # half the speed is slower beyond noise, but not surely by more than 60%
    ref, cand = side(tmp_path, "ref", workers=2), side(tmp_path, "cand", workers=0)
    assert main([str(ref), str(cand), "--max-slowdown", "0.6"]) == 0
    assert "slower than REF beyond noise, but not surely by more than 60%" in capsys.readouterr().out


def test_one_sweep_is_split_into_its_sides_with_where(tmp_path, capsys):
    out = tmp_path / "out"
    args = [str(SWEEP), str(SWEEP), "--ref-where", "data.num_workers=2", "--cand-where", "data.num_workers=0"]
    assert main([*args, "--out", str(out)]) == 1
    assert compare_json(out)["ref"]["label"] == "data.num_workers=2"


def test_a_sweep_of_several_configurations_is_refused_naming_them(tmp_path, capsys):
    assert main([str(SWEEP), str(SWEEP), "--out", str(tmp_path)]) == 2
    err = capsys.readouterr().err
    assert "holds 3 configurations" in err and "--ref-where" in err
    assert compare_json(tmp_path)["exit_status"] == 2


def test_runs_from_another_machine_cannot_be_compared(tmp_path, capsys):
    ref, cand = side(tmp_path, "ref", workers=0), side(tmp_path, "cand", workers=0)
    edit_runs(cand, lambda r: r["machine"].update(hostname="other-host"))
    assert main([str(ref), str(cand)]) == 2
    err = capsys.readouterr().err
    assert "another machine" in err and "host (bench vs other-host)" in err
    assert "another machine" in compare_json(cand)["reason"]
    assert main([str(ref), str(cand), "--allow-mixed-machines"]) == 0


def test_runs_of_another_workload_cannot_be_compared(tmp_path, capsys):
    ref, cand = side(tmp_path, "ref", workers=0), side(tmp_path, "cand", workers=0)
    edit_runs(ref, lambda r: r["config"].update(model={"_target_": "segperf.model.unet.SegmentationModule"}))
    edit_runs(cand, lambda r: r["config"].update(model={"_target_": "segperf.model.cnn.ClassificationModule"}))
    assert main([str(ref), str(cand)]) == 2
    assert "another workload" in capsys.readouterr().err and "model._target_" in compare_json(cand)["reason"]


def test_runs_that_recorded_no_workload_are_compared_with_a_note_that_says_so(tmp_path, capsys):
    ref, cand = side(tmp_path, "ref", workers=0), side(tmp_path, "cand", workers=0)
    edit_runs(cand, lambda r: r.pop("config"))  # PerfMonitor in a script records no config
    assert main([str(ref), str(cand)]) == 0
    err = capsys.readouterr().err
    assert "3 of 6 runs recorded no workload" in err and "taken to be the same model" in err
    assert compare_json(cand)["notes"][0].startswith("3 of 6 runs recorded no workload")


def test_a_failed_run_cannot_be_compared_and_is_named(tmp_path, capsys):
    ref, cand = side(tmp_path, "ref", workers=0), side(tmp_path, "cand", workers=0)
    failed = next(cand.glob("*/results.json"))
    failed.write_text(json.dumps({"status": "failed", "error": "CUDA out of memory"}))
    assert main([str(ref), str(cand)]) == 2
    err = capsys.readouterr().err
    assert failed.parent.name in err and "CUDA out of memory" in err


def test_a_folder_without_results_cannot_be_compared(tmp_path, capsys):
    ref, empty = side(tmp_path, "ref", workers=0), tmp_path / "empty"
    empty.mkdir()
    assert main([str(ref), str(empty)]) == 2
    assert "CAND: no runs in" in capsys.readouterr().err


def test_one_run_a_side_is_too_few_to_judge_noise(tmp_path, capsys):
    ref, cand = side(tmp_path, "ref", workers=2), side(tmp_path, "cand", workers=0)
    one_ref, one_cand = next(ref.iterdir()), next(cand.iterdir())
    assert main([str(one_ref), str(one_cand)]) == 2
    assert "too few completed runs" in capsys.readouterr().err


@pytest.mark.slow  # a subprocess; the in-process tests check each exit status
def test_the_command_line_exits_with_the_decision(tmp_path):
    ref, cand = side(tmp_path, "ref", workers=2), side(tmp_path, "cand", workers=0)
    done = subprocess.run(
        [sys.executable, "-m", "segperf.compare", str(ref), str(cand)], capture_output=True, text=True, check=False
    )
    assert done.returncode == 1, done.stderr
    assert "SLOWER" in done.stdout
