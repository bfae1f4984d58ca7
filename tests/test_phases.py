"""Phase accounting: every instant of a run belongs to one phase, counted once."""

import pytest
import torch

from segperf.perf.phases import account_phases, phase_of_action, split_rows, split_steps, steady_state_batches


def test_overlapping_records_are_counted_once_for_the_higher_priority_phase():
    # a batch_to_device inside a validation window belongs to validation
    intervals = {
        "validation": [(10.0, 14.0)],
        "batch_to_device": [(11.0, 12.0), (20.0, 21.0)],
        "train_step": [(21.0, 25.0)],
    }
    table = account_phases(intervals, run=(0.0, 30.0))
    assert table.phases["validation"]["wall_s"] == pytest.approx(4.0)
    assert table.phases["batch_to_device"]["wall_s"] == pytest.approx(1.0)
    assert table.phases["batch_to_device"]["calls"] == 2
    assert table.phases["train_step"]["wall_s"] == pytest.approx(4.0)
    assert table.accounted_s == pytest.approx(9.0)
    assert table.accounted_fraction == pytest.approx(9.0 / 30.0)
    assert table.phases["validation"]["fraction"] == pytest.approx(4.0 / 30.0)


def test_warmup_window_takes_the_steps_inside_it_and_explicit_call_counts_win():
    intervals = {
        "warmup": [(0.0, 10.0)],
        "data_wait": [(0.0, 1.0), (10.0, 11.0)],
        "train_step": [(1.0, 10.0), (11.0, 13.0)],
    }
    table = account_phases(intervals, run=(0.0, 13.0), calls={"warmup": 1})
    assert table.phases["warmup"] == {"calls": 1, "wall_s": pytest.approx(10.0), "fraction": pytest.approx(10 / 13)}
    assert table.phases["data_wait"]["wall_s"] == pytest.approx(1.0)
    assert table.phases["train_step"]["wall_s"] == pytest.approx(2.0)
    assert table.accounted_fraction == pytest.approx(1.0)


def test_records_outside_the_run_are_clipped_and_windows_are_exclusive():
    table = account_phases({"setup": [(-5.0, 2.0)], "checkpoint": [(1.0, 3.0)]}, run=(0.0, 4.0))
    assert table.phases["setup"]["wall_s"] == pytest.approx(1.0)
    assert table.windows["checkpoint"] == [(1.0, 3.0)]
    assert table.windows["setup"] == [(0.0, 1.0)]


def test_lightning_actions_map_to_segperf_phases():
    assert phase_of_action("[_TrainingEpochLoop].train_dataloader_next") == "data_wait"
    assert phase_of_action("[Strategy]SingleDeviceStrategy.batch_to_device") == "batch_to_device"
    assert phase_of_action("[Strategy]DDPStrategy.batch_to_device") == "batch_to_device"
    assert phase_of_action("run_training_batch") == "train_step"
    assert phase_of_action("save_checkpoint") == "checkpoint"
    assert phase_of_action("[Callback]TQDMProgressBar.on_train_batch_end") == "logging"
    assert phase_of_action("[Strategy]SingleDeviceStrategy.training_step") is None  # inside train_step


def test_the_tap_keeps_when_each_phase_call_happened_and_passes_every_call_on(monkeypatch):
    from types import SimpleNamespace

    from lightning.pytorch.profilers import PassThroughProfiler

    from segperf.callbacks import profiler_tap
    from segperf.callbacks.profiler_tap import PhaseTap

    class Recording(PassThroughProfiler):
        def __init__(self):
            super().__init__()
            self.calls = []

        def start(self, action_name):
            self.calls.append(("start", action_name))

        def stop(self, action_name):
            self.calls.append(("stop", action_name))

    users = Recording()
    trainer = SimpleNamespace(profiler=users)
    tap = PhaseTap.install(trainer)
    assert trainer.profiler is tap
    # each edge read twice: the tap also times its own bookkeeping (measurement_cost.tap_s)
    edges = [t for edge in [1.0, 1.5, 2.0, 4.0, 5.0, 5.25] for t in (edge, edge)]
    clock = iter(edges + [9.0] * 4)  # the last, untimed action still reads the clock for its bookkeeping
    # the tap's own clock, not time.perf_counter itself, which another thread of the process may read
    monkeypatch.setattr(profiler_tap, "time", SimpleNamespace(perf_counter=lambda: next(clock)))
    for action in ("run_training_batch", "[_TrainingEpochLoop].train_dataloader_next", "run_training_batch"):
        with tap.profile(action):
            pass
    with tap.profile("[LightningModule]Net.on_fit_start"):  # no phase: passed on, not timed
        pass
    assert tap.intervals["run_training_batch"] == [(1.0, 1.5), (5.0, 5.25)]
    assert tap.intervals["[_TrainingEpochLoop].train_dataloader_next"] == [(2.0, 4.0)]
    assert len(users.calls) == 8 and users.calls[-1] == ("stop", "[LightningModule]Net.on_fit_start")
    tap.uninstall(trainer)
    assert trainer.profiler is users  # the user's profiler back after the fit


