"""One Carvana sample as tensors: decoded from its files (segperf.data.carvana.decode) or taken from a
cache of decoded samples (segperf.data.cache), then augmented when training asks for it."""

from __future__ import annotations

import torch
from torch.utils.data import Dataset

from segperf.data.carvana.decode import image_at, mask_at
from segperf.data.carvana.layout import Sample
from segperf.data.skips import BadSamples


class CarvanaDataset(Dataset):
    """Returns `(image uint8 [H, W, 3], mask uint8 [H, W])` tensors.

    Kept uint8 and HWC on purpose: it is what the decoder produces, it is 4x smaller to move
    than float32, and the module converts both on the device (see SegmentationModule).
    `decode` is "full" or "reduced" (segperf.data.carvana.decode); `cache` a SampleCache holding these
    very samples already decoded; `augment` a callable on one sample (HostAugment); `bad` reads
    the files and says what a sample whose image or mask fails becomes (segperf.data.skips: under
    data.on_bad_sample=skip, the next sample that decodes).
    """

    def __init__(
        self,
        samples: list[Sample],
        height: int,
        width: int,
        decode: str = "full",
        cache=None,
        augment=None,
        bad: BadSamples | None = None,
    ) -> None:
        if cache is not None and len(cache) != len(samples):
            raise ValueError(f"a cache of {len(cache)} samples does not belong to a dataset of {len(samples)}")
        self.samples = samples
        self.size = (width, height)  # PIL's order
        self.decode = decode
        self.cache = cache
        self.augment = augment
        self.bad = bad if bad is not None else BadSamples()

    def __len__(self) -> int:
        return len(self.samples)

    def __getitem__(self, index: int) -> tuple[torch.Tensor, torch.Tensor]:
        if self.cache is not None:
            image, mask = self.cache.sample(index)  # views of shared memory; collation copies them
        else:
            image, mask = self.bad.fetch(index, len(self.samples), self._decoded)
        if self.augment is not None:
            image, mask = self.augment(image, mask)
        return image, mask

    def _decoded(self, index: int) -> tuple[torch.Tensor, torch.Tensor]:
        sample = self.samples[index]
        image = self.bad.read(sample.image, lambda im: image_at(im, self.size, self.decode), "image")
        mask = self.bad.read(sample.mask, lambda im: mask_at(im, self.size), "mask")
        # np.asarray of a PIL image is read-only; torch wants a writable buffer
        return torch.from_numpy(image.copy()), torch.from_numpy(mask)
