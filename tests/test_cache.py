"""cache=memory and cache=device: decoded once, served unchanged, shared with workers, never
stale, and refused with a clear message when they would not fit."""

from __future__ import annotations

import os
import shutil
from collections import OrderedDict
from types import SimpleNamespace

import pytest
import torch
from torch.utils.data import DataLoader, Dataset

from segperf.data import cache as cache_module
from segperf.data.cache import DeviceBatches, fill_cache
from segperf.data.carvana.cache import cache_key
from segperf.data.carvana.dataset import CarvanaDataset
from segperf.data.carvana.decode import decode_sample
from segperf.data.carvana.layout import find_samples
from tests.test_datamodule import make_dm


@pytest.fixture(autouse=True)
def no_cache_from_an_earlier_test(monkeypatch):
    monkeypatch.setattr(cache_module, "_caches", OrderedDict())


def batches(loader) -> list[tuple[torch.Tensor, torch.Tensor]]:
    return [(image.clone(), mask.clone()) for image, mask in loader]


@pytest.mark.parametrize("decode", ["full", "reduced"])
def test_a_cached_sample_is_byte_identical_to_the_decoded_one(tiny_carvana, decode):
    dataset = make_dm(tiny_carvana, cache="memory", decode=decode).train_dataloader().dataset
    assert dataset.cache is not None
    for index in range(0, len(dataset), 7):
        image, mask = dataset[index]
        fresh_image, fresh_mask = decode_sample(dataset.samples[index], dataset.size, decode)
        assert torch.equal(image, fresh_image) and torch.equal(mask, fresh_mask)


@pytest.mark.parametrize("cache", ["memory", "device"])
def test_cached_training_and_validation_batches_equal_the_uncached_ones(tiny_carvana, cache):
    plain, cached = make_dm(tiny_carvana, train_images=12), make_dm(tiny_carvana, train_images=12, cache=cache)
    for a, b in (
        (plain.train_dataloader(), cached.train_dataloader()),
        (plain.val_dataloader(), cached.val_dataloader()),
    ):
        first, second = batches(a), batches(b)
        assert len(first) == len(second) == len(b)
        for (a_img, a_mask), (b_img, b_mask) in zip(first, second, strict=True):
            assert torch.equal(a_img, b_img) and torch.equal(a_mask, b_mask)


class WritesIntoTheCache(Dataset):
    """Each item, fetched in a worker process, writes a marker into the cache it was given."""

    def __init__(self, cache) -> None:
        self.cache = cache

    def __len__(self) -> int:
        return 4

    def __getitem__(self, index: int) -> torch.Tensor:
        self.cache.images[index, 0, 0, 0] = 200 + index
        return torch.tensor([os.getpid(), int(self.cache.images.is_shared())])


def test_the_memory_cache_is_shared_with_worker_processes_not_copied(tiny_carvana):
    samples = find_samples(tiny_carvana)[:4]
    cache = fill_cache(CarvanaDataset(samples, 64, 96), "k", torch.device("cpu"), 0, "test")
    cache.images[:, 0, 0, 0] = 0
    seen = torch.cat(list(DataLoader(WritesIntoTheCache(cache), batch_size=1, num_workers=2)))
    pids, shared = seen[:, 0], seen[:, 1]
    assert os.getpid() not in pids.tolist() and shared.tolist() == [1, 1, 1, 1]
    # the workers' writes landed in the main process's tensor: one storage, not a copy per worker
    assert cache.images[:, 0, 0, 0].tolist() == [200, 201, 202, 203]


def test_the_datamodules_memory_cache_lives_in_shared_memory(tiny_carvana):
    dataset = make_dm(tiny_carvana, cache="memory", num_workers=2).train_dataloader().dataset
    assert dataset.cache.images.is_shared() and dataset.cache.masks.is_shared()