def test_a_tapped_action_that_raises_or_nests_is_still_stopped_and_timed():
    from types import SimpleNamespace

    from lightning.pytorch.profilers import SimpleProfiler

    from segperf.callbacks.profiler_tap import PhaseTap

    users = SimpleProfiler()  # raises on an action started twice or stopped without a start
    tap = PhaseTap.install(SimpleNamespace(profiler=users))
    with pytest.raises(RuntimeError, match="in the step"):
        with tap.profile("run_training_batch") as name:
            assert name == "run_training_batch"
            raise RuntimeError("in the step")
    with tap.profile("run_training_batch"):
        with tap.profile("[Callback]PerfMonitor.on_train_batch_end"):  # nested, then the same again
            pass
        with tap.profile("[Callback]PerfMonitor.on_train_batch_end"):
            pass
    assert len(tap.intervals["run_training_batch"]) == 2
    assert users.current_actions == {}  # every action the user's profiler saw start, it saw stop
    assert len(users.recorded_durations["[Callback]PerfMonitor.on_train_batch_end"]) == 2


def test_a_step_splits_into_forward_backward_and_optimizer_step_that_add_up_to_it():
    steps = [(0.0, 1.0), (2.0, 3.0), (4.0, 5.0)]
    backward = [(0.2, 0.6), (2.3, 2.8), (None, None)]  # the last step never called backward
    split = split_steps(steps, backward, skip=1)
    assert split["steps"] == 1 and split["unsplit_s"] == pytest.approx(1.0)
    assert split["seconds"] == pytest.approx({"forward": 0.3, "backward": 0.5, "optimizer_step": 0.2})
    rows = split_rows(split, run_wall_s=10.0)
    assert rows["backward"]["fraction"] == pytest.approx(0.05)
    assert rows["backward"]["of_train_step"] == pytest.approx(0.25)  # 0.5 of the 2 s of steps after warm-up
    assert rows["unsplit"]["wall_s"] == pytest.approx(1.0)


def test_steady_state_batches_leave_out_the_warmup_steps():
    intervals = {
        "[_TrainingEpochLoop].train_dataloader_next": [(0, 3), (4, 4.5), (6, 6.25)],
        "run_training_batch": [(3, 4), (4.5, 6), (6.25, 7.25)],
    }
    batches = steady_state_batches(intervals, warmup_steps=1)
    assert batches == {"data_wait": [0.5, 0.25], "train_step": [1.5, 1.0]}


def test_clock_marks_warmup_end_and_pauses_for_validation_with_a_patched_clock(monkeypatch):
    from types import SimpleNamespace

    from segperf.callbacks import phase_clock
    from segperf.callbacks.phase_clock import PhaseClock

    ticks = iter(range(100))
    monkeypatch.setattr(phase_clock, "time", SimpleNamespace(perf_counter=lambda: float(next(ticks))))
    trainer = SimpleNamespace(
        strategy=SimpleNamespace(root_device=SimpleNamespace(type="cpu")), state=SimpleNamespace(fn="fit")
    )
    clock = PhaseClock(warmup_steps=1)
    batch = (torch.zeros(4, 3), None)  # 4 samples: the leading dimension of the first tensor
    clock.on_train_start(trainer, None)  # t=0
    clock.on_train_batch_start(trainer, None, batch, 0)  # t=1
    clock.on_before_backward(trainer, None, None)  # t=2: the forward took 1
    clock.on_after_backward(trainer, None)  # t=3: the backward took 1
    clock.on_train_batch_end(trainer, None, None, batch, 0)  # warm-up ends: t=4
    clock.on_validation_start(trainer, None)  # t=5
    clock.on_validation_batch_end(trainer, None, None, batch, 0)
    clock.on_validation_end(trainer, None)  # t=6
    clock.on_train_batch_start(trainer, None, batch, 1)  # pause ends, the step starts: t=7
    clock.on_before_backward(trainer, None, None)  # t=8
    clock.on_train_batch_end(trainer, None, None, batch, 1)  # t=9
    clock.on_train_end(trainer, None)  # t=10
    assert clock.marks == {"train_start": 0.0, "warmup_end": 4.0, "train_end": 10.0}
    assert clock.step_times == [(1.0, 4.0), (7.0, 9.0)] and clock.step_images == [4, 4]  # each step's edges
    assert clock.validation == [(5.0, 6.0)]
    assert clock.pauses == [(5.0, 7.0)]  # validation and whatever followed it before training resumed
    assert clock.forward_s == [1.0, 1.0]  # batch start to backward, per step (when a DDP rank is ready)
    assert clock.backward == [(2.0, 3.0), (8.0, None)]  # the second step's backward never ended
    assert (clock.steps, clock.images, clock.warmup_images, clock.validation_images) == (2, 8, 4, [4])
    assert clock.device_step_times() == []  # no CUDA events on a CPU
