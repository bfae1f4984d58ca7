"""data=imagefolder: both layouts, the stratified split, every mode and size made RGB at the
model's size, the built-in folder, and the DataModule's loaders through every data axis.
Folders are tiny and made in tmp_path; run-level behaviour is in test_imagefolder_run.py."""

from __future__ import annotations

import random
from collections import Counter
from pathlib import Path

import numpy as np
import pytest
import torch
from hydra.utils import instantiate
from PIL import Image

from segperf.data.cache import DeviceBatches
from segperf.data.imagefolder.builtin import ensure_builtin, generate
from segperf.data.imagefolder.cache import DeviceCropFlip
from segperf.data.imagefolder.dataset import ImageFolderDataset, load_rgb, to_rgb
from segperf.data.imagefolder.layout import ImageSample, class_names, count_classes, scan_folder, stratified_split
from segperf.data.resumable import ResumableLoader
from segperf.errors import DataLayoutError
from tests.conftest import QUIET, compose_config

# tiny runs of the image-folder workload (the real config, shrunk): 64x64, the smallest ResNet-18 input
IMAGEFOLDER_TINY = [
    "data=imagefolder",
    "model=resnet18",
    "perf.peak_probe=false",
    "data.height=64",
    "data.width=64",
    "train_images=16",
    "val_images=8",
    "batch_size=8",
    "val_every_images=16",
    *QUIET,
]


def write_image(path: Path, seed: int, size: tuple[int, int] = (40, 30), mode: str = "RGB", fmt: str = "JPEG") -> Path:
    """A small image of random colour blocks (not a flat colour: a crop must differ from the whole)."""
    rng = np.random.default_rng(seed)
    blocks = rng.integers(0, 256, (3, 4, 3), dtype=np.uint8)
    image = Image.fromarray(blocks, "RGB").resize(size, Image.NEAREST).convert(mode)
    path.parent.mkdir(parents=True, exist_ok=True)
    image.save(path, fmt)
    return path


def make_folder(root: Path, counts: dict[str, int], seed: int = 0) -> Path:
    """`root/<class>/<class>_<i>.jpg`, `counts[class]` images of each class."""
    for c, (name, n) in enumerate(counts.items()):
        for i in range(n):
            write_image(root / name / f"img_{i:03d}.jpg", seed * 1000 + c * 100 + i)
    return root


@pytest.fixture(scope="session")
def tiny_folder(tmp_path_factory) -> Path:
    """Two classes of 16 small JPEGs each (the one-folder form)."""
    return make_folder(tmp_path_factory.mktemp("data") / "photos", {"cat": 16, "dog": 16})


# -- layout ------------------------------------------------------------------------------------


def test_the_class_folder_form_numbers_classes_by_sorted_name_and_ignores_other_files(tmp_path):
    root = make_folder(tmp_path / "photos", {"zebra": 2, "ant": 3})
    (root / "ant" / "notes.txt").write_text("not an image")
    (root / "ant" / ".hidden.jpg").write_bytes(b"\xff\xd8 never read")
    (root / ".thumbnails").mkdir()
    write_image(root / ".thumbnails" / "x.jpg", 1)  # a hidden folder is not a class
    write_image(root / "zebra" / "more" / "deep.png", 2, fmt="PNG")  # subfolders of a class count
    (root / "README.md").write_text("a file in the root is not a class")
    layout = scan_folder(root)
    assert layout.form == "classes" and layout.classes == ["ant", "zebra"] and layout.val is None
    assert Counter(s.label for s in layout.train) == {0: 3, 1: 3}
    assert root / "zebra" / "more" / "deep.png" in {s.path for s in layout.train}
    assert layout.problems == [] and layout.ignored_files == 1


def test_the_train_val_form_keeps_the_given_split(tmp_path):
    make_folder(tmp_path / "train", {"cat": 4, "dog": 5})
    make_folder(tmp_path / "val", {"cat": 2, "dog": 1}, seed=1)
    (tmp_path / "test").mkdir()  # left alone
    layout = scan_folder(tmp_path)
    assert layout.form == "train/val" and layout.classes == ["cat", "dog"]
    assert (len(layout.train), len(layout.val)) == (9, 3)
    assert {s.path.parent.parent.name for s in layout.val} == {"val"}
    assert class_names(tmp_path) == ["cat", "dog"]


