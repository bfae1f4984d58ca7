"""`python -m segperf.bench data`: one run measures the grid next to the naive reference and
writes the table as JSON whose path is the last line printed. Rates are never asserted."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from segperf.bench.__main__ import main
from tests.conftest import REPO

TINY = ["--height", "64", "--width", "96", "--images", "8", "--batch-size", "4", "--min-seconds", "0.05"]
ROW_KEYS = {"loader", "decode", "cache", "workers", "pin", "augment", "images_per_s", "ratio_vs_naive", "note"}


def last_line_json(out: str) -> list[dict]:
    path = Path(out.strip().splitlines()[-1])
    assert path.name.endswith(".json") and path.is_file()
    return json.loads(path.read_text())


def test_loader_benchmark_rows_carry_settings_rates_and_ratios_against_the_naive_loader(tiny_carvana, tmp_path, capsys):
    out = tmp_path / "loader.json"
    args = ["data", "--root", str(tiny_carvana), *TINY, "--workers", "0", "--pin", "off", "--out", str(out)]
    assert main(args) == 0
    printed = capsys.readouterr().out
    assert printed.strip().splitlines()[-1] == str(out)
    rows = last_line_json(printed)
    assert [r["loader"] for r in rows] == ["naive"] + ["DataLoader"] * 2 + ["device cache"] + ["DataLoader"] * 2 + [
        "device cache",
        "copy bound",
    ]
    assert [(r["decode"], r["cache"]) for r in rows[1:7]] == [
        ("full", "off"), ("full", "memory"), ("full", "device"),
        ("reduced", "off"), ("reduced", "memory"), ("reduced", "device"),
    ]  # fmt: skip
    for row in rows:
        assert ROW_KEYS <= row.keys() and row["images_per_s"] > 0
        assert row["ratio_vs_naive"] == pytest.approx(row["images_per_s"] / rows[0]["images_per_s"])
    assert rows[0]["ratio_vs_naive"] == 1.0 and rows[0]["workers"] == 0 and rows[0]["augment"] == "off"
    assert all(r["mean_abs_diff_vs_full"] < 1.5 for r in rows if r["decode"] == "reduced")
    assert "| loader" in printed and "vs naive" in printed
    assert "Bound: gathering cached batches copies memory at" in printed
    assert "decode=reduced vs full at 64x96: mean absolute pixel difference" in printed


def test_pin_without_cuda_is_measured_and_the_table_says_it_does_nothing(tiny_carvana, tmp_path, capsys):
    if torch.cuda.is_available():
        pytest.skip("has CUDA: pinning does something here")
    args = ["data", "--root", str(tiny_carvana), *TINY, "--decode", "full", "--cache", "off", "--workers", "0"]
    assert main([*args, "--pin", "off,on", "--no-device-cache", "--out", str(tmp_path / "pin.json")]) == 0
    rows = last_line_json(capsys.readouterr().out)
    pinned = [r for r in rows if r["pin"]]
    assert len(pinned) == 1 and "no CUDA: pin_memory does nothing" in pinned[0]["note"]


def test_cold_cache_marks_every_timed_row_cold_and_says_how(tiny_carvana, tmp_path, capsys, monkeypatch):
    from segperf.data import cold

    monkeypatch.setattr(cold.os, "geteuid", lambda: 1000)  # fadvise, not the whole machine's cache
    args = ["data", "--root", str(tiny_carvana), *TINY, "--decode", "reduced", "--cache", "off", "--workers", "0"]
    assert main([*args, "--pin", "off", "--no-device-cache", "--cold-cache", "--out", str(tmp_path / "c.json")]) == 0
    printed = capsys.readouterr().out
    assert "page cache: cold (posix_fadvise DONTNEED" in printed
    assert {r["page_cache"] for r in last_line_json(printed)} == {"cold"}


def test_an_unknown_benchmark_prints_usage():
    assert main(["model"]) == 2


@pytest.mark.slow
def test_bench_data_command_runs_the_whole_default_grid(tiny_carvana, tmp_path):
    done = subprocess.run(
        [sys.executable, "-m", "segperf.bench", "data", "--root", str(tiny_carvana), *TINY],
        cwd=tmp_path,
        env={**os.environ, "NO_ALBUMENTATIONS_UPDATE": "1", "PYTHONPATH": str(REPO)},
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    last = Path(done.stdout.strip().splitlines()[-1])
    assert last.parts[:2] == ("outputs", "bench") and last.name == "loader.json"
    rows = json.loads((tmp_path / last).read_text())
    grid = {(r["decode"], r["cache"], r["workers"], r["pin"]) for r in rows if r["loader"] == "DataLoader"}
    assert len(grid) == 16  # decode x cache x workers x pin
    assert [r["loader"] for r in rows].count("device cache") == 2
    assert rows[0]["loader"] == "naive" and rows[-1]["loader"] == "copy bound"
