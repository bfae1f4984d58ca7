from segperf.model.module import SegmentationModule
from segperf.model.unet import UNet, level_shapes

__all__ = ["SegmentationModule", "UNet", "level_shapes"]
