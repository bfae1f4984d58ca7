"""The commands the README shows, run as a user runs them (real subprocesses: slow)."""

import json
import re
import subprocess
import sys

import pytest
import yaml

from segperf.config import available_cores
from tests.conftest import REPO, TINY, compose_config, run_cli

pytestmark = pytest.mark.slow

EVERY_OPTION = [  # baseline (+ the seed's run size), fast, and the remaining precision
    "size=seed workers=off prefetch=off pin=off upsample=upconv memory_format=nchw compile=off precision=fp32"
    " decode=full cache=off augment=off",
    "workers=auto prefetch=on pin=on upsample=deconv memory_format=channels_last compile=on precision=bf16"
    " decode=reduced cache=memory augment=basic cold_cache=true",
    "precision=fp16 cache=device",
]


def cli_config(args: list[str], tmp_path) -> dict:
    done = run_cli([*args, "--cfg", "job", "--resolve"], cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    return yaml.safe_load(done.stdout)


def test_every_option_of_every_group_is_accepted_on_the_command_line(tmp_path):
    baseline, fast, fp16 = (cli_config(line.split(), tmp_path) for line in EVERY_OPTION)
    assert (baseline["data"]["num_workers"], fast["data"]["num_workers"]) == (0, available_cores())
    assert (baseline["data"]["prefetch_factor"], fast["data"]["prefetch_factor"]) == (None, 4)
    assert (baseline["data"]["pin_memory"], fast["data"]["pin_memory"]) == (False, True)
    assert (baseline["model"]["net"]["upsample"], fast["model"]["net"]["upsample"]) == ("upconv", "deconv")
    assert (baseline["model"]["memory_format"], fast["model"]["memory_format"]) == ("nchw", "channels_last")
    assert (baseline["model"]["compile"], fast["model"]["compile"]) == (False, True)
    assert [c["trainer"]["precision"] for c in (baseline, fast, fp16)] == [
        "32-true",
        "bf16-mixed",
        "16-mixed",
    ]
    assert (baseline["data"]["decode"], fast["data"]["decode"]) == ("full", "reduced")
    assert [c["data"]["cache"] for c in (baseline, fast, fp16)] == ["off", "memory", "device"]
    assert (baseline["data"]["augment"], fast["data"]["augment"]) == ("off", "basic")
    assert (baseline["data"]["cold_cache"], fast["data"]["cold_cache"]) == (False, True)


def test_an_unknown_option_is_refused_with_the_available_choices(tmp_path):
    done = run_cli(["workers=lots", "--cfg", "job"], cwd=tmp_path)
    assert done.returncode != 0
    assert "workers" in done.stderr and "auto" in done.stderr and "off" in done.stderr


def test_an_unknown_value_of_a_fixed_choice_setting_is_refused_while_composing_with_the_valid_ones(tmp_path):
    done = run_cli(["data.cache=disk", "--cfg", "job"], cwd=tmp_path)
    assert done.returncode != 0
    assert "Invalid value 'disk', expected one of [off, memory, device]" in done.stderr
    assert "full_key: data.cache" in done.stderr and "Traceback" not in done.stderr


@pytest.mark.parametrize(
    "command",
    [
        "model=cnn data=mnist size=mnist",
        "model=cnn data=mnist size=mnist batch_size=512 data.num_workers=4",
        "model=cnn data=mnist size=mnist_demo profile=counters",
    ],
)
def test_the_readmes_cpu_study_commands_compose_without_unet_or_carvana_keys(tmp_path, command):
    config = cli_config(command.split(), tmp_path)
    assert config["data"]["_target_"].endswith("MnistDataModule")
    assert not {"decode", "cache", "augment"} & config["data"].keys()
    assert "upsample" not in config["model"]["net"]


def test_train_command_on_a_data_folder_writes_results_that_tensorboard_reads(tmp_path, tiny_carvana):
    done = run_cli([*TINY, f"data.root={tiny_carvana}", "hydra.run.dir=outputs/run"], cwd=tmp_path)
    assert done.returncode == 0, done.stderr[-3000:]
    assert "There are 80 datapoints (64 train, 16 val)." in done.stdout
    assert "level 4: encoder ( 512,    4,    6), decoder none" in done.stdout
    run = tmp_path / "outputs" / "run"
    results = json.loads((run / "results.json").read_text())
    assert results["status"] == "completed"
    assert (results["train"]["images"], results["dataset"]["train_cars"], results["dataset"]["val_cars"]) == (8, 4, 1)
    assert (run / "checkpoints" / "last.ckpt").is_file()
    # `tensorboard --logdir outputs`, as the README shows, finds the run's scalars
    tensorboard = REPO / ".venv" / "bin" / "tensorboard"
    command = [str(tensorboard) if tensorboard.exists() else "tensorboard", "--inspect", "--logdir", "outputs"]
    shown = subprocess.run(command, cwd=tmp_path, capture_output=True, text=True, timeout=120)
    assert shown.returncode == 0, shown.stderr
    assert "val/dice" in shown.stdout and "train/loss" in shown.stdout


def test_opt_all_runs_on_the_cpu_with_compile_bf16_workers_and_channels_last(tmp_path, tiny_carvana):
    # a two-level net: torch.compile's time grows with the graph's operators, and the test is about
    # every fast setting composing and running together, not about the net
    small = ["model.net.level_channels=[8,16]", "val_every_images=8"]
    done = run_cli(["+opt=all", *TINY, *small, f"data.root={tiny_carvana}", "hydra.run.dir=run"], cwd=tmp_path)
    assert done.returncode == 0, done.stderr[-3000:]
    results = json.loads((tmp_path / "run" / "results.json").read_text())
    assert results["status"] == "completed" and results["train"]["images"] == 8
    assert results["precision"] == "bf16-mixed"
    config = results["config"]
    assert config["model"]["compile"] is True and config["model"]["memory_format"] == "channels_last"
    assert config["data"]["num_workers"] == available_cores() and config["data"]["pin_memory"] is True


def test_multirun_sweep_writes_one_named_run_directory_per_job(tmp_path, tiny_carvana):
    args = [
        "-m",
        "workers=off,auto",
        "pin=off,on",
        *TINY,
        f"data.root={tiny_carvana}",
        "hydra.sweep.dir=sweep",
    ]
    done = run_cli(args, cwd=tmp_path)
    assert done.returncode == 0, done.stderr[-3000:]
    runs = sorted(p.parent for p in (tmp_path / "sweep").glob("*/results.json"))
    assert len(runs) == 4
    names = [p.name for p in runs]
    assert any(re.fullmatch(r"\d+_.*pin=on.*workers=auto.*", n) for n in names), names
    combos = set()
    for run in runs:
        config = json.loads((run / "results.json").read_text())["config"]
        combos.add((config["data"]["num_workers"], config["data"]["pin_memory"]))
    assert combos == {(0, False), (0, True), (available_cores(), False), (available_cores(), True)}

    # the report of that sweep: one table row per combination, a PNG per chart
    shown = subprocess.run(
        [sys.executable, "-m", "segperf.report", "sweep"], cwd=tmp_path, capture_output=True, text=True, timeout=300
    )
    assert shown.returncode == 0, shown.stderr
    report = tmp_path / "sweep" / "report.md"
    assert shown.stdout.strip().splitlines()[-1] == "sweep/report.md"  # the path, last, as given
    sections = {part.split("\n", 1)[0]: part for part in report.read_text().split("\n## ")[1:]}
    for section in ("Training", "Memory"):  # one row per combination in each: speed, and peak memory
        rows = [line for line in sections[section].splitlines() if line.startswith("| ") and "workers=" in line]
        assert len(rows) == 4, section
        assert sum("workers=auto" in row and "pin=on" in row for row in rows) == 1
    charts = list((tmp_path / "sweep").glob("*.png"))
    assert len(charts) >= 4 and all(png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" for png in charts)


def test_a_failing_sweep_job_is_recorded_and_the_sweep_goes_on(tmp_path, tiny_carvana):
    tiny = [o for o in TINY if not o.startswith("val_images=")]
    args = ["-m", "val_images=50,4", "+repeat=0", *tiny, f"data.root={tiny_carvana}", "hydra.sweep.dir=sweep"]
    done = run_cli(args, cwd=tmp_path)
    assert done.returncode == 0, done.stderr[-3000:]
    assert "failed" in done.stdout and "the sweep goes on" in done.stdout
    by_status = {}
    for path in (tmp_path / "sweep").glob("*/results.json"):
        results = json.loads(path.read_text())
        by_status[results["status"]] = results
        assert results["config"]["repeat"] == 0
    assert set(by_status) == {"failed", "completed"}
    assert "val_images=50" in by_status["failed"]["error"]
    assert by_status["completed"]["train"]["images"] == 8


def test_readme_main_command_trains_the_baseline_on_built_in_data(tmp_path):
    # exactly `python -m segperf.train`: default run size, built-in full-size data generated
    # into an empty cache, outputs under ./outputs/<date>/<time>/
    done = run_cli([], cwd=tmp_path, env={"SEGPERF_CACHE": str(tmp_path / "cache")})
    assert done.returncode == 0, done.stderr[-3000:]
    assert "There are 160 datapoints (128 train, 32 val)." in done.stdout
    (results_path,) = (tmp_path / "outputs").glob("*/*/results.json")
    results = json.loads(results_path.read_text())
    assert results["status"] == "completed" and results["dataset"]["synthetic"] is True
    demo = compose_config()  # size=demo, the default
    assert results["train"]["images"] == demo.train_images and results["train"]["images_per_s"] > 0
    assert results["config"]["model"]["compile"] is False and results["config"]["data"]["num_workers"] == 0


@pytest.mark.parametrize(
    "argv,expected",
    [
        (["model=m", "data=d", "-m", "workers=off,auto"], ["-m", "model=m", "data=d", "workers=off,auto"]),
        (["a=1", "--config-dir", "conf", "b=2", "--multirun"], ["--config-dir", "conf", "--multirun", "a=1", "b=2"]),
        (["a=1", "--config-dir=conf", "-cn", "train", "b=2"], ["--config-dir=conf", "-cn", "train", "a=1", "b=2"]),
        (["a=1", "--info", "b=2"], ["--info", "a=1", "b=2"]),  # --info alone: b=2 is not its value
        (["a=1", "--info", "searchpath"], ["--info", "searchpath", "a=1"]),
        (["-m", "a=1,2"], ["-m", "a=1,2"]),
    ],
)
def test_hydras_flags_may_come_after_the_overrides(argv, expected):
    from segperf.command_line import options_first

    assert options_first(argv) == expected
