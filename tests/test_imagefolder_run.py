"""data=imagefolder in a run: a broken folder is described in full before any training (or its bad
parts skipped and recorded), every preset composes on every workload, and a real short run via the
command line records the classes and the phases."""

from __future__ import annotations

import json
import warnings
from pathlib import Path

import pytest
from PIL import Image, ImageFile

from segperf.data.carvana.checks import BadDataError
from segperf.data.imagefolder.checks import apply_policy, check_folder
from segperf.data.imagefolder.layout import scan_folder
from tests.conftest import MNIST_TINY, compose_config, run_cli
from tests.test_imagefolder import IMAGEFOLDER_TINY, make_folder, write_image

# (workload overrides, and the fast setting of each axis the workload has)
PIPELINE = {"data.decode": "reduced", "data.cache": "memory"}
WORKLOADS = {
    "unet/carvana": ([], {"model.net.upsample": "deconv", **PIPELINE}),
    "cnn/mnist": (["model=cnn", "data=mnist"], {}),
    "resnet18/imagefolder": (["model=resnet18", "data=imagefolder"], PIPELINE),
}
EVERYWHERE = {"data.prefetch_factor": 4, "data.pin_memory": True, "model.memory_format": "channels_last",
              "model.compile": True, "trainer.precision": "bf16-mixed"}  # fmt: skip


def select(cfg, dotted: str):
    for part in dotted.split("."):
        cfg = cfg[part]
    return cfg


@pytest.mark.parametrize("workload", WORKLOADS)
def test_opt_all_composes_on_every_workload_and_sets_the_axes_it_has(workload):
    overrides, own = WORKLOADS[workload]
    cfg = compose_config(*overrides, "+opt=all")
    for key, value in (EVERYWHERE | own).items():
        assert select(cfg, key) == value, key
    assert ("upsample" in cfg.model.net) == (workload == "unet/carvana")
    assert ("cache" in cfg.data) == (workload != "cnn/mnist")
    # a group on the command line still wins over the preset's choice
    if own:
        assert compose_config(*overrides, "+opt=all", "decode=full").data.decode == "full"


@pytest.mark.parametrize("workload", WORKLOADS)
@pytest.mark.parametrize("preset", ["4_deconv", "7_bf16"])
def test_the_ladder_presets_compose_on_every_workload(workload, preset):
    overrides, _ = WORKLOADS[workload]
    cfg = compose_config(*overrides, f"+opt={preset}")
    assert cfg.data.prefetch_factor == 4 and cfg.data.pin_memory is True
    assert cfg.model.net.get("upsample", "deconv") == "deconv"


def test_opt_all_leaves_the_unet_carvana_config_as_the_override_form_did():
    # the choices the former `override /upsample|/decode|/cache` lines made, spelt out as groups
    assert (
        compose_config("+opt=all") == compose_config("+opt=7_bf16", "upsample=deconv", "decode=reduced", "cache=memory")
        and compose_config("+opt=all", "upsample=upconv").model.net.upsample == "upconv"
    )
    assert compose_config(*MNIST_TINY, "+opt=all").data.num_workers >= 1


# -- a broken folder -----------------------------------------------------------------------------


def broken(root: Path) -> dict[str, Path]:
    """A folder with one problem of each kind a file or folder can have."""
    make_folder(root, {"cat": 6, "dog": 6, "eel": 3})
    truncated = root / "cat" / "img_001.jpg"
    truncated.write_bytes(truncated.read_bytes()[:300])
    html = root / "dog" / "img_002.jpg"
    html.write_text("<html>404 Not Found</html>")  # a failed download saved under the image's name
    empty = root / "eel" / "img_000.jpg"
    empty.write_bytes(b"")
    corrupt = root / "dog" / "img_004.jpg"
    corrupt.write_bytes(b"\xff\xd8\xff\xe0" + b"\x13" * 200 + b"\xff\xd9")  # a JPEG's markers, garbage between
    (root / "fox").mkdir()  # an empty class folder
    (root / "fox" / "notes.txt").write_text("the photos are still on my phone")
    # in the order an error lists the kinds
    return {"truncated": truncated, "corrupt": corrupt, "not an image": html, "empty": empty,
            "empty class": root / "fox"}  # fmt: skip


