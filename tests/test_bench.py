"""`python -m segperf.bench data [overrides]`: one run measures the grid next to the naive reference
and writes the table as JSON whose path is the last line printed; it takes Hydra overrides named
as in training, and a bad one stops it with one line naming the key. Rates are never asserted."""

from __future__ import annotations

import json
import os
import shlex
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from segperf.bench.__main__ import main
from tests.conftest import REPO
from tests.doc_commands import segperf_commands

TINY = ["data.height=64", "data.width=96", "images=8", "batch_size=4", "min_seconds=0.05"]
ROW_KEYS = {"loader", "decode", "cache", "workers", "pin", "augment", "images_per_s", "ratio_vs_naive", "note"}


@pytest.fixture(autouse=True)
def in_tmp(tmp_path, monkeypatch):
    """Each run's folder (outputs/bench/<date>_<time>/) lands under tmp_path."""
    monkeypatch.chdir(tmp_path)


def last_line_json(out: str) -> list[dict]:
    path = Path(out.strip().splitlines()[-1])
    assert path.name.endswith(".json") and path.is_file()
    return json.loads(path.read_text())


def grid(rows: list[dict]) -> set[tuple]:
    return {(r["decode"], r["cache"], r["workers"], r["pin"]) for r in rows if r["loader"] == "DataLoader"}


def test_loader_benchmark_rows_carry_settings_rates_and_ratios_against_the_naive_loader(tiny_carvana, tmp_path, capsys):
    out = tmp_path / "loader.json"
    args = ["data", f"data.root={tiny_carvana}", *TINY, "data.num_workers=0", "data.pin_memory=false", f"out={out}"]
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
    assert all(r["height"] == 64 and r["width"] == 96 and r["batch_size"] == 4 for r in rows)
    assert all(r["mean_abs_diff_vs_full"] < 1.5 for r in rows if r["decode"] == "reduced")
    assert "| loader" in printed and "vs naive" in printed
    assert "Bound: gathering cached batches copies memory at" in printed
    assert "decode=reduced vs full at 64x96: mean absolute pixel difference" in printed


def test_the_json_goes_to_hydras_run_folder_with_the_composed_config(tiny_carvana, tmp_path, capsys):
    args = [f"data.root={tiny_carvana}", *TINY, "data.cache=off", "data.decode=reduced", "data.num_workers=0"]
    assert main(["data", *args, "data.pin_memory=false", "seed=3", f"hydra.run.dir={tmp_path / 'run'}"]) == 0
    printed = capsys.readouterr().out
    assert Path(printed.strip().splitlines()[-1]) == Path("run/loader.json")  # under the working folder: relative
    assert [r["loader"] for r in last_line_json(printed)] == ["naive", "DataLoader"]  # no cache: no bound
    assert "Bound:" not in printed
    recorded = (tmp_path / "run" / ".hydra" / "config.yaml").read_text()
    assert "seed: 3" in recorded and "decode: reduced" in recorded


def test_pin_without_cuda_is_measured_and_the_table_says_it_does_nothing(tiny_carvana, capsys):
    if torch.cuda.is_available():
        pytest.skip("has CUDA: pinning does something here")
    args = ["data", f"data.root={tiny_carvana}", *TINY, "data.decode=full", "data.cache=off", "data.num_workers=0"]
    assert main([*args, "data.pin_memory=[off,on]"]) == 0
    rows = last_line_json(capsys.readouterr().out)
    pinned = [r for r in rows if r["pin"]]
    assert len(rows) == 3 and len(pinned) == 1 and "no CUDA: pin_memory does nothing" in pinned[0]["note"]


def test_cold_cache_marks_every_timed_row_cold_and_says_how(tiny_carvana, capsys, monkeypatch):
    from segperf.data import cold

    monkeypatch.setattr(cold.os, "geteuid", lambda: 1000)  # fadvise, not the whole machine's cache
    args = ["data", f"data.root={tiny_carvana}", *TINY, "data.decode=reduced", "data.cache=off"]
    assert main([*args, "data.num_workers=0", "data.pin_memory=false", "cold_cache=true"]) == 0
    printed = capsys.readouterr().out
    assert "page cache: cold (posix_fadvise DONTNEED" in printed
    assert {r["page_cache"] for r in last_line_json(printed)} == {"cold"}


