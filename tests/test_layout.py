import random
import shutil
from pathlib import Path

import pytest

from segperf.data.carvana.layout import Sample, find_samples, split_by_car


def fake_samples(cars: int, views: int = 16) -> list[Sample]:
    return [
        Sample(f"{c:012x}", f"{v:02d}", Path(f"{c:012x}_{v:02d}.jpg"), Path(f"{c:012x}_{v:02d}_mask.gif"))
        for c in range(cars)
        for v in range(1, views + 1)
    ]


def test_split_is_by_car_and_keeps_every_view_of_a_car_together():
    split = split_by_car(fake_samples(20))
    train_cars = {s.car for s in split.train}
    val_cars = {s.car for s in split.val}
    assert not train_cars & val_cars
    assert len(split.val) == 16 * len(val_cars)


def test_split_holds_out_rounded_twenty_percent_of_cars_like_the_seed():
    # the full Kaggle train set: 318 cars -> 254 / 64 cars, 4,064 / 1,024 images
    split = split_by_car(fake_samples(318))
    assert split.summary() == {
        "images": 5088,
        "cars": 318,
        "train_images": 4064,
        "val_images": 1024,
        "train_cars": 254,
        "val_cars": 64,
    }
    assert len(split_by_car(fake_samples(7)).val_cars) == round(0.2 * 7) == 1
    assert len(split_by_car(fake_samples(8)).val_cars) == 2


def test_split_is_deterministic_and_independent_of_file_order():
    samples = fake_samples(30)
    shuffled = samples[:]
    random.Random(3).shuffle(shuffled)
    assert split_by_car(samples).val_cars == split_by_car(shuffled).val_cars
    # the chosen cars are those with the smallest sha256 of their id, not the first listed
    assert split_by_car(samples).val_cars != sorted({s.car for s in samples})[:6]


def test_holdout_fraction_outside_zero_one_is_refused_with_the_setting_named():
    with pytest.raises(ValueError, match=r"data.holdout_frac=1.5"):
        split_by_car(fake_samples(3), 1.5)


def test_layout_ignores_stray_files(tiny_carvana, tmp_path):
    root = tmp_path / "carvana"
    shutil.copytree(tiny_carvana, root)
    (root / "train" / "notes.txt").write_text("hello")
    (root / "train" / ".DS_Store").write_bytes(b"\0")
    (root / "train_masks" / "thumbs.db").write_bytes(b"\0")
    (root / "metadata.csv").write_text("id,year\n")
    (root / "train" / "subdir").mkdir()
    assert len(find_samples(root)) == len(find_samples(tiny_carvana)) == 80


def test_missing_mask_is_named_in_the_error(tiny_carvana, tmp_path):
    root = tmp_path / "carvana"
    shutil.copytree(tiny_carvana, root)
    victim = sorted((root / "train_masks").iterdir())[3]
    victim.unlink()
    with pytest.raises(FileNotFoundError, match=victim.name) as error:
        find_samples(root)
    assert "1 image(s)" in str(error.value)


def test_missing_data_root_says_how_to_fix_it(tmp_path):
    with pytest.raises(FileNotFoundError, match=r"data.root=.*nowhere.*does not exist.*synthetic"):
        find_samples(tmp_path / "nowhere")


def test_folder_without_images_is_refused(tmp_path):
    (tmp_path / "train").mkdir()
    (tmp_path / "train_masks").mkdir()
    with pytest.raises(FileNotFoundError, match="no <car>_<view>.jpg images"):
        find_samples(tmp_path)


def test_a_folder_in_another_layout_names_the_missing_folder_and_the_expected_layout(tmp_path):
    (tmp_path / "images").mkdir()  # e.g. an images/ + masks/ layout
    (tmp_path / "train").mkdir()
    with pytest.raises(FileNotFoundError, match=r"train_masks is missing\. Expected Kaggle's Carvana layout"):
        find_samples(tmp_path)