def test_a_broken_folder_lists_every_bad_file_and_the_empty_class_folder_together(tmp_path):
    bad = broken(tmp_path / "photos")
    report = check_folder(scan_folder(tmp_path / "photos"), workers=2)
    with pytest.raises(BadDataError) as error:
        apply_policy(report, "raise")
    headline, *lines = str(error.value).splitlines()
    assert headline == (
        f"5 problems with the image folder {tmp_path / 'photos'}: 1 truncated, 1 corrupt, 1 not an image, 1 empty, "
        "1 empty class folder. Fix them, or set data.on_bad_sample=skip to leave the bad images and empty class "
        "folders out."
    )
    assert [line.split(": ", 1)[0] for line in lines] == [f"- {bad[k]}" for k in bad]  # one line each, by kind
    assert "truncated JPEG" in lines[0] and "replace the file" in lines[0]
    assert "not an image (PIL cannot identify it) despite its .jpg name; remove it" in lines[2]
    assert "corrupt JPEG" in lines[1] and "empty file (0 bytes)" in lines[3]
    assert lines[4].endswith("empty class folder (no images); add its images or remove it")


def test_skip_leaves_out_the_bad_files_and_the_empty_class_and_records_each(tmp_path):
    bad = broken(tmp_path / "photos")
    report = check_folder(scan_folder(tmp_path / "photos"))
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        kept, skipped = apply_policy(report, "skip")
    assert len(caught) == 1 and "left out 4 of 15 images" in str(caught[0].message)
    assert len(kept) == 11 and not {s.path for s in kept} & set(bad.values())
    assert {(entry["kind"], entry["path"]) for entry in skipped} == {(k, str(p)) for k, p in bad.items()}


@pytest.mark.parametrize("policy", ["raise", "skip"])
def test_a_single_class_or_none_cannot_be_trained_on_whatever_the_policy(tmp_path, policy):
    make_folder(tmp_path / "one", {"cat": 3})
    (tmp_path / "one" / "dog").mkdir()
    with pytest.raises(BadDataError) as error:
        apply_policy(check_folder(scan_folder(tmp_path / "one")), policy)
    text = str(error.value)
    assert "1 fewer than two classes" in text and "cannot make a second class" in text
    assert f"- {tmp_path / 'one'}: one class (cat): a classifier needs two classes or more" in text
    assert f"- {tmp_path / 'one' / 'dog'}: empty class folder" in text


def test_a_valid_png_webp_or_padded_jpeg_is_not_a_problem(tmp_path):
    root = make_folder(tmp_path / "photos", {"a": 2, "b": 2})
    write_image(root / "a" / "p.png", 9, fmt="PNG")
    write_image(root / "b" / "w.webp", 9, fmt="WEBP")
    padded = root / "b" / "img_000.jpg"
    padded.write_bytes(padded.read_bytes() + b"\x00" * 16)
    assert check_folder(scan_folder(root)).problems == []


def test_the_check_reads_headers_only_and_decodes_no_image(tmp_path, monkeypatch):
    root = make_folder(tmp_path / "photos", {"a": 4, "b": 4})

    def no_decode(self, *args, **kwargs):
        raise AssertionError("the check decoded pixels")

    monkeypatch.setattr(Image.Image, "load", no_decode)
    monkeypatch.setattr(ImageFile.ImageFile, "load", no_decode)
    report = check_folder(scan_folder(root), workers=2)
    assert report.checked == 8 and report.problems == []


# -- runs ----------------------------------------------------------------------------------------