def test_the_memory_cache_prints_its_cost(tiny_carvana, capsys):
    make_dm(tiny_carvana, cache="memory").train_dataloader()
    out = capsys.readouterr().out
    # 64 train samples x 64 x 96 pixels x (3 image + 1 mask) bytes = 1.57 MB
    assert "cached 64 train samples in shared host memory: 1.6 MB (0.02 MB per sample)" in out


def test_the_cache_key_changes_with_size_decode_root_and_the_files(tiny_carvana, tmp_path):
    samples = find_samples(tiny_carvana)
    key = cache_key(tiny_carvana, 64, 96, "full", samples)
    assert key == cache_key(tiny_carvana, 64, 96, "full", find_samples(tiny_carvana))
    assert key != cache_key(tiny_carvana, 128, 96, "full", samples)
    assert key != cache_key(tiny_carvana, 64, 192, "full", samples)
    assert key != cache_key(tiny_carvana, 64, 96, "reduced", samples)
    assert key != cache_key(tiny_carvana, 64, 96, "full", samples[:-1])
    copy = shutil.copytree(tiny_carvana, tmp_path / "copy")
    assert key != cache_key(copy, 64, 96, "full", find_samples(copy))
    copied = find_samples(copy)
    before = cache_key(copy, 64, 96, "full", copied)
    stat = copied[0].image.stat()
    os.utime(copied[0].image, ns=(stat.st_atime_ns, stat.st_mtime_ns + 10**9))  # the file was replaced
    assert cache_key(copy, 64, 96, "full", copied) != before


def test_a_later_job_reuses_a_cache_only_when_its_key_matches(tiny_carvana, capsys):
    first = make_dm(tiny_carvana, cache="memory").train_dataloader().dataset.cache
    again = make_dm(tiny_carvana, cache="memory", seed=5).train_dataloader().dataset.cache
    other = make_dm(tiny_carvana, cache="memory", decode="reduced").train_dataloader().dataset.cache
    assert again is first
    assert other is not first and other.key != first.key
    assert "reusing the train cache" in capsys.readouterr().out


def test_cache_device_runs_on_the_cpu_as_its_own_device_without_a_dataloader(tiny_carvana):
    loader = make_dm(tiny_carvana, cache="device", train_images=10).train_dataloader()
    device_batches = loader.loader
    assert isinstance(device_batches, DeviceBatches) and len(loader) == 3
    assert device_batches.cache.images.device == torch.device("cpu")
    shapes = [(image.shape, image.dtype, mask.shape, mask.dtype) for image, mask in loader]
    assert shapes[0] == ((4, 64, 96, 3), torch.uint8, (4, 64, 96), torch.uint8)
    assert [s[0][0] for s in shapes] == [4, 4, 2]


def test_cache_device_that_does_not_fit_is_refused_with_what_to_do(tiny_carvana, monkeypatch):
    monkeypatch.setattr(cache_module.psutil, "virtual_memory", lambda: SimpleNamespace(available=1_000_000))
    dm = make_dm(tiny_carvana, cache="device")
    with pytest.raises(ValueError, match=r"data.cache=device: the 64 samples at 64x96 need 1.6 MB on cpu.*"
                                         r"use cache=memory or a smaller data.height/data.width"):  # fmt: skip
        dm.train_dataloader()


def test_cache_memory_that_does_not_fit_is_refused_with_what_to_do(tiny_carvana, monkeypatch):
    monkeypatch.setattr(cache_module.psutil, "virtual_memory", lambda: SimpleNamespace(available=1_000_000))
    with pytest.raises(ValueError, match=r"data.cache=memory: .* need 1.6 MB.*of RAM available: use a smaller size"):
        make_dm(tiny_carvana, cache="memory").train_dataloader()


def test_a_training_run_with_cache_device_and_augmentation_completes_on_the_cpu(tiny_cfg, tmp_path):
    from segperf.training.run import train

    results = train(tiny_cfg("cache=device", "augment=basic", "decode=reduced", "val_every_images=1000"), tmp_path)
    assert results["status"] == "completed" and results["train"]["images"] == 8
    assert results["config"]["data"]["cache"] == "device"
