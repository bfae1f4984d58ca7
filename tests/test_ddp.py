"""Data-parallel training (trainer=ddp) at run time: the ranks of a sweep's job started into that
job's folder, one results.json per run with per-rank rows (in the summary and the report too),
and what each rank does on its own. The set-up (config, each rank's data) is in test_ddp_setup.py.

The slow test runs real DDP on this CPU: 2 processes, gloo backend, started by Lightning."""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path
from types import SimpleNamespace

import pytest
import torch
from hydra.core.hydra_config import HydraConfig
from omegaconf import open_dict

from segperf.perf.summary import format_run_summary
from segperf.training.distributed import LAUNCH_ENV, DistributedJob, combine, per_job_rank_commands, rank_command
from segperf.training.resume import resume_argv
from tests.conftest import TINY, compose_config, run_cli


# -- starting the other ranks of a sweep job ---------------------------------------------------------
@pytest.fixture
def hydra_job(tmp_path):
    """HydraConfig as it is inside job 1 of `python -m segperf.train -m seed=0,1 trainer=ddp`."""
    cfg = compose_config("trainer=ddp")
    from hydra import compose, initialize_config_dir

    from segperf.config import CONFIG_DIR

    with initialize_config_dir(config_dir=str(CONFIG_DIR), version_base="1.3"):
        full = compose(config_name="train", overrides=["trainer=ddp", "seed=1"], return_hydra_config=True)
    job_dir = tmp_path / "sweep" / "1_seed=1,trainer=ddp"
    with open_dict(full):
        full.hydra.runtime.output_dir = str(job_dir)
        full.hydra.runtime.cwd = str(tmp_path)
        full.hydra.job.name = "train"
        full.hydra.overrides.task = ["seed=1", "trainer=ddp"]
    HydraConfig.instance().set_config(full)
    yield SimpleNamespace(cfg=cfg, job_dir=job_dir, cwd=tmp_path)
    HydraConfig.instance().cfg = None


def test_other_ranks_run_this_job_into_its_folder_not_the_whole_sweep(hydra_job, monkeypatch):
    monkeypatch.setattr(sys, "argv", ["train.py", "-m", "seed=0,1", "trainer=ddp", "-cd", "/my/conf"])
    command, cwd = rank_command(local_rank=1)
    assert command[:3] == [sys.executable, "-m", "segperf.train"]
    assert "-m" not in command[3:] and "seed=0,1" not in command  # no replay of the sweep
    assert command[3:5] == ["-cd", "/my/conf"]  # the config the user chose
    assert "seed=1" in command and "trainer=ddp" in command  # this job's values
    assert f'hydra.run.dir="{hydra_job.job_dir}"' in command
    assert "hydra.output_subdir=null" in command and "hydra.job.name=train_rank1" in command
    assert cwd == str(hydra_job.cwd)


def test_lightning_uses_segperfs_rank_command_during_fit_only():
    from lightning.pytorch.strategies.launchers import subprocess_script

    original = subprocess_script._hydra_subprocess_cmd  # fails here if Lightning renames it
    with per_job_rank_commands():
        assert subprocess_script._hydra_subprocess_cmd is rank_command
    assert subprocess_script._hydra_subprocess_cmd is original


def test_a_finished_ddp_job_leaves_no_launch_variables_for_the_next_job(monkeypatch):
    monkeypatch.setenv("MASTER_ADDR", "node7")
    for key in ("MASTER_PORT", "LOCAL_RANK", "WORLD_SIZE", "NODE_RANK"):
        monkeypatch.delenv(key, raising=False)
    job = DistributedJob()
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT="4242", LOCAL_RANK="0", WORLD_SIZE="2", NODE_RANK="0")
    job.close()
    assert os.environ["MASTER_ADDR"] == "node7"
    assert not {"MASTER_PORT", "LOCAL_RANK", "WORLD_SIZE", "NODE_RANK"} & set(os.environ)
    assert set(LAUNCH_ENV) == {"MASTER_ADDR", "MASTER_PORT", "NODE_RANK", "LOCAL_RANK", "WORLD_SIZE"}


def test_resume_argv_leaves_a_command_it_already_rewrote_alone(tmp_path):
    run = tmp_path / "run"
    (run / ".hydra").mkdir(parents=True)
    (run / ".hydra" / "overrides.yaml").write_text("- +opt=all\n- trainer=ddp\n")
    once = resume_argv([f"resume={run}"])
    assert once == ["+opt=all", "trainer=ddp", f"resume={run}", f"hydra.run.dir={run}"]
    assert resume_argv(once) == once  # rank 1 starts from rank 0's rewritten command
    quoted = [*once[:-1], f'hydra.run.dir="{run}"']
    assert resume_argv(quoted) == quoted