def test_without_data_root_the_built_in_data_is_made_in_segperfs_cache_folder(tmp_path, capsys, monkeypatch):
    monkeypatch.setenv("SEGPERF_CACHE", str(tmp_path / "cache"))
    small = ["data.synthetic.cars=2", "data.synthetic.width=240", "data.synthetic.height=160"]
    args = ["data", *TINY, *small, "data.decode=reduced", "data.cache=off", "data.num_workers=0"]
    assert main([*args, "data.pin_memory=false"]) == 0
    printed = capsys.readouterr().out
    assert f"samples of {tmp_path / 'cache' / 'carvana-synthetic-v1-cars2-seed0-240x160'}" in printed


@pytest.mark.parametrize(
    ("args", "names"),
    [
        (["data.heigth=128"], ["data.heigth=128: no such key; did you mean data.height?"]),  # misspelt
        (["height=128"], ["height=128: no such key; did you mean data.height?"]),  # data. left out
        (["+data.extra=1"], ["data.extra: no such key"]),
        (["batch_size=abc"], ["batch_size=abc: Value 'abc' of type 'str' could not be converted to Integer"]),
        (["workers=[0,2]"], ["workers=[0,2]: workers is one of training's config groups", "data.num_workers"]),
        (["data.num_workers=[0,-1]"], ["data.num_workers=[0,-1]: a list of worker counts >= 0"]),
        (["data.cache=disk"], ["data.cache=[disk]: a list of off, memory, device"]),
        (["data.augment=strong"], ["data.augment='strong': use one of off, basic"]),
        (["--workers", "0,2"], ["--workers: options are Hydra overrides now: 'data.num_workers=[0,2]'"]),
    ],
)
def test_a_bad_override_stops_before_any_work_with_one_line_naming_the_key(args, names, tmp_path, capsys):
    assert main(["data", *args]) == 2
    printed = capsys.readouterr()
    assert printed.err.startswith("segperf.bench: error: ") and printed.err.count("\n") == 1, printed.err
    for name in names:
        assert name in printed.err
    assert "Traceback" not in printed.err and printed.out == ""
    assert list(tmp_path.iterdir()) == []  # no run folder: nothing ran


def test_every_bad_value_is_listed_at_once(capsys):
    assert main(["data", "images=0", "data.decode=[fast]", "min_seconds=-1"]) == 2
    lines = capsys.readouterr().err.splitlines()
    keys = [line.removeprefix("segperf.bench: error: ").split("=")[0] for line in lines]
    assert keys == ["data.decode", "images", "min_seconds"]


@pytest.mark.slow  # Hydra's help lists every config group (~2 s)
def test_help_and_cfg_job_are_hydras_and_run_nothing(tmp_path, capsys):
    assert main(["data", "--help"]) == 0
    helped = capsys.readouterr().out
    assert "python -m segperf.bench data [overrides]" in helped and "num_workers:" in helped
    assert main(["data", "--cfg", "job", "data.height=128", "data.decode=reduced"]) == 0
    shown = capsys.readouterr().out
    assert "height: 128" in shown and "decode: reduced" in shown and "min_seconds: 1.0" in shown
    assert list(tmp_path.iterdir()) == []


def test_an_unknown_benchmark_prints_usage():
    assert main(["model"]) == 2


def test_the_bench_times_the_training_datamodules_own_train_loaders(tiny_carvana, tmp_path, monkeypatch, capsys):
    """As nanoGPT's bench.py reuses model.py: every timed loader is CarvanaDataModule.train_dataloader's,
    built with the row's settings, so the bench measures what a training run loads."""
    from segperf.data.carvana.datamodule import CarvanaDataModule

    built = []
    real = CarvanaDataModule.train_dataloader

    def recorded(self):
        built.append((self.decode, self.cache, self.num_workers, self.pin_memory, self.train_images))
        return real(self)

    monkeypatch.setattr(CarvanaDataModule, "train_dataloader", recorded)
    args = ["data", f"data.root={tiny_carvana}", *TINY, "data.decode=reduced", "data.num_workers=0"]
    assert main([*args, "data.pin_memory=false", "data.cache=[off,memory,device]", f"out={tmp_path / 'l.json'}"]) == 0
    rows = json.loads((tmp_path / "l.json").read_text())
    timed = [(r["decode"], r["cache"], r["workers"], r["pin"], 8) for r in rows if r["loader"] != "naive"][:-1]
    assert built == timed  # one loader per row (the copy bound reuses the memory cache)


