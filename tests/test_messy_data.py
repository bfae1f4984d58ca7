"""A real photo library: every file a folder can hold (tests/messy_images.py makes them), and a run
that skips what it cannot read, at every stage, and finishes; or, told to raise, names the file."""

from __future__ import annotations

import json
import os
import re
import shutil
import warnings
from collections import Counter
from pathlib import Path

import numpy as np
import pytest
import torch
from PIL import Image
from torch.utils.data import DataLoader

from segperf.data.cache import fill_cache
from segperf.data.carvana.dataset import CarvanaDataset
from segperf.data.carvana.layout import scan_layout
from segperf.data.filechecks import WHOLE_LIST, BadDataError
from segperf.data.imagefolder.cache import LABEL
from segperf.data.imagefolder.checks import check_folder
from segperf.data.imagefolder.dataset import ImageFolderDataset
from segperf.data.imagefolder.layout import ImageSample, scan_folder
from segperf.data.skips import BadSamples, RunSkips, SkipLog
from segperf.errors import explain
from tests.conftest import compose_config, raises_from_loader, run_cli
from tests.messy_images import bad_files, write_messy_folder
from tests.test_imagefolder import IMAGEFOLDER_TINY

UNDECODABLE = {name for name, (_, _, kind) in bad_files((8, 8)).items() if kind == "undecodable"}


def messy_library(root: Path, bad: bool = True) -> dict[str, tuple[Path, str]]:
    """Two class folders of every good kind of file, the damaged ones in the first; their kinds."""
    _, broken = write_messy_folder(root / "cats", bad=bad)
    write_messy_folder(root / "dogs", seed=1, bad=False)
    return broken


def dataset_of(paths: list[Path], bad: BadSamples) -> ImageFolderDataset:
    return ImageFolderDataset([ImageSample(p, i % 2) for i, p in enumerate(paths)], 24, 24, bad=bad)


def test_every_mode_and_container_of_a_real_library_becomes_rgb_at_the_model_size(tmp_path, recwarn):
    good, _ = write_messy_folder(tmp_path / "cats", bad=False)
    log = SkipLog(tmp_path / "log")
    dataset = dataset_of(list(good.values()), BadSamples("raise", log))
    for index in range(len(dataset)):
        image, _ = dataset[index]
        assert image.shape == (24, 24, 3) and image.dtype == torch.uint8
    assert not [w for w in recwarn.list if "PIL" in w.filename]  # caught, not shown
    warned = [e for e in log.read() if e["event"] == "warnings"]
    assert [e["path"] for e in warned] == [str(good["tiff_warns"])]
    assert "Tag data larger than file" in warned[0]["warnings"][0]["message"]


def test_the_header_check_refuses_giant_declared_images_and_misses_only_undecodable_pixels(tmp_path):
    broken = messy_library(tmp_path / "photos")
    report = check_folder(scan_folder(tmp_path / "photos"), workers=2)
    found = {p.path: p.kind for p in report.problems}
    header_kinds = {name: kind for name, (_, kind) in broken.items() if kind != "undecodable"}
    assert {name: found.get(broken[name][0]) for name in header_kinds} == header_kinds
    assert "data.max_image_pixels=178,956,970" in next(p.reason for p in report.problems if p.kind == "too large")
    assert not any(broken[name][0] in found for name in UNDECODABLE)  # what only data.check=decode finds


def test_decode_check_lists_every_bad_file_in_one_go_and_a_second_check_decodes_only_what_changed(tmp_path):
    broken = messy_library(tmp_path / "photos")
    cache = tmp_path / "cache"
    first = check_folder(scan_folder(tmp_path / "photos"), check="decode", cache_dir=cache, decoders=2)
    assert {p.path: p.kind for p in first.problems} == {path: kind for path, kind in broken.values()}
    header_finds = sum(kind != "undecodable" for _, kind in broken.values())
    assert first.decoded == first.checked - header_finds  # the header check's own finds are not decoded again
    again = check_folder(scan_folder(tmp_path / "photos"), check="decode", cache_dir=cache, decoders=2)
    assert again.decoded == 0 and again.problems == first.problems
    touched = next(iter((tmp_path / "photos" / "dogs").iterdir()))
    os.utime(touched, ns=(1, 1))
    assert check_folder(scan_folder(tmp_path / "photos"), check="decode", cache_dir=cache).decoded == 1
    assert any(path.name == "tiff_warns.tif" for path in again.warnings)


