"""threads=one|half|all (and num_threads=N): torch's intra-op threads for the run, restored for
the next job of a sweep."""

import pytest
import torch

from segperf.config import CONFIG_DIR, available_cores
from segperf.model.cnn import ClassificationModule
from segperf.schema import problems_in
from segperf.training.run import TORCH_THREADS, reset_global_state, train
from tests.conftest import MNIST_TINY, compose_config


@pytest.mark.parametrize(
    ("override", "expected"),
    [
        ("threads=default", None),
        ("threads=one", 1),
        ("threads=half", max(1, available_cores() // 2)),
        ("threads=all", available_cores()),
        ("num_threads=3", 3),  # any count, through the key: Hydra refuses numbers as option names
    ],
)
def test_threads_options_name_core_counts_and_any_count_goes_through_num_threads(override, expected):
    assert compose_config(override).num_threads == expected
    assert compose_config().num_threads is None  # the baseline: torch's own choice


def test_no_threads_option_is_a_bare_number():
    assert sorted(p.stem for p in (CONFIG_DIR / "threads").glob("*.yaml")) == ["all", "default", "half", "one"]


def test_zero_threads_is_refused_with_what_is_allowed():
    assert problems_in(compose_config("num_threads=0")) == [
        "num_threads=0: must be a whole number >= 1 (or threads=one|half|all, or null: torch's default)"
    ]


def test_threads_reach_torch_during_the_run_and_are_restored_for_the_next_job(tiny_mnist, tmp_path, monkeypatch):
    wanted = 1 if TORCH_THREADS != 1 else 2  # something other than torch's default
    seen = []
    monkeypatch.setattr(ClassificationModule, "on_train_start", lambda self: seen.append(torch.get_num_threads()))
    cfg = compose_config(*MNIST_TINY, f"data.root={tiny_mnist}", "train_images=32", f"num_threads={wanted}")
    try:
        results = train(cfg, tmp_path)
    finally:
        reset_global_state()
    assert seen == [wanted] and results["torch_threads"] == wanted and results["axes"]["threads"] == wanted
    assert f"Torch threads           {wanted} intra-op" in (tmp_path / "summary.txt").read_text()
    assert torch.get_num_threads() == TORCH_THREADS


def test_an_earlier_jobs_leftovers_in_reference_cycles_are_freed_before_the_next_job():
    """What a job's peak RSS counts is its own: an earlier job's trainer, module and data (held in
    reference cycles until the cyclic collector runs) are freed before the next job starts."""
    import gc
    import weakref

    class Job:  # trainer <-> module, as Lightning links them
        pass

    enabled = gc.isenabled()
    gc.disable()  # the collector would otherwise run at a time of its own choosing
    try:
        trainer, module = Job(), Job()
        trainer.module, module.trainer, module.data = module, trainer, torch.zeros(1024)
        left = weakref.ref(module)
        del trainer, module
        assert left() is not None  # in a cycle: no reference count reaches 0
        reset_global_state()
        assert left() is None
    finally:
        if enabled:
            gc.enable()
