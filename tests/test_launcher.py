"""Sweeps through hydra-submitit-launcher: `hydra/launcher=slurm` turns a multirun into SLURM jobs with the
settings a GPU cluster needs, and `hydra/launcher=local` runs the same path (submitit's local executor) here.

No SLURM cluster is reachable from CI: the SLURM tests stop at the sbatch script submitit would submit."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
from hydra import compose, initialize_config_dir
from hydra.utils import instantiate
from omegaconf import DictConfig, OmegaConf

from segperf.config import CONFIG_DIR
from tests.conftest import TINY, run_cli
from tests.extras import needs_extra

needs_extra("slurm")
import submitit  # noqa: E402


def compose_with_hydra(*overrides: str) -> DictConfig:
    """The train config with its `hydra` node, as a multirun composes it."""
    with initialize_config_dir(config_dir=str(CONFIG_DIR), version_base="1.3"):
        return compose(config_name="train", overrides=list(overrides), return_hydra_config=True)


def test_slurm_launcher_defaults_to_one_task_per_gpu_and_submitit_requeue():
    launcher = compose_with_hydra("hydra/launcher=slurm").hydra.launcher
    assert launcher._target_.endswith("SlurmLauncher")
    assert (launcher.nodes, launcher.gpus_per_node, launcher.tasks_per_node, launcher.cpus_per_task) == (1, 1, 1, 8)
    assert (launcher.timeout_min, launcher.partition, launcher.mem_gb) == (60, None, None)
    assert (launcher.signal_delay_s, launcher.max_num_timeout) == (120, 2)
    # submitit's pickles and logs stay inside the sweep folder
    assert OmegaConf.to_container(launcher)["submitit_folder"] == "${hydra.sweep.dir}/.submitit/%j"


def test_slurm_request_follows_the_ddp_trainer_one_task_per_gpu():
    cfg = compose_with_hydra("hydra/launcher=slurm", "trainer=ddp", "trainer.devices=4", "trainer.num_nodes=2")
    launcher = cfg.hydra.launcher
    assert (launcher.nodes, launcher.gpus_per_node, launcher.tasks_per_node) == (2, 4, 4)
    # a list of device ids counts its ids
    ids = compose_with_hydra("hydra/launcher=slurm", "trainer=ddp", "trainer.devices=[0,1]").hydra.launcher
    assert (ids.nodes, ids.gpus_per_node, ids.tasks_per_node) == (1, 2, 2)


def test_slurm_settings_from_the_command_line_reach_the_launcher():
    cfg = compose_with_hydra(
        "hydra/launcher=slurm",
        "hydra.launcher.partition=gpu",
        "hydra.launcher.nodes=2",
        "hydra.launcher.gpus_per_node=4",
        "hydra.launcher.cpus_per_task=12",
        "hydra.launcher.timeout_min=240",
    )
    launcher = cfg.hydra.launcher
    assert (launcher.partition, launcher.nodes, launcher.timeout_min) == ("gpu", 2, 240)
    assert (launcher.gpus_per_node, launcher.tasks_per_node, launcher.cpus_per_task) == (4, 4, 12)
    # run folders keep their <job>_<override_dirname> names (cut to a length file systems take)
    subdir = "${job_dirname:${hydra.job.num},${hydra.job.override_dirname}}"
    assert OmegaConf.to_container(cfg.hydra.sweep)["subdir"] == subdir


def test_slurm_sweep_submits_an_sbatch_script_with_the_settings(tmp_path, monkeypatch):
    """The launcher as Hydra runs it, up to the point where submitit would call sbatch."""
    fake_bin = tmp_path / "bin"
    fake_bin.mkdir()
    (fake_bin / "srun").write_text("#!/bin/sh\nexit 1\n")  # submitit refuses to start where srun is missing
    (fake_bin / "srun").chmod(0o755)
    monkeypatch.setenv("PATH", f"{fake_bin}{os.pathsep}{os.environ['PATH']}")
    executors = []
    monkeypatch.setattr(submitit.AutoExecutor, "map_array", lambda self, fn, *args: executors.append(self) or [])
    sweep = tmp_path / "sweep"
    overrides = ["hydra/launcher=slurm", "hydra.launcher.partition=gpu", "trainer=ddp", "trainer.devices=4"]
    cfg = compose_with_hydra(*overrides, "hydra.launcher.setup=[module load cuda]", f"hydra.sweep.dir={sweep}")

    launcher = instantiate(cfg.hydra.launcher)
    launcher.setup(hydra_context=object(), task_function=print, config=cfg)
    launcher.launch([["pin=off"], ["pin=on"]], initial_job_idx=0)

    slurm = executors[0]._executor
    script = slurm._make_submission_file_text("python -m segperf.train", "uid")
    for line in (
        "#SBATCH --partition=gpu",
        "#SBATCH --nodes=1",
        "#SBATCH --gpus-per-node=4",
        "#SBATCH --ntasks-per-node=4",
        "#SBATCH --cpus-per-task=8",
        "#SBATCH --time=60",
        "#SBATCH --signal=USR2@120",  # submitit's requeue signal
        "module load cuda",
    ):
        assert line in script.splitlines(), script
    assert slurm.max_num_timeout == 2
    assert Path(slurm.folder).parent == sweep / ".submitit"


@pytest.mark.slow
def test_local_submitit_sweep_runs_both_jobs_into_named_run_folders(tmp_path, tiny_carvana):
    args = ["-m", "hydra/launcher=local", "pin=off,on", *TINY, f"data.root={tiny_carvana}", "hydra.sweep.dir=sweep"]
    # the command of docs/scaling-out.md; it needs train.py's `__main__` to call the imported entry point (a
    # launcher pickles the task function, and one of `__main__` drags torch.backends.cudnn along)
    done = run_cli(args, cwd=tmp_path, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    sweep = tmp_path / "sweep"
    runs = sorted(p.name for p in sweep.iterdir() if (p / "results.json").exists())
    assert len(runs) == 2 and runs[0].startswith("0_") and runs[1].startswith("1_"), runs
    assert "pin=off" in runs[0] and "pin=on" in runs[1]  # hydra.sweep.subdir: <job>_<override_dirname>
    for run in runs:
        results = json.loads((sweep / run / "results.json").read_text())
        assert results["status"] == "completed"
        assert results["machine"]["hostname"]
    assert list((sweep / ".submitit").glob("*/*_log.out")), "submitit's logs belong inside the sweep folder"
    assert not (tmp_path / ".submitit").exists()
