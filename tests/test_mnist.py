"""data=mnist: MNIST's IDX files are read (plain or gzipped), the built-in digits are written in
that format, and the DataModule serves what the training run and the measurement expect."""

import gc
import gzip
import shutil

import numpy as np
import pytest
import torch
from hydra.utils import instantiate

from segperf.data.mnist.datamodule import read_split
from segperf.data.mnist.digits import FILES, generate
from segperf.data.mnist.idx import IdxFormatError, read_idx, write_idx
from segperf.data.resumable import ResumableLoader
from segperf.errors import DataLayoutError
from tests.conftest import MNIST_TINY, compose_config


def test_builtin_digit_files_round_trip_through_the_idx_reader(tiny_mnist):
    images, labels = read_split(tiny_mnist, "train")
    assert images.shape == (256, 28, 28) and images.dtype == torch.uint8
    assert labels.dtype == torch.int64 and sorted(set(labels.tolist())) == list(range(10))
    assert images.float().mean() > 10  # ink, not blank images
    raw = read_idx(tiny_mnist / FILES["test"][0], ndim=3)
    write_idx(tiny_mnist.parent / "copy.gz", raw)
    assert np.array_equal(read_idx(tiny_mnist.parent / "copy.gz", ndim=3), raw)
    assert (tiny_mnist / FILES["train"][0]).read_bytes()[:8] == bytes([0, 0, 8, 3, 0, 0, 1, 0])  # 256 images


def test_builtin_digits_are_the_same_bytes_every_time(tmp_path):
    a, b = generate(tmp_path / "a", train=30, test=10, seed=3), generate(tmp_path / "b", train=30, test=10, seed=3)
    for name in (n for pair in FILES.values() for n in pair):
        assert (a / name).read_bytes() == (b / name).read_bytes()


def test_a_file_with_a_wrong_magic_number_is_refused_naming_the_file(tmp_path):
    bad = tmp_path / "train-images-idx3-ubyte"
    bad.write_bytes(b"\x12\x34\x56\x78" + bytes(64))
    with pytest.raises(IdxFormatError, match=r"train-images-idx3-ubyte: not an IDX file \(magic number 0x12345678"):
        read_idx(bad, ndim=3)


def test_labels_where_images_belong_and_truncated_files_are_refused(tiny_mnist, tmp_path):
    with pytest.raises(IdxFormatError, match="of 1 dimensions .*expected 3"):
        read_idx(tiny_mnist / FILES["train"][1], ndim=3)
    cut = tmp_path / "cut"
    cut.write_bytes((tiny_mnist / FILES["train"][0]).read_bytes()[:1000])
    with pytest.raises(IdxFormatError, match="truncated"):
        read_idx(cut, ndim=3)


def test_gzipped_files_in_torchvisions_layout_are_found(tiny_mnist, tmp_path):
    raw = tmp_path / "MNIST" / "raw"
    raw.mkdir(parents=True)
    for name in (n for pair in FILES.values() for n in pair):
        (raw / f"{name}.gz").write_bytes(gzip.compress((tiny_mnist / name).read_bytes()))
    assert torch.equal(read_split(tmp_path, "test")[0], read_split(tiny_mnist, "test")[0])


def test_a_folder_without_mnist_files_names_what_is_missing(tiny_mnist, tmp_path):
    shutil.copy(tiny_mnist / FILES["train"][0], tmp_path)
    with pytest.raises(DataLayoutError, match="no train-labels-idx1-ubyte .*expected MNIST's four IDX files"):
        read_split(tmp_path, "train")


def test_datamodule_serves_uint8_digits_through_the_resumable_loader(tiny_mnist):
    cfg = compose_config(*MNIST_TINY, f"data.root={tiny_mnist}", "data.num_workers=1")
    dm = instantiate(cfg.data)
    dm.setup("fit")
    assert dm.split is not None
    assert dm.summary() | {"root": None} == {
        "root": None,
        "synthetic": False,
        "format": "idx",
        "images": 320,
        "train_images": 256,
        "val_images": 64,
        "classes": 10,
    }
    train = dm.train_dataloader()
    assert isinstance(train, ResumableLoader) and len(train) == 4 and train.num_workers == 1
    image, label = next(iter(train))
    assert (image.shape, image.dtype, label.shape, label.dtype) == ((32, 28, 28), torch.uint8, (32,), torch.int64)
    assert sum(len(batch[1]) for batch in dm.val_dataloader()) == 64
    # the loader keeps its worker (persistent_workers): end it here, where it takes a moment, not when a
    # later test's garbage collection finds the loader, where DataLoader waited 5 s for the worker to exit
    del train, dm
    gc.collect()


def test_more_validation_images_than_the_test_file_holds_is_refused(tiny_mnist):
    dm = instantiate(compose_config(*MNIST_TINY, f"data.root={tiny_mnist}", "val_images=65").data)
    with pytest.raises(ValueError, match="val_images=65 is more than the 64 test images"):
        dm.setup("fit")
