"""The up-front sample check (segperf.data.carvana.checks): each damage is done on a copy of tiny_carvana."""

from __future__ import annotations

import json
import warnings
from pathlib import Path

import pytest
from PIL import Image, ImageFile

from segperf.data.carvana.checks import BadDataError, apply_policy, check_samples, format_bad
from segperf.data.carvana.layout import find_samples
from segperf.data.filechecks import WHOLE_LIST
from tests.conftest import images_of, mask_of


@pytest.fixture
def data(carvana_copy) -> Path:
    return carvana_copy


def _cut_in_half(path: Path) -> Path:
    """A download that stopped half-way."""
    path.write_bytes(path.read_bytes()[: path.stat().st_size // 2])
    return path


def _reasons(root: Path, workers: int = 1) -> dict[Path, str]:
    report = check_samples(find_samples(root), workers=workers)
    return {b.path: b.reason for b in report.bad}


def test_clean_set_has_no_bad_samples_and_stray_files_are_not_samples(data):
    (data / "train" / "notes.txt").write_text("hello")
    (data / "train" / ".DS_Store").write_bytes(b"\x00\x01garbage")
    (data / "train_masks" / "Thumbs.db").write_bytes(b"garbage")
    (data / "train" / "broken.jpg").write_bytes(b"")  # does not match <car>_<view>.jpg
    samples = find_samples(data)
    report = check_samples(samples, workers=2)
    assert report.checked == len(samples) == 80
    assert report.bad == []
    assert report.orphan_masks == []
    assert report.seconds >= 0
    assert apply_policy(samples, report, "raise") == (samples, [])


def test_truncated_jpeg_is_reported_with_its_path(data):
    image = _cut_in_half(images_of(data)[3])
    reasons = _reasons(data)
    assert list(reasons) == [image]
    assert "truncated" in reasons[image]


def test_jpeg_with_trailing_zero_padding_is_not_truncated(data):
    image = images_of(data)[0]
    image.write_bytes(image.read_bytes() + b"\x00" * 10 + b"\n")
    assert _reasons(data) == {}


def test_corrupt_jpeg_and_empty_file_are_reported(data):
    garbage, empty = images_of(data)[1], images_of(data)[20]
    garbage.write_bytes(b"this is not a jpeg at all" * 100)
    empty.write_bytes(b"")
    reasons = _reasons(data, workers=2)
    assert set(reasons) == {garbage, empty}
    assert "corrupt" in reasons[garbage]
    assert "empty" in reasons[empty] and "0 bytes" in reasons[empty]


def test_png_named_jpg_is_reported_as_not_a_jpeg(data):
    image = images_of(data)[2]
    with Image.open(image) as im:
        im.load()
        im.save(image, format="PNG")
    reasons = _reasons(data)
    assert "not a JPEG" in reasons[image]


def test_unreadable_gif_mask_is_reported_with_the_mask_path(data):
    mask = mask_of(images_of(data)[5])
    mask.write_bytes(b"\x13\x37garbage" * 50)
    reasons = _reasons(data)
    assert list(reasons) == [mask]
    assert "mask" in reasons[mask]


def test_truncated_gif_mask_is_reported(data):
    mask = _cut_in_half(mask_of(images_of(data)[6]))
    reasons = _reasons(data)
    assert list(reasons) == [mask]
    assert "truncated GIF" in reasons[mask]


def test_image_mask_size_mismatch_names_both_sizes(data):
    image = images_of(data)[7]
    mask = mask_of(image)
    with Image.open(mask) as im:
        im.load()
        im.resize((120, 80), Image.NEAREST).save(mask, format="GIF")
    reasons = _reasons(data)
    assert list(reasons) == [mask]
    assert "image 240x160 but mask 120x80" in reasons[mask]


def test_policy_raise_lists_first_five_files_and_how_many_more(data):
    images = images_of(data)
    damaged = images[:7]
    for image in damaged:
        raw = image.read_bytes()
        image.write_bytes(raw[: len(raw) // 2])
    samples = find_samples(data)
    report = check_samples(samples, workers=2)
    assert [b.path for b in report.bad] == damaged  # sorted by path, the same with threads
    with pytest.raises(BadDataError) as info:
        apply_policy(samples, report, "raise")
    message = str(info.value)
    assert isinstance(info.value, ValueError)
    headline, listing = message.splitlines()
    assert headline == (
        f"7 bad samples in {data}: 7 truncated. Fix or remove them, or set data.on_bad_sample=skip to leave them out."
    )
    assert listing.startswith("- truncated (7): ")
    for image in damaged[:5]:
        assert f"{image}: truncated JPEG" in listing
    for image in damaged[5:]:
        assert str(image) not in listing
    assert listing.endswith(f"; and 2 more ({WHOLE_LIST})")  # where the whole list is
    assert info.value.bad_files == [
        {"path": str(image), "reason": b.reason, "kind": "truncated"}
        for image, b in zip(damaged, report.bad, strict=True)
    ]
    assert message == format_bad(report)


def test_policy_skip_leaves_out_bad_samples_with_one_warning(data):
    images = images_of(data)
    truncated, mismatched = images[0], images[9]
    truncated.write_bytes(truncated.read_bytes()[:100])
    with Image.open(mask_of(mismatched)) as im:
        im.load()
        im.resize((60, 40)).save(mask_of(mismatched), format="GIF")
    samples = find_samples(data)
    report = check_samples(samples)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        kept, skipped = apply_policy(samples, report, "skip")
    assert len(caught) == 1 and "2" in str(caught[0].message)
    assert len(kept) == len(samples) - 2
    assert {s.image for s in kept}.isdisjoint({truncated, mismatched})
    assert skipped == [
        {
            "path": str(truncated),
            "reason": "truncated JPEG (no end-of-image marker; header unreadable)",
            "kind": "truncated",
        },
        {
            "path": str(mask_of(mismatched)),
            "reason": "size mismatch: image 240x160 but mask 60x40",
            "kind": "size mismatch",
        },
    ]


def test_orphan_masks_are_listed_not_fatal(data):
    image = images_of(data)[4]
    image.unlink()
    samples = find_samples(data)
    report = check_samples(samples)
    assert report.orphan_masks == [mask_of(image)]
    assert report.bad == []
    with pytest.warns(UserWarning, match=r"1 mask\(s\) without an image .*not used"):
        kept, skipped = apply_policy(samples, report, "raise")
    assert kept == samples
    assert skipped == [{"path": str(mask_of(image)), "reason": "mask without an image (not used)", "kind": "no image"}]


def test_check_does_not_decode_images(data, monkeypatch):
    def no_decode(self, *args, **kwargs):
        raise AssertionError("check_samples decoded pixels")

    # ImageFile.load (JPEG, GIF) overrides Image.load, so both are patched
    monkeypatch.setattr(Image.Image, "load", no_decode)
    monkeypatch.setattr(ImageFile.ImageFile, "load", no_decode)
    samples = find_samples(data)
    with Image.open(samples[0].image) as im, pytest.raises(AssertionError):
        im.convert("RGB")  # the patch does catch a decode
    report = check_samples(samples, workers=2)
    assert report.checked == 80 and report.bad == []


# -- the check in a run: before any training, with the chosen policy --------------------------


def test_a_run_on_data_with_a_truncated_jpeg_stops_before_training_naming_it(data, tiny_cfg, tmp_path):
    from segperf.training.run import train

    root, victim = data, _cut_in_half(images_of(data)[5])
    with pytest.raises(BadDataError, match=victim.name) as error:
        train(tiny_cfg(f"data.root={root}"), tmp_path / "run")
    assert "data.on_bad_sample=skip" in str(error.value)
    results = json.loads((tmp_path / "run" / "results.json").read_text())
    assert results["status"] == "failed" and victim.name in results["error"]
    assert results["train"]["steps"] == 0 and not (tmp_path / "run" / "checkpoints").exists()
    assert [(b["path"], b["kind"]) for b in results["dataset"]["bad_files"]] == [(str(victim), "truncated")]
    assert (tmp_path / "run" / "bad_files.txt").read_text() == f"{victim}\n"


def test_skip_leaves_the_bad_sample_out_and_records_it_in_results(data, tiny_cfg, tmp_path):
    from segperf.training.run import train

    root, victim = data, _cut_in_half(images_of(data)[5])
    with pytest.warns(UserWarning, match="1"):
        results = train(tiny_cfg(f"data.root={root}", "data.on_bad_sample=skip"), tmp_path / "run")
    assert results["status"] == "completed"
    assert results["dataset"]["images"] == 79
    assert [s["path"] for s in results["dataset"]["skipped"]] == [str(victim)]
    assert "truncated" in results["dataset"]["skipped"][0]["reason"]
    assert [b["path"] for b in results["dataset"]["bad_files"]] == [str(victim)]
    assert (tmp_path / "run" / "bad_files.txt").read_text() == f"{victim}\n"