def many_bad_files(folder: Path, sets: int) -> dict[Path, str]:
    """`sets` of every damaged kind of file (tests/messy_images.py) and of a text file and an HTML
    error page named as images, and an empty file, into `folder`: path -> kind."""
    folder.mkdir(parents=True, exist_ok=True)
    kinds: dict[Path, str] = {}
    for i in range(sets):
        for name, (suffix, data, kind) in bad_files((40, 32), seed=i).items():
            (path := folder / f"{name}_{i:02d}{suffix}").write_bytes(data)
            kinds[path] = kind
        (page := folder / f"download_{i:02d}.jpg").write_text("<html><body>403 Forbidden</body></html>")
        (note := folder / f"note_{i:02d}.png").write_text("scanned on the office printer")
        kinds |= {page: "not an image", note: "not an image"}
    for empty in (folder / "empty.png", folder / "empty.jpg"):
        empty.write_bytes(b"")
        kinds[empty] = "empty"
    return kinds


def test_a_check_that_stops_on_46_bad_files_lists_every_one_in_results_and_in_bad_files_txt(tmp_path, monkeypatch):
    """The error names the first ten of each kind; the whole list, with kind and reason, is in
    results.json (dataset.bad_files) and, one path a line, in the run folder's bad_files.txt."""
    from segperf.training.run import train

    monkeypatch.setenv("SEGPERF_CACHE", str(tmp_path / "cache"))  # the decode verdicts: none cached yet
    messy_library(tmp_path / "photos", bad=False)
    kinds = many_bad_files(tmp_path / "photos" / "cats", sets=4)
    counts = Counter(kinds.values())
    assert len(kinds) == 46 and counts["undecodable"] == 20
    cfg = compose_config(*IMAGEFOLDER_TINY, f"data.root={tmp_path / 'photos'}", "data.check=decode")
    with pytest.raises(BadDataError) as error:
        train(cfg, tmp_path / "run")
    message = str(error.value)
    assert f"- ... and 10 more undecodable ({WHOLE_LIST})" in message
    assert sum(str(path) in message for path in kinds) == sum(min(n, 10) for n in counts.values())  # 36 named
    results = json.loads((tmp_path / "run" / "results.json").read_text())
    listed = {entry["path"]: entry for entry in results["dataset"]["bad_files"]}
    assert {Path(path): entry["kind"] for path, entry in listed.items()} == kinds
    assert all(entry["reason"] for entry in listed.values())
    lines = (tmp_path / "run" / "bad_files.txt").read_text().splitlines()
    assert sorted(lines) == sorted(map(str, kinds)) and lines == list(listed)  # in the error's order


