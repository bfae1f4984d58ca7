"""The loader bench's data: the training DataModule of `data.format`, built from training's own
data config (conf/data/<format>.yaml, composed as a training run composes it), so the bench
times the loaders training runs (as nanoGPT's bench.py reuses model.py). The bench sets only
what it measures: the run size, the image size, the data folder and each grid point's axes.

What stays the bench's own is the naive reference loader (`naive_batches`): the seed study's
first loader, written the way it loaded, to give every rate a ratio.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import numpy as np
import torch
from hydra import compose, initialize_config_dir
from hydra.core.global_hydra import GlobalHydra
from hydra.utils import instantiate
from omegaconf import DictConfig, OmegaConf, open_dict
from PIL import Image

from segperf.bench.schema import BenchSettingsError, Settings
from segperf.config import CONFIG_DIR
from segperf.data.base import RunDataModule
from segperf.schema import own_problems

Batches = Iterator[tuple[torch.Tensor, torch.Tensor]]
# the grid's axes, as the DataModule keeps them (its constructor's data.decode, data.cache,
# data.num_workers and data.pin_memory)
AXES = ("decode", "cache", "num_workers", "pin_memory")


def _compose_training(overrides: list[str]) -> DictConfig:
    """Training's config (conf/train.yaml) with `overrides`; inside the bench's Hydra app, or alone."""
    if GlobalHydra.instance().is_initialized():  # the bench's @hydra.main searches the same conf/
        return compose(config_name="train", overrides=overrides)
    with initialize_config_dir(config_dir=str(CONFIG_DIR), version_base="1.3"):
        return compose(config_name="train", overrides=overrides)


def data_config(s: Settings) -> DictConfig:
    """Training's data config of `data.format` with the bench's run size, image size and folder;
    its own values otherwise (the built-in data's, the on_bad_sample policy, the split)."""
    cfg = _compose_training([f"data={s.format}", f"augment={s.augment}"])
    with open_dict(cfg):
        cfg.train_images, cfg.batch_size, cfg.seed = s.images, s.batch_size, s.seed
        cfg.val_images = 0  # the bench validates nothing (the reduced-decode check sets its own count)
        cfg.cold_cache = False  # the bench drops the page cache before each timed pass itself
        cfg.data.height, cfg.data.width = s.height, s.width
        cfg.data.root = str(s.root) if s.root is not None else None
        for key, value in (s.synthetic if s.format == "carvana" else s.builtin).items():
            OmegaConf.update(cfg, f"data.{'synthetic' if s.format == 'carvana' else 'builtin'}.{key}", value)
    if problems := own_problems(cfg.data):  # the data config's own range checks (data.synthetic.cars=1)
        raise BenchSettingsError(problems)
    return cfg.data


def build(s: Settings) -> RunDataModule:
    """The workload's DataModule, set up (its up-front file check, its split): the bench times the
    loaders of its training split."""
    datamodule = instantiate(data_config(s))
    datamodule.standalone_device = torch.device("cuda" if torch.cuda.is_available() else "cpu")  # cache=device
    datamodule.setup("fit")
    return datamodule


def configure(datamodule: RunDataModule, **axes: Any) -> RunDataModule:
    """`datamodule` with one grid point's settings: its next train_dataloader() builds with them."""
    for name, value in axes.items():
        if name not in AXES or not hasattr(datamodule, name):
            raise AttributeError(f"{type(datamodule).__name__} has no loader axis {name!r}")
        setattr(datamodule, name, value)
    return datamodule


def cache_of(loader: Any):
    """The SampleCache a train loader serves from (cache=memory: its dataset's; cache=device: the
    DeviceBatches' own), or None (cache=off)."""
    cache = getattr(getattr(loader, "dataset", None), "cache", None)
    return cache if cache is not None else getattr(loader, "cache", None)


def validation_images(datamodule: RunDataModule, decode: str, count: int = 16) -> torch.Tensor:
    """Up to `count` validation images, uint8 [N, H, W, 3], as the model gets them with `decode`
    (no cache, no augmentation): what decode=reduced changes is measured on them."""
    configure(datamodule, decode=decode, cache="off", num_workers=0, pin_memory=False)
    datamodule.val_images = min(count, len(datamodule.split.val))
    return torch.cat([image for image, _ in datamodule.val_dataloader()])[:count]


# -- the naive reference --------------------------------------------------------------------------
def naive_batches(fmt: str, samples: list, order: list[int], size: tuple[int, int], batch_size: int) -> Batches:
    """The seed study's first loader: in the training process, sample after sample, the whole
    image decoded by PIL and then resized (PIL's (width, height) `size`); no workers, no
    prefetching, no cache. Carvana's samples come with their masks, an image folder's with labels."""
    for start in range(0, len(order), batch_size):
        picked = [samples[i] for i in order[start : start + batch_size]]
        if fmt == "carvana":
            images = [np.array(Image.open(s.image).convert("RGB").resize(size, Image.BILINEAR)) for s in picked]
            masks = [(np.array(Image.open(s.mask).resize(size, Image.NEAREST)) != 0).astype(np.uint8) for s in picked]
            yield torch.from_numpy(np.stack(images)), torch.from_numpy(np.stack(masks))
        else:
            images = [np.array(Image.open(s.path).convert("RGB").resize(size, Image.BILINEAR)) for s in picked]
            yield torch.from_numpy(np.stack(images)), torch.tensor([s.label for s in picked])