# -- per-rank rows, their sum, the summary and the report -------------------------------------
def row(rank: int, images: int, rate: float, wait: float, forward: float) -> dict:
    return {
        "rank": rank,
        "node_rank": 0,
        "local_rank": rank,
        "host": "gpu-node-1",
        "device": f"cuda:{rank}",
        "status": "completed",
        "images": images,
        "steps": images // 8,
        "images_per_s": rate,
        "wall_s": 10.0,
        "data_wait_s": wait * 10,
        "data_wait_mean_s": wait,
        "train_step_s": 1.0,
        "train_step_mean_s": 0.1,
        "forward_mean_s": forward,
        "ready_mean_s": wait + forward,
        "device_step_mean_s": None,
    }


def test_the_run_adds_up_its_ranks_and_names_the_one_the_others_wait_for():
    rows = [row(0, 800, 100.0, 0.001, 0.03), row(1, 800, 99.0, 0.040, 0.03), row(2, 800, 101.0, 0.002, 0.03)]
    combined = combine(rows)
    assert combined["images"] == 2400 and combined["images_per_s"] == pytest.approx(300.0)
    assert combined["slowest_rank"] == 1  # a slow loader: it reaches the all-reduce last
    assert combined["slowest_lag_s"] == pytest.approx(0.0385)


def test_a_rank_without_a_rate_leaves_the_total_unknown_rather_than_low():
    combined = combine([row(0, 16, 10.0, 0.0, 0.1), {**row(1, 16, 10.0, 0.0, 0.1), "images_per_s": None}])
    assert combined["images_per_s"] is None and combined["images"] == 32


def test_a_rank_row_takes_steady_state_steps_and_the_device_step_mean():
    from segperf.training.distributed import rank_row

    per_batch = {"warmup_steps": 1, "data_wait_s": [9.0, 0.01, 0.03], "train_step_s": [9.0, 0.1, 0.3]}
    per_batch["forward_s"] = [9.0, 0.04, 0.06]
    results = {
        "status": "completed",
        "train": {"images": 12, "steps": 3, "images_per_s": 40.0, "wall_s": 1.0},
        "jitter": {"per_batch": per_batch, "device_step": {"count": 2, "mean": 0.18}},
        "resources": {"cpu_mean_percent": 95.0, "gpu_util_mean_percent": 80.0, "peak_allocated_bytes": 2**30},
    }
    trainer = SimpleNamespace(global_rank=1, node_rank=0, local_rank=1, strategy=SimpleNamespace(root_device="cuda:1"))
    row = rank_row(results, trainer)
    assert row["data_wait_mean_s"] == pytest.approx(0.02) and row["train_step_s"] == pytest.approx(0.4)
    assert row["ready_mean_s"] == pytest.approx(0.07)  # warm-up step left out
    assert (row["device_step_mean_s"], row["gpu_util_mean_percent"], row["device"]) == (0.18, 80.0, "cuda:1")


def test_summary_shows_the_total_one_row_per_rank_and_the_straggler_with_its_cause():
    rows = [row(0, 800, 100.0, 0.001, 0.03), row(1, 800, 99.0, 0.040, 0.03)]
    rows[0]["arrivals"], rows[1]["arrivals"] = [0.031] * 50, [0.070] * 50  # paired, step by step
    results = {
        "status": "completed",
        "train": {"images": 1600, "steps": 100, "images_per_s": 199.0, "rank0_images_per_s": 100.0},
        "distributed": {
            "strategy": "DDPStrategy",
            "backend": "nccl",
            "world_size": 2,
            "num_nodes": 1,
            "devices_per_node": 2,
            "hosts": ["gpu-node-1"],
            **combine(rows),
            "ranks": rows,
        },
    }
    text = format_run_summary(results)
    assert "Data-parallel ranks" in text and "2 ranks on 1 node(s) x 2 device(s), DDPStrategy over nccl" in text
    lines = text.splitlines()
    assert any(line.split()[:4] == ["1", "gpu-node-1", "cuda:1", "800"] for line in lines)
    assert any(line.split()[:3] == ["all", "1,600", "199.0"] for line in lines)
    assert "Straggler: rank 1 waits for its data: last to reach the gradient all-reduce in 100% of 50 steps" in text
    assert "arrivals" not in results["distributed"]["ranks"][0]  # used for the pairing, not kept
    assert any(line.split()[:4] == ["of", "which", "rank", "0"] for line in lines)


