"""A data-parallel run's set-up (trainer=ddp): what the config composes to, the docs'
scaling-out commands included, and each rank's own share of the training and validation data."""

from __future__ import annotations

import os
from collections import Counter
from types import SimpleNamespace

import pytest
import torch
from hydra.utils import instantiate
from omegaconf import OmegaConf

from segperf.data.base import RankShard
from segperf.data.carvana.datamodule import CarvanaDataModule
from segperf.errors import DataSizeError
from segperf.schema import check_settings
from tests.conftest import MNIST_TINY, compose_config
from tests.extras import needs_extra


# -- the config -----------------------------------------------------------------------------
def test_trainer_ddp_selects_lightnings_ddp_strategy_on_two_devices_of_one_node():
    cfg = compose_config("trainer=ddp")
    assert (cfg.trainer.strategy, cfg.trainer.devices, cfg.trainer.num_nodes) == ("ddp", 2, 1)
    assert cfg.trainer.precision == "32-true"  # everything else as trainer=default


def test_trainer_ddp_takes_devices_and_nodes_from_the_command_line():
    cfg = compose_config("trainer=ddp", "trainer.devices=4", "trainer.num_nodes=2")
    check_settings(cfg)
    assert (cfg.trainer.devices, cfg.trainer.num_nodes) == (4, 2)


def test_a_misspelt_trainer_key_fails_while_composing():
    with pytest.raises(Exception, match="num_node"):
        compose_config("trainer=ddp", "trainer.num_node=2")


@pytest.mark.parametrize("group", ["workers=auto", "threads=all"])
def test_auto_workers_and_threads_share_the_nodes_cores_between_its_ranks(group, monkeypatch):
    monkeypatch.delenv("SLURM_CPUS_PER_TASK", raising=False)
    monkeypatch.setattr(os, "sched_getaffinity", lambda pid: set(range(16)))
    key = "data.num_workers" if group.startswith("workers") else "num_threads"
    single = compose_config(group)
    ddp = compose_config(group, "trainer=ddp", "trainer.devices=4")
    assert (OmegaConf.select(single, key), OmegaConf.select(ddp, key)) == (16, 4)
    monkeypatch.setenv("SLURM_CPUS_PER_TASK", "6")  # srun gives each task its own CPUs
    assert OmegaConf.select(compose_config(group, "trainer=ddp", "trainer.devices=4"), key) == 6


def test_device_count_reads_every_form_of_trainer_devices(monkeypatch):
    from segperf.config import device_count

    monkeypatch.setattr(torch.cuda, "device_count", lambda: 8)
    assert [device_count(d) for d in (1, 4, [0, 1], "3", "0,1,2", "auto", -1)] == [1, 4, 2, 3, 3, 8, 8]


# -- each rank's share of the data ------------------------------------------------------------
def test_rank_shards_split_the_order_without_overlap_and_with_equal_lengths():
    order = list(range(100, 111))  # 11 positions, 3 ranks: 3 each, the 11th image is left out
    shards = [list(RankShard(order, rank, 3)) for rank in range(3)]
    assert [len(s) for s in shards] == [3, 3, 3] == [len(RankShard(order, r, 3)) for r in range(3)]
    assert shards[0] == [100, 103, 106] and shards[2] == [102, 105, 108]
    assert not set(shards[0]) & set(shards[1]) and not set(shards[1]) & set(shards[2])


def make_dm(root, rank: int, world: int, **overrides) -> CarvanaDataModule:
    options = dict(root=str(root), height=64, width=96, train_images=8, val_images=4, batch_size=2)
    dm = CarvanaDataModule(**{**options, **overrides})
    dm.trainer = SimpleNamespace(global_rank=rank, world_size=world)  # what the DataModule reads of it
    dm.setup("fit")
    return dm


def test_ranks_train_on_disjoint_shares_that_add_up_to_train_images(tiny_carvana):
    shares = [list(make_dm(tiny_carvana, rank, 2, train_images=40).train_dataloader().sampler) for rank in (0, 1)]
    assert [len(s) for s in shares] == [20, 20]
    assert not set(shares[0]) & set(shares[1])  # no image seen twice within the pass
    # the ranks deal out exactly the order a single process would draw
    single = list(make_dm(tiny_carvana, 0, 1, train_images=40).train_dataloader().sampler)
    assert sorted(shares[0] + shares[1]) == sorted(single)


