"""A probe times its steady state (segperf.perf.steady_state, segperf.callbacks.steady_probe): the
warm-up lasts as long as the step times say, the steps a DataLoader served from the queue it filled
before them are not timed, and the probe runs until its rate is known to its precision or stops at a
cap and says so. Synthetic step-time sequences, and the callback in a fake trainer loop."""

from __future__ import annotations

import random
from types import SimpleNamespace

import pytest
import torch
from torch.utils.data import DataLoader

from segperf.callbacks.steady_probe import SECTION, SteadyProbe, queued_batches
from segperf.perf.steady_state import settled_from, steady_window

BATCH = 6


def run(compute: list[float], waits: list[float] | None = None) -> list[tuple[float, float]]:
    """(start, end) of steps taking `compute[i]` seconds after waiting `waits[i]` for their batch."""
    t, steps = 0.0, []
    for i, step in enumerate(compute):
        t += (waits or [0.0] * len(compute))[i]
        steps.append((t, t + step))
        t += step
    return steps


def loader_bound(warmup: list[float], queued: int, net_s: float, loader_s: float, steps: int):
    """A run whose loader makes a batch every `loader_s` (several workers together) and whose net
    takes `net_s` a step: `queued` batches wait at the end of warm-up, refilled as the loader goes."""
    t, ready, out = 0.0, [], []
    for duration in warmup:
        out.append((t, t + duration))
        t += duration
    made = t  # the queue is full here; the loader goes on from now
    ready = [t] * queued
    for _ in range(steps):
        if not ready:
            made += loader_s
            ready.append(made)
        else:
            made = max(made, ready[-1])
        if len(ready) < queued + 1:
            made += loader_s
            ready.append(made)
        start = max(t, ready.pop(0))
        out.append((start, start + net_s))
        t = start + net_s
    return out


def test_a_compile_that_takes_three_steps_is_warm_up_though_the_minimum_is_two():
    # torch.compile's first step, a recompile on the second, a third still slow; then 0.4 s steps
    steps = run([45.0, 12.0, 3.0] + [0.4] * 20)
    window = steady_window(steps, [BATCH] * len(steps), min_warmup=2, queued_batches=0, train_start=0.0)
    assert window.warmup_steps == 3 and window.warmup_by_times == 1 and window.settled
    assert window.start == 3 and window.timed_steps == 20
    assert window.images_per_s == pytest.approx(BATCH / 0.4)
    # the fixed count alone would have timed the 3 s step: 20 % slower
    with_third = sum([BATCH] * 21) / (3.0 + 20 * 0.4)
    assert with_third < 0.8 * window.images_per_s


def test_a_fast_step_between_two_slow_ones_does_not_end_the_warm_up():
    periods = [30.0, 5.0, 0.4, 6.0, 0.4, 0.4, 0.4] + [0.4] * 10
    assert settled_from(periods, 2) == (4, True)


def test_step_times_that_still_fall_in_the_first_half_are_said_not_settled():
    periods = [10.0, 5.0] + [2.0 - 0.1 * i for i in range(16)]  # the allocator's slow growth
    start, settled = settled_from(periods, 2)
    assert not settled and start == 2 + 8


def test_a_run_with_noisy_steps_is_not_taken_for_a_warm_up():
    rng = random.Random(3)
    periods = [20.0, 2.0] + [0.4 * (1 + rng.uniform(-0.3, 0.3)) for _ in range(24)]
    start, settled = settled_from(periods, 2)
    assert settled and start <= 3


def test_the_batches_a_loader_queued_before_the_timed_steps_are_not_timed():
    # the case: two workers x prefetch 4 = 8 batches queued; the loader at half the net's speed
    steps = loader_bound([40.0, 3.0], queued=8, net_s=0.3, loader_s=0.6, steps=40)
    window = steady_window(steps, [BATCH] * len(steps), min_warmup=2, queued_batches=8, train_start=0.0)
    assert window.queue_steps >= 8 and window.queued_batches == 8
    assert window.images_per_s == pytest.approx(BATCH / 0.6, rel=0.03)  # the loader's rate, not the net's
    # from the end of a fixed warm-up, 16 steps of this run read 1.5x the loader's rate
    first16 = steps[2:18]
    short = BATCH * 16 / (first16[-1][1] - steps[1][1])
    assert short > 1.4 * BATCH / 0.6


