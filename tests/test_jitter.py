"""Per-batch jitter: distributions, starved steps and TensorBoard histograms."""

from __future__ import annotations

import json
import math

import numpy as np
import pytest

from segperf.perf.jitter import STARVED_FRACTION, distribution, jitter_summary, log_histograms, starved_steps


def test_distribution_of_known_values_gives_known_percentiles_and_cv():
    d = distribution([1.0, 2.0, 3.0, 4.0, 5.0])
    assert d["count"] == 5
    assert d["mean"] == pytest.approx(3.0)
    assert d["p50"] == pytest.approx(3.0)
    assert d["p90"] == pytest.approx(4.6)  # linear interpolation between 4 and 5
    assert d["p99"] == pytest.approx(4.96)
    assert (d["min"], d["max"]) == (1.0, 5.0)
    assert d["std"] == pytest.approx(math.sqrt(2.0))  # population std
    assert d["cv"] == pytest.approx(math.sqrt(2.0) / 3.0)


def test_distribution_of_constant_values_has_zero_cv():
    d = distribution([0.25] * 10)
    assert d["std"] == 0.0 and d["cv"] == 0.0 and d["p99"] == 0.25


def test_distribution_is_plain_python_numbers_and_json_ready():
    d = distribution(np.array([0.1, 0.2, 0.4], dtype=np.float32))
    assert all(type(v) in (int, float) for v in d.values())
    json.dumps(d)


def test_empty_distribution_has_count_zero_and_none_elsewhere():
    d = distribution([])
    assert d["count"] == 0
    assert all(d[k] is None for k in d if k != "count")


def test_zero_mean_gives_no_cv_instead_of_dividing_by_zero():
    assert distribution([0.0, 0.0])["cv"] is None


def test_starved_steps_are_counted_against_a_fraction_of_the_median_step():
    steps = [1.0, 1.0, 1.0, 10.0]  # median 1.0 -> threshold 0.1 s; the slow step does not raise it
    waits = [0.05, 0.2, 0.1, 0.5]  # 0.1 is not above the threshold
    s = starved_steps(waits, steps)
    assert s == {"count": 2, "steps": 4, "fraction": 0.5, "threshold_s": pytest.approx(STARVED_FRACTION)}


def test_starved_steps_take_a_custom_fraction():
    assert starved_steps([0.3, 0.6], [1.0, 1.0], fraction=0.5)["count"] == 1


def test_mismatched_lengths_raise_naming_both_lengths():
    with pytest.raises(ValueError, match="3.*2"):
        starved_steps([0.1, 0.1, 0.1], [1.0, 1.0])


def test_no_steps_give_zero_starved_and_none():
    assert starved_steps([], []) == {"count": 0, "steps": 0, "fraction": None, "threshold_s": None}


def test_jitter_summary_has_both_distributions_and_starved():
    j = jitter_summary([0.0, 0.5], [1.0, 1.0])
    assert set(j) == {"data_wait", "train_step", "starved"}
    assert j["data_wait"]["max"] == 0.5 and j["train_step"]["mean"] == 1.0 and j["starved"]["count"] == 1
    json.dumps(j)


def test_histograms_land_in_a_real_summary_writer_and_read_back(tmp_path):
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator
    from torch.utils.tensorboard import SummaryWriter

    writer = SummaryWriter(log_dir=str(tmp_path))
    waits = [0.01, 0.02, 0.5, 0.03]
    log_histograms(writer, {"data_wait_s": waits, "train_step_s": [1.0, 1.1, 0.9], "empty": []}, global_step=7)
    writer.close()

    acc = EventAccumulator(str(tmp_path), size_guidance={"histograms": 0})
    acc.Reload()
    tags = acc.Tags()["histograms"]
    assert sorted(tags) == ["jitter/data_wait_s", "jitter/train_step_s"]  # the empty one is skipped
    (event,) = acc.Histograms("jitter/data_wait_s")
    assert event.step == 7
    assert event.histogram_value.num == 4
    assert event.histogram_value.max == pytest.approx(0.5)
    assert event.histogram_value.sum == pytest.approx(sum(waits))