def test_report_shows_scaling_efficiency_and_the_straggler_of_ddp_configurations(tmp_path):
    from segperf.report import build_report
    from segperf.report.sweep import load_sweep
    from tests.test_report import make_results, write_sweep

    def ddp(ips: float, slowest: int, seed: int) -> dict:
        dist = {"world_size": 4, "slowest_rank": slowest, "slowest_lag_s": 0.012, "ranks": []}
        return make_results(ips, seed=seed, distributed=dist)

    sweep = write_sweep(
        tmp_path / "sweep",
        {
            "0_trainer=default,seed=0": make_results(100.0, seed=0),
            "1_trainer=ddp,seed=0": ddp(360.0, 2, 0),
            "2_trainer=default,seed=1": make_results(100.0, seed=1),
            "3_trainer=ddp,seed=1": ddp(360.0, 2, 1),
        },
    )
    report = build_report(load_sweep(sweep), tmp_path, charts_too=False).read_text()
    section = report.split("## Data-parallel scaling", 1)[1]
    lines = [line for line in section.splitlines() if line.startswith("| ")]
    rows = {cells[0]: cells for cells in ([c.strip() for c in line.strip("| ").split(" | ")] for line in lines)}
    assert rows["trainer=ddp"][1:] == ["4", "360", "90.0", "3.60×", "90%", "2 (2 of 2 runs)", "12"]
    assert rows["trainer=default"][1:6] == ["1", "100", "100", "1.00×", "100%"]


def test_report_of_single_process_runs_has_no_data_parallel_section(tmp_path):
    from segperf.report import build_report
    from segperf.report.sweep import load_sweep
    from tests.test_report import make_results, write_sweep

    sweep = write_sweep(tmp_path / "sweep", {"0_seed=0": make_results(100.0), "1_seed=1": make_results(90.0, seed=1)})
    assert "Data-parallel" not in build_report(load_sweep(sweep), tmp_path, charts_too=False).read_text()


# -- real DDP on this CPU -----------------------------------------------------------------------
DDP_CPU = ["trainer=ddp", "trainer.accelerator=cpu", "trainer.devices=2", "warmup_steps=1"]


def read(path: Path) -> dict:
    return json.loads(path.read_text())


