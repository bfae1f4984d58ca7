"""One measured training run: `train(cfg, run_dir)`, what `python -m segperf.train` calls.

Reads top to bottom like the run: data, model, callbacks, logger, trainer; fit; a last
validation if the schedule did not end on one. How it ended and what it measured go into
results.json and summary.txt through `RunRecord` (segperf.training.record), whatever happens.
Kept apart from the command line (segperf.train) because torch, Lightning and the libraries
they pull in take seconds to import, which `--cfg job`, `--help` and Hydra's config checks
need not wait for.
"""

from __future__ import annotations

import gc
import warnings
from pathlib import Path
from typing import Any

import lightning as L
import torch
from hydra.utils import instantiate
from lightning.pytorch.loggers import TensorBoardLogger
from lightning.pytorch.profilers import SimpleProfiler
from omegaconf import DictConfig, open_dict

from segperf.training.checkpoints import AtomicCheckpointIO
from segperf.training.compile_cache import use_private_copy
from segperf.training.distributed import per_job_rank_commands
from segperf.training.record import RunRecord
from segperf.training.trainer import build_trainer, precision_notice
from segperf.training.workload import build_workload

# Lightning's notes that say nothing to a segperf user: the module's device-side conversion is
# meant to take over from the DataModule's hook, and a pytree deprecation inside Lightning itself.
warnings.filterwarnings("ignore", message=r".*overridden `on_after_batch_transfer`.*")
warnings.filterwarnings("ignore", message=r".*isinstance\(treespec, LeafSpec\)` is deprecated.*")

TORCH_THREADS = torch.get_num_threads()  # torch's own choice, restored before every sweep job


def train(cfg: DictConfig, run_dir: Path) -> dict[str, Any]:
    """Run one experiment; always leaves results.json in `run_dir`, also when it fails or is
    interrupted (then with a checkpoint to resume from, see segperf.training.resume)."""
    reset_global_state()
    with open_dict(cfg):
        cfg.paths.output_dir = str(run_dir)  # the callbacks write under it
    with RunRecord(cfg, run_dir) as record:
        cfg = record.prepare()  # every bad value at once; what this machine cannot do; resume
        if cfg.model.get("compile"):  # torch.compile's cache: this process's own copy (compile_cache)
            use_private_copy()
        if cfg.num_threads:  # the threads group: torch's intra-op threads for this run
            torch.set_num_threads(cfg.num_threads)
        record.results["torch_threads"] = torch.get_num_threads()
        L.seed_everything(cfg.seed, workers=True)
        callbacks = record.use_callbacks([instantiate(c) for c in cfg.callbacks.values()])  # PerfMonitor among them

        with record.span("define_model"):  # segperf's or the user's LightningModule, one path
            workload = record.workload = build_workload(cfg)
            datamodule, module = record.datamodule, record.module = workload.datamodule, workload.module
            print(workload.description)
        if notice := precision_notice(cfg.trainer.precision, cfg.trainer.accelerator):
            record.notice(notice)

        with record.span("setup"):  # the Trainer's construction is set-up too, as its fit's own is
            trainer = record.trainer = build_trainer(
                cfg.trainer,
                callbacks=callbacks,
                logger=TensorBoardLogger(save_dir=run_dir, name="", version="", default_hp_metric=False),
                # Lightning's own per-action report (fit-lightning-profile.txt); PerfMonitor taps it
                profiler=SimpleProfiler(dirpath=run_dir, filename="lightning-profile") if cfg.perf.measure else None,
                default_root_dir=run_dir,
                plugins=[AtomicCheckpointIO()],
                **workload.trainer_options,
            )
        record.fit_called()  # Trainer.fit's work before its first hook (strategy, prepare_data) is set-up
        with per_job_rank_commands():  # trainer=ddp: the other ranks run this job, in this folder
            trainer.fit(module, datamodule=datamodule, ckpt_path=record.ckpt_path and str(record.ckpt_path))
        # a run without validation (data=none, a module with no val_dataloader()) checkpoints at the end
        if not trainer.interrupted and (trainer.global_step % trainer.val_check_batch or not workload.validates):
            if workload.validates:
                with record.span("validation"):
                    trainer.validate(module, datamodule=datamodule, verbose=False)  # quality at the very end
            with record.span("checkpoint"):  # the trained weights, whatever the validation schedule
                trainer.save_checkpoint(run_dir / "checkpoints" / "last.ckpt")
    return record.results


def reset_global_state() -> None:
    """Sweep jobs share one process (Hydra's basic launcher): drop what an earlier job left."""
    # An earlier job's trainer, module and data sit in reference cycles (trainer <-> module <->
    # callbacks) until the cyclic collector's next full pass: uncollected, they added 50-90 MiB to
    # each later job's peak RSS (556 -> 749 MiB over four CNN runs in one process), memory that is
    # not the job's own. Collected here, every job starts from the same footprint.
    gc.collect()
    torch._dynamo.reset()  # compiled graphs and their guards
    torch.set_float32_matmul_precision("highest")  # torch's default; a job may have changed it
    torch.backends.cudnn.benchmark = False  # Lightning keeps the current value when benchmark=null
    torch.set_num_threads(TORCH_THREADS)  # a job may have set threads=...
    if torch.cuda.is_available():
        torch.cuda.reset_peak_memory_stats()
