"""`python -m segperf.train [overrides]`: one measured training run (or a sweep with -m).

Reads top to bottom like the run: data, model, callbacks, logger, trainer; fit; a last
validation if the schedule did not end on one; results.json and summary.txt in the run dir.
"""

from __future__ import annotations

import os
import traceback
from pathlib import Path
from typing import Any

os.environ.setdefault("NO_ALBUMENTATIONS_UPDATE", "1")  # no network call on import

import hydra
import lightning as L
import torch
from hydra.core.hydra_config import HydraConfig
from hydra.utils import instantiate
from lightning.pytorch.callbacks import ModelCheckpoint
from lightning.pytorch.loggers import TensorBoardLogger
from omegaconf import DictConfig, OmegaConf

from segperf.config import CONFIG_DIR
from segperf.model.unet import describe
from segperf.perf.results import format_summary, write_json_atomic, write_text_atomic
from segperf.perf.throughput import TrainThroughput
from segperf.trainer import build_trainer, validation_interval


def train(cfg: DictConfig, run_dir: Path) -> dict[str, Any]:
    """Run one experiment; always leaves results.json in `run_dir`, also when it fails."""
    L.seed_everything(cfg.seed, workers=True)
    results: dict[str, Any] = {"status": "failed", "dataset": {}, "train": {}, "quality": {}}
    results["config"] = OmegaConf.to_container(cfg, resolve=True)
    throughput = TrainThroughput(warmup_steps=cfg.warmup_steps)
    trainer = None
    try:
        datamodule = instantiate(cfg.data)
        net = instantiate(cfg.model.net)
        net.check_input_size(cfg.data.height, cfg.data.width)  # before any work, not at the first step
        print(describe(net, cfg.data.height, cfg.data.width))
        module = instantiate(cfg.model, net=net)

        checkpoint = ModelCheckpoint(dirpath=run_dir / "checkpoints", save_last=True, save_top_k=0)
        logger = TensorBoardLogger(save_dir=run_dir, name="", version="", default_hp_metric=False)
        trainer = build_trainer(
            OmegaConf.to_container(cfg.trainer, resolve=True),
            val_every_images=cfg.val_every_images,
            batch_size=cfg.batch_size,
            callbacks=[throughput, checkpoint],
            logger=logger,
            default_root_dir=run_dir,
        )
        results["device"] = str(trainer.strategy.root_device)
        results["precision"] = trainer.precision
        trainer.fit(module, datamodule=datamodule)
        results["dataset"] = datamodule.summary()
        if trainer.interrupted:
            results["status"] = "interrupted"
        else:
            if trainer.global_step % validation_interval(cfg.val_every_images, cfg.batch_size):
                trainer.validate(module, datamodule=datamodule, verbose=False)  # quality at the end
            results["status"] = "completed"
    except BaseException as error:
        results["status"] = "interrupted" if isinstance(error, KeyboardInterrupt) else "failed"
        results["error"] = f"{type(error).__name__}: {error}"
        results["traceback"] = traceback.format_exc()
        raise
    finally:
        if trainer is not None:
            metrics = trainer.callback_metrics
            results["quality"] = {
                "val_pixel_accuracy": _item(metrics.get("val/pixel_accuracy")),
                "val_dice": _item(metrics.get("val/dice")),
                "val_loss": _item(metrics.get("val/loss")),
            }
            if "datamodule" in locals() and datamodule.split is not None:
                results["dataset"] = datamodule.summary()
        results["train"] = throughput.summary()
        write_json_atomic(run_dir / "results.json", results)
        summary = format_summary(results)
        write_text_atomic(run_dir / "summary.txt", summary)
        print(summary, end="")
        print(f"Results: {run_dir / 'results.json'}")
    return results


def _item(value: Any) -> float | None:
    return None if value is None else float(value.item() if isinstance(value, torch.Tensor) else value)


@hydra.main(config_path=str(CONFIG_DIR), config_name="train", version_base="1.3")
def main(cfg: DictConfig) -> None:
    train(cfg, Path(HydraConfig.get().runtime.output_dir))


if __name__ == "__main__":
    main()
