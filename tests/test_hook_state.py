"""segperf's LightningModules store Lightning's per-hook bookkeeping as plain attributes: a training
step assigns it without nn.Module's attribute checks, while parameters, buffers and submodules are
registered as before and Lightning still knows which hook is running."""

from __future__ import annotations

from collections import Counter

import lightning as L
import pytest
import torch
from torch import nn
from torch.utils.data import DataLoader, TensorDataset

from segperf.model.cnn import ClassificationModule, DigitCNN
from segperf.model.hook_state import PLAIN_ATTRIBUTES
from segperf.model.module import SegmentationModule
from segperf.model.unet import UNet


def cnn_module() -> ClassificationModule:
    return ClassificationModule(DigitCNN(channels=[4], hidden=8))


def unet_module() -> SegmentationModule:
    return SegmentationModule(UNet(stem_channels=4, level_channels=[8, 16]))


def test_a_training_step_sets_no_bookkeeping_attribute_through_nn_module(monkeypatch):
    module_sets: Counter[str] = Counter()
    module_setattr = nn.Module.__setattr__

    def counting(self, name, value):
        module_sets[name] += 1
        module_setattr(self, name, value)

    monkeypatch.setattr(nn.Module, "__setattr__", counting)
    torch.manual_seed(0)
    data = TensorDataset(torch.randint(0, 256, (24, 28, 28), dtype=torch.uint8), torch.randint(0, 10, (24,)))
    seen_in_step: list[str | None] = []

    class Watching(ClassificationModule):
        def training_step(self, batch, batch_idx):
            seen_in_step.append(self._current_fx_name)
            return super().training_step(batch, batch_idx)

    module = Watching(DigitCNN(channels=[4], hidden=8))
    module_sets.clear()
    trainer = L.Trainer(
        max_epochs=1,
        logger=False,
        log_every_n_steps=2,
        enable_checkpointing=False,
        enable_progress_bar=False,
        enable_model_summary=False,
        limit_val_batches=0,
        accelerator="cpu",
    )
    trainer.fit(module, DataLoader(data, batch_size=4))

    assert trainer.global_step == 6
    assert not PLAIN_ATTRIBUTES & set(module_sets), f"set through nn.Module: {dict(module_sets)}"
    # what Lightning's self.log reads to know where it is called from
    assert seen_in_step == ["training_step"] * 6
    assert module._current_fx_name is None and "_current_fx_name" in vars(module)


@pytest.mark.parametrize("make", [cnn_module, unet_module])
def test_parameters_buffers_and_submodules_still_register(make):
    module = make()
    module.extra = nn.Linear(2, 2)
    module.scale = nn.Parameter(torch.ones(1))
    module.register_buffer("offset", torch.zeros(1))
    module.offset = torch.ones(1)
    assert "extra" in module._modules and "scale" in module._parameters
    assert torch.equal(module._buffers["offset"], torch.ones(1))
    # a tensor under a bookkeeping name is not plain bookkeeping: nn.Module decides, as before
    module._current_fx_name = nn.Parameter(torch.zeros(1))
    assert "_current_fx_name" in module._parameters