def test_class_names_may_hold_any_characters(tmp_path):
    names = ["golden retriever", "chat é", "a=b,c", "雪"]
    root = make_folder(tmp_path / "photos", dict.fromkeys(names, 2))
    assert scan_folder(root).classes == sorted(names) == class_names(root)
    assert count_classes(str(root), 4) == 4


def test_the_class_count_the_net_is_sized_for_never_raises(tmp_path):
    assert count_classes(None, 6) == 6  # the built-in folder's
    assert count_classes(str(tmp_path / "nowhere"), 4) == 2  # the data check names the problem later


def test_a_missing_root_or_one_without_class_folders_says_what_is_expected(tmp_path):
    with pytest.raises(DataLayoutError, match=r"does not exist.*ROOT/<class>/<image>.*built-in"):
        scan_folder(tmp_path / "nowhere")
    write_image(tmp_path / "loose.jpg", 0)
    with pytest.raises(DataLayoutError, match=rf"no class folders in {tmp_path}\. Expected an image folder"):
        scan_folder(tmp_path)


# -- split -------------------------------------------------------------------------------------


def fake_samples(counts: list[int]) -> list[ImageSample]:
    return [ImageSample(Path(f"/d/c{c}/{i:04d}.jpg"), c) for c, n in enumerate(counts) for i in range(n)]


def test_the_split_holds_out_the_same_share_of_every_class():
    split = stratified_split(fake_samples([100, 50, 10, 3]), ["a", "b", "c", "d"], 0.2, seed=0)
    held = Counter(s.label for s in split.val)
    assert held == {0: 20, 1: 10, 2: 2, 3: 1}  # round(0.2 n), at least one of a class of two or more
    assert Counter(s.label for s in split.train) == {0: 80, 1: 40, 2: 8, 3: 2}
    assert not {s.path for s in split.train} & {s.path for s in split.val}
    one = stratified_split(fake_samples([1, 5]), ["a", "b"], 0.2)
    assert Counter(s.label for s in one.train)[0] == 1  # a class's last image stays in training


def test_the_split_is_seeded_and_independent_of_listing_order():
    samples = fake_samples([40, 40])
    shuffled = samples[:]
    random.Random(3).shuffle(shuffled)
    first = stratified_split(samples, ["a", "b"], 0.25, seed=0)
    assert first == stratified_split(shuffled, ["a", "b"], 0.25, seed=0)
    assert first.val != stratified_split(samples, ["a", "b"], 0.25, seed=1).val
    assert [s.path.name for s in first.val if s.label == 0] != [f"{i:04d}.jpg" for i in range(10)]  # not the first


def test_a_holdout_fraction_outside_zero_one_is_refused_naming_the_setting():
    with pytest.raises(ValueError, match=r"data.holdout_frac=1.5"):
        stratified_split(fake_samples([4, 4]), ["a", "b"], 1.5)


# -- decoding: any mode and size becomes RGB at the model's size --------------------------------


@pytest.mark.parametrize(
    "mode,fmt,suffix",
    [("L", "PNG", "png"), ("RGBA", "PNG", "png"), ("P", "GIF", "gif"), ("CMYK", "JPEG", "jpg"),
     ("I;16", "PNG", "png"), ("LA", "PNG", "png"), ("1", "BMP", "bmp"), ("RGB", "WEBP", "webp")],
)  # fmt: skip
def test_every_image_mode_becomes_rgb_at_the_target_size(tmp_path, mode, fmt, suffix):
    path = write_image(tmp_path / f"x.{suffix}", 0, size=(61, 23), mode=mode, fmt=fmt)
    dataset = ImageFolderDataset([ImageSample(path, 0)], height=32, width=48)
    image, label = dataset[0]
    assert image.shape == (32, 48, 3) and image.dtype == torch.uint8 and label.item() == 0
    assert image.float().std() > 0  # a picture, not a flat fill


