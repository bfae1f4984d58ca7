"""Configs saved before the data sources moved into data/carvana|imagefolder|mnist name the old
module paths in their `_target_` (a run folder's .hydra/config.yaml, a user's config folder that
copied conf/data/): they still instantiate, and say what to write instead."""

from __future__ import annotations

import warnings

import pytest
from hydra.utils import get_class, instantiate
from omegaconf import OmegaConf

from segperf.data.carvana.datamodule import CarvanaDataModule
from segperf.data.imagefolder.datamodule import ImageFolderDataModule
from segperf.data.mnist.datamodule import MnistDataModule
from tests.conftest import compose_config

IMAGEFOLDER = ["data=imagefolder", "model=resnet18"]
MNIST = ["data=mnist", "model=cnn"]


@pytest.mark.parametrize(
    "workload,old_target,cls",
    [
        (["data=carvana"], "segperf.data.datamodule.CarvanaDataModule", CarvanaDataModule),
        (IMAGEFOLDER, "segperf.data.imagefolder.ImageFolderDataModule", ImageFolderDataModule),
        (MNIST, "segperf.data.mnist.MnistDataModule", MnistDataModule),
    ],
)
def test_a_saved_config_naming_an_old_module_path_still_instantiates(tmp_path, workload, old_target, cls):
    cfg = compose_config(*workload)
    saved = OmegaConf.to_container(cfg.data, resolve=True)
    saved["_target_"] = old_target  # as a run trained before the move saved it
    path = tmp_path / "config.yaml"
    OmegaConf.save(OmegaConf.create({"data": saved}), path)
    datamodule = instantiate(OmegaConf.load(path).data)
    assert type(datamodule) is cls
    assert datamodule.batch_size == cfg.data.batch_size and datamodule.num_workers == cfg.data.num_workers


def test_an_old_flat_module_path_warns_with_the_path_to_write_instead():
    with pytest.warns(FutureWarning, match=r"segperf\.data\.datamodule is now segperf\.data\.carvana\.datamodule"):
        from segperf.data import datamodule
    assert datamodule.CarvanaDataModule is CarvanaDataModule


def test_the_current_paths_in_conf_load_without_a_warning():
    for workload in (["data=carvana"], IMAGEFOLDER, MNIST):
        target = compose_config(*workload).data._target_
        with warnings.catch_warnings():
            warnings.simplefilter("error", FutureWarning)
            assert get_class(target).__name__ == target.rpartition(".")[2]