def test_skip_in_a_run_trains_on_the_rest_and_records_what_it_left_out(tmp_path):
    from segperf.training.run import train

    bad = broken(tmp_path / "photos")
    cfg = compose_config(*IMAGEFOLDER_TINY, f"data.root={tmp_path / 'photos'}", "data.on_bad_sample=skip")
    with pytest.warns(UserWarning, match="left out 4 of 15 images"):
        results = train(cfg, tmp_path / "run")
    assert results["status"] == "completed" and results["dataset"]["classes"] == 3
    assert results["dataset"]["class_names"] == ["cat", "dog", "eel"]  # fox, empty, is not a class
    assert {entry["path"] for entry in results["dataset"]["skipped"]} == {str(p) for p in bad.values()}


@pytest.mark.slow
def test_a_broken_folder_stops_the_command_before_training_one_line_per_problem(tmp_path):
    bad = broken(tmp_path / "photos")
    run = tmp_path / "run"
    done = run_cli([*IMAGEFOLDER_TINY, f"data.root={tmp_path / 'photos'}", f"hydra.run.dir={run}"], cwd=tmp_path)
    assert done.returncode == 2, done.stderr[-3000:]
    assert "Traceback" not in done.stderr
    errors = [line for line in done.stderr.splitlines() if line.startswith("segperf: error: ")]
    assert len(errors) == 6 and errors == done.stderr.strip().splitlines()[-6:]
    assert all(any(str(path) in line for line in errors) for path in bad.values())
    results = json.loads((run / "results.json").read_text())
    assert results["status"] == "failed" and results["train"]["steps"] == 0
    assert str(bad["empty class"]) in results["error"]


@pytest.mark.slow
def test_a_short_run_with_every_fast_axis_records_the_classes_and_the_phases(tmp_path):
    root = make_folder(tmp_path / "my photos", {"golden retriever": 12, "chat=é,x": 12, "eel": 12})
    run = tmp_path / "run"
    # +opt=all without compile (~a minute of compilation on a CPU; test_config_groups covers that it is set)
    args = [*IMAGEFOLDER_TINY, f"data.root={root}", "+opt=all", "compile=off", f"hydra.run.dir={run}"]
    done = run_cli(args, cwd=tmp_path)
    assert done.returncode == 0, done.stderr[-3000:]
    results = json.loads((run / "results.json").read_text())
    assert results["status"] == "completed"
    assert results["dataset"]["classes"] == 3
    assert results["dataset"]["class_names"] == ["chat=é,x", "eel", "golden retriever"]
    assert {"data_wait", "train_step", "validation"} <= results["phases"].keys()
    assert results["axes"]["cache"] == "memory" and results["axes"]["decode"] == "reduced"
    assert results["axes"]["memory_format"] == "channels_last" and results["config"]["model"]["net"]["num_classes"] == 3
    assert 0 <= results["quality"]["val_accuracy"] <= 1 and results["train"]["images_per_s"] > 0
    assert "3 classes" in (run / "summary.txt").read_text()


def test_the_loader_bench_measures_an_image_folder_next_to_its_naive_loader(tmp_path, capsys):
    from segperf.bench.__main__ import main

    tiny_folder = make_folder(tmp_path / "photos", {"cat": 6, "dog": 6})
    out = tmp_path / "loader.json"
    args = ["data", "data.format=imagefolder", f"data.root={tiny_folder}", "data.height=64", "data.width=64"]
    args += ["images=8", "batch_size=4", "min_seconds=0.05", "data.decode=reduced", "data.num_workers=0"]
    assert main([*args, "data.pin_memory=false", "data.augment=basic", f"out={out}"]) == 0
    printed = capsys.readouterr().out
    rows = json.loads(out.read_text())
    assert [(r["loader"], r["cache"]) for r in rows] == [
        ("naive", "off"), ("DataLoader", "off"), ("DataLoader", "memory"), ("device cache", "device"),
        ("copy bound", "memory"),
    ]  # fmt: skip
    assert all(r["images_per_s"] > 0 and r["height"] == 64 for r in rows)
    assert "mean absolute pixel difference" in printed and "masks" not in printed.split("decode=reduced vs full")[1]
