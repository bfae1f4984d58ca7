"""scripts/decision_rule_rates.py: the decision rule's simulated rates, through segperf's own rule."""

from __future__ import annotations

import json
import runpy
import subprocess
import sys

import pytest

import segperf.perf.decision
from segperf.perf.decision import Comparison
from tests.conftest import REPO

SCRIPT = REPO / "scripts" / "decision_rule_rates.py"
SMALL = ["--trials", "150", "--runs", "2,3", "--pair-configurations", "2,4", "--sweep-configurations", "4"]


def rows_of(result: dict, **match) -> list[dict]:
    return [row for row in result["rows"] if all(row.get(key) == value for key, value in match.items())]


@pytest.fixture(scope="module")
def small_run(tmp_path_factory):
    out = tmp_path_factory.mktemp("rates") / "rates.json"
    done = subprocess.run(
        [sys.executable, str(SCRIPT), "--seed", "3", *SMALL, "--out", str(out)],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    return done.stdout, json.loads(out.read_text())


def test_every_cell_is_simulated_and_printed_with_its_uncertainty_and_sweep_size(small_run):
    stdout, result = small_run
    assert result["trials"] == 150 and result["runs"] == [2, 3]
    pairs, sweeps = rows_of(result, table="pairs"), rows_of(result, table="sweeps")
    assert len(pairs) == 7 * 2 * 2  # the seven pair rows, for each sweep size and each number of runs
    assert len(sweeps) == 2 * 2  # with and without slow runs, for each number of runs
    for row in pairs:
        for rate in (row["rate"], row["coverage"]):
            assert 0.0 <= rate["value"] <= 1.0 and rate["plus_minus"] > 0
            assert rate["trials"] == 150 and rate["comparisons"] == 150  # one counted comparison a sweep
    for row in sweeps:  # every configuration but the baseline compared: 2 equal and 1 faster a sweep
        assert row["false_calls"]["comparisons"] == 2 * 150 and row["found"]["comparisons"] == 150
    assert "alone (a sweep of two configurations)" in stdout
    assert "in a sweep of 4 configurations (the 2 others drawn like the baseline)" in stdout
    assert "| 2 runs each | 3 runs each |" in stdout
    assert "| 4 | 5% | 2 |" in stdout and "| 4 | 0% | 3 |" in stdout


def test_a_large_difference_at_low_noise_is_found_and_equal_configurations_mostly_are_not(small_run):
    _, result = small_run
    for row in rows_of(result, table="pairs", scenario="1.5× faster, 3% noise: found"):
        assert row["rate"]["value"] >= 0.9
    for row in rows_of(result, table="pairs", scenario="equal, 4% noise on all: called distinguishable"):
        assert row["rate"]["value"] <= 0.2
        assert row["coverage"]["value"] >= 0.8
    for row in rows_of(result, table="sweeps", outliers=0.0):
        assert row["found"]["value"] >= 0.9  # 1.3x at 3% noise
        assert row["false_calls"]["value"] <= 0.2


def run_in_process(monkeypatch, *argv: str) -> None:
    monkeypatch.setattr(sys, "argv", [str(SCRIPT), *argv])
    runpy.run_path(str(SCRIPT), run_name="__main__")


def test_the_same_seed_gives_the_same_rates_and_another_seed_other_draws(tmp_path, monkeypatch):
    def rates(seed: int) -> list[dict]:
        out = tmp_path / f"{seed}.json"
        few = ["--trials", "40", "--runs", "2", "--pair-configurations", "2", "--sweep-configurations", "3"]
        run_in_process(monkeypatch, "--seed", str(seed), *few, "--out", str(out))
        return json.loads(out.read_text())["rows"]

    assert rates(1) == rates(1)
    assert rates(1) != rates(2)


def test_the_rates_are_those_of_segperfs_own_decision_function(tmp_path, monkeypatch):
    # a rule that calls everything distinguishable, patched into segperf: the script must report it
    def always(a, b, noise=None, level=0.95):
        return Comparison(len(a), len(b), 1.0, 0.5, 0.6, level, True)

    monkeypatch.setattr(segperf.perf.decision, "compare_throughput", always)
    out = tmp_path / "rates.json"
    run_in_process(monkeypatch, "--trials", "5", "--runs", "2", "--out", str(out))
    result = json.loads(out.read_text())
    assert all(row["rate"]["value"] == 1.0 for row in rows_of(result, table="pairs", true_ratio=1.0))
    assert all(row["false_calls"]["value"] == 1.0 for row in rows_of(result, table="sweeps"))


def test_a_bad_setting_is_named_with_what_to_do():
    done = subprocess.run(
        [sys.executable, str(SCRIPT), "--runs", "1,2"], cwd=REPO, capture_output=True, text=True, timeout=60
    )
    assert done.returncode == 2
    assert "--runs" in done.stderr and "values >= 2" in done.stderr