def test_a_loader_faster_than_the_net_loses_only_its_queue_steps():
    steps = run([20.0, 1.0] + [0.3] * 30, [0.0] * 32)
    window = steady_window(steps, [BATCH] * len(steps), min_warmup=2, queued_batches=8, train_start=0.0)
    assert window.queue_steps == 8 and window.start == 10 and window.timed_steps == 22
    assert window.images_per_s == pytest.approx(BATCH / 0.3)


def test_the_precision_narrows_with_more_steps_and_is_none_without_two():
    rng = random.Random(1)
    compute = [0.4 * (1 + rng.gauss(0, 0.08)) for _ in range(66)]
    short = steady_window(run(compute[:10]), [BATCH] * 10, min_warmup=2, queued_batches=0, train_start=0.0)
    long = steady_window(run(compute), [BATCH] * 66, min_warmup=2, queued_batches=0, train_start=0.0)
    assert long.half_width < short.half_width < 0.2
    assert long.half_width < 0.05
    one = steady_window(run([1.0, 1.0, 0.4]), [BATCH] * 3, min_warmup=2, queued_batches=0, train_start=0.0)
    assert one.timed_steps == 1 and one.half_width is None


def test_workers_that_hand_out_batches_in_turns_are_precise_over_blocks_of_steps():
    # two workers, loader-bound: steps alternate 0.1 s and 0.5 s; each pair takes 0.6 s
    steps = run([20.0, 1.0] + [0.1, 0.5] * 16)
    window = steady_window(steps, [BATCH] * len(steps), min_warmup=2, queued_batches=0, train_start=0.0)
    assert window.half_width < 0.01  # pairs of steps are alike, single steps are not
    assert window.images_per_s == pytest.approx(2 * BATCH / 0.6)


def test_a_validation_pause_is_not_a_step():
    steps = run([10.0, 1.0] + [0.4] * 12)
    shifted = [(s + (5.0 if i >= 8 else 0.0), e + (5.0 if i >= 8 else 0.0)) for i, (s, e) in enumerate(steps)]
    pause = (steps[7][1], steps[7][1] + 5.0)
    window = steady_window(shifted, [BATCH] * 14, min_warmup=2, queued_batches=0, train_start=0.0, pauses=[pause])
    assert window.images_per_s == pytest.approx(BATCH / 0.4)


# -- the callback in a fake trainer loop ---------------------------------------------------------
class FakeTrainer:
    def __init__(self, loader):
        self.train_dataloader = loader
        self.should_stop = False


def drive(probe: SteadyProbe, durations: list[float], loader=None) -> int:
    """Run `probe`'s hooks over steps of the given durations on a fake clock; the steps taken."""
    now = [0.0]
    probe.clock = lambda: now[0]
    trainer = FakeTrainer(loader or [])
    probe.on_train_start(trainer, None)
    for i, duration in enumerate(durations):
        probe.on_train_batch_start(trainer, None, None, i)
        now[0] += duration
        probe.on_train_batch_end(trainer, None, None, torch.zeros(BATCH, 1), i)
        if trainer.should_stop:
            return i + 1
    return len(durations)


def test_a_quiet_probe_stops_once_its_rate_is_known_to_its_precision():
    rng = random.Random(5)
    probe = SteadyProbe(warmup_steps=2, min_steps=8, max_steps=64, precision=0.05, queued_batches=0)
    taken = drive(probe, [30.0, 2.0] + [0.4 * (1 + rng.gauss(0, 0.02)) for _ in range(100)])
    assert taken == 2 + 8 and probe.stopped_by == "precision"
    results: dict = {}
    probe.record(results)
    section = results[SECTION]
    assert section["stopped_by"] == "precision" and section["timed_steps"] == 8
    assert section["half_width"] <= 0.05 and section["images_per_s"] == pytest.approx(BATCH / 0.4, rel=0.03)


