"""One image-folder sample as tensors: decoded to RGB, transformed to the model's input size.

Any image becomes RGB uint8 [H, W, 3] at data.height x data.width, whatever its size and mode:
grayscale (L, 1, 16-bit I;16), with alpha (LA, RGBA, PA: laid on white, as a viewer shows it),
palette (P), CMYK or YCbCr; a photo's EXIF orientation is applied first, so a portrait stays
upright. The transforms are albumentations 2.0.8's, on the host:

- validation (and training with augment=off): resize so the image covers H x W, keeping its
  aspect ratio, then crop the centre (SmallestMaxSize(max_size_hw) + CenterCrop);
- training with augment=basic: RandomResizedCrop (a random part of 50-100% of the area, aspect
  3/4-4/3, resized to H x W) + HorizontalFlip, the usual ImageNet recipe with a larger smallest
  crop, since a net trained for minutes on a CPU learns from whole objects faster.

Both downscale with INTER_AREA (a 500x375 photo to 96x96 is a 4x reduction, where bilinear alone
aliases). `decode=reduced` asks libjpeg for the smallest DCT scale that still covers the size
the validation resize needs (Pillow's `Image.draft`, as segperf.data.carvana.decode does for Carvana);
other formats have no reduced decode and decode whole. With a cache (`cache=memory|device`)
each image is stored once as its validation transform, and training crops from that (see
segperf.data.imagefolder_augment).
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import numpy as np
import torch
from PIL import Image, ImageOps
from torch.utils.data import Dataset

from segperf.data.imagefolder.layout import ImageSample
from segperf.data.skips import BadSamples

CROP_SCALE = (0.5, 1.0)  # RandomResizedCrop's share of the image area
CROP_RATIO = (3 / 4, 4 / 3)
FLIP_P = 0.5
_BACKGROUND = (255, 255, 255)  # what a transparent pixel becomes


def to_rgb(im: Image.Image) -> Image.Image:
    """Any PIL mode as RGB: alpha laid on white, 16- and 32-bit grayscale scaled to 8 bits."""
    if im.mode == "RGB":
        return im
    if im.mode in ("I;16", "I;16B", "I;16L", "I", "F"):  # 16/32-bit grayscale: scale to 0-255
        values = np.asarray(im, dtype=np.float64)
        top = 65535.0 if values.max(initial=0) > 255 else 255.0  # 8-bit values in a 16-bit file stay
        grey = np.clip(values / top * 255.0, 0, 255).astype(np.uint8)
        return Image.fromarray(grey, "L").convert("RGB")
    if im.mode in ("RGBA", "LA", "PA") or (im.mode == "P" and "transparency" in im.info):
        rgba = im.convert("RGBA")
        canvas = Image.new("RGB", rgba.size, _BACKGROUND)
        canvas.paste(rgba, mask=rgba.getchannel("A"))
        return canvas
    return im.convert("RGB")  # L, 1, P, CMYK, YCbCr, ...


def cover_size(width: int, height: int, target: tuple[int, int]) -> tuple[int, int]:
    """(width, height) of an image scaled to cover `target` (PIL's (width, height)), aspect kept."""
    scale = max(target[0] / width, target[1] / height)
    return max(target[0], math.ceil(width * scale)), max(target[1], math.ceil(height * scale))


def rgb_of(im: Image.Image, target: tuple[int, int], decode: str = "full") -> np.ndarray:
    """RGB uint8 [h, w, 3] of an opened image's first frame (an animated GIF or APNG, a multi-page
    TIFF: PIL opens them there), upright; with `decode=reduced` a JPEG is decoded at the smallest
    DCT scale that still covers `target` ((width, height)) after the resize."""
    if decode == "reduced" and im.format == "JPEG":
        im.draft("RGB", cover_size(*im.size, target))  # the decoder scales down, by 1/2, 1/4 or 1/8
    im = ImageOps.exif_transpose(im)  # a photo taken upright stays upright
    return np.asarray(to_rgb(im))


def load_rgb(path: Path, target: tuple[int, int], decode: str = "full") -> np.ndarray:
    """rgb_of an image file (no pixel limit, warnings as they come: the dataset reads through
    BadSamples.read, which adds both)."""
    with Image.open(path) as im:
        return rgb_of(im, target, decode)


class Transforms:
    """albumentations pipelines to H x W: `val` (resize + centre crop) and `train` (random
    resized crop + flip); `train_from_cached` is the training one for an image already at H x W."""

    def __init__(self, height: int, width: int, seed: int = 0) -> None:
        import albumentations as A  # imported only here (~1 s, pulls in OpenCV)
        import cv2

        area = {"interpolation": cv2.INTER_LINEAR, "area_for_downscale": "image"}
        self.val = A.Compose([A.SmallestMaxSize(max_size_hw=(height, width), **area), A.CenterCrop(height, width)])
        crop = A.RandomResizedCrop(size=(height, width), scale=CROP_SCALE, ratio=CROP_RATIO, **area)
        self.train = A.Compose([crop, A.HorizontalFlip(p=FLIP_P)], seed=int(seed) % 2**32)

    def reseed(self, seed: int) -> None:
        """A DataLoader worker's own draws (segperf.data.seeding.seed_worker calls this)."""
        self.train.set_random_seed(int(seed) % 2**32)


class ImageFolderDataset(Dataset):
    """Returns `(image uint8 [H, W, 3], label int64 [])`, as the U-Net's data does (uint8 and HWC:
    what the decoder makes, 4x less to move than float32; the module converts on the device).

    `train` picks the random crop and flip (when `augment` is "basic"); `cache` is a SampleCache of
    these samples' validation transforms (then a training sample is cropped from its cached image);
    `bad` reads the files and says what a file that fails becomes (segperf.data.skips: under
    data.on_bad_sample=skip, the next sample that decodes).
    """

    def __init__(
        self,
        samples: list[ImageSample],
        height: int,
        width: int,
        decode: str = "full",
        train: bool = False,
        augment: str = "off",
        seed: int = 0,
        cache: Any = None,
        bad: BadSamples | None = None,
    ) -> None:
        if cache is not None and len(cache) != len(samples):
            raise ValueError(f"a cache of {len(cache)} samples does not belong to a dataset of {len(samples)}")
        self.samples = samples
        self.size = (width, height)  # PIL's order (as CarvanaDataset's)
        self.decode = decode
        self.cache = cache
        self.bad = bad if bad is not None else BadSamples()
        self.transforms = Transforms(height, width, seed)
        self.random = train and augment == "basic"
        # what segperf.data.seeding.seed_worker reseeds in each worker (None: nothing random)
        self.augment = self.transforms if self.random else None
        self.labels = torch.tensor([s.label for s in samples], dtype=torch.int64)

    def __len__(self) -> int:
        return len(self.samples)

    def __getitem__(self, index: int) -> tuple[torch.Tensor, torch.Tensor]:
        if self.cache is not None:
            image = self.cache.images[index].numpy()  # shared memory, already H x W
            if self.random:
                image = self.transforms.train(image=image)["image"]
            label = self.labels[index]
        else:
            image, label = self.bad.fetch(index, len(self.samples), self._decoded)
            pipeline = self.transforms.train if self.random else self.transforms.val
            image = pipeline(image=image)["image"]
        # a flip or crop can leave a strided view, which torch.from_numpy refuses; an image already at
        # the target size can come through as PIL's read-only buffer, which torch would warn about
        image = np.ascontiguousarray(image)
        return torch.from_numpy(image if image.flags.writeable else image.copy()), label

    def _decoded(self, index: int) -> tuple[np.ndarray, torch.Tensor]:
        """The image of sample `index` decoded, with its label (a replacement brings its own)."""
        path = self.samples[index].path
        return self.bad.read(path, lambda im: rgb_of(im, self.size, self.decode)), self.labels[index]
