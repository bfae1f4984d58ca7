"""The later-run noise: where a tune finds it (the setting, this machine's record, the default), and
what it does to what the tune prints (wider intervals around the same ratios, the same decisions)."""

from __future__ import annotations

import json

import pytest

from segperf.tune import later_noise
from segperf.tune.later_noise import DEFAULT, LaterNoise, for_this_machine, machine_key, remember
from segperf.tune.search import KEPT
from tests.test_tune_search import Workload, tune


def test_the_setting_wins_then_this_machines_record_then_the_default(tmp_path):
    record = tmp_path / "later-noise.json"
    assert for_this_machine(path=record).relative == DEFAULT  # never measured
    assert "never measured" in for_this_machine(path=record).source
    remember(0.021, 14, "outputs/study", path=record)
    found = for_this_machine(path=record)
    assert found.relative == 0.021 and "measured on this machine" in found.source and "14 degrees" in found.source
    assert for_this_machine(0.0, path=record) == LaterNoise(0.0, "tune.later_noise=0")


def test_another_machines_record_or_a_broken_one_leaves_the_default_and_a_study_keeps_the_others(tmp_path):
    record = tmp_path / "later-noise.json"
    record.write_text(json.dumps({"other-host / Some CPU / 64 cores": {"relative": 0.01, "df": 9}}))
    assert for_this_machine(path=record).relative == DEFAULT
    remember(0.03, 20, "study", path=record)
    data = json.loads(record.read_text())
    assert data["other-host / Some CPU / 64 cores"]["relative"] == 0.01 and data[machine_key()]["relative"] == 0.03
    assert [p.name for p in tmp_path.iterdir()] == ["later-noise.json"]  # written atomically: no temp file left
    record.write_text("{not json")
    assert for_this_machine(path=record).relative == DEFAULT


def test_the_record_lives_in_the_segperf_cache(tmp_path, monkeypatch):
    monkeypatch.setenv("SEGPERF_CACHE", str(tmp_path))
    remember(0.04, 5, "study")
    assert later_noise.record_path() == tmp_path / "later-noise.json"
    assert for_this_machine().relative == 0.04


def test_the_later_noise_widens_every_printed_interval_and_changes_no_decision():
    """The same simulated tune with and without 5% later-run noise: the same steps, verdicts, ratios
    and tuned configuration; each printed interval holds the tune's own and is wider; a gain beyond
    the tune's noise whose later interval holds 1 says that a later run may find the two even."""
    speeds = {"workers=auto": 1.5, "precision=bf16": 1.06}
    plain = tune(Workload(speeds, seed=3), presets={})
    later = tune(Workload(speeds, seed=3), presets={}, later=LaterNoise(0.05, "test"))
    assert later.best == plain.best and later.later_noise == {"relative": 0.05, "source": "test"}
    assert [(s.option, s.verdict, s.ratio) for s in later.steps] == [
        (s.option, s.verdict, s.ratio) for s in plain.steps
    ]
    intervals = [(s, p) for s, p in zip(later.steps, plain.steps, strict=True) if s.low is not None]
    assert intervals
    for step, own in intervals:
        assert (step.tune_low, step.tune_high) == (own.low, own.high) == (own.tune_low, own.tune_high)
        assert step.low < own.low <= own.high < step.high
    workers = [s for s in later.steps if s.option == ("workers=auto",)]
    assert workers[0].verdict == KEPT and workers[0].low > 1  # 1.5x holds a later run too
    near = [s for s in later.steps if s.verdict == KEPT and s.tune_low > 1 and s.low <= 1]
    assert near and all("a run made later may find the two even" in s.note for s in near)


@pytest.mark.parametrize("value", [-0.1, 1.0])
def test_a_later_noise_out_of_range_is_one_error_line(value, capsys, tmp_path):
    from segperf.tune import cli

    code = cli.main([f"tune.later_noise={value}", f"hydra.sweep.dir={tmp_path / 'tune'}"])
    err = capsys.readouterr().err
    assert code == 2 and "Traceback" not in err
    assert f"segperf.tune: error: tune.later_noise={value}: must be between 0 and 1" in err


def test_a_preset_slower_than_another_only_beyond_the_tunes_noise_says_a_later_run_may_find_them_even():
    """Two presets both faster than the start, one 5% slower than the other in a quiet tune (0.5%
    scatter): slower beyond the tune's noise, but within 5% later-run noise; the note says both."""
    result = tune(
        Workload({"precision=bf16": 2.0, "compile=on": 0.95}, seed=1, noise=0.005), later=LaterNoise(0.05, "t")
    )
    (compiled,) = [s for s in result.steps if s.stage == "presets" and s.axis == "+opt=all"]
    assert compiled.verdict == "rejected: slower" and "compile=on" not in result.best
    assert "of +opt=all compile=off, side by side" in compiled.note
    assert (
        "slower beyond this tune's noise only" in compiled.note
        and "a run made later may find the two even" in compiled.note
    )
