"""The DataModule applies the run-size limits and hands out uint8 HWC batches."""

from collections import Counter

import pytest
import torch
from hydra.utils import instantiate

from segperf.data.carvana.datamodule import CarvanaDataModule
from segperf.data.prefetch import ThreadPrefetchLoader
from tests.conftest import TINY_CARVANA_SUMMARY


def make_dm(root, **overrides) -> CarvanaDataModule:
    options = dict(root=str(root), height=64, width=96, train_images=8, val_images=4, batch_size=4)
    dm = CarvanaDataModule(**{**options, **overrides})
    dm.setup("fit")
    return dm


def test_prints_the_seed_data_line_and_records_the_split(tiny_carvana, capsys):
    dm = make_dm(tiny_carvana)
    out = capsys.readouterr().out
    assert "There are 80 datapoints (64 train, 16 val)." in out
    assert "There are 5 cars (4 train, 1 val)." in out
    assert dm.summary() | {"root": None} == TINY_CARVANA_SUMMARY


def test_batches_are_uint8_hwc_images_and_binary_masks_at_the_configured_size(tiny_carvana):
    image, mask = next(iter(make_dm(tiny_carvana).train_dataloader()))
    assert image.dtype == torch.uint8 and image.shape == (4, 64, 96, 3)
    assert mask.dtype == torch.uint8 and mask.shape == (4, 64, 96)
    assert set(mask.unique().tolist()) == {0, 1}


def test_training_draws_exactly_train_images_over_the_run(tiny_carvana):
    loader = make_dm(tiny_carvana, train_images=10).train_dataloader()
    sizes = [len(image) for image, _ in loader]
    assert sizes == [4, 4, 2]


def test_more_train_images_than_the_split_wraps_around_without_repeats_within_a_pass(tiny_carvana):
    dm = make_dm(tiny_carvana, train_images=100)
    order = list(dm.train_dataloader().sampler)
    assert len(order) == 100
    assert len(set(order[:64])) == 64  # a full shuffle of the 64 training images first
    assert max(Counter(order).values()) == 2


def test_training_order_is_reproducible_from_the_seed(tiny_carvana):
    first = list(make_dm(tiny_carvana, seed=3).train_dataloader().sampler)
    again = list(make_dm(tiny_carvana, seed=3).train_dataloader().sampler)
    other = list(make_dm(tiny_carvana, seed=4).train_dataloader().sampler)
    assert first == again != other


def test_validation_uses_val_images_samples_of_held_out_cars_only(tiny_carvana):
    dm = make_dm(tiny_carvana, val_images=6)
    subset = dm.val_dataloader().dataset
    assert len(subset) == 6
    val_cars = set(dm.split.val_cars)
    assert {subset.dataset.samples[i].car for i in subset.indices} <= val_cars


def test_more_val_images_than_the_split_has_is_refused_with_the_limit(tiny_carvana):
    with pytest.raises(ValueError, match=r"val_images=17 .* 16 validation images.*val_images<=16"):
        make_dm(tiny_carvana, val_images=17)


def test_thread_prefetch_yields_the_same_batches_as_the_plain_loader(tiny_carvana):
    plain = make_dm(tiny_carvana, train_images=12).train_dataloader()
    prefetched = make_dm(tiny_carvana, train_images=12, prefetch_factor=2).train_dataloader()
    assert isinstance(prefetched.loader, ThreadPrefetchLoader) and len(prefetched) == len(plain) == 3
    for (a_img, a_mask), (b_img, b_mask) in zip(plain, prefetched, strict=True):
        assert torch.equal(a_img, b_img) and torch.equal(a_mask, b_mask)


def test_thread_prefetch_reraises_a_decode_error_naming_the_file(tiny_carvana, monkeypatch):
    # a file whose header and end marker look fine but whose data does not decode: only the
    # decoder finds out, in the loader, and the error must still name the file
    from PIL import Image

    loader = make_dm(tiny_carvana, prefetch_factor=2).train_dataloader()

    def broken(self, *args, **kwargs):
        raise OSError("broken data stream when reading image file")

    monkeypatch.setattr(Image.Image, "convert", broken)
    with pytest.raises(OSError, match=r"could not decode image .*\.jpg: broken data stream"):
        next(iter(loader))


def test_without_a_root_the_built_in_data_is_generated_once_and_used(tmp_path, capsys):
    from tests.conftest import compose_config

    cfg = compose_config(
        "data.height=64",
        "data.width=96",
        f"data.synthetic.cache_dir={tmp_path}",
        "data.synthetic.cars=5",
        "data.synthetic.width=240",
        "data.synthetic.height=160",
    )
    dm = instantiate(cfg.data)
    dm.prepare_data()
    dm.setup("fit")
    assert dm.summary()["synthetic"] is True
    assert dm.summary()["images"] == 80
    assert str(tmp_path) in dm.summary()["root"]
    folders = list(tmp_path.iterdir())
    dm2 = instantiate(cfg.data)
    dm2.prepare_data()
    assert list(tmp_path.iterdir()) == folders  # reused, not generated again
