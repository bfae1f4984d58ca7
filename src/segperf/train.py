"""`python -m segperf.train [overrides]`: one measured training run (or a sweep with -m).

Reads top to bottom like the run: data, model, callbacks, logger, trainer; fit; a last
validation if the schedule did not end on one; results.json and summary.txt in the run dir.
"""

from __future__ import annotations

import os
import warnings
from pathlib import Path
from typing import Any

os.environ.setdefault("NO_ALBUMENTATIONS_UPDATE", "1")  # no network call on import

import hydra
import lightning as L
import torch
from hydra.core.hydra_config import HydraConfig
from hydra.types import RunMode
from hydra.utils import instantiate
from lightning.pytorch.callbacks import ModelCheckpoint
from omegaconf import DictConfig, OmegaConf

from segperf.config import CONFIG_DIR
from segperf.model.unet import describe
from segperf.perf.measure import RunMeasurement
from segperf.perf.ops_profile import OperatorProfile
from segperf.perf.results import record_failure, write_json_atomic, write_text_atomic
from segperf.perf.summary import format_run_summary
from segperf.trainer import build_trainer, precision_notice

# Lightning's notes that say nothing to a segperf user: the module's device-side conversion is
# meant to take over from the DataModule's hook, and a pytree deprecation inside Lightning itself.
warnings.filterwarnings("ignore", message=r".*overridden `on_after_batch_transfer`.*")
warnings.filterwarnings("ignore", message=r".*isinstance\(treespec, LeafSpec\)` is deprecated.*")


def train(cfg: DictConfig, run_dir: Path) -> dict[str, Any]:
    """Run one experiment; always leaves results.json in `run_dir`, also when it fails."""
    reset_global_state()
    L.seed_everything(cfg.seed, workers=True)
    results: dict[str, Any] = {"status": "failed", "dataset": {}, "train": {}, "quality": {}, "notices": []}
    results["axes"] = axis_settings(cfg)
    results["config"] = OmegaConf.to_container(cfg, resolve=True)
    measurement = RunMeasurement(run_dir, cfg.warmup_steps, cfg.perf.sample_interval_s, cfg.perf.measure)
    datamodule = module = trainer = ops = None
    try:
        with measurement.span("define_model"):
            datamodule = instantiate(cfg.data)
            net = instantiate(cfg.model.net)
            net.check_input_size(cfg.data.height, cfg.data.width)  # before any work, not at the first step
            print(describe(net, cfg.data.height, cfg.data.width))
            module = instantiate(cfg.model, net=net)
        if notice := precision_notice(cfg.trainer.precision, cfg.trainer.accelerator):
            print(f"segperf: note: {notice}")
            results["notices"].append(notice)

        checkpoint = ModelCheckpoint(dirpath=run_dir / "checkpoints", save_last=True, save_top_k=0)
        callbacks = [measurement.clock, checkpoint]
        if cfg.perf.ops_steps:
            ops = OperatorProfile(run_dir, steps=cfg.perf.ops_steps, skip_steps=cfg.warmup_steps)
            callbacks.append(ops)
        logger = measurement.make_logger(run_dir)
        trainer = build_trainer(
            OmegaConf.to_container(cfg.trainer, resolve=True),
            val_every_images=cfg.val_every_images,
            batch_size=cfg.batch_size,
            callbacks=callbacks,
            logger=logger,
            profiler=measurement.profiler,
            default_root_dir=run_dir,
        )
        measurement.clock.mark("fit_called")
        trainer.fit(module, datamodule=datamodule)
        measurement.clock.mark("fit_returned")
        if not trainer.interrupted and trainer.global_step % trainer.val_check_batch:
            with measurement.span("validation"):
                trainer.validate(module, datamodule=datamodule, verbose=False)  # quality at the very end
        results["status"] = "interrupted" if trainer.interrupted else "completed"
    except BaseException as error:
        record_failure(results, error)
        raise
    finally:
        measurement.finish(results, trainer, module)
        if ops is not None and ops.result is not None:
            results["ops"] = ops.result
        finish_results(results, trainer, datamodule)
        write_json_atomic(run_dir / "results.json", results)
        summary = format_run_summary(results)
        write_text_atomic(run_dir / "summary.txt", summary)
        print(summary, end="")
        print(f"Results: {run_dir / 'results.json'}")
    return results


def reset_global_state() -> None:
    """Sweep jobs share one process (Hydra's basic launcher): drop what an earlier job left."""
    torch._dynamo.reset()  # compiled graphs and their guards
    torch.set_float32_matmul_precision("highest")  # torch's default; a job may have changed it
    torch.backends.cudnn.benchmark = False  # Lightning keeps the current value when benchmark=null
    if torch.cuda.is_available():
        torch.cuda.reset_peak_memory_stats()


def finish_results(results: dict[str, Any], trainer, datamodule) -> None:
    """Fill in what the run did, from whatever got built before it ended."""
    if datamodule is not None and datamodule.split is not None:
        results["dataset"] = datamodule.summary()
    if trainer is None:
        return
    results["device"] = str(trainer.strategy.root_device)
    results["precision"] = trainer.precision
    metrics = trainer.callback_metrics
    results["quality"] = {
        "val_pixel_accuracy": _item(metrics.get("val/pixel_accuracy")),
        "val_dice": _item(metrics.get("val/dice")),
        "val_loss": _item(metrics.get("val/loss")),
    }
    log_hparams(trainer, results)


def axis_settings(cfg: DictConfig) -> dict[str, Any]:
    """The value each optimization axis resolved to: what a sweep varies, and what TensorBoard's
    HParams view and the report group runs by."""
    return {
        "workers": cfg.data.num_workers,
        "prefetch": cfg.data.prefetch_factor,
        "pin": cfg.data.pin_memory,
        "upsample": cfg.model.net.upsample,
        "memory_format": cfg.model.memory_format,
        "compile": cfg.model.compile,
        "precision": cfg.trainer.precision,
        "batch_size": cfg.batch_size,
        "train_images": cfg.train_images,
    }


def log_hparams(trainer: L.Trainer, results: dict[str, Any]) -> None:
    """Axis settings with the run's outcome, once at the end, for TensorBoard's HParams view."""
    metrics = {
        "hp/images_per_s": results["train"].get("images_per_s"),
        "hp/val_dice": results["quality"].get("val_dice"),
        "hp/val_pixel_accuracy": results["quality"].get("val_pixel_accuracy"),
        "hp/data_wait_fraction": (results.get("phases") or {}).get("data_wait", {}).get("fraction"),
    }
    params = {k: str(v) if v is None else v for k, v in results["axes"].items()}
    for logger in trainer.loggers:
        logger.log_hyperparams(params, {k: v for k, v in metrics.items() if v is not None})
        logger.save()


def _item(value: Any) -> float | None:
    return None if value is None else float(value.item() if isinstance(value, torch.Tensor) else value)


@hydra.main(config_path=str(CONFIG_DIR), config_name="train", version_base="1.3")
def main(cfg: DictConfig) -> None:
    hydra_cfg = HydraConfig.get()
    run_dir = Path(hydra_cfg.runtime.output_dir)
    try:
        train(cfg, run_dir)
    except Exception as error:
        if hydra_cfg.mode != RunMode.MULTIRUN:
            raise
        # One failed job (out of memory, a crashed worker) must not end the sweep: its
        # results.json already records the error, and the report lists it.
        print(
            f"segperf: job {hydra_cfg.job.num} failed ({type(error).__name__}: {error}); "
            f"recorded in {run_dir / 'results.json'}; the sweep goes on."
        )


if __name__ == "__main__":
    main()
