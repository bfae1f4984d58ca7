"""Built-in image-folder data (`data=imagefolder` without `data.root`): rendered objects as JPEGs.

A user's own photos are the point of this workload, but a fresh machine has none and segperf
never downloads, so without `data.root` a small ImageNet-like folder is rendered once into
segperf's cache folder (with a lock file and an atomic rename, as the other built-in sets):
`<class>/<class>_<n>.jpg`, photo-sized (about 500x375, every image its own size, landscape and
some portrait), JPEG like a camera's, so the real decode path runs (reduced DCT decode too).

Each class is a kind of object: a shape (circle, square, triangle, star, ...) in a colour of the
class's own band of hues (circles reddish, squares greenish, ...; each image its own hue in the
band, saturation and brightness), large, near the middle, at a random size and rotation, on a
varied background (a gradient, stripes or a blotchy texture in random colours, faint clutter
lines) with sensor-like noise. Two cues, as real classes have (shape and colour: a lemon and a
lime), make it an easy folder: a randomly initialised ResNet-18 at 96x96 tells the classes apart
within a few hundred steps. (By shape alone, with random colours, it takes a CNN far longer:
CNNs pick up colour and texture before shape.) Everything is seeded: the same arguments give
identical files.
"""

from __future__ import annotations

import argparse
import colorsys
import functools
import math
import sys
import time
from pathlib import Path

import numpy as np
from PIL import Image, ImageDraw

from segperf.data.folders import build_folder, ensure_folder

SHAPES = ("circle", "square", "triangle", "star", "cross", "ring", "hexagon", "crescent")
SIZE = (500, 375)  # ImageNet's typical photo, width x height; each image varies around it


def _polygon(kind: str, cx: float, cy: float, r: float, angle: float) -> list[tuple[float, float]]:
    corners = {"square": 4, "triangle": 3, "hexagon": 6}[kind]
    return [(cx + r * math.cos(angle + 2 * math.pi * k / corners), cy + r * math.sin(angle + 2 * math.pi * k / corners))
            for k in range(corners)]  # fmt: skip


def _star(cx: float, cy: float, r: float, angle: float) -> list[tuple[float, float]]:
    points = []
    for k in range(10):
        radius = r if k % 2 == 0 else 0.42 * r
        points.append(
            (cx + radius * math.cos(angle + math.pi * k / 5), cy + radius * math.sin(angle + math.pi * k / 5))
        )
    return points


def draw_shape(image: Image.Image, kind: str, cx: float, cy: float, r: float, angle: float, colour) -> None:
    """One object of class `kind`, radius `r` around (cx, cy): drawn as a mask, then painted."""
    mask = Image.new("L", image.size, 0)
    draw = ImageDraw.Draw(mask)
    if kind in ("circle", "crescent"):
        draw.ellipse((cx - r, cy - r, cx + r, cy + r), fill=255)
        if kind == "crescent":  # a second disc, offset, cut out of the first
            dx, dy = 0.55 * r * math.cos(angle), 0.55 * r * math.sin(angle)
            draw.ellipse((cx + dx - 0.85 * r, cy + dy - 0.85 * r, cx + dx + 0.85 * r, cy + dy + 0.85 * r), fill=0)
    elif kind == "ring":
        draw.ellipse((cx - r, cy - r, cx + r, cy + r), outline=255, width=max(2, int(r * 0.3)))
    elif kind == "cross":
        for a in (angle, angle + math.pi / 2):
            dx, dy = r * math.cos(a), r * math.sin(a)
            draw.line((cx - dx, cy - dy, cx + dx, cy + dy), fill=255, width=max(3, int(r * 0.45)))
    elif kind == "star":
        draw.polygon(_star(cx, cy, r, angle), fill=255)
    else:
        draw.polygon(_polygon(kind, cx, cy, r, angle), fill=255)
    image.paste(colour, mask=mask)


@functools.lru_cache(maxsize=1)
def _noise_sheet() -> np.ndarray:
    """Sensor-like noise, large enough for any image and offset: drawn once, not per image."""
    side = int(max(SIZE) * 1.15) + 64
    return np.random.default_rng(12345).normal(0, 6, (side, side, 3)).astype(np.int16)


