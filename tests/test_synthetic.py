"""The synthetic data set must be a drop-in for Kaggle's Carvana layout, deterministic, and believable
enough (car where the mask says, sensible coverage, views that differ) for the timing study to be fair."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from PIL import Image

from segperf.data.carvana import synthetic

W, H = 192, 128
SRC = Path(__file__).resolve().parents[1] / "src"


@pytest.fixture(scope="module")
def small_set(tmp_path_factory) -> Path:
    return synthetic.generate(tmp_path_factory.mktemp("syn") / "carvana", cars=2, seed=3, width=W, height=H)


def _tree_bytes(root: Path) -> dict[str, bytes]:
    return {str(p.relative_to(root)): p.read_bytes() for p in sorted(root.rglob("*")) if p.is_file()}


def test_layout_matches_kaggle_naming_and_every_image_has_a_same_size_mask(small_set):
    images = sorted((small_set / "train").iterdir())
    masks = sorted((small_set / "train_masks").iterdir())
    assert len(images) == len(masks) == 2 * synthetic.VIEWS
    assert sorted(p.name for p in small_set.iterdir()) == ["train", "train_masks"]
    for img in images:
        m = re.fullmatch(r"([0-9a-f]{12})_(\d\d)\.jpg", img.name)
        assert m and 1 <= int(m.group(2)) <= 16
        mask = small_set / "train_masks" / f"{img.stem}_mask.gif"
        assert mask.is_file()
        with Image.open(img) as a, Image.open(mask) as b:
            assert a.format == "JPEG" and a.mode == "RGB" and a.size == (W, H)
            assert b.format == "GIF" and b.size == (W, H)
    cars = {p.name[:12] for p in images}
    assert cars == set(synthetic.car_ids(2, seed=3))
    for car in cars:
        assert sorted(p.name for p in images if p.name.startswith(car)) == [f"{car}_{v:02d}.jpg" for v in range(1, 17)]


def test_same_arguments_give_identical_bytes_and_another_seed_gives_other_cars(small_set, tmp_path):
    again = synthetic.generate(tmp_path / "again", cars=2, seed=3, width=W, height=H)
    assert _tree_bytes(again) == _tree_bytes(small_set)
    assert set(synthetic.car_ids(2, seed=4)).isdisjoint(synthetic.car_ids(2, seed=3))
    assert len(set(synthetic.car_ids(50, seed=0))) == 50


def test_generate_refuses_to_overwrite_an_existing_data_set_and_leaves_no_temp_dirs(small_set):
    with pytest.raises(FileExistsError, match="already exists"):
        synthetic.generate(small_set, cars=1, width=W, height=H)
    assert [p.name for p in small_set.parent.iterdir()] == [small_set.name]


def test_masks_are_palette_gifs_with_a_plausible_car_fraction_and_the_car_is_drawn_there(small_set):
    for gif in sorted((small_set / "train_masks").iterdir()):
        with Image.open(gif) as m:
            assert m.mode == "P"
            assert m.getpalette()[:6] == [0, 0, 0, 255, 255, 255]
            car = np.array(m) != 0
        assert set(np.unique(np.array(Image.open(gif)))) <= {0, 1}
        assert 0.05 < car.mean() < 0.60
        rgb = np.asarray(Image.open(small_set / "train" / gif.name.replace("_mask.gif", ".jpg")), float)
        gap = np.abs(rgb[car].mean(0) - rgb[~car].mean(0)).mean()
        assert gap > 15, f"{gif.name}: car pixels look like background (mean colour gap {gap:.1f})"


def _bbox_width(mask: Image.Image) -> int:
    cols = np.flatnonzero((np.array(mask) != 0).any(0))
    return int(cols[-1] - cols[0] + 1)


def test_views_go_around_the_car_so_the_side_view_is_wider_than_the_front_view():
    for cid in synthetic.car_ids(3, seed=0):
        side, front = (_bbox_width(synthetic.render_view(cid, v, W, H, seed=0)[1]) for v in (1, 5))
        assert side > 1.5 * front
        a, b = (np.array(synthetic.render_view(cid, v, W, H, seed=0)[1]) != 0 for v in (3, 7))
        assert not np.array_equal(a, b)  # 45 and 135 degrees: the nose points the other way...
        flipped = a[:, ::-1]  # ...so one is roughly the other's mirror image (the car is a bit off-centre)
        assert (flipped & b).sum() / (flipped | b).sum() > 0.8


def test_full_size_view_has_kaggle_dimensions_and_modes():
    img, mask = synthetic.render_view(synthetic.car_ids(1, seed=0)[0], 7, 1918, 1280, seed=0)
    assert img.size == mask.size == (1918, 1280)
    assert img.mode == "RGB" and mask.mode == "P"


def test_ensure_synthetic_generates_once_then_reuses_the_cache(tmp_path, monkeypatch, capsys):
    path = synthetic.ensure_synthetic(tmp_path / "cache", cars=1, seed=0, width=W, height=H)
    assert path == tmp_path / "cache" / f"carvana-synthetic-v1-cars1-seed0-{W}x{H}"
    assert len(list((path / "train").iterdir())) == synthetic.VIEWS
    assert "generating 16" in capsys.readouterr().out

    def fail(*a, **k):
        raise AssertionError("generate() called again for a cached data set")

    monkeypatch.setattr(synthetic, "generate", fail)
    assert synthetic.ensure_synthetic(tmp_path / "cache", cars=1, seed=0, width=W, height=H) == path
    assert capsys.readouterr().out == ""


def test_ensure_synthetic_expands_the_home_directory(tmp_path, monkeypatch):
    monkeypatch.setenv("HOME", str(tmp_path))
    path = synthetic.ensure_synthetic("~/c", cars=1, seed=1, width=W, height=H)
    assert path.parent == tmp_path / "c" and (path / "train_masks").is_dir()


def test_ensure_synthetic_uses_the_winners_folder_when_another_process_renames_first(tmp_path, monkeypatch):
    path = tmp_path / f"carvana-synthetic-v1-cars1-seed0-{W}x{H}"
    real_ids = synthetic.car_ids

    def rival_finishes_while_we_render(cars, seed):
        monkeypatch.setattr(synthetic, "car_ids", real_ids)
        synthetic.generate(path, cars=cars, seed=seed, width=W, height=H)
        return real_ids(cars, seed)

    monkeypatch.setattr(synthetic, "car_ids", rival_finishes_while_we_render)
    assert synthetic.ensure_synthetic(tmp_path, cars=1, seed=0, width=W, height=H) == path
    assert len(list((path / "train").iterdir())) == synthetic.VIEWS
    assert [p.name for p in tmp_path.iterdir()] == [path.name]  # our temp folder was cleaned up


@pytest.mark.slow  # the subprocess pays the package's torch/lightning import (~9 s on 2 cores)
# the generator's module, and the command's first name (kept: scripts call it)
@pytest.mark.parametrize("module", ["segperf.data.carvana.synthetic", "segperf.data.synthetic"])
def test_command_line_writes_sixteen_images_and_masks(tmp_path, module):
    out = tmp_path / "cli"
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(SRC), os.environ.get("PYTHONPATH", "")])}
    cmd = [
        sys.executable,
        "-m",
        module,
        str(out),
        "--cars",
        "1",
        "--width",
        "192",
        "--height",
        "128",
    ]
    res = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=120)
    assert res.returncode == 0, res.stderr
    assert len(list((out / "train").glob("*.jpg"))) == 16
    assert len(list((out / "train_masks").glob("*_mask.gif"))) == 16
    assert "16 images" in res.stdout and str(out) in res.stdout
