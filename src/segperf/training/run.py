"""One measured training run: `train(cfg, run_dir)`, what `python -m segperf.train` calls.

Reads top to bottom like the run: data, model, callbacks, logger, trainer; fit; a last
validation if the schedule did not end on one; results.json and summary.txt in the run dir.
Kept apart from the command line (segperf.train) because torch, Lightning and the libraries
they pull in take seconds to import, which `--cfg job`, `--help` and Hydra's config checks
need not wait for.
"""

from __future__ import annotations

import warnings
from pathlib import Path
from typing import Any

import lightning as L
import torch
from hydra.utils import instantiate
from lightning.pytorch.callbacks import ModelCheckpoint
from lightning.pytorch.utilities import rank_zero_only
from omegaconf import DictConfig, OmegaConf

from segperf.config import plain_config
from segperf.errors import SegperfError, explain, is_worker_error
from segperf.model.unet import UNet, describe
from segperf.perf.counters import HardwareCounters
from segperf.perf.measure import RunMeasurement
from segperf.perf.ops_profile import OperatorProfile
from segperf.perf.results import record_failure, write_json_atomic, write_text_atomic
from segperf.perf.summary import format_run_summary
from segperf.schema import check_settings
from segperf.training.adapt import adapt_to_machine, adjustment_notice
from segperf.training.checkpoints import AtomicCheckpointIO, InterruptCheckpoint, Terminated, TerminateOutsideTraining
from segperf.training.distributed import DistributedJob, gather_ranks, is_distributed, log_ranks, per_job_rank_commands
from segperf.training.resume import resume_checkpoint, resume_command
from segperf.training.trainer import build_trainer, precision_notice

# Lightning's notes that say nothing to a segperf user: the module's device-side conversion is
# meant to take over from the DataModule's hook, and a pytree deprecation inside Lightning itself.
warnings.filterwarnings("ignore", message=r".*overridden `on_after_batch_transfer`.*")
warnings.filterwarnings("ignore", message=r".*isinstance\(treespec, LeafSpec\)` is deprecated.*")

TORCH_THREADS = torch.get_num_threads()  # torch's own choice, restored before every sweep job
# what results.json's `quality` holds for a module that does not say (the U-Net's metrics)
SEGMENTATION_QUALITY = ("val/pixel_accuracy", "val/dice", "val/loss")


