"""Sweeps run repeats as passes over the grid (A B A B), so drift during a sweep is not read as a
speed-up of whichever configuration ran last (hydra/sweeper=segperf, the default)."""

import json

import pytest
from hydra import compose, initialize_config_dir
from hydra.core.override_parser.overrides_parser import OverridesParser

from hydra_plugins.segperf_sweeper.segperf_sweeper import SegperfSweeper, slowest_first
from segperf.config import CONFIG_DIR
from tests.conftest import MNIST_TINY, run_cli
from tests.extras import needs_extra


def jobs_of(*arguments: str, max_batch_size=None, slowest=("repeat",)) -> list[list[list[str]]]:
    """The batches of jobs the sweeper hands to the launcher, parsed by Hydra's own parser."""
    overrides = OverridesParser.create().parse_overrides(list(arguments))
    return SegperfSweeper(max_batch_size=max_batch_size, slowest=slowest).split_arguments(overrides, max_batch_size)


def test_repeats_vary_slowest_every_configuration_once_then_again():
    (jobs,) = jobs_of("pin=off,on", "workers=off,auto", "+repeat=0,1")
    assert jobs == [
        ["pin=off", "workers=off", "+repeat=0"],
        ["pin=off", "workers=auto", "+repeat=0"],
        ["pin=on", "workers=off", "+repeat=0"],
        ["pin=on", "workers=auto", "+repeat=0"],
        ["pin=off", "workers=off", "+repeat=1"],
        ["pin=off", "workers=auto", "+repeat=1"],
        ["pin=on", "workers=off", "+repeat=1"],
        ["pin=on", "workers=auto", "+repeat=1"],
    ]


def test_repeat_given_first_or_without_plus_is_still_slowest_and_the_rest_keeps_hydras_order():
    (jobs,) = jobs_of("repeat=2,0,1", "batch_size=64,512", "seed=3")
    assert [(job[0], job[1]) for job in jobs] == [
        ("repeat=2", "batch_size=64"),
        ("repeat=2", "batch_size=512"),
        ("repeat=0", "batch_size=64"),  # the sweep's order of values, not sorted
        ("repeat=0", "batch_size=512"),
        ("repeat=1", "batch_size=64"),
        ("repeat=1", "batch_size=512"),
    ]
    assert all(job[2] == "seed=3" for job in jobs)


def test_without_a_repeat_the_order_is_hydras():
    (ours,) = jobs_of("pin=off,on", "workers=off,auto")
    assert ours == [
        ["pin=off", "workers=off"],
        ["pin=off", "workers=auto"],
        ["pin=on", "workers=off"],
        ["pin=on", "workers=auto"],
    ]


def test_batches_for_the_launcher_keep_the_interleaved_order():
    batches = jobs_of("pin=off,on,off", "+repeat=0,1", max_batch_size=4)
    assert [len(batch) for batch in batches] == [4, 2]
    assert [job[1] for batch in batches for job in batch] == ["+repeat=0"] * 3 + ["+repeat=1"] * 3


def test_slowest_first_orders_several_keys_in_the_given_order():
    jobs = [[f"a={a}", f"seed={s}", f"repeat={r}"] for a in "xy" for s in (1, 2) for r in (0, 1)]
    ordered = slowest_first(jobs, ["repeat", "seed"])
    assert [job[2] + " " + job[1] for job in ordered[:4]] == ["repeat=0 seed=1"] * 2 + ["repeat=0 seed=2"] * 2
    assert [job[0] for job in ordered[:4]] == ["a=x", "a=y", "a=x", "a=y"]


def test_train_sweeps_with_the_segperf_sweeper_by_default_and_the_launcher_stays_pluggable():
    needs_extra("slurm")
    with initialize_config_dir(config_dir=str(CONFIG_DIR), version_base="1.3"):
        default = compose(config_name="train", return_hydra_config=True)
        slurm = compose(config_name="train", overrides=["hydra/launcher=slurm"], return_hydra_config=True)
    assert default.hydra.sweeper._target_.endswith("SegperfSweeper")
    assert list(default.hydra.sweeper.slowest) == ["repeat"]
    assert slurm.hydra.sweeper._target_.endswith("SegperfSweeper")
    assert "submitit" in slurm.hydra.launcher._target_


@pytest.mark.slow
def test_a_sweep_with_repeats_runs_the_configurations_interleaved(tmp_path, tiny_mnist):
    args = ["-m", "pin=off,on", "+repeat=0,1", *MNIST_TINY, f"data.root={tiny_mnist}", "hydra.sweep.dir=sweep"]
    done = run_cli(args, cwd=tmp_path)
    assert done.returncode == 0, done.stderr[-3000:]
    runs = sorted((tmp_path / "sweep").glob("*/results.json"), key=lambda p: int(p.parent.name.split("_")[0]))
    order = [json.loads(p.read_text()) for p in runs]
    assert [(r["config"]["data"]["pin_memory"], r["config"]["repeat"]) for r in order] == [
        (False, 0),
        (True, 0),
        (False, 1),
        (True, 1),
    ]
    assert [p.parent.name.split("_")[0] for p in runs] == ["0", "1", "2", "3"]
    assert [r["process_job"] for r in order] == [0, 1, 2, 3]  # one process: the first job pays start-up costs
