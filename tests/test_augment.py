"""augment=basic: image and mask move together, on the host and on the device; only training
samples are augmented; each DataLoader worker draws its own augmentations, reproducibly; and
workers=auto counts the cores the process may use."""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch.utils.data import DataLoader

from segperf.data.carvana.augment import DeviceAugment, HostAugment
from segperf.data.carvana.dataset import CarvanaDataset
from segperf.data.carvana.layout import find_samples
from segperf.data.seeding import seed_worker
from tests.test_datamodule import make_dm


def car_and_mask(height: int = 64, width: int = 96) -> tuple[torch.Tensor, torch.Tensor]:
    """An image whose content *is* its mask (white car on black), off-centre so a flip shows."""
    mask = torch.zeros(height, width, dtype=torch.uint8)
    mask[20:44, 10:52] = 1
    mask[12:20, 20:40] = 1  # a cabin on top
    return (mask * 255)[..., None].expand(-1, -1, 3).contiguous(), mask


def misplaced_pixels(image: torch.Tensor, mask: torch.Tensor) -> int:
    """Pixels where the mask disagrees with the image content under it, except on the car's
    outline, where bilinear (image) and nearest (mask) resampling may differ by a pixel."""
    bright = image.float().mean(-1) > 127
    m = mask[None, None].float()
    outline = (F.max_pool2d(m, 3, 1, 1) != -F.max_pool2d(-m, 3, 1, 1))[0, 0]
    return int(((bright != (mask == 1)) & ~outline).sum())


def test_host_augmentation_moves_image_and_mask_together():
    image, mask = car_and_mask()
    augment = HostAugment(seed=0)
    changed = 0
    for _ in range(24):
        out_image, out_mask = augment(image, mask)
        assert out_image.dtype == out_mask.dtype == torch.uint8
        assert out_image.shape == image.shape and out_mask.shape == mask.shape
        assert set(out_mask.unique().tolist()) <= {0, 1}
        assert misplaced_pixels(out_image, out_mask) == 0
        changed += not torch.equal(out_mask, mask)
    assert changed >= 6  # flips and shifts did happen (each with p=0.5)


def test_device_augmentation_moves_image_and_mask_together_per_sample():
    image, mask = car_and_mask()
    images, masks = image.expand(16, -1, -1, -1).contiguous(), mask.expand(16, -1, -1).contiguous()
    out_images, out_masks = DeviceAugment(seed=0, device="cpu")(images, masks)
    assert out_images.dtype == out_masks.dtype == torch.uint8
    assert out_images.shape == images.shape and out_masks.shape == masks.shape
    assert set(out_masks.unique().tolist()) <= {0, 1}
    for out_image, out_mask in zip(out_images, out_masks, strict=True):
        assert misplaced_pixels(out_image, out_mask) == 0
    distinct = {tuple(m.flatten().tolist()) for m in out_masks}
    assert len(distinct) >= 4  # each sample draws its own flip and affine


def test_only_training_samples_are_augmented(tiny_carvana):
    dm = make_dm(tiny_carvana, augment="basic")
    assert isinstance(dm.train_dataloader().dataset.augment, HostAugment)
    assert dm.val_dataloader().dataset.dataset.augment is None
    plain = make_dm(tiny_carvana).train_dataloader()
    augmented = make_dm(tiny_carvana, augment="basic", train_images=16).train_dataloader()
    assert plain.dataset.augment is None
    differs = [not torch.equal(a[0], b[0]) for a, b in zip(plain, augmented, strict=False)]
    assert any(differs)


def test_with_cache_device_the_device_augments_the_training_batches(tiny_carvana):
    loader = make_dm(tiny_carvana, cache="device", augment="basic").train_dataloader()
    assert isinstance(loader.loader.augment, DeviceAugment)
    assert make_dm(tiny_carvana, cache="device", augment="basic").val_dataloader().augment is None


def test_each_worker_draws_its_own_augmentations_and_a_rerun_draws_the_same(tiny_carvana):
    sample = find_samples(tiny_carvana)[0]
    dataset = CarvanaDataset([sample] * 8, 64, 96, augment=HostAugment(seed=0))

    def first_two_batches(worker_init_fn) -> list[torch.Tensor]:
        torch.manual_seed(0)  # what seed_everything does before a run
        loader = DataLoader(dataset, batch_size=4, num_workers=2, worker_init_fn=worker_init_fn)
        return [image for image, _ in loader]

    worker0, worker1 = first_two_batches(seed_worker)
    assert not torch.equal(worker0, worker1)
    again = first_two_batches(seed_worker)
    assert torch.equal(again[0], worker0) and torch.equal(again[1], worker1)
    # what seed_worker fixes: albumentations' own generator is copied into every forked worker
    unseeded0, unseeded1 = first_two_batches(None)
    assert torch.equal(unseeded0, unseeded1)


def test_loaders_with_workers_seed_them(tiny_carvana):
    loader = make_dm(tiny_carvana, num_workers=2).train_dataloader()
    assert loader.worker_init_fn is seed_worker and loader.persistent_workers is True
    assert make_dm(tiny_carvana).train_dataloader().worker_init_fn is None


def test_workers_auto_counts_the_cores_this_process_may_use_not_the_machines(monkeypatch):
    from segperf import config

    monkeypatch.setattr(config.os, "sched_getaffinity", lambda pid: {3}, raising=False)
    monkeypatch.setattr(config.os, "cpu_count", lambda: 64)
    assert config.available_cores() == 1  # e.g. `taskset -c 3` on a 64-core machine
