"""segperf.perf.decision.compare_pooled: the tuner decides "faster beyond noise" by the report's rule, and
decides a one-run side too when the tune has measured enough repeats to know the machine's noise."""

from __future__ import annotations

import pytest

from segperf.perf.decision import compare_pooled, compare_throughput, pooled_noise

# four configurations measured twice on a machine with ~1% run-to-run noise
QUIET = [[10.0, 10.1], [20.0, 20.3], [5.0, 5.05], [8.0, 7.9]]


def test_two_runs_a_side_are_decided_exactly_as_the_report_decides():
    groups = [*QUIET, [2.7, 3.4], [8.4, 8.5]]
    tuner = compare_pooled([8.4, 8.5], [2.7, 3.4], 0.95, groups)
    report = compare_throughput([8.4, 8.5], [2.7, 3.4], noise=pooled_noise(groups))
    assert tuner == report
    # the sweep: the noisy configuration keeps part of its spread, and the clear
    # difference is still called, with an interval inside [2.0, 3.6]
    assert tuner.distinguishable and 2.0 <= tuner.low < tuner.ratio < tuner.high <= 3.6


def test_one_run_of_the_candidate_is_decided_against_the_pooled_noise():
    faster = compare_pooled([13.0], [10.0, 10.1], 0.95, [*QUIET, [13.0]])
    assert faster.n_a == 1 and faster.distinguishable and faster.low > 1.2
    level = compare_pooled([10.1], [10.0, 10.1], 0.95, [*QUIET, [10.1]])
    assert level.distinguishable is False and level.low < 1 < level.high


def test_a_thin_pool_decides_on_the_two_sides_alone_and_one_run_is_not_enough():
    thin = [[10.0, 10.1], [13.0]]  # one degree of freedom of noise: it says little
    assert compare_pooled([13.0], [10.0, 10.1], 0.95, thin).distinguishable is None
    two_a_side = compare_pooled([13.0, 13.1], [10.0, 10.1], 0.95, [[10.0, 10.1], [13.0, 13.1]])
    assert two_a_side == compare_throughput([13.0, 13.1], [10.0, 10.1])


def test_a_side_noisier_than_the_pool_keeps_part_of_its_own_noise():
    # the candidate's two runs scatter by ~40% while every other configuration is within 1%: its
    # interval is wider than the quiet pool alone would make it, and 1.15x is not called
    noisy = [9.5, 14.0]
    groups = [*QUIET, noisy, [10.0, 10.1]]
    result = compare_pooled(noisy, [10.0, 10.1], 0.95, groups)
    assert result.ratio == pytest.approx(1.15, abs=0.01)
    assert result.distinguishable is False
    # the standard error is above what the pooled noise alone gives two runs a side
    assert result.log_se**2 > pooled_noise(groups).variance * (1 / 2 + 1 / 2) * 1.1