@pytest.mark.parametrize("workers", [0, 1])
def test_skip_replaces_a_sample_that_fails_mid_run_keeping_the_batch_size_and_records_it(tmp_path, workers, capfd):
    broken = messy_library(tmp_path / "photos")
    good = sorted((tmp_path / "photos" / "dogs").iterdir())[:10]
    failing = [broken[name][0] for name in sorted(UNDECODABLE)]
    paths = good[:3] + failing + good[3:]
    log = SkipLog(tmp_path / "log")
    loader = DataLoader(dataset_of(paths, BadSamples("skip", log)), batch_size=4, num_workers=workers)
    sizes = [len(images) for images, _ in loader]
    assert sizes == [4] * (len(paths) // 4) + ([len(paths) % 4] if len(paths) % 4 else [])
    skipped = [e for e in log.read() if e["event"] == "skipped"]
    assert {e["path"] for e in skipped} == {str(p) for p in failing}
    stage = "DataLoader worker 0" if workers else "main process"
    assert all(e["stage"] == stage and e["reason"] for e in skipped)
    # libtiff's own lines, printed in the worker (or this process) as it failed: in the reasons, not the console
    out, err = capfd.readouterr()
    assert not RAW_DECODER_LINE.search(out + err), (out + err)[-3000:]
    reasons = {Path(e["path"]).name: e["reason"] for e in skipped}
    assert "the decoder printed: TIFFFillStrip: Read error on strip 0" in reasons["tiff_read_error.tif"]
    assert "the decoder printed: Fax4Decode: Bad code word" in reasons["fax_bad_code.tif"]


def test_raise_mid_run_names_the_file_and_the_decode_check_without_the_workers_traceback(tmp_path):
    broken = messy_library(tmp_path / "photos")
    failing = broken["zlib_broken"][0]
    loader = DataLoader(dataset_of([failing], BadSamples("raise")), num_workers=1)
    with raises_from_loader(Exception) as caught:
        next(iter(loader))
    message = explain(caught.value)
    assert message.startswith(f"could not decode image {failing}: ")
    assert "data.check=decode finds every such file before training" in message
    assert message.endswith("(in DataLoader worker 0)") and "Traceback" not in message


@pytest.mark.slow
def test_a_file_deleted_or_rewritten_after_the_check_is_skipped_under_skip_and_named_under_raise(tmp_path):
    good, _ = write_messy_folder(tmp_path / "cats", bad=False)
    gone, rewritten, kept = good["bmp"], good["webp"], good["progressive"]
    skips = RunSkips("skip")
    skips.after_check([], {}, [gone, rewritten, kept])
    gone.unlink()
    rewritten.write_bytes(rewritten.read_bytes()[:-10])  # a sync tool half-way through
    dataset = dataset_of([gone, rewritten, kept], skips.reader())
    assert all(dataset[i][0].shape == (24, 24, 3) for i in range(3))  # each replaced by the kept one
    reasons = {Path(s["path"]).name: s["reason"] for s in skips.summary()["skipped"]}
    assert reasons["bmp.bmp"].startswith("missing: deleted or moved since the check")
    assert reasons["webp.webp"].startswith("changed since the check")
    strict = RunSkips("raise")
    strict.after_check([], {}, [kept])
    os.utime(kept, ns=(1, 1))
    with pytest.raises(OSError, match=f"could not decode image {kept}: changed since the check"):
        dataset_of([kept], strict.reader())[0]


def test_the_cache_fill_replaces_a_sample_that_fails_and_records_the_stage(tmp_path):
    broken = messy_library(tmp_path / "photos")
    good = sorted((tmp_path / "photos" / "dogs").iterdir())[:5]
    skips = RunSkips("skip")
    dataset = dataset_of([*good, broken["cut_tiff"][0]], skips.reader("cache fill"))
    cache = fill_cache(dataset, "k", torch.device("cpu"), 0, "test", target=LABEL)
    assert len(cache) == 6 and torch.equal(cache.images[5], cache.images[0])  # the next index (wrapped) took its place
    (entry,) = skips.summary()["skipped"]
    assert entry["path"] == str(broken["cut_tiff"][0]) and entry["stage"] == "cache fill (main process)"


def test_carvana_skip_replaces_a_sample_whose_mask_fails_mid_run(tiny_carvana, tmp_path):
    root = tmp_path / "carvana"
    shutil.copytree(tiny_carvana, root)
    samples = scan_layout(root).samples[:8]
    skips = RunSkips("skip")
    skips.after_check([], {}, [p for s in samples for p in (s.image, s.mask)])
    mask = samples[2].mask
    mask.write_bytes(mask.read_bytes()[: mask.stat().st_size // 2])  # rewritten mid-run, cut short
    dataset = CarvanaDataset(samples, 32, 48, bad=skips.reader())
    images = [len(image) for image, _ in DataLoader(dataset, batch_size=4, num_workers=1)]
    assert images == [4, 4]
    (entry,) = skips.summary()["skipped"]
    assert entry["path"] == str(mask) and entry["stage"] == "DataLoader worker 0"


# a line the image library's C code printed, as it would reach the console raw
RAW_DECODER_LINE = re.compile(r"^\s*(TIFFFillStrip|Fax4Decode|LZWDecode|ZIPDecode|TIFFReadDirectory)\b", re.MULTILINE)


def test_a_run_that_skips_undecodable_files_mid_run_completes_and_lists_each(tmp_path, capfd):
    from segperf.training.run import train

    broken = messy_library(tmp_path / "photos")
    every_file = ["train_images=48", "val_images=64"]  # more than each split holds: every file is read
    args = [*IMAGEFOLDER_TINY, *every_file, f"data.root={tmp_path / 'photos'}", "data.on_bad_sample=skip"]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)  # the check's own "left out" warning
        results = train(compose_config(*args), tmp_path / "run")
    assert results["status"] == "completed"
    skipped = {entry["path"]: entry for entry in results["dataset"]["skipped"]}
    assert {str(path) for path, _ in broken.values()} <= set(skipped)
    assert all(skipped[str(path)]["stage"] == "check" for path, kind in broken.values() if kind != "undecodable")
    # the whole list of bad files, the check's and the run's: results.json's and the run folder's plain one
    assert {entry["path"] for entry in results["dataset"]["bad_files"]} == {str(path) for path, _ in broken.values()}
    listed = (tmp_path / "run" / "bad_files.txt").read_text().splitlines()
    assert sorted(listed) == sorted(str(path) for path, _ in broken.values())
    # what libtiff printed while the DataLoader decoded: with the file, not on the console
    out, err = capfd.readouterr()
    assert not RAW_DECODER_LINE.search(out + err), (out + err)[-3000:]
    assert "TIFFFillStrip: Read error on strip 0" in skipped[str(broken["tiff_read_error"][0])]["reason"]
    assert "Fax4Decode: Bad code word" in skipped[str(broken["fax_bad_code"][0])]["reason"]
    printed = [w for e in results["dataset"]["image_warnings"] for w in e["warnings"] if w["kind"] == "DecoderMessage"]
    assert any("TIFFFillStrip" in w["message"] for w in printed)
    assert "DecoderMessage" in out  # one counted line: "while loading, the image library warned ..."


def test_what_libtiff_prints_in_the_decode_checks_processes_is_kept_with_its_file_not_on_the_console(tmp_path, capfd):
    broken = messy_library(tmp_path / "photos")
    report = check_folder(scan_folder(tmp_path / "photos"), check="decode", cache_dir=None, decoders=2)
    out, err = capfd.readouterr()
    assert not RAW_DECODER_LINE.search(out + err), (out + err)[-3000:]
    reasons = {p.path: p.reason for p in report.problems}
    read_error, bad_code = broken["tiff_read_error"][0], broken["fax_bad_code"][0]
    assert "the decoder printed: TIFFFillStrip: Read error on strip 0; got " in reasons[read_error]
    assert "the decoder printed: Fax4Decode: Bad code word at line 0" in reasons[bad_code]
    assert [w["kind"] for w in report.warnings[read_error]] == ["DecoderMessage"]
    # a file that decodes although libtiff printed about it: its lines are that file's warnings
    late_garbage = tmp_path / "photos" / "dogs" / "fax_late_garbage.tif"
    late_garbage.write_bytes(late_garbage_fax(bad_code.read_bytes()))
    again = check_folder(scan_folder(tmp_path / "photos"), check="decode", cache_dir=None)
    assert late_garbage not in {p.path for p in again.problems}
    assert {w["kind"] for w in again.warnings[late_garbage]} == {"DecoderMessage"}
    assert again.warnings[late_garbage][0]["message"].startswith("Fax4Decode: Bad code word at line ")
    out, err = capfd.readouterr()
    assert not RAW_DECODER_LINE.search(out + err)


def late_garbage_fax(garbage_fax: bytes) -> bytes:
    """The fax TIFF of tests/messy_images.py with only the last three quarters of its strip garbage:
    the decode finishes (those lines come out white), and libtiff prints about the first bad one."""
    from tests.messy_images import _encode, _pixels, _strip_tags

    good = _encode(Image.fromarray(_pixels((40, 32), 7)).convert("1"), "TIFF", compression="group4")
    offset, length, _ = _strip_tags(good)
    cut = offset + length // 4
    return good[:cut] + b"\x01" * (offset + length - cut) + good[offset + length :]


@pytest.mark.slow
def test_the_command_with_decode_check_lists_every_bad_file_exits_2_and_prints_no_verdict_nor_pil_warning(tmp_path):
    broken = messy_library(tmp_path / "photos")
    run = tmp_path / "run"
    args = [*IMAGEFOLDER_TINY, f"data.root={tmp_path / 'photos'}", f"hydra.run.dir={run}", "data.check=decode"]
    done = run_cli(args, cwd=tmp_path, env={"SEGPERF_CACHE": str(tmp_path / "cache")})
    assert done.returncode == 2, done.stderr[-3000:]
    assert "Traceback" not in done.stderr and "Warning" not in done.stderr + done.stdout
    assert all(str(path) in done.stderr for path, _ in broken.values())
    assert "Verdict" not in done.stdout and "overhead-bound" not in done.stdout
    assert "stopped before its first training step" in (run / "summary.txt").read_text()
    assert json.loads((run / "results.json").read_text())["status"] == "failed"
    assert sorted((run / "bad_files.txt").read_text().splitlines()) == sorted(str(p) for p, _ in broken.values())
    assert not RAW_DECODER_LINE.search(done.stderr + done.stdout)  # libtiff's lines: in the reasons only
    every_file = ["train_images=48", "val_images=64"]  # more than each split holds: every file is read
    skip_args = [*args[:-2], *every_file, f"hydra.run.dir={tmp_path / 'skip'}", "data.on_bad_sample=skip"]
    skip = run_cli(skip_args, cwd=tmp_path)
    assert skip.returncode == 0, skip.stderr[-3000:]
    assert "Traceback" not in skip.stderr and "Tag data larger than file" not in skip.stderr
    assert not RAW_DECODER_LINE.search(skip.stderr + skip.stdout)
    # segperf's own "left out" warning reads as its notes do, not as Python's file:line: UserWarning
    assert "segperf: warning: data.on_bad_sample=skip: left out" in skip.stderr and "UserWarning" not in skip.stderr
    assert "the image library warned" in skip.stdout
    results = json.loads((tmp_path / "skip" / "results.json").read_text())
    assert {str(path) for path, _ in broken.values()} <= {entry["path"] for entry in results["dataset"]["skipped"]}
    assert np.isfinite(results["train"]["images_per_s"])
