"""`python -m segperf.tune calibrate` (segperf.tune.calibrate): a tune's probes against long runs of
the configurations it visited, interleaved; the probe/long-run ratio per configuration and the
coverage of the printed intervals."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from segperf.tune import later_noise
from segperf.tune.calibrate import study, tables
from tests.conftest import NARROW_UNET


def record(start: list[str], steps: list[dict], final: dict | None = None, probe: dict | None = None) -> dict:
    """tune.json as segperf.tune.output writes it (the keys the study reads)."""
    return {
        "command": "python -m segperf.tune",
        "machine": {"cpu_model": "a CPU", "cores": 2, "avx512_bf16": False, "amx_bf16": False, "torch": "2"},
        "settings": {"probe": probe or {}},
        "result": {"start": start, "steps": steps, "final_configs": final or {"start": start}},
    }


def step(candidate, against, low=None, high=None, ratio=None, stage="axes", probes=1) -> dict:
    return {
        "stage": stage,
        "axis": "workers",
        "candidate": candidate,
        "against": against,
        "ratio": ratio,
        "low": low,
        "high": high,
        "verdict": "kept",
        "candidate_probes": [{}] * probes,
        "against_probes": [{}] * probes,
    }


def test_the_configurations_a_tune_visited_are_its_final_ones_and_both_sides_of_each_measured_step():
    start = ["batch_size=4"]
    tuned = ["batch_size=4", "workers=auto"]
    steps = [
        step(tuned, start, 1.1, 1.6, 1.3),
        step(["batch_size=4", "pin=on"], tuned, probes=0),  # skipped: budget, nothing measured
        step(tuned, start, stage="quality"),
    ]
    found = study.visited(record(start, steps, {"start": start, "tuned": tuned}))
    assert found == {"start": tuple(start), "workers=auto": tuple(tuned)}
    assert [d["ratio"] for d in study.decisions(record(start, steps))] == [1.3]


def test_a_configuration_the_tune_only_ever_cut_or_saw_fail_is_left_out_of_the_study():
    # fp16 emulated on a CPU: minutes a step; the study runs without the tune's time limit
    start, tuned = ["a"], ["a", "w"]
    fp16, broken = ["a", "w", "precision=fp16"], ["a", "w", "compile=on"]
    cut = {"images_per_s": None, "cut": True}
    steps = [
        step(tuned, start) | {"candidate_probes": [{"images_per_s": 12.0}], "against_probes": [{"images_per_s": 4.0}]},
        step(fp16, tuned) | {"candidate_probes": [cut], "against_probes": [{"images_per_s": 12.0}]},
        step(broken, tuned) | {"candidate_probes": [{"images_per_s": None, "failed": "boom"}, {"images_per_s": 3.0}]},
    ]
    found = study.visited(record(start, steps, {"start": start, "tuned": tuned}))
    assert tuple(fp16) not in found.values()
    assert tuple(broken) in found.values()  # one of its probes ran: it has a rate to calibrate


def test_the_table_and_the_coverage_read_geometric_means_of_the_interleaved_runs():
    configs = {"start": ("a",), "workers=auto": ("a", "w")}
    probes = {"start": [10.0, 10.0], "workers=auto": [20.0, 18.0]}
    longs = {"start": [10.0, 10.4], "workers=auto": [14.0, 15.0]}
    rows = study.table(configs, probes, longs)
    assert rows[0]["within"] is True and rows[1]["within"] is False  # 18.97 against 14.49: 1.31x
    decided = [{"stage": "axes", "axis": "workers", "candidate": ("a", "w"), "against": ("a",), "ratio": 1.9}]
    covered = study.coverage([decided[0] | {"low": 1.5, "high": 2.3}], configs, longs)
    assert covered[0]["long_ratio"] == pytest.approx(14.49 / 10.2, rel=0.01) and covered[0]["covered"] is False
    text = tables.markdown(rows, covered, "about")
    assert "Probes within ±15% of the long runs: 1/2 (50%)" in text
    assert "Printed intervals containing the long runs' ratio: 0/1 (0%)" in text


def test_a_printed_ratio_agrees_with_the_long_runs_when_they_differ_by_less_than_both_estimates_noise():
    from segperf.perf.decision import Noise

    four_percent = Noise(variance=0.04**2, df=20, configurations=10)
    # a tight printed interval that misses the long runs' ratio (two runs a side, 4% each) by 3%:
    # the long runs' own estimate is that uncertain, so the two agree
    assert study.consistent(1.00, 0.97, 1.03, 1.03, (2, 2), four_percent, 0.95) is True
    # by 20% they do not, however the noise is counted
    assert study.consistent(1.00, 0.97, 1.03, 1.20, (2, 2), four_percent, 0.95) is False
    # with more long runs a side, their estimate is tighter: 6% apart no longer agrees
    assert study.consistent(1.00, 0.98, 1.02, 1.06, (2, 2), four_percent, 0.95) is True
    assert study.consistent(1.00, 0.98, 1.02, 1.06, (40, 40), four_percent, 0.95) is False
    assert study.consistent(1.00, 0.98, 1.02, None, (2, 2), four_percent, 0.95) is None


def test_a_decision_is_held_by_its_printed_later_interval_and_judged_consistent_on_its_own_minutes_interval():
    """A tune's step prints where a later run falls (low-high) and decided on the interval of its own
    minutes (tune_low-tune_high): coverage reads the first, agreement within both noises the second."""
    configs = {"start": ("a",), "workers=auto": ("a", "w")}
    longs = {"start": [10.0, 10.0, 10.0], "workers=auto": [12.0, 12.0, 12.0]}  # 1.20x, no scatter
    found = step(("a", "w"), ("a",), 0.9, 1.25, 1.05) | {"tune_low": 1.04, "tune_high": 1.06}
    rec = {"result": {"steps": [found]}}
    (row,) = study.coverage(study.decisions(rec), configs, longs)
    assert row["covered"] is True and row["consistent"] is False
    old = step(("a", "w"), ("a",), 0.9, 1.25, 1.05)  # a record from before: one interval for both
    (row,) = study.coverage(study.decisions({"result": {"steps": [old]}}), configs, longs)
    assert row["covered"] is True and row["consistent"] is True


def test_the_tunes_own_noise_is_pooled_from_its_full_runs_once_per_configuration():
    start, tuned = ["a"], ["a", "w"]
    rates = {"a": [10.0, 10.4, 9.8, 10.2], "w": [20.0, 21.0]}
    first = step(tuned, start) | {
        "candidate_probes": [{"images_per_s": 20.0}],
        "against_probes": [{"images_per_s": r} for r in rates["a"][:2]],
    }
    later = step(["a", "w", "x"], tuned) | {
        "candidate_probes": [{"images_per_s": 5.0, "screened": True}],
        "against_probes": [{"images_per_s": r} for r in rates["w"]],
    }
    rec = record(start, [first, later], {"start": start, "tuned": tuned})
    rec["result"]["final"] = {"start": [{"images_per_s": r} for r in rates["a"]]}
    noise = study.tune_noise(rec)
    # the start's four probes (the final's list, the longest seen) and the tuned one's two: 4 df
    assert noise.df == 4 and 0.01 < noise.relative < 0.04


def test_the_claims_are_the_tunes_printed_ratios_beside_the_long_runs_and_the_tuned_one_against_the_fastest_other():
    start, tuned, preset = ("a",), ("a", "w"), ("a", "p")
    final = {"start": start, "+opt=all": preset, "tuned": tuned}
    runs = {"start": [10.0, 10.5, 9.5], "+opt=all": [20.0, 21.0, 19.0], "tuned": [19.0, 19.5, 18.5]}
    rec = record(list(start), [], {name: list(c) for name, c in final.items()})
    rec["result"]["final"] = {name: [{"images_per_s": r} for r in rates] for name, rates in runs.items()}
    configs = {"start": start, "p": preset, "w": tuned}
    names = study.final_labels(configs, rec)
    assert names == {"start": "start", "+opt=all": "p", "tuned": "w"}
    # the long runs: the preset is faster than the probes said, the tuned one as fast as they said
    longs = {"start": [10.0, 10.0, 10.0], "p": [25.0, 25.0, 25.0], "w": [19.0, 19.0, 19.0]}
    found = study.claims(rec, names, longs)
    rows = {row["claim"]: row for row in found["rows"]}
    assert rows["tuned vs start"]["long_ratio"] == pytest.approx(1.9) and rows["tuned vs start"]["covered"] is True
    assert (
        rows["tuned vs +opt=all"]["long_ratio"] == pytest.approx(0.76) and rows["tuned vs +opt=all"]["covered"] is False
    )
    assert found["fastest_other"] == "+opt=all" and found["tuned_vs_fastest"] == pytest.approx(0.76)
    assert found["reaches_0_90"] is False
    assert "misses** 0.90x" in tables.claims_markdown(found)


@pytest.mark.slow  # four tiny training runs (~1 min on 2 cores)
def test_a_study_of_a_tiny_tune_runs_a_probe_and_a_long_run_of_each_configuration_and_writes_its_table(
    tiny_carvana, tmp_path
):
    tiny = ["perf.peak_probe=false", "data.height=32", "data.width=48", "batch_size=2", *NARROW_UNET]
    start = sorted([f"data.root={tiny_carvana}", *tiny])
    other = sorted([*start, "upsample=deconv"])
    probe = {
        "steps": 2,
        "max_steps": 4,
        "precision": 0.5,
        "val_images": 2,
        "overrides": ["perf.peak_probe=false", "trainer.enable_progress_bar=false", "~callbacks.last_checkpoint"],
    }
    tune = tmp_path / "tune"
    tune.mkdir()
    steps = [step(other, start, 0.8, 1.3, 1.0)]
    (tune / "tune.json").write_text(json.dumps(record(start, steps, {"start": start, "tuned": other}, probe)))
    out = tmp_path / "study"
    command = [sys.executable, "-m", "segperf.tune", "calibrate", str(tune), "--rounds", "1", "--long-steps", "4"]
    command += ["--out", str(out)]
    command += ["--claim-rounds", "2"]
    done = subprocess.run(command, cwd=tmp_path, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    result = json.loads((out / "calibration.json").read_text())
    rows = {row["configuration"]: row for row in result["configurations"]}
    assert set(rows) == {"start", "upsample=deconv"}
    assert all(row["probe_images_per_s"] and row["long_images_per_s"] for row in rows.values())
    assert result["decisions"][0]["long_ratio"] is not None
    runs = sorted(p.name for p in out.glob("*_*_*"))
    # a round of probe + long run each, then the claims' second long run of each final configuration
    assert [r.split("_")[1] for r in sorted(runs, key=lambda r: int(r.split("_")[0]))] == ["probe", "long"] * 2 + [
        "long"
    ] * 2
    assert result["claims"]["long_runs"] == {"start": 2, "tuned": 2}
    assert json.loads((out / "0_probe_0_r0" / "results.json").read_text())["tune_probe"]["timed_steps"] >= 2
    assert "| `upsample=deconv` |" in (out / "calibration.md").read_text()
    # this machine's later-run noise, recorded for the next tune (the test's own SEGPERF_CACHE)
    recorded = later_noise.recorded()[later_noise.machine_key()]
    assert recorded["relative"] > 0 and recorded["study"] == str(out.resolve())
    assert "This machine's later-run noise:" in done.stdout
    # the tables again from what the study recorded, running nothing
    (out / "calibration.md").unlink()
    again = subprocess.run([*command, "--tables-only"], cwd=tmp_path, capture_output=True, text=True, timeout=120)
    assert again.returncode == 0, again.stderr[-3000:]
    assert sorted(p.name for p in out.glob("*_*_*")) == runs  # nothing ran
    assert "later-run noise" not in again.stdout  # tables again: nothing measured, nothing recorded
    assert json.loads((out / "calibration.json").read_text())["configurations"] == result["configurations"]
    assert "Printed ratios agreeing with the long runs'" in (out / "calibration.md").read_text()


def test_a_folder_without_a_tune_is_one_error_line(tmp_path, capsys):
    from segperf.tune.cli import main

    assert main(["calibrate", str(tmp_path)]) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"segperf.tune calibrate: error: {tmp_path}: no tune.json") and len(err.splitlines()) == 1
