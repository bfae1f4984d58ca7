"""The LightningModule: loss, optimizer, metrics, and the device-side input conversion."""

from __future__ import annotations

import warnings
from collections.abc import Callable
from typing import Any, Literal

import lightning as L
import torch
import torch.nn.functional as F
from lightning.pytorch.loggers import TensorBoardLogger
from torch._dynamo.exc import TorchDynamoException
from torchmetrics import MeanMetric
from torchmetrics.classification import MulticlassAccuracy
from torchmetrics.segmentation import DiceScore

from segperf.model.hook_state import PlainHookState
from segperf.model.optim import configure_adam
from segperf.model.step_logging import TrainLossLogging
from segperf.model.unet import UNet
from segperf.quality import Quality

MemoryFormat = Literal["nchw", "channels_last"]


class SegmentationModule(PlainHookState, TrainLossLogging, L.LightningModule):
    """Trains a segmentation net with cross-entropy and Adam (lr 1e-4 and no schedule, as in the
    seed; `scheduler` is a learning-rate schedule stepped every training step, see
    segperf.model.optim.configure_adam).

    Batches arrive as `(image uint8 [B, H, W, 3], mask uint8 [B, H, W])`: uint8 moves 4x fewer
    bytes host-to-device than float32, and HWC is what the JPEG decoder produces. The float
    conversion and the memory-layout choice happen on the device, in `on_after_batch_transfer`.
    """

    # the run's quality: what the report, the tuner's guard and infer judge it by (segperf.quality)
    quality = Quality("val/dice", "max", label="val Dice")

    def __init__(
        self,
        net: UNet,
        lr: float = 1e-4,
        memory_format: MemoryFormat = "nchw",
        compile: bool = False,
        sample_panels: int = 4,
        scheduler: Callable[..., Any] | None = None,
    ) -> None:
        super().__init__()
        # logged to TensorBoard once at the end, with the run's outcome (segperf.training.run.log_hparams);
        # not the scheduler: a functools.partial, and checkpoints hold plain data only
        self.save_hyperparameters(ignore=["net", "scheduler"], logger=False)
        self.net = net
        self.lr = lr
        self.scheduler = scheduler
        self.memory_format = memory_format
        self.sample_panels = sample_panels
        if memory_format == "channels_last":
            self.net.to(memory_format=torch.channels_last)
        # why compile was turned off during the run (its compiler failed), for results.json
        self.compile_fallback: str | None = None
        if compile:
            # in place, so state_dict keys stay those of the plain net (checkpoints interchange);
            # compilation happens lazily at the first call and is counted as warm-up.
            self.net.compile()
        num_classes = net.config["num_classes"]
        self.val_pixel_accuracy = MulticlassAccuracy(num_classes, average="micro", multidim_average="global")
        with warnings.catch_warnings():
            # torchmetrics 1.9 warns whenever average="micro" is given, that its default will change:
            # it is given here on purpose, so the note says nothing to a segperf user
            warnings.filterwarnings("ignore", message=r"DiceScore metric currently defaults to `average=micro`")
            self.val_dice = DiceScore(num_classes, include_background=False, average="micro", input_format="index")
        self.val_loss = MeanMetric()  # weighted by batch size: the mean over all validation images

    # -- device-side input conversion -------------------------------------------------------
    def on_after_batch_transfer(self, batch, dataloader_idx: int):
        image, mask = batch
        # [B, H, W, 3] -> [B, 3, H, W] is a free view whose strides are already channels-last.
        image = image.permute(0, 3, 1, 2)
        if self.memory_format == "nchw":
            # the layout conversion the seed's "align tensor memory layouts" axis avoids
            image = image.contiguous()
        image = image.float().div_(255.0)  # .float() keeps the strides: NCHW stays NCHW, NHWC stays NHWC
        return image, mask.long()

    # -- steps ------------------------------------------------------------------------------
    def forward(self, image: torch.Tensor) -> torch.Tensor:
        try:
            return self.net(image)
        except TorchDynamoException as error:  # the compiler failed (no C++ compiler, no Triton, ...)
            if self.net._compiled_call_impl is None:
                raise
            self._fall_back_to_eager(error)
            return self.net(image)

    def _fall_back_to_eager(self, error: Exception) -> None:
        """Whether torch.compile works on a machine is only known at the first call: rather than
        lose the run, train on without it, say so once and record it."""
        self.net._compiled_call_impl = None  # nn.Module.compile() in reverse: plain eager calls
        root = error  # dynamo wraps the compiler's own error; that one says what is missing
        while (inner := getattr(root, "inner_exception", None) or root.__cause__) is not None:
            root = inner
        lines = str(root).strip().splitlines()
        self.compile_fallback = f"{type(root).__name__}: {lines[0] if lines else ''}"[:300]
        print(
            f"segperf: note: torch.compile failed ({self.compile_fallback}); "
            "the run continues without it (as model.compile=false) and records this in results.json."
        )

    def training_step(self, batch, batch_idx: int) -> torch.Tensor:
        image, mask = batch
        loss = F.cross_entropy(self(image), mask)
        self.log_train_loss(loss, image.shape[0])  # at the steps the logger writes (segperf.model.step_logging)
        return loss

    def validation_step(self, batch, batch_idx: int) -> None:
        image, mask = batch
        logits = self(image)
        loss = F.cross_entropy(logits, mask)
        pred = logits.argmax(dim=1)
        self.val_pixel_accuracy.update(pred, mask)
        self.val_dice.update(pred, mask)
        self.val_loss.update(loss, weight=image.shape[0])
        if batch_idx == 0:
            self._log_sample_panels(image, mask, pred)

    def on_validation_epoch_end(self) -> None:
        # torchmetrics reduce over all ranks' validation images under DDP
        metrics = {
            "val/pixel_accuracy": self.val_pixel_accuracy.compute(),
            "val/dice": self.val_dice.compute(),
            "val/loss": self.val_loss.compute(),
        }
        for name, value in metrics.items():
            self.log(name, value)
        for metric in (self.val_pixel_accuracy, self.val_dice, self.val_loss):
            metric.reset()

    def configure_optimizers(self) -> Any:
        return configure_adam(self, self.lr, self.scheduler)

    def on_save_checkpoint(self, checkpoint: dict) -> None:
        super().on_save_checkpoint(checkpoint)  # the validation history
        # plain data, so `torch.load(weights_only=True)` can rebuild the net
        checkpoint["net_config"] = dict(self.net.config)

    # -- TensorBoard ------------------------------------------------------------------------
    def _log_sample_panels(self, image: torch.Tensor, mask: torch.Tensor, pred: torch.Tensor) -> None:
        """image | true mask | predicted mask, one row per sample, under `val/samples`."""
        if self.sample_panels <= 0 or self.trainer.sanity_checking:
            return
        loggers = [lg for lg in self.loggers if isinstance(lg, TensorBoardLogger)]
        if not loggers:
            return
        n = min(self.sample_panels, image.shape[0])
        rgb = image[:n].float().clamp(0, 1)
        true = mask[:n, None].float().expand(-1, 3, -1, -1)
        guess = pred[:n, None].float().expand(-1, 3, -1, -1)
        rows = torch.cat([rgb, true, guess], dim=3)  # side by side along the width
        panel = torch.cat(list(rows), dim=1).cpu()  # one row per sample, stacked
        for logger in loggers:
            logger.experiment.add_image("val/samples", panel, self.global_step)
