"""Kaggle's Carvana layout and the split by car, never by image.

`ROOT/train/<car>_<view>.jpg` and `ROOT/train_masks/<car>_<view>_mask.gif`; any other file is
ignored. Validation gets whole cars, never single images of a car the model trains on: cars are
ordered by the sha256 of their id (independent of file order and of the file system), and the
first `round(holdout_frac * cars)` are held out.
"""

from __future__ import annotations

import hashlib
import re
from dataclasses import dataclass
from pathlib import Path

from segperf.errors import DataLayoutError

IMAGE_RE = re.compile(r"^(?P<car>[0-9a-zA-Z]+)_(?P<view>\d{2})\.jpg$")
MASK_RE = re.compile(r"^(?P<car>[0-9a-zA-Z]+)_(?P<view>\d{2})_mask\.gif$")
LAYOUT_HINT = (
    "Expected Kaggle's Carvana layout: ROOT/train/<car>_<view>.jpg and ROOT/train_masks/<car>_<view>_mask.gif."
)


@dataclass(frozen=True)
class Sample:
    car: str
    view: str
    image: Path
    mask: Path


@dataclass(frozen=True)
class Split:
    train: list[Sample]
    val: list[Sample]
    train_cars: list[str]
    val_cars: list[str]

    def summary(self) -> dict[str, int]:
        return {
            "images": len(self.train) + len(self.val),
            "cars": len(self.train_cars) + len(self.val_cars),
            "train_images": len(self.train),
            "val_images": len(self.val),
            "train_cars": len(self.train_cars),
            "val_cars": len(self.val_cars),
        }


def _list_files(folder: Path, pattern: re.Pattern[str]) -> dict[tuple[str, str], Path]:
    return {
        (m["car"], m["view"]): path for path in folder.iterdir() if path.is_file() and (m := pattern.match(path.name))
    }


def _listing(paths: list[Path], limit: int = 5) -> str:
    shown = ", ".join(str(p) for p in paths[:limit])
    more = f" (and {len(paths) - limit} more)" if len(paths) > limit else ""
    return shown + more


@dataclass(frozen=True)
class Layout:
    """What a data folder holds: the images paired with their masks, and the files that are not."""

    root: Path
    samples: list[Sample]  # every image with its mask, sorted by (car, view)
    no_mask: list[tuple[Path, Path]]  # (image, the mask it should have) for images without one
    no_image: list[Path]  # masks without an image


def scan_layout(root: str | Path) -> Layout:
    """The samples of a Kaggle-layout folder and, without stopping at them, its images without a
    mask and masks without an image. A folder that is not in the layout at all (missing, no
    `train/` or `train_masks/`, no images) raises DataLayoutError naming every missing part."""
    root = Path(root).expanduser()
    if not root.is_dir():
        raise DataLayoutError(
            f"data.root={root} does not exist or is not a folder. {LAYOUT_HINT} "
            "Leave data.root unset to use the built-in synthetic data."
        )
    image_dir, mask_dir = root / "train", root / "train_masks"
    missing = [folder for folder in (image_dir, mask_dir) if not folder.is_dir()]
    if missing:
        verb = "is" if len(missing) == 1 else "are"
        raise DataLayoutError(f"{' and '.join(str(f) for f in missing)} {verb} missing. {LAYOUT_HINT}")
    images = _list_files(image_dir, IMAGE_RE)
    masks = _list_files(mask_dir, MASK_RE)
    if not images:
        raise DataLayoutError(f"no <car>_<view>.jpg images in {image_dir}. {LAYOUT_HINT}")
    return Layout(
        root=root,
        samples=[Sample(car, view, images[car, view], masks[car, view]) for car, view in sorted(images.keys() & masks)],
        no_mask=[(images[key], mask_dir / f"{key[0]}_{key[1]}_mask.gif") for key in sorted(images.keys() - masks)],
        no_image=sorted(masks[key] for key in masks.keys() - images.keys()),
    )


def find_samples(root: str | Path) -> list[Sample]:
    """Every image with its mask, sorted by (car, view). Raises with the offending files named
    (an image without a mask too; a run lists every problem at once, see segperf.data.carvana.checks)."""
    layout = scan_layout(root)
    missing = [mask for _, mask in layout.no_mask]
    if missing:
        raise DataLayoutError(
            f"{len(missing)} image(s) in {layout.root / 'train'} have no mask; missing: {_listing(missing)}. "
            "Add the masks or remove those images."
        )
    return layout.samples


def car_order_key(car: str) -> str:
    return hashlib.sha256(car.encode()).hexdigest()


def split_by_car(samples: list[Sample], holdout_frac: float = 0.2) -> Split:
    if not 0.0 <= holdout_frac <= 1.0:
        raise ValueError(f"data.holdout_frac={holdout_frac} is outside [0, 1]; 0.2 holds out 20% of the cars.")
    cars = sorted({s.car for s in samples}, key=car_order_key)
    n_val = round(holdout_frac * len(cars))
    val_cars = set(cars[:n_val])
    return Split(
        train=[s for s in samples if s.car not in val_cars],
        val=[s for s in samples if s.car in val_cars],
        train_cars=sorted(set(cars) - val_cars),
        val_cars=sorted(val_cars),
    )
