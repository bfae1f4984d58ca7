"""images/s is of the steady state: steps served by a DataLoader queue filled before they ran are
left out, where the run went on to wait for its batches (segperf.perf.train_rate)."""

from __future__ import annotations

from types import SimpleNamespace

from segperf.perf.train_rate import steady_start, train_section


def clock(step_s: float, gaps: list[float], warmup: int = 2, batch: int = 32, pauses=()) -> SimpleNamespace:
    """A PhaseClock's record of steps of `step_s` seconds, each after waiting `gaps[i]` for its batch."""
    t, times = 0.0, []
    for gap in gaps:
        t += gap
        times.append((t, t + step_s))
        t += step_s
    marks = {"train_start": 0.0, "train_end": t, "warmup_end": times[warmup - 1][1]}
    return SimpleNamespace(
        marks=marks,
        steps=len(gaps),
        images=batch * len(gaps),
        warmup_steps=warmup,
        warmup_images=batch * warmup,
        step_times=times,
        step_images=[batch] * len(gaps),
        pauses=list(pauses),
        validation=[],
        validation_images=[],
    )


def test_a_loader_at_half_the_nets_speed_is_timed_once_its_queue_has_drained():
    # 0.1 s steps; 2 warm-up steps, then 16 served by the full queue, then each waits 0.1 s for its batch
    run = clock(0.1, [0.5, 0.0] + [0.0] * 16 + [0.1] * 16)
    section = train_section(run, 0.0, (0.0, run.marks["train_end"]))
    assert section["queue_steps_excluded"] == 16
    assert abs(section["images_per_s"] - 32 / 0.2) < 1e-6  # the loader's rate, not the net's 320
    # the warm-up's end alone, as before, would say 32 steps in 4.8 s: 213 images/s
    assert section["images_per_s"] < 200


def test_a_run_that_never_waits_is_timed_from_the_end_of_warm_up():
    run = clock(0.1, [0.5, 0.0] + [0.001] * 20)
    section = train_section(run, 0.0, (0.0, run.marks["train_end"]))
    assert section["queue_steps_excluded"] == 0
    assert abs(section["images_per_s"] - 20 * 32 / (20 * 0.101)) < 1e-6


def test_a_loader_without_workers_waits_from_the_first_timed_step_and_keeps_every_one():
    run = clock(0.1, [0.5] + [0.05] * 12)
    section = train_section(run, 0.0, (0.0, run.marks["train_end"]))
    assert section["queue_steps_excluded"] == 0
    assert abs(section["images_per_s"] - 11 * 32 / (11 * 0.15)) < 1e-6


def test_a_validation_pause_is_not_a_wait_and_too_few_steps_after_a_wait_keep_the_window():
    # steps 2..9 fed, a validation pause of 1 s before step 6: not a wait
    gaps = [0.5, 0.0, 0.0, 0.0, 0.0, 0.0, 1.0, 0.0, 0.0, 0.0]
    run = clock(0.1, gaps)
    pause = (run.step_times[5][1], run.step_times[6][0])
    assert steady_start(run.step_times, [pause], 2, 0.0) is None
    assert steady_start(run.step_times, [], 2, 0.0) == 6  # the same gap, not a pause: a wait
    # a wait with two steps after it: too few to time, the warm-up's end stays the start
    assert steady_start(clock(0.1, [0.5, 0, 0, 0, 0, 0, 0.1, 0]).step_times, [], 2, 0.0) is None


def test_one_late_stall_of_a_run_that_was_fed_is_not_a_queue_draining():
    # fed for 16 of 20 timed steps, then one long wait (a GC pause, a slow file): the run keeps its steps
    gaps = [0.5, 0.0] + [0.001] * 16 + [0.3] + [0.001] * 3
    run = clock(0.1, gaps)
    assert steady_start(run.step_times, [], 2, 0.0) is None
    section = train_section(run, 0.0, (0.0, run.marks["train_end"]))
    assert section["queue_steps_excluded"] == 0 and section["images_per_s"] > 200