def test_ranks_run_the_same_number_of_steps(tiny_carvana):
    """DDP waits for every rank at every step: unequal batch counts would hang the run."""
    loaders = [make_dm(tiny_carvana, rank, 3, train_images=23).train_dataloader() for rank in range(3)]
    assert [len(loader) for loader in loaders] == [4, 4, 4]  # 23 // 3 = 7 images each, in batches of 2
    assert [[len(image) for image, _ in loader] for loader in loaders] == [[2, 2, 2, 1]] * 3


def test_over_more_than_one_pass_no_rank_repeats_an_image_before_the_split_is_used_up(tiny_carvana):
    shares = [list(make_dm(tiny_carvana, rank, 2, train_images=128).train_dataloader().sampler) for rank in (0, 1)]
    first_pass = shares[0][:32] + shares[1][:32]  # 64 training images, one full shuffle
    assert len(set(first_pass)) == 64
    assert max(Counter(shares[0] + shares[1]).values()) == 2


def test_a_resumed_rank_goes_on_with_its_own_share_where_it_stopped(tiny_carvana):
    """Every rank loads rank 0's checkpoint: the same batch count, applied to each rank's share."""
    for rank in (0, 1):
        whole = list(make_dm(tiny_carvana, rank, 2, train_images=24).train_dataloader().sampler)  # 12 images
        resumed = make_dm(tiny_carvana, rank, 2, train_images=24).train_dataloader()  # a new process
        resumed.load_state_dict({"batches_done": 2, "samples_done": 4})
        assert list(resumed.sampler) == whole[4:] and len(resumed) == 6  # Lightning's counter ends the epoch


def test_validation_images_are_split_between_ranks_once_each(tiny_carvana):
    subsets = [make_dm(tiny_carvana, rank, 2, val_images=5).val_dataloader().dataset for rank in (0, 1)]
    single = make_dm(tiny_carvana, 0, 1, val_images=5).val_dataloader().dataset
    assert [len(s) for s in subsets] == [3, 2]
    assert sorted(subsets[0].indices + subsets[1].indices) == sorted(single.indices)


def test_mnist_validation_is_split_between_ranks(tiny_mnist):
    cfg = compose_config(*MNIST_TINY, f"data.root={tiny_mnist}", "val_images=64")
    sizes = []
    for rank in (0, 1):
        dm = instantiate(cfg.data)
        dm.trainer = SimpleNamespace(global_rank=rank, world_size=2)
        dm.setup("fit")
        sizes.append(len(dm.val_dataloader().dataset))
        assert len(dm.train_dataloader()) == 2  # 128 images, 64 per rank, batches of 32
    assert sizes == [32, 32]


def test_fewer_images_than_ranks_is_a_clear_error(tiny_carvana):
    with pytest.raises(DataSizeError, match="val_images=2 leaves no validation image for some of the 3 ranks"):
        make_dm(tiny_carvana, 0, 3, val_images=2).val_dataloader()
    with pytest.raises(DataSizeError, match="train_images=2 leaves no image for some of the 3 ranks"):
        make_dm(tiny_carvana, 0, 3, train_images=2).train_dataloader()


# -- the docs' commands -------------------------------------------------------------------------
def scaling_out_commands() -> list[list[str]]:
    """The `python -m segperf.train` commands of the scaling-out page (docs/scaling-out.md), as argv."""
    from tests.doc_commands import segperf_commands

    return segperf_commands("segperf.train", ["docs/scaling-out.md"])


def first_of_each_sweep(args: list[str]) -> list[str]:
    return [a.split(",")[0] if "=" in a and "," in a and "[" not in a else a for a in args if a != "-m"]


def test_the_scaling_out_pages_commands_compose_with_matching_ddp_and_slurm_settings():
    from hydra import compose, initialize_config_dir

    from segperf.config import CONFIG_DIR

    commands = scaling_out_commands()
    assert len(commands) == 4  # one node with N GPUs, the CPU, several nodes under SLURM, a SLURM sweep
    for args in sorted(commands, key=lambda args: "hydra/launcher=slurm" in args):  # SLURM's last
        if "hydra/launcher=slurm" in args:
            needs_extra("slurm")  # the launcher's config is the plugin's
        with initialize_config_dir(config_dir=str(CONFIG_DIR), version_base="1.3"):
            cfg = compose(config_name="train", overrides=first_of_each_sweep(args), return_hydra_config=True)
        assert cfg.trainer.strategy == "ddp"
        if "hydra/launcher=slurm" in args:  # what Lightning checks against SLURM's task counts
            launcher = cfg.hydra.launcher
            assert launcher.tasks_per_node == launcher.gpus_per_node == cfg.trainer.devices
            assert launcher.nodes == cfg.trainer.num_nodes
