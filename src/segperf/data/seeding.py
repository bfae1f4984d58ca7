"""Seeding DataLoader workers, for every workload whose dataset draws random augmentations.

A dataset that augments exposes `augment`: None, or an object with `reseed(seed)` (Carvana's
HostAugment, an image folder's transforms). torch seeds torch, `random` and numpy in each
worker, but not a library's own generator, such as albumentations': forked workers would all
draw the same "random" augmentations without `seed_worker`.
"""

from __future__ import annotations

import os
import sys
from typing import Any

import torch
from torch.utils.data import get_worker_info


def seed_worker(worker_id: int) -> None:
    """DataLoader `worker_init_fn`: seeds the worker's augmentation generator from its torch seed,
    so each worker draws different augmentations and a run with the same seed draws the same ones.

    torch already seeds torch, `random` and numpy in each worker (base seed + worker id), but not
    albumentations' own generator. After `seed_everything(workers=True)` (every training run),
    Lightning's rank-aware seeding runs first, as it would have without this function (Lightning
    adds its own only to loaders that have none)."""
    lightning_seed = sys.modules.get("lightning.fabric.utilities.seed")  # never imported here: ~2 s per worker
    if lightning_seed is not None and int(os.environ.get("PL_SEED_WORKERS", 0)):
        lightning_seed.pl_worker_init_function(worker_id)
    info = get_worker_info()
    dataset: Any = info.dataset if info is not None else None
    while dataset is not None and not hasattr(dataset, "augment"):  # Subset -> the workload's dataset
        dataset = getattr(dataset, "dataset", None)
    if dataset is not None and dataset.augment is not None:
        dataset.augment.reseed(torch.initial_seed())