# -- the commands the docs show --------------------------------------------------------------
def doc_commands(*pages: str) -> list[list[str]]:
    """The overrides of every `python -m segperf.bench data ...` line in a ```bash block of `pages`
    (default: the README and every docs page)."""
    return [args[1:] for args in segperf_commands("segperf.bench", list(pages) or None) if args[:1] == ["data"]]


def makefile_bench_args() -> list[list[str]]:
    """The BENCH_ARGS examples of the Makefile (the variable's comment and the target's help)."""
    text = (REPO / "Makefile").read_text()
    examples = [part.split('"', 1)[0] for part in text.split('BENCH_ARGS="')[1:]]
    return [shlex.split(example) for example in examples]


def test_the_docs_and_the_makefile_show_bench_commands_that_pass_the_checks(tiny_carvana, capsys):
    from segperf.bench.cli import check

    guide = doc_commands("README.md", "docs/loader-benchmark.md")
    assert len(guide) == 5  # the README's quick-start line and the four of the loader benchmark's page
    commands = [*doc_commands(), *makefile_bench_args()]
    assert len(commands) == 5 + 2 + 2  # with BENCHMARKS.md's two and the Makefile's two
    for args in commands:
        assert check([a.replace("/path/to/carvana", str(tiny_carvana)) for a in args]) == [], args


@pytest.mark.slow
def test_the_readmes_bench_commands_run_as_shown(tiny_carvana, tmp_path):
    """Each command of the README and the loader benchmark's page as a user runs it (a subprocess),
    with the tiny size appended: later overrides win, so the command's own settings stay as shown."""
    from hydra import compose, initialize_config_dir

    from segperf.bench.schema import settings
    from segperf.config import CONFIG_DIR

    env = {**os.environ, "NO_ALBUMENTATIONS_UPDATE": "1", "PYTHONPATH": str(REPO), "SEGPERF_CACHE": str(tmp_path)}
    shown = doc_commands("README.md", "docs/loader-benchmark.md")
    commands = [c for i, c in enumerate(shown) if c not in shown[:i]]
    assert len(commands) == 4  # the README's quick-start line is the page's first
    for number, shown in enumerate(commands):
        args = [a.replace("/path/to/carvana", str(tiny_carvana)) for a in shown]
        if not any(a.startswith("data.root=") for a in args):
            args.append(f"data.root={tiny_carvana}")  # not the 10-car built-in set: minutes to make
        args += [*TINY, f"hydra.run.dir=outputs/bench/{number}"]
        done = subprocess.run(
            [sys.executable, "-m", "segperf.bench", "data", *args],
            cwd=tmp_path,
            env=env,
            capture_output=True,
            text=True,
            timeout=600,
        )
        assert done.returncode == 0, (shown, done.stderr[-3000:])
        last = Path(done.stdout.strip().splitlines()[-1])
        assert last == Path(f"outputs/bench/{number}/loader.json")
        rows = json.loads((tmp_path / last).read_text())
        assert rows[0]["loader"] == "naive"
        with initialize_config_dir(config_dir=str(CONFIG_DIR), version_base="1.3"):
            s = settings(compose(config_name="bench", overrides=args))
        dataloader_caches = [c for c in s.cache if c != "device"]
        expected = {(d, c, w, p) for d in s.decode for c in dataloader_caches for w in s.workers for p in s.pin}
        assert grid(rows) == expected, shown
        assert [r["loader"] for r in rows].count("device cache") == len(s.decode) * ("device" in s.cache)
        assert {r["augment"] for r in rows[1:]} == {s.augment}
        if not shown:  # the default: the whole grid, the device cache and the copy bound
            assert len(expected) == 16 and rows[-1]["loader"] == "copy bound"
