"""The nets (plain nn.Modules) and their LightningModules.

Every net answers the same small interface, so the run treats them alike: `config` (plain data,
saved in checkpoints), `check_input_size(height, width)` (raises before any work when the data's
size does not fit the net) and `describe(height, width)` (the model summary the run prints).
"""

from typing import Protocol

from segperf.model.module import SegmentationModule
from segperf.model.unet import UNet, level_shapes


class Net(Protocol):
    config: dict

    def check_input_size(self, height: int, width: int) -> None: ...

    def describe(self, height: int, width: int) -> str: ...


__all__ = ["Net", "SegmentationModule", "UNet", "level_shapes"]