def _background(rng: np.random.Generator, width: int, height: int) -> Image.Image:
    """A gradient, stripes or a blotchy texture, in random colours."""
    a, b = rng.integers(0, 256, 3), rng.integers(0, 256, 3)
    style = rng.integers(3)
    if style == 0:  # a linear gradient in a random direction
        direction = rng.uniform(0, 2 * math.pi)
        y, x = np.ogrid[0:height, 0:width]
        t = (x * math.cos(direction) + y * math.sin(direction)) / math.hypot(width, height) + 0.5
        t = np.clip(t, 0, 1)[..., None]
    elif style == 1:  # soft stripes
        period, direction = rng.uniform(20, 80), rng.uniform(0, math.pi)
        y, x = np.ogrid[0:height, 0:width]
        t = (0.5 + 0.5 * np.sin((x * math.cos(direction) + y * math.sin(direction)) * 2 * math.pi / period))[..., None]
    else:  # a blotchy texture: coarse noise blown up
        coarse = rng.uniform(0, 1, (max(2, height // 40), max(2, width // 40)))
        t = np.asarray(Image.fromarray((coarse * 255).astype(np.uint8)).resize((width, height), Image.BICUBIC))
        t = (t / 255.0)[..., None]
    rgb = a * (1 - t) + b * t
    return Image.fromarray(np.clip(rgb, 0, 255).astype(np.uint8), "RGB")


def class_colour(rng: np.random.Generator, label: int, classes: int) -> tuple[int, int, int]:
    """The object's colour: a hue of its class's own band of the colour wheel (the bands are
    spaced evenly, +-25 degrees around each centre), any saturation and brightness that still
    reads as that hue."""
    hue = (label / classes + rng.uniform(-25, 25) / 360) % 1.0
    rgb = colorsys.hsv_to_rgb(hue, rng.uniform(0.55, 1.0), rng.uniform(0.55, 1.0))
    return tuple(int(255 * v) for v in rgb)  # type: ignore[return-value]


def render_image(kind: str, seed: int, label: int, index: int, classes: int = 4) -> Image.Image:
    """One image of class `kind` (the `label`-th of `classes`); the same arguments give the same pixels."""
    rng = np.random.default_rng([seed, label, index])
    width, height = (int(v * rng.uniform(0.8, 1.15)) for v in SIZE)
    if rng.uniform() < 0.2:  # some portrait photos
        width, height = height, width
    image = _background(rng, width, height)
    draw = ImageDraw.Draw(image)
    for _ in range(rng.integers(0, 6)):  # faint clutter lines
        x0, y0, x1, y1 = rng.uniform(0, width), rng.uniform(0, height), rng.uniform(0, width), rng.uniform(0, height)
        shade = tuple(int(v) for v in rng.integers(0, 256, 3))
        draw.line((x0, y0, x1, y1), fill=shade, width=int(rng.integers(1, 4)))
    # the object is large and near the middle, as in most photos of one thing (ImageNet's): a
    # random crop of half the image or more still shows most of it
    side = min(width, height)
    r = side * rng.uniform(0.22, 0.36)
    cx = width / 2 + rng.uniform(-1, 1) * max(0.0, width / 2 - r) * 0.6
    cy = height / 2 + rng.uniform(-1, 1) * max(0.0, height / 2 - r) * 0.6
    draw_shape(image, kind, cx, cy, r, rng.uniform(0, 2 * math.pi), class_colour(rng, label, classes))
    ox, oy = (int(v) for v in rng.integers(0, 64, 2))
    noise = _noise_sheet()[oy : oy + height, ox : ox + width]  # one sheet, a new offset per image
    return Image.fromarray(np.clip(np.asarray(image, np.int16) + noise, 0, 255).astype(np.uint8), "RGB")


def generate(
    out: str | Path, classes: int = 4, per_class: int = 500, seed: int = 0, val_frac: float | None = None
) -> Path:
    """Write `per_class` JPEGs of each of the first `classes` shapes into a new folder `out`,
    atomically: `out/<class>/...`, or with `val_frac` the given-split form `out/train/<class>/`
    and `out/val/<class>/` (the last `round(val_frac * per_class)` of each class in val/)."""
    if not 2 <= classes <= len(SHAPES):
        raise ValueError(f"classes={classes}: the built-in folder has 2 to {len(SHAPES)} classes ({', '.join(SHAPES)})")
    held = 0 if val_frac is None else round(val_frac * per_class)

    def render(tmp: Path) -> None:
        for label, kind in enumerate(SHAPES[:classes]):
            for index in range(per_class):
                split = "" if val_frac is None else ("val" if index >= per_class - held else "train")
                folder = tmp / split / kind
                folder.mkdir(parents=True, exist_ok=True)
                quality = int(np.random.default_rng([seed, label, index, 1]).integers(82, 95))
                image = render_image(kind, seed, label, index, classes)
                image.save(folder / f"{kind}_{index:05d}.jpg", "JPEG", quality=quality)

    return build_folder(out, render)


def ensure_builtin(cache_dir: str | Path, classes: int = 4, per_class: int = 500, seed: int = 0) -> Path:
    """The built-in image folder for these settings, rendered on first use; the folder's name
    holds every setting, so sets never mix."""
    path = Path(cache_dir).expanduser() / f"imagefolder-builtin-v1-classes{classes}-per{per_class}-seed{seed}"
    return ensure_folder(
        path,
        path,  # renamed into place whole: present means complete
        lambda: generate(path, classes, per_class, seed),
        f"rendering {classes * per_class:,} built-in images of {classes} classes",
    )


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(
        prog="python -m segperf.data.imagefolder.builtin", description=__doc__.splitlines()[0]
    )
    parser.add_argument("out", type=Path, help="folder to create (must not exist or be empty)")
    parser.add_argument("--classes", type=int, default=4, help=f"2 to {len(SHAPES)}: {', '.join(SHAPES)}")
    parser.add_argument("--per-class", type=int, default=500, help="images of each class")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--val-frac", type=float, default=None, help="write train/ and val/ with this share in val/")
    args = parser.parse_args(argv)
    start = time.perf_counter()
    out = generate(args.out, args.classes, args.per_class, args.seed, args.val_frac)
    n = args.classes * args.per_class
    print(
        f"wrote {n:,} images of {args.classes} classes to {out} in {time.perf_counter() - start:.1f} s", file=sys.stderr
    )


if __name__ == "__main__":
    main()