def test_transparency_is_laid_on_white_and_16_bit_grey_is_scaled_to_8_bits(tmp_path):
    clear = Image.new("RGBA", (8, 8), (10, 200, 30, 0))
    assert np.asarray(to_rgb(clear)).min() == 255
    grey16 = Image.fromarray(np.full((4, 4), 32768, np.uint16))
    assert grey16.mode.startswith("I;16") and abs(int(np.asarray(to_rgb(grey16))[0, 0, 0]) - 128) <= 1


def test_validation_resizes_to_cover_and_crops_the_centre_and_training_crops_at_random(tmp_path):
    # a wide image, left half black, right half white: a centre crop of the covering resize keeps both
    wide = np.zeros((20, 80, 3), np.uint8)
    wide[:, 40:] = 255
    path = tmp_path / "wide.png"
    Image.fromarray(wide).save(path)
    val = ImageFolderDataset([ImageSample(path, 1)], 16, 16)[0][0]
    assert val.shape == (16, 16, 3) and val[:, :4].max() == 0 and val[:, -4:].min() == 255
    plain = ImageFolderDataset([ImageSample(path, 1)], 16, 16, train=True, augment="off")
    assert torch.equal(plain[0][0], val)  # augment=off trains on the validation transform
    square = path.with_name("square.png")
    Image.fromarray(np.repeat(wide[:, 10:70], 3, axis=0)).save(square)  # 60x60, half black, half white
    train = ImageFolderDataset([ImageSample(square, 1)], 16, 16, train=True, augment="basic", seed=0)
    draws = {train[0][0].float().mean().round().item() for _ in range(12)}
    assert len(draws) > 1  # random crops of other parts (and flips)


def test_reduced_decode_decodes_a_jpeg_at_a_smaller_scale_that_still_covers_the_target(tmp_path):
    path = write_image(tmp_path / "big.jpg", 0, size=(800, 600))
    assert load_rgb(path, (96, 96), "full").shape == (600, 800, 3)
    reduced = load_rgb(path, (96, 96), "reduced")
    assert reduced.shape == (150, 200, 3)  # 1/4 scale: the smallest still >= 96 on both sides
    full = ImageFolderDataset([ImageSample(path, 0)], 96, 96, "full")[0][0].float()
    assert (full - ImageFolderDataset([ImageSample(path, 0)], 96, 96, "reduced")[0][0].float()).abs().mean() < 3


def test_the_device_crop_and_flip_keeps_shapes_and_draws_differently_per_image():
    images = torch.arange(16 * 16, dtype=torch.float32).view(1, 16, 16, 1).expand(4, -1, -1, 3).to(torch.uint8)
    out, labels = DeviceCropFlip(seed=0)(images.contiguous(), torch.arange(4))
    assert out.shape == (4, 16, 16, 3) and out.dtype == torch.uint8 and labels.tolist() == [0, 1, 2, 3]
    assert len({tuple(o.flatten().tolist()) for o in out}) == 4


# -- the built-in folder -----------------------------------------------------------------------


def test_the_built_in_folder_is_photo_sized_jpegs_the_same_every_time(tmp_path):
    a = generate(tmp_path / "a", classes=3, per_class=2, seed=5)
    b = generate(tmp_path / "b", classes=3, per_class=2, seed=5)
    files = sorted(p.relative_to(a) for p in a.rglob("*.jpg"))
    assert [str(f.parent) for f in files] == ["circle"] * 2 + ["square"] * 2 + ["triangle"] * 2
    assert all((a / f).read_bytes() == (b / f).read_bytes() for f in files)
    sizes = {Image.open(a / f).size for f in files}
    assert len(sizes) > 1 and all(250 <= min(s) and max(s) <= 600 for s in sizes)
    split = generate(tmp_path / "split", classes=2, per_class=5, seed=5, val_frac=0.4)
    assert scan_folder(split).form == "train/val" and len(scan_folder(split).val) == 4