def assert_one_record_with_rank_rows(run_dir: Path, train_images: int) -> dict:
    results = read(run_dir / "results.json")
    assert results["status"] == "completed", results.get("error")
    dist = results["distributed"]
    assert (dist["world_size"], dist["backend"], dist["devices_per_node"]) == (2, "gloo", 2)
    assert [r["rank"] for r in dist["ranks"]] == [0, 1]
    images = [r["images"] for r in dist["ranks"]]
    assert images == [train_images // 2] * 2 and sum(images) == dist["images"] == results["train"]["images"]
    rates = [r["images_per_s"] for r in dist["ranks"]]
    assert results["train"]["images_per_s"] == pytest.approx(sum(rates))
    assert dist["slowest_rank"] in (0, 1)
    assert all(r["data_wait_mean_s"] is not None and r["train_step_mean_s"] > 0 for r in dist["ranks"])
    assert results["progress"]["images_done"] == train_images
    # rank 0 alone writes the run's files; rank 1 leaves only its log (and Lightning's profile report)
    assert sorted(p.name for p in run_dir.glob("results*.json")) == ["results.json"]
    assert (run_dir / "train_rank1.log").is_file() and not (run_dir / "train_rank1").exists()
    assert "Data-parallel ranks" in (run_dir / "summary.txt").read_text()
    return results


@pytest.mark.slow
def test_a_sweep_of_ddp_jobs_on_two_cpu_processes_writes_one_record_per_job_in_its_own_folder(tmp_path, tiny_carvana):
    """Real DDP (2 processes, gloo) on the U-Net, as the jobs of a multirun. Lightning alone would
    re-run the whole sweep per rank into ./outputs/...: segperf starts each job's second rank as
    that job, in that job's folder, and only rank 0 writes the job's record."""
    sweep = ["seed=0,1", "hydra.sweep.dir=sweep", "hydra.sweep.subdir=${hydra.job.num}"]  # short folder names
    args = ["-m", *TINY, f"data.root={tiny_carvana}", *DDP_CPU, "train_images=16", *sweep]
    done = run_cli(args, cwd=tmp_path, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["sweep"]  # no outputs/ from the other ranks
    jobs = sorted(p for p in (tmp_path / "sweep").iterdir() if p.is_dir())
    assert [p.name for p in jobs] == ["0", "1"]
    for job in jobs:
        results = assert_one_record_with_rank_rows(job, 16)
        assert results["quality"]["val_dice"] is not None  # reduced over both ranks' validation images
        assert (job / "checkpoints" / "last.ckpt").is_file() and (job / ".hydra" / "config.yaml").is_file()
    seeds = [read(job / "results.json")["config"]["seed"] for job in jobs]
    assert seeds == [0, 1]  # each job's ranks ran that job's settings
    from tensorboard.backend.event_processing.event_multiplexer import EventMultiplexer

    events = EventMultiplexer().AddRunsFromDirectory(str(jobs[0])).Reload()
    tags = {tag for run in events.Runs().values() for tag in run.get("scalars", [])}
    assert {"ranks/images_per_s/rank0", "ranks/images_per_s/rank1", "ranks/ready_mean_s/rank1"} <= tags


# -- what each rank does on its own --------------------------------------------------------------
def test_each_rank_samples_the_gpu_of_its_local_rank(monkeypatch):
    from segperf.perf.sampler import sampled_gpu

    monkeypatch.setattr(torch.cuda, "device_count", lambda: 4)
    monkeypatch.setattr(torch.cuda, "current_device", lambda: 0)
    for key in ("LOCAL_RANK", "SLURM_LOCALID"):
        monkeypatch.delenv(key, raising=False)
    assert sampled_gpu() == 0  # one process
    monkeypatch.setenv("SLURM_LOCALID", "3")
    assert sampled_gpu() == 3  # srun's fourth task on the node
    monkeypatch.setenv("LOCAL_RANK", "2")
    assert sampled_gpu() == 2
    monkeypatch.setenv("LOCAL_RANK", "5")  # one GPU per task (CUDA_VISIBLE_DEVICES): not an index here
    assert sampled_gpu() == 3


def test_an_error_on_one_rank_does_not_wait_for_the_others_to_checkpoint(tmp_path):
    from segperf.callbacks import InterruptCheckpoint

    saved = []
    trainer = SimpleNamespace(global_step=5, world_size=2, save_checkpoint=saved.append)
    InterruptCheckpoint(tmp_path).on_exception(trainer, None, RuntimeError("CUDA error"))
    assert saved == []  # the others sit in a collective: a checkpoint barrier would never return
    InterruptCheckpoint(tmp_path).on_exception(trainer, None, KeyboardInterrupt())
    assert saved == [tmp_path / "interrupted.ckpt"]  # Ctrl-C reaches every rank: all of them save


@pytest.mark.parametrize(
    ("slow_part", "cause"),
    [("data_wait_mean_s", "data"), ("forward_mean_s", "host"), ("backward_compute_mean_s", "backward")],
)
def test_the_straggler_is_named_for_the_part_of_its_arrival_that_is_late(slow_part, cause):
    rows = []
    for rank in range(3):
        r = {**row(rank, 80, 10.0, 0.002, 0.01), "backward_compute_mean_s": 0.02, "allreduce_wait_mean_s": 0.001}
        r["arrivals"] = [0.032 + 0.0005 * (i % 3) for i in range(40)]
        rows.append(r)
    rows[2][slow_part] += 0.03
    for r in rows:
        r["ready_mean_s"] = r["data_wait_mean_s"] + r["forward_mean_s"] + r["backward_compute_mean_s"]
    rows[2]["arrivals"] = [a + 0.03 for a in rows[2]["arrivals"]]
    rows[0]["allreduce_wait_mean_s"] = rows[1]["allreduce_wait_mean_s"] = 0.031
    found = combine(rows)["straggler"]
    assert (found["rank"], found["cause"]) == (2, cause)
    assert found["last_share"] == 1.0 and found["lag_median_s"] == pytest.approx(0.03, abs=0.002)
    assert found["others_allreduce_wait_mean_s"] == pytest.approx(0.031)


def test_a_rank_late_now_and_then_is_no_straggler():
    # rank 1's mean is higher (one stall of 0.5 s), but it is last in only a few steps
    a = [0.03 + 0.001 * (i % 2) for i in range(40)]
    b = [0.03 + 0.001 * ((i + 1) % 2) for i in range(40)]
    b[7] += 0.5
    rows = [{**row(0, 80, 10.0, 0.0, 0.03), "arrivals": a}, {**row(1, 80, 10.0, 0.0125, 0.03), "arrivals": b}]
    combined = combine(rows)
    assert combined["slowest_rank"] == 1  # by the means, as a plain delta would say
    assert combined["straggler"]["rank"] is None and "no rank stands out" in combined["straggler"]["text"]