def train(cfg: DictConfig, run_dir: Path) -> dict[str, Any]:
    """Run one experiment; always leaves results.json in `run_dir`, also when it fails or is
    interrupted (then with a checkpoint to resume from, see segperf.training.resume)."""
    reset_global_state()
    results: dict[str, Any] = {"status": "failed", "dataset": {}, "train": {}, "quality": {}, "notices": []}
    results["axes"] = axis_settings(cfg)
    results["config"] = plain_config(cfg)
    try:
        # every bad value at once, before any work; then what this machine cannot do
        check_settings(cfg)
        cfg = OmegaConf.create(results["config"])  # plain from here: the schema has done its job
        results["adjusted"] = adapt_to_machine(cfg)
        ckpt_path = resume_checkpoint(run_dir) if cfg.resume else None
    except SegperfError as error:
        record_failure(results, error)
        if not (run_dir / "results.json").exists():  # never overwrite an earlier run's record (resume=)
            write_json_atomic(run_dir / "results.json", results)
        raise
    for setting, change in results["adjusted"].items():
        _notice(results, adjustment_notice(setting, change))
    if ckpt_path is not None:
        results["resumed"] = {"checkpoint": str(ckpt_path)}
        print(f"segperf: resuming {run_dir} from {ckpt_path.name}")
    if cfg.num_threads:  # the threads group: torch's intra-op threads for this run
        torch.set_num_threads(cfg.num_threads)
    results["torch_threads"] = torch.get_num_threads()
    L.seed_everything(cfg.seed, workers=True)
    measurement = RunMeasurement(run_dir, cfg.warmup_steps, cfg.perf.sample_interval_s, cfg.perf.measure)
    for note in measurement.hardware_notes():
        print(f"segperf: note: {note}")
    datamodule = module = trainer = ops = counters = None
    stopper = InterruptCheckpoint(run_dir / "checkpoints")
    job = DistributedJob()
    terminate = TerminateOutsideTraining().install()
    try:
        with measurement.span("define_model"):
            datamodule = instantiate(cfg.data)
            net = instantiate(cfg.model.net)
            if isinstance(net, UNet):
                net.check_input_size(cfg.data.height, cfg.data.width)  # before any work, not at the first step
                print(describe(net, cfg.data.height, cfg.data.width))
            else:
                print(net.describe())
            module = instantiate(cfg.model, net=net)
        if notice := precision_notice(cfg.trainer.precision, cfg.trainer.accelerator):
            _notice(results, notice)

        # checkpoints/last.ckpt, rewritten (atomically) at every validation: what resume= and infer read
        checkpoint = ModelCheckpoint(
            dirpath=run_dir / "checkpoints", filename="last", save_top_k=1, enable_version_counter=False
        )
        callbacks = [measurement.clock, checkpoint, stopper, terminate]
        if cfg.perf.ops_steps:
            ops = OperatorProfile(run_dir, steps=cfg.perf.ops_steps, skip_steps=cfg.warmup_steps)
            callbacks.append(ops)
        if cfg.perf.counters:  # profile=counters: perf stat over the training steps after warm-up
            counters = HardwareCounters(run_dir, skip_steps=cfg.warmup_steps)
            callbacks.append(counters)
        logger = measurement.make_logger(run_dir)
        trainer = build_trainer(
            OmegaConf.to_container(cfg.trainer, resolve=True),
            val_every_images=cfg.val_every_images,
            batch_size=cfg.batch_size,
            callbacks=callbacks,
            logger=logger,
            profiler=measurement.profiler,
            default_root_dir=run_dir,
            plugins=[AtomicCheckpointIO()],
        )
        measurement.clock.mark("fit_called")
        with per_job_rank_commands():  # trainer=ddp: the other ranks run this job, in this folder
            trainer.fit(module, datamodule=datamodule, ckpt_path=None if ckpt_path is None else str(ckpt_path))
        measurement.clock.mark("fit_returned")
        if not trainer.interrupted and trainer.global_step % trainer.val_check_batch:
            with measurement.span("validation"):
                trainer.validate(module, datamodule=datamodule, verbose=False)  # quality at the very end
            with measurement.span("checkpoint"):  # the trained weights, whatever the validation schedule
                trainer.save_checkpoint(run_dir / "checkpoints" / "last.ckpt")
        results["status"] = "completed"
    except BaseException as error:
        if stopper.signal is not None:  # Lightning caught Ctrl-C / SIGTERM and saved a checkpoint
            results["status"] = "interrupted"
            results["error"] = f"interrupted by {stopper.signal}"
            results["interrupted_by"] = stopper.signal
        else:
            record_failure(results, error)
            if isinstance(error, Terminated):  # before the trainer ran
                results["error"], results["interrupted_by"] = "interrupted by SIGTERM", "SIGTERM"
            if is_worker_error(error):
                results["error"] = explain(error)  # the file, not the worker's traceback
        if not isinstance(error, SystemExit) or stopper.signal is None:
            raise
    finally:
        terminate.uninstall()
        measurement.finish(results, trainer, module)
        if ops is not None and ops.result is not None:
            results["ops"] = ops.result
        if counters is not None:
            results["counters"] = counters.finish()
        finish_results(results, cfg, trainer, datamodule, module, run_dir)
        gather_and_record(results, trainer, run_dir, job)
    return results


def gather_and_record(results: dict[str, Any], trainer, run_dir: Path, job: DistributedJob) -> None:
    """One run, one record: under DDP every rank runs train() and sends its row to rank 0, which
    alone writes results.json, summary.txt and the run's last TensorBoard entries."""
    if trainer is not None and trainer.world_size > 1 and results["status"] == "completed" and is_distributed():
        try:
            gather_ranks(results, trainer)
        except Exception as error:  # a rank gone: keep rank 0's own record
            _notice(results, f"per-rank measurement not gathered ({type(error).__name__}: {error})")
    job.close()
    if not (trainer.is_global_zero if trainer is not None else rank_zero_only.rank == 0):
        return
    if trainer is not None:
        log_hparams(trainer, results)
        log_ranks(trainer, results)
    write_json_atomic(run_dir / "results.json", results)
    summary = format_run_summary(results)
    write_text_atomic(run_dir / "summary.txt", summary)
    print(summary, end="")
    print(f"Results: {run_dir / 'results.json'}")


def _notice(results: dict[str, Any], text: str) -> None:
    """Said once, when it happens, and kept in results.json (and summary.txt's notes)."""
    print(f"segperf: note: {text}")
    results["notices"].append(text)


