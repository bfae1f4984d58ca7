"""Kaggle's Carvana layout and the split by car (DESIGN.md, "Data layout" and "Split").

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


def find_samples(root: str | Path) -> list[Sample]:
    """Every image with its mask, sorted by (car, view). Raises with the offending files named."""
    root = Path(root).expanduser()
    if not root.is_dir():
        raise DataLayoutError(
            f"data.root={root} does not exist or is not a folder. {LAYOUT_HINT} "
            "Leave data.root unset to use the built-in synthetic data."
        )
    image_dir, mask_dir = root / "train", root / "train_masks"
    for folder in (image_dir, mask_dir):
        if not folder.is_dir():
            raise DataLayoutError(f"{folder} is missing. {LAYOUT_HINT}")
    images = _list_files(image_dir, IMAGE_RE)
    masks = _list_files(mask_dir, MASK_RE)
    if not images:
        raise DataLayoutError(f"no <car>_<view>.jpg images in {image_dir}. {LAYOUT_HINT}")
    missing = sorted(mask_dir / f"{car}_{view}_mask.gif" for car, view in images.keys() - masks.keys())
    if missing:
        raise DataLayoutError(
            f"{len(missing)} image(s) in {image_dir} have no mask; missing: {_listing(missing)}. "
            "Add the masks or remove those images."
        )
    return [Sample(car, view, images[car, view], masks[car, view]) for car, view in sorted(images)]


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
