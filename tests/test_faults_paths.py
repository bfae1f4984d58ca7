"""Paths as values: every path-taking key takes a path exactly as segperf printed it — a sweep
job's folder, `multirun/<date>/<time>/0_seed=1,train_images=8`, with its `=` and `,` — without
quoting (Hydra's override grammar would split it)."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

import pytest
from hydra import compose, initialize_config_dir

from segperf.command_line import hydra_quote, path_value, quote_path_values
from segperf.config import CONFIG_DIR
from tests.conftest import QUIET, REPO, TINY, compose_config, run_cli

# the tiny run without the quiet trainer keys (a job folder is named after every override, and
# a file name has at most 255 bytes) and with a narrow U-Net (a small checkpoint, a quick inference)
SWEEP = [a for a in TINY if a not in QUIET] + ["model.net.stem_channels=8", "model.net.level_channels=[8,16,32,64,128]"]


@pytest.fixture(scope="module")
def sweep_job(tmp_path_factory, tiny_carvana) -> tuple[Path, Path]:
    """(the folder it ran in, the job folder exactly as the sweep printed it) of a one-job sweep."""
    cwd = tmp_path_factory.mktemp("sweep")
    sweep = ["-m", *SWEEP, "seed=1", f"data.root={tiny_carvana}", "hydra.sweep.dir=multirun/2025-01-02/03-04-05"]
    done = run_cli(sweep, cwd=cwd, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    printed = re.findall(r"^Results: (.+)/results\.json$", done.stdout, re.MULTILINE)
    assert len(printed) == 1 and "=" in printed[0] and "," in printed[0]
    return cwd, Path(printed[0])


@pytest.mark.slow
def test_infer_takes_a_sweep_job_folder_as_the_sweep_printed_it(sweep_job):
    cwd, job = sweep_job
    command = [sys.executable, "-m", "segperf.infer", f"run_dir={job}", "hydra.run.dir=inferred", "val_images=2"]
    done = subprocess.run([*command, "warmup_batches=1"], cwd=cwd, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    results = json.loads((cwd / "inferred" / "results.json").read_text())
    assert results["status"] == "completed"
    assert results["inference"]["checkpoint"] == str(cwd / job / "checkpoints" / "last.ckpt")


@pytest.mark.slow
def test_resume_takes_a_sweep_job_folder_as_printed(sweep_job):
    cwd, job = sweep_job
    before = (cwd / job / "results.json").read_text()
    done = run_cli([f"resume={job}"], cwd=cwd, timeout=300)
    assert done.returncode == 2, done.stderr[-3000:]  # the folder was read: that job completed
    assert done.stderr.strip().splitlines()[-1] == (
        f"segperf: error: resume={job}: that run completed; there is nothing to resume (start a new run instead)"
    )
    assert (cwd / job / "results.json").read_text() == before


@pytest.mark.slow
def test_the_report_takes_a_sweep_job_folder_as_printed(sweep_job, tmp_path, capsys):
    from segperf.report.cli import main

    cwd, job = sweep_job
    assert main([str(cwd / job), "--out", str(tmp_path / "report")]) == 0
    assert (tmp_path / "report" / "report.md").is_file()
    assert capsys.readouterr().out.startswith("1 jobs, 0 failed")


def test_ckpt_and_data_root_compose_to_the_very_path(tmp_path, monkeypatch):
    folder = tmp_path / "multirun" / "2025-01-02" / "03-04-05" / "0_pin=on,workers=2"
    (folder / "checkpoints").mkdir(parents=True)
    monkeypatch.chdir(tmp_path)
    relative = "multirun/2025-01-02/03-04-05/0_pin=on,workers=2"
    argv = quote_path_values([f"ckpt={relative}/checkpoints/last.ckpt", f"data.root={folder}", "batch_size=2"])
    with initialize_config_dir(config_dir=str(CONFIG_DIR), version_base="1.3"):
        cfg = compose(config_name="infer", overrides=argv)
    assert cfg.ckpt == f"{relative}/checkpoints/last.ckpt"
    assert cfg.data.root == str(folder) and cfg.batch_size == 2
    assert compose_config(*quote_path_values([f"data.root={folder}"])).data.root == str(folder)


def test_a_sweep_over_other_keys_still_sweeps_and_the_path_stays_one_value(tmp_path, monkeypatch):
    from hydra.core.override_parser.overrides_parser import OverridesParser

    job = tmp_path / "0_pin=on,workers=2"
    job.mkdir()
    argv = quote_path_values(["-m", f"run_dir={job}", "precision=fp32,bf16", "batch_size=2,4"])
    assert argv == ["-m", f"run_dir={hydra_quote(str(job))}", "precision=fp32,bf16", "batch_size=2,4"]
    parsed = OverridesParser.create().parse_overrides(argv[1:])
    assert [o.is_sweep_override() for o in parsed] == [False, True, True]
    assert parsed[0].value() == str(job)


@pytest.mark.parametrize(
    ("given", "expected"),
    [
        (["run_dir='a=b,c'"], ["run_dir='a=b,c'"]),  # quoted by the user: left alone
        (['ckpt="a=b.ckpt"'], ['ckpt="a=b.ckpt"']),
        (["data.root=/data/carvana"], ["data.root=/data/carvana"]),  # nothing to quote
        (["data.root=null"], ["data.root=null"]),  # Hydra's null, not a folder named "null"
        (["hydra.run.dir=out/${now:%H}"], ["hydra.run.dir=out/${now:%H}"]),  # an interpolation
        (["batch_size=2,4", "-m"], ["batch_size=2,4", "-m"]),  # not a path key
        (["-m", "ckpt=a.ckpt,b.ckpt"], ["-m", "ckpt=a.ckpt,b.ckpt"]),  # a sweep of (missing) paths
        (["ckpt=a.ckpt,b.ckpt"], ["ckpt='a.ckpt,b.ckpt'"]),  # no sweep without -m: one path
        (["+hydra.sweep.dir=out/x=1"], ["+hydra.sweep.dir='out/x=1'"]),
        (["resume=runs/it's=1"], ["resume='runs/it\\'s=1'"]),
    ],
)
def test_a_path_value_is_quoted_only_where_the_grammar_would_split_it(given, expected):
    assert quote_path_values(given) == expected


def test_the_path_of_a_quoted_value_is_read_as_hydra_reads_it():
    assert path_value("run_dir='a=b,c'") == "a=b,c"
    assert path_value('hydra.run.dir="out/0_x=1"') == "out/0_x=1"
    assert path_value("resume='runs/it\\'s=1'") == "runs/it's=1"
    assert path_value("data.root=/data/carvana") == "/data/carvana"


def test_a_sweep_over_existing_folders_with_commas_becomes_a_sweep_of_quoted_folders(tmp_path, monkeypatch):
    for name in ("0_pin=on,workers=2", "1_pin=off,workers=2"):
        (tmp_path / name).mkdir()
    monkeypatch.chdir(tmp_path)
    argv = quote_path_values(["-m", "run_dir=0_pin=on,workers=2,1_pin=off,workers=2"])
    assert argv == ["-m", "run_dir='0_pin=on,workers=2','1_pin=off,workers=2'"]


def test_the_bench_takes_a_data_root_with_equals_and_commas(tmp_path, capsys):
    from segperf.bench.cli import main

    root = tmp_path / "sets" / "carvana=small,v2"
    root.mkdir(parents=True)
    assert main([f"data.root={root}", "--cfg", "job"]) == 0
    assert f"root: {root}" in capsys.readouterr().out


def test_resume_reads_a_quoted_or_unquoted_folder_alike(tmp_path):
    from segperf.training.resume import resume_argv

    run = tmp_path / "0_pin=on,workers=2"
    (run / ".hydra").mkdir(parents=True)
    (run / ".hydra" / "overrides.yaml").write_text("- pin=on\n- data.num_workers=2\n")
    plain = quote_path_values(resume_argv([f"resume={run}"]))
    quoted = quote_path_values(resume_argv([f"resume={hydra_quote(str(run))}"]))
    assert plain == quoted == ["pin=on", "data.num_workers=2", f"resume='{run}'", f"hydra.run.dir='{run}'"]
    assert quote_path_values(resume_argv(plain)) == plain  # the other ranks of a DDP run start from it


def test_every_entry_point_quotes_paths_before_hydra():
    # segperf.command_line.prepared, every command's one preamble, quotes them (quote_path_values)
    for module in ("segperf/training/cli.py", "segperf/inference/cli.py", "segperf/bench/cli.py"):
        source = (REPO / "src" / module).read_text()
        assert "prepared(" in source or "quote_path_values(" in source, module