def test_without_a_root_the_built_in_folder_is_made_once_in_the_cache_folder(tmp_path):
    first = ensure_builtin(tmp_path, classes=2, per_class=3, seed=1)
    assert first.name == "imagefolder-builtin-v1-classes2-per3-seed1" and class_names(first) == ["circle", "square"]
    stamp = (first / "circle" / "circle_00000.jpg").stat().st_mtime_ns
    assert ensure_builtin(tmp_path, classes=2, per_class=3, seed=1) == first
    assert (first / "circle" / "circle_00000.jpg").stat().st_mtime_ns == stamp  # not rendered again
    assert not list(tmp_path.glob(".*"))  # no lock file or half-built folder left


# -- the DataModule through the config ---------------------------------------------------------


def datamodule(root: Path, *overrides: str):
    dm = instantiate(compose_config(*IMAGEFOLDER_TINY, f"data.root={root}", *overrides).data)
    dm.setup("fit")
    return dm


def test_the_datamodule_serves_uint8_rgb_batches_with_labels_and_summarises_the_classes(tiny_folder):
    dm = datamodule(tiny_folder, "data.num_workers=1")
    summary = dm.summary()
    assert summary["classes"] == 2 and summary["class_names"] == ["cat", "dog"]
    assert summary["class_images"] == {"cat": {"train": 13, "val": 3}, "dog": {"train": 13, "val": 3}}
    assert (summary["train_images"], summary["val_images"], summary["format"]) == (26, 6, "imagefolder")
    train = dm.train_dataloader()
    assert isinstance(train, ResumableLoader) and len(train) == 2 and train.num_workers == 1
    image, label = next(iter(train))
    assert (image.shape, image.dtype, label.shape, label.dtype) == ((8, 64, 64, 3), torch.uint8, (8,), torch.int64)
    assert sum(len(b[1]) for b in dm.val_dataloader()) == 6  # val_images=8, the folder has 6: all of them


@pytest.mark.parametrize("cache", ["memory", "device"])
def test_a_cache_holds_each_image_once_at_the_target_size_and_training_still_crops(tiny_folder, cache):
    dm = datamodule(tiny_folder, f"cache={cache}", "decode=reduced")
    loader = dm.train_dataloader().loader
    batches = [torch.cat([b[0] for b in loader]) for _ in range(2)]
    if cache == "device":
        assert isinstance(loader, DeviceBatches) and loader.cache.images.shape == (26, 64, 64, 3)
    else:
        assert loader.dataset.cache.images.shape == (26, 64, 64, 3) and loader.dataset.cache.images.is_shared()
    assert not torch.equal(*batches)  # each pass draws its own crops and flips
    val = torch.cat([b[0] for b in dm.val_dataloader()])
    plain = torch.cat([b[0] for b in datamodule(tiny_folder, "decode=reduced").val_dataloader()])
    assert torch.equal(val, plain)  # validation is the same images with or without a cache


def test_cold_cache_drops_the_folders_images_from_the_page_cache_after_the_check(tiny_folder, monkeypatch):
    from segperf.data import cold

    monkeypatch.setattr(cold.os, "geteuid", lambda: 1000)  # these files' pages, not the whole machine's
    summary = datamodule(tiny_folder, "cold_cache=true").summary()
    assert (summary["page_cache"], summary["page_cache_method"]) == ("cold", "posix_fadvise")


def test_resnet18_without_a_size_runs_the_image_folder_size_and_a_given_size_is_kept():
    # size=demo's batches of 4 teach a ResNet-18 nothing: the default for it is size=imagefolder's run
    default = compose_config("data=imagefolder", "model=resnet18")
    imagefolder = compose_config("data=imagefolder", "model=resnet18", "size=imagefolder")
    for key in ("train_images", "val_images", "batch_size", "val_every_images"):
        assert default[key] == imagefolder[key]
    assert (default.train_images, default.batch_size) == (6000, 32)
    short = compose_config("data=imagefolder", "model=resnet18", "size=imagefolder_demo")
    assert (short.train_images, short.batch_size) == (1920, 32)
    unet = compose_config()  # the other workloads keep size=demo's run
    assert (unet.train_images, unet.batch_size) == (320, 4)
