"""The run's TensorBoard logger flushes its event file every few seconds, not after every logged
step (Lightning's save() after each log_metrics waits for the writer thread: ~1 ms a step on 2
cores), and loses nothing: every scalar is in the event file once the logger is finalized."""

from __future__ import annotations

from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

from segperf.training.tensorboard import TensorBoardLogger


def test_saves_within_the_period_do_not_flush_and_finalize_keeps_every_scalar(tmp_path, monkeypatch):
    logger = TensorBoardLogger(tmp_path, name="", version="", flush_secs=3600)
    flushes = []
    original = logger.experiment.flush
    monkeypatch.setattr(logger.experiment, "flush", lambda: (flushes.append(1), original())[1])
    for step in range(50):  # Lightning: log_metrics then save, every log_every_n_steps
        logger.log_metrics({"train_loss": 1.0 / (step + 1)}, step=step)
        logger.save()
    assert len(flushes) == 1  # the first save (hparams.yaml and the file's header); not one a step
    assert (tmp_path / "hparams.yaml").exists()
    logger.finalize("success")
    events = EventAccumulator(str(tmp_path))
    events.Reload()
    assert [s.step for s in events.Scalars("train_loss")] == list(range(50))


def test_a_save_after_the_period_flushes(tmp_path, monkeypatch):
    from segperf.training import tensorboard

    clock = iter([0.0, 1.0, 6.0, 6.5])
    monkeypatch.setattr(tensorboard.time, "monotonic", lambda: next(clock))
    logger = TensorBoardLogger(tmp_path, name="", version="", flush_secs=5)
    flushes = []
    monkeypatch.setattr(logger.experiment, "flush", lambda: flushes.append(1))
    for _ in range(4):
        logger.save()
    assert len(flushes) == 2  # at 0 s and at 6 s; not at 1 s or 6.5 s
