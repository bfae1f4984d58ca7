"""Decoding one Carvana sample at the model's input size: the `decode` axis.

`full` is the seed study's way: decode the whole 1918x1280 JPEG, then resize. `reduced` asks
libjpeg to decode at a reduced DCT scale (1/2, 1/4 or 1/8; Pillow's `Image.draft`): it picks
the smallest scale that is still at least the target size (480x320 for 384x256, from
1918x1280), which skips most of the inverse DCT and colour conversion, and then resizes the
rest of the way with the same bilinear filter. Measured on the built-in data at 256x384: the
JPEG decode is 3.4x faster and the pixels differ from `full`'s by 0.44 levels of 255 on
average (docs/BENCHMARKS.md). Bilinear was the closest to `full` of the filters tried
(bicubic 0.51, Lanczos 0.59, box 0.70) at the same speed.

Masks are palette GIFs: LZW-compressed, which has no reduced decode, and the decode is most of
their cost (~9 ms of ~9.1 ms at full size). Both modes therefore decode them whole and resize
with NEAREST straight to the target, which only samples the pixels it keeps (cheaper than
reducing first) and keeps the labels exactly 0/1.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import torch
from PIL import Image

from segperf.data.carvana.layout import Sample


def image_at(im: Image.Image, size: tuple[int, int], decode: str = "full") -> np.ndarray:
    """RGB uint8 [H, W, 3] at `size` (PIL's (width, height) order) of an opened image. No EXIF
    rotation: a mask is drawn on the pixels as stored, and must stay aligned with them."""
    if decode == "reduced":
        # a no-op for non-JPEG files; for a JPEG the decoder itself scales down
        im.draft("RGB", size)
    return np.asarray(im.convert("RGB").resize(size, Image.BILINEAR))


def mask_at(im: Image.Image, size: tuple[int, int]) -> np.ndarray:
    """uint8 [H, W], 1 where the palette index is nonzero (car), else 0, of an opened mask (an
    animated GIF's first frame)."""
    if im.mode not in ("P", "L", "1"):  # a mask saved as RGB or with alpha: any colour is the car
        im = im.convert("L")
    return (np.asarray(im.resize(size, Image.NEAREST)) != 0).astype(np.uint8)


def decode_image(path: Path, size: tuple[int, int], decode: str = "full") -> np.ndarray:
    """image_at of a file (no pixel limit: the dataset reads through segperf.data.skips, which adds it)."""
    with Image.open(path) as im:
        return image_at(im, size, decode)


def decode_mask(path: Path, size: tuple[int, int]) -> np.ndarray:
    """mask_at of a file."""
    with Image.open(path) as im:
        return mask_at(im, size)


def decode_sample(sample: Sample, size: tuple[int, int], decode: str = "full") -> tuple[torch.Tensor, torch.Tensor]:
    """`(image uint8 [H, W, 3], mask uint8 [H, W])`; a decode error names the file."""
    try:
        image = decode_image(sample.image, size, decode)
    except OSError as error:
        raise OSError(f"could not decode image {sample.image}: {error}") from error
    try:
        mask = decode_mask(sample.mask, size)
    except OSError as error:
        raise OSError(f"could not decode mask {sample.mask}: {error}") from error
    # np.asarray of a PIL image is read-only; torch wants a writable buffer
    return torch.from_numpy(image.copy()), torch.from_numpy(mask)
