"""A dirty data folder is described in full by the first error: the layout's problems (an image
without a mask, a mask without an image, missing folders) and every file's (truncated, corrupt,
empty, size mismatch), grouped by kind; `skip` leaves out every bad sample of every kind."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
import warnings
from pathlib import Path

import pytest
from PIL import Image

from segperf.data.carvana.checks import BadDataError, apply_policy, check_layout
from segperf.data.carvana.layout import scan_layout
from segperf.data.filechecks import WHOLE_LIST
from segperf.data.mnist.datamodule import read_splits
from segperf.errors import DataLayoutError
from tests.conftest import TINY, images_of, mask_of, run_cli


@pytest.fixture
def data(carvana_copy) -> Path:
    return carvana_copy


def dirty(root: Path) -> dict[str, Path]:
    """One file of each kind of problem, in a copy of tiny_carvana (80 samples)."""
    images = images_of(root)
    truncated, no_mask, empty, mismatched, orphaned = images[3], images[10], images[20], images[30], images[40]
    truncated.write_bytes(truncated.read_bytes()[:1000])
    mask_of(no_mask).unlink()
    empty.write_bytes(b"")
    with Image.open(mask_of(mismatched)) as im:
        im.load()
        im.resize((60, 40)).save(mask_of(mismatched), format="GIF")
    orphaned.unlink()
    return {
        "truncated": truncated,
        "no mask": no_mask,
        "empty": empty,
        "size mismatch": mask_of(mismatched),
        "no image": mask_of(orphaned),
    }


def test_a_dirty_folder_lists_the_truncated_jpeg_and_the_missing_mask_together(data):
    bad = dirty(data)
    report = check_layout(scan_layout(data))
    with pytest.raises(BadDataError) as error:
        apply_policy(report.samples, report, "raise")
    headline, *kinds = str(error.value).splitlines()
    assert headline == (
        f"4 bad samples in {data}: 1 truncated, 1 empty, 1 image/mask size mismatch, 1 without a mask. "
        "Fix or remove them, or set data.on_bad_sample=skip to leave them out."
    )
    assert kinds == [
        f"- truncated (1): {bad['truncated']}: truncated JPEG (no end-of-image marker)",
        f"- empty (1): {bad['empty']}: empty file (0 bytes)",
        f"- image/mask size mismatch (1): {bad['size mismatch']}: size mismatch: image 240x160 but mask 60x40",
        f"- without a mask (1): {bad['no mask']}: no mask ({mask_of(bad['no mask'])} is missing)",
        f"- mask without an image (1; not used, not an error): {bad['no image']}",
    ]


def test_an_image_without_a_mask_is_checked_too(data):
    image = images_of(data)[7]
    mask_of(image).unlink()
    image.write_bytes(image.read_bytes()[:500])
    report = check_layout(scan_layout(data))
    assert [(b.path, b.kind) for b in report.bad] == [(image, "truncated"), (image, "no mask")]
    assert report.counts() == "1 truncated, 1 without a mask"
    assert len(report.bad_images) == 1 and report.checked == 80


def test_the_error_names_the_first_five_of_each_kind_and_counts_them_all(data):
    images = images_of(data)
    for image in images[:7]:
        image.write_bytes(image.read_bytes()[:800])
    for image in images[40:46]:
        mask_of(image).unlink()
    report = check_layout(scan_layout(data))
    message = str(pytest.raises(BadDataError, apply_policy, report.samples, report, "raise").value)
    headline, truncated, no_mask = message.splitlines()
    assert headline.startswith(f"13 bad samples in {data}: 7 truncated, 6 without a mask. ")
    assert truncated.startswith("- truncated (7): ") and truncated.endswith(f"; and 2 more ({WHOLE_LIST})")
    assert no_mask.startswith("- without a mask (6): ") and no_mask.endswith(f"; and 1 more ({WHOLE_LIST})")
    assert all(str(image) in truncated for image in images[:5]) and str(images[5]) not in truncated
    assert all(str(image) in no_mask for image in images[40:45]) and str(images[45]) not in no_mask


def test_skip_leaves_out_every_bad_sample_of_every_kind_with_one_warning(data):
    bad = dirty(data)
    report = check_layout(scan_layout(data))
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        kept, skipped = apply_policy(report.samples, report, "skip")
    assert len(caught) == 1
    warning = str(caught[0].message)
    assert "left out 4 of 79 samples" in warning
    assert "1 truncated, 1 empty, 1 image/mask size mismatch, 1 without a mask" in warning
    assert "1 mask(s) without an image" in warning
    assert len(kept) == 75
    assert {s.image for s in kept}.isdisjoint({bad["truncated"], bad["no mask"], bad["empty"]})
    assert {(entry["kind"], entry["path"]) for entry in skipped} == {(kind, str(p)) for kind, p in bad.items()}
    assert all(entry["reason"] for entry in skipped)


def test_skip_that_would_leave_nothing_says_so(data):
    for mask in (data / "train_masks").iterdir():
        mask.write_bytes(b"")
    report = check_layout(scan_layout(data))
    with pytest.raises(BadDataError, match=r"data.on_bad_sample=skip leaves no sample to use"):
        apply_policy(report.samples, report, "skip")


def test_a_folder_missing_both_of_its_folders_names_both(tmp_path):
    (tmp_path / "images").mkdir()
    with pytest.raises(DataLayoutError) as error:
        scan_layout(tmp_path)
    assert f"{tmp_path / 'train'} and {tmp_path / 'train_masks'} are missing" in str(error.value)


# -- in a run ------------------------------------------------------------------------------------


@pytest.mark.slow
def test_a_run_on_a_dirty_folder_stops_with_every_problem_on_its_own_line(data, tmp_path):
    bad = dirty(data)
    done = run_cli([*TINY, f"data.root={data}", f"hydra.run.dir={tmp_path / 'run'}"], cwd=tmp_path, timeout=300)
    assert done.returncode == 2, done.stderr[-3000:]
    assert "Traceback" not in done.stderr
    errors = [line for line in done.stderr.splitlines() if line.startswith("segperf: error: ")]
    assert len(errors) == 6 and errors == done.stderr.strip().splitlines()[-6:]  # the last lines
    assert errors[0].startswith(f"segperf: error: 4 bad samples in {data}: 1 truncated, ")
    assert any(str(bad["truncated"]) in line and "truncated JPEG" in line for line in errors)
    assert any(str(bad["no mask"]) in line and "no mask" in line for line in errors)
    results = json.loads((tmp_path / "run" / "results.json").read_text())
    assert results["status"] == "failed" and str(bad["no mask"]) in results["error"]


def test_skip_completes_on_a_dirty_folder_and_records_every_file_left_out(data, tiny_cfg, tmp_path):
    from segperf.training.run import train

    bad = dirty(data)
    with pytest.warns(UserWarning, match="left out 4 of 79 samples"):
        results = train(tiny_cfg(f"data.root={data}", "data.on_bad_sample=skip"), tmp_path / "run")
    assert results["status"] == "completed"
    assert results["dataset"]["images"] == 75
    recorded = {entry["path"]: entry for entry in results["dataset"]["skipped"]}
    assert set(recorded) == {str(p) for p in bad.values()}
    assert "truncated JPEG" in recorded[str(bad["truncated"])]["reason"]
    assert recorded[str(bad["no mask"])]["kind"] == "no mask"
    assert json.loads((tmp_path / "run" / "results.json").read_text())["dataset"]["skipped"] == list(recorded.values())


@pytest.mark.slow
def test_inference_on_a_run_that_skipped_bad_samples_skips_them_too_and_stops_in_lines_when_told_to_raise(
    data, tiny_cfg, tmp_path
):
    from segperf.training.run import train

    bad = dirty(data)
    narrow = ["model.net.stem_channels=8", "model.net.level_channels=[8,16,32,64,128]"]
    with pytest.warns(UserWarning, match="left out 4 of 79 samples"):
        assert train(tiny_cfg(f"data.root={data}", "data.on_bad_sample=skip", *narrow), tmp_path / "run")["status"] == (
            "completed"
        )

    def infer(*args: str) -> subprocess.CompletedProcess:
        command = [sys.executable, "-m", "segperf.infer", f"run_dir={tmp_path / 'run'}", "val_images=4", *args]
        return subprocess.run(command, cwd=tmp_path, capture_output=True, text=True, timeout=300)

    done = infer(f"hydra.run.dir={tmp_path / 'infer'}")  # the run's data policy comes with its folder
    assert done.returncode == 0, done.stderr[-3000:]
    assert json.loads((tmp_path / "infer" / "results.json").read_text())["status"] == "completed"
    stopped = infer("data.on_bad_sample=raise", f"hydra.run.dir={tmp_path / 'raise'}")
    assert stopped.returncode == 2 and "Traceback" not in stopped.stderr, stopped.stderr[-3000:]
    errors = [line for line in stopped.stderr.splitlines() if line.startswith("segperf.infer: error: ")]
    assert errors == stopped.stderr.strip().splitlines()[-len(errors) :] and len(errors) == 6  # headline + 5 kinds
    assert errors[0].startswith(f"segperf.infer: error: 4 bad samples in {data}: 1 truncated, ")
    assert any(str(bad["no mask"]) in line for line in errors)


# -- MNIST's four files --------------------------------------------------------------------------


def test_every_problem_of_the_mnist_files_is_listed_at_once(tiny_mnist, tmp_path):
    root = tmp_path / "mnist"
    shutil.copytree(tiny_mnist, root)
    images = root / "train-images-idx3-ubyte"
    images.write_bytes(images.read_bytes()[:5000])  # cut short
    (root / "t10k-labels-idx1-ubyte").unlink()
    (root / "t10k-images-idx3-ubyte").write_bytes(b"")
    with pytest.raises(DataLayoutError) as error:
        read_splits(root)
    headline, *lines = str(error.value).splitlines()
    assert headline.startswith(f"3 problems with the MNIST files in {root}:")
    assert len(lines) == 3
    assert any(line.startswith(f"- {images}: header says 256x28x28") and "truncated" in line for line in lines)
    assert any("t10k-labels-idx1-ubyte" in line and "missing" in line for line in lines)
    assert any("t10k-images-idx3-ubyte" in line and "empty" in line for line in lines)