def reset_global_state() -> None:
    """Sweep jobs share one process (Hydra's basic launcher): drop what an earlier job left."""
    torch._dynamo.reset()  # compiled graphs and their guards
    torch.set_float32_matmul_precision("highest")  # torch's default; a job may have changed it
    torch.backends.cudnn.benchmark = False  # Lightning keeps the current value when benchmark=null
    torch.set_num_threads(TORCH_THREADS)  # a job may have set threads=...
    if torch.cuda.is_available():
        torch.cuda.reset_peak_memory_stats()


def finish_results(results: dict[str, Any], cfg: DictConfig, trainer, datamodule, module, run_dir: Path) -> None:
    """Fill in what the run did, from whatever got built before it ended."""
    if datamodule is not None and datamodule.split is not None:
        results["dataset"] = datamodule.summary()
    if module is not None and module.compile_fallback:
        results["adjusted"]["model.compile"] = {
            "requested": True,
            "used": False,
            "reason": f"torch.compile failed at its first call: {module.compile_fallback}",
        }
        results["notices"].append(adjustment_notice("model.compile", results["adjusted"]["model.compile"]))
    if trainer is None:
        return
    world = trainer.world_size  # under DDP each rank trains on train_images // world (segperf.data.base)
    per_rank = cfg.train_images // world
    results["progress"] = {
        "steps_done": trainer.global_step,
        "steps_total": -(-per_rank // cfg.batch_size),
        "images_done": min(trainer.global_step * cfg.batch_size, per_rank) * world,
        "images_total": per_rank * world,
    }
    if "resumed" in results:
        results["resumed"]["from_step"] = trainer.global_step - results["train"].get("steps", 0)
    if results["status"] == "interrupted" and any((run_dir / "checkpoints").glob("*.ckpt")):
        results["resume_command"] = resume_command(run_dir)
    results["device"] = str(trainer.strategy.root_device)
    results["precision"] = trainer.precision
    metrics = trainer.callback_metrics
    names = getattr(module, "quality_metrics", SEGMENTATION_QUALITY)  # the CNN's: val/accuracy, val/loss
    results["quality"] = {name.replace("/", "_"): _item(metrics.get(name)) for name in names}


def axis_settings(cfg: DictConfig) -> dict[str, Any]:
    """The value each optimization axis resolved to: what a sweep varies, and what TensorBoard's
    HParams view and the report group runs by."""
    return {
        "workers": cfg.data.num_workers,
        "prefetch": cfg.data.prefetch_factor,
        "pin": cfg.data.pin_memory,
        "upsample": OmegaConf.select(cfg, "model.net.upsample"),
        "memory_format": cfg.model.memory_format,
        "compile": cfg.model.compile,
        "precision": cfg.trainer.precision,
        "threads": cfg.num_threads,
        # the data pipeline (Carvana): None for a workload without these keys
        "decode": OmegaConf.select(cfg, "data.decode"),
        "cache": OmegaConf.select(cfg, "data.cache"),
        "augment": OmegaConf.select(cfg, "data.augment"),
        "cold_cache": OmegaConf.select(cfg, "data.cold_cache"),
        "batch_size": cfg.batch_size,
        "train_images": cfg.train_images,
        # data-parallel (trainer=ddp): ranks = devices x num_nodes
        "strategy": cfg.trainer.strategy,
        "devices": cfg.trainer.devices,
        "num_nodes": cfg.trainer.num_nodes,
    }


def log_hparams(trainer: L.Trainer, results: dict[str, Any]) -> None:
    """Axis settings with the run's outcome, once at the end, for TensorBoard's HParams view."""
    metrics = {
        "hp/images_per_s": results["train"].get("images_per_s"),
        "hp/val_dice": results["quality"].get("val_dice"),
        "hp/val_pixel_accuracy": results["quality"].get("val_pixel_accuracy"),
        "hp/val_accuracy": results["quality"].get("val_accuracy"),
        "hp/data_wait_fraction": (results.get("phases") or {}).get("data_wait", {}).get("fraction"),
    }
    params = {k: v if isinstance(v, (bool, int, float, str)) else str(v) for k, v in results["axes"].items()}
    for logger in trainer.loggers:
        logger.log_hyperparams(params, {k: v for k, v in metrics.items() if v is not None})
        logger.save()


def _item(value: Any) -> float | None:
    return None if value is None else float(value.item() if isinstance(value, torch.Tensor) else value)