def test_a_noisy_probe_runs_on_and_stops_at_its_cap_saying_so():
    rng = random.Random(6)
    probe = SteadyProbe(warmup_steps=2, min_steps=8, max_steps=24, precision=0.01, queued_batches=0)
    taken = drive(probe, [30.0, 2.0] + [0.4 * (1 + rng.uniform(-0.5, 0.5)) for _ in range(100)])
    assert probe.stopped_by == "cap" and taken >= 2 + 24
    results: dict = {}
    probe.record(results)
    assert results[SECTION]["timed_steps"] == 24 and results[SECTION]["half_width"] > 0.01


def test_the_probe_records_what_it_left_out_and_why():
    probe = SteadyProbe(warmup_steps=2, min_steps=8, max_steps=16, precision=0.05)
    loader = DataLoader(list(range(60)), batch_size=BATCH, num_workers=2, prefetch_factor=4)
    drive(probe, [30.0, 8.0, 3.0] + [0.4] * 40, loader=loader)
    results: dict = {}
    probe.record(results)
    section = results[SECTION]
    assert section["queued_batches"] == 8 and section["queue"] == "2 workers x prefetch_factor 4"
    assert section["warmup_steps"] == 3 and section["queue_steps"] == 8
    text = " ".join(section["excluded"])
    assert (
        "2 warm-up steps" in text
        and "1 more warm-up steps" in text
        and "8 steps served from the loader's queue" in text
    )


def test_share_cores_adds_its_measuring_steps_to_the_minimum_warm_up():
    probe = SteadyProbe(warmup_steps=2)
    probe.extend_warmup(3)
    assert probe.warmup_steps == 5
    probe.steps.append((0.0, 1.0))
    with pytest.raises(RuntimeError):
        probe.extend_warmup(1)


def test_the_queue_of_each_kind_of_loader():
    assert queued_batches(DataLoader(list(range(8)), num_workers=0)) == (0, "no workers, no prefetching")
    assert queued_batches(DataLoader(list(range(8)), num_workers=2))[0] == 4  # torch's default factor 2
    thread = SimpleNamespace(loader=DataLoader(list(range(8))), depth=4)  # segperf's prefetch without workers
    assert queued_batches(thread) == (4, "a prefetching thread's 4")
    assert queued_batches([DataLoader(list(range(8)), num_workers=2, prefetch_factor=3)])[0] == 6


def test_settings_out_of_range_are_refused():
    with pytest.raises(ValueError):
        SteadyProbe(min_steps=8, max_steps=4)
    with pytest.raises(ValueError):
        SteadyProbe(precision=0)


@pytest.mark.slow  # a real run with two DataLoader workers (~20 s on 2 cores)
def test_a_real_probe_leaves_out_its_loaders_queue_stops_on_its_own_and_the_tuner_reads_it(tiny_cfg, tmp_path):
    import json

    from segperf.training.run import train
    from segperf.tune.runner import probe_from_results

    steady = (
        "{_target_:segperf.callbacks.steady_probe.SteadyProbe,warmup_steps:2,min_steps:4,max_steps:12,precision:0.5}"
    )
    size = (2 + 3 + 2 * 12) * 4  # as the tuner sizes a probe: room for the cap and as much again
    cfg = tiny_cfg(
        "workers=auto",
        "prefetch=on",
        f"train_images={size}",
        f"val_every_images={size}",
        f"+callbacks.tune_probe={steady}",
    )
    train(cfg, tmp_path)
    results = json.loads((tmp_path / "results.json").read_text())
    section = results["tune_probe"]
    workers = cfg.data.num_workers
    assert section["queued_batches"] == workers * 4 and section["queue"] == f"{workers} workers x prefetch_factor 4"
    assert section["queue_steps"] >= workers * 4 and section["warmup_steps"] >= 2
    assert section["stopped_by"] in ("precision", "cap") and section["timed_steps"] >= 4
    assert results["progress"]["steps_done"] < results["progress"]["steps_total"]  # it stopped on its own
    assert results["status"] == "completed" and section["excluded"]
    probe = probe_from_results(("workers=auto",), tmp_path, limited=True)
    assert probe.images_per_s == section["images_per_s"] and not probe.cut and probe.failed is None
