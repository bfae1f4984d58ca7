"""Built-in MNIST-format data: rendered digits written as the four MNIST IDX files.

MNIST itself is a download, which segperf never does; the CPU study only needs 28x28 grayscale
digits with labels, in MNIST's files, so that the real reading path (segperf.data.mnist.idx) runs. Each
image is a digit drawn in one of several fonts — Pillow's built-in font plus the TrueType fonts
found on the machine, picked deterministically — at a random size, stroke weight, slant, small
rotation and offset, anti-aliased, with a little sensor-like noise. Everything is seeded: the
same seed and font set give identical files. The fonts a machine has go into the cache folder's
name, so data rendered with another set is never mistaken for it.
"""

from __future__ import annotations

import argparse
import hashlib
import os
import time
from functools import lru_cache
from pathlib import Path

import numpy as np
from PIL import Image, ImageDraw, ImageFilter, ImageFont

from segperf.data.folders import build_folder, ensure_folder
from segperf.data.mnist.idx import write_idx

SIDE = 28  # MNIST's image side
# split -> (images file, labels file), MNIST's names
FILES = {
    "train": ("train-images-idx3-ubyte", "train-labels-idx1-ubyte"),
    "test": ("t10k-images-idx3-ubyte", "t10k-labels-idx1-ubyte"),
}
FONT_DIRS = ("/usr/share/fonts", "/usr/local/share/fonts", "/Library/Fonts", "C:/Windows/Fonts")
MAX_SYSTEM_FONTS = 12
_GLYPH_SIZE = 48  # templates are drawn large, then scaled down per sample (anti-aliasing)


def system_fonts() -> list[Path]:
    """Up to MAX_SYSTEM_FONTS TrueType/OpenType files, evenly spread over the sorted list of those
    installed (sorted by file name, so the choice does not depend on directory order)."""
    found: list[Path] = []
    for folder in FONT_DIRS:
        if os.path.isdir(folder):
            found += [p for p in Path(folder).rglob("*") if p.suffix.lower() in (".ttf", ".otf")]
    found = sorted(set(found), key=lambda p: (p.name, str(p)))
    if len(found) > MAX_SYSTEM_FONTS:
        found = [found[(i * len(found)) // MAX_SYSTEM_FONTS] for i in range(MAX_SYSTEM_FONTS)]
    return found


def font_set_id(fonts: list[Path]) -> str:
    """8 hex digits naming the font set (Pillow's built-in font is always in it)."""
    return hashlib.sha256("\n".join(["pillow-default", *(p.name for p in fonts)]).encode()).hexdigest()[:8]


@lru_cache(maxsize=2)
def _templates(fonts: tuple[Path, ...]) -> list[list[Image.Image]]:
    """[font][digit] -> the digit drawn white on black, cropped to its ink: regular, and bold
    (a max filter thickens the strokes) as a second "font"."""
    faces = [ImageFont.load_default(size=_GLYPH_SIZE)]
    for path in fonts:
        try:
            faces.append(ImageFont.truetype(str(path), _GLYPH_SIZE))
        except OSError:  # a font file Pillow cannot open: leave it out
            continue
    templates = []
    for face in faces:
        regular, bold = [], []
        for digit in range(10):
            canvas = Image.new("L", (2 * _GLYPH_SIZE, 2 * _GLYPH_SIZE), 0)
            ImageDraw.Draw(canvas).text((_GLYPH_SIZE // 2, _GLYPH_SIZE // 4), str(digit), fill=255, font=face)
            box = canvas.getbbox()
            if box is None:  # a symbol font without digits
                break
            glyph = canvas.crop(box)
            regular.append(glyph)
            bold.append(glyph.filter(ImageFilter.MaxFilter(3)))
        if len(regular) == 10:
            templates += [regular, bold]
    return templates


def render_digits(count: int, seed: int, fonts: list[Path] | None = None) -> tuple[np.ndarray, np.ndarray]:
    """`count` images uint8 [count, 28, 28] and their labels uint8 [count], balanced over 0-9."""
    templates = _templates(tuple(system_fonts() if fonts is None else fonts))
    rng = np.random.default_rng(seed)
    labels = rng.permutation(np.arange(count) % 10).astype(np.uint8)
    face = rng.integers(0, len(templates), count)
    height = rng.integers(15, 21, count)  # MNIST's digits fit a 20x20 box
    stretch = rng.uniform(0.8, 1.2, count)
    angle = np.radians(rng.uniform(-12.0, 12.0, count))
    shear = rng.uniform(-0.25, 0.25, count)
    shift = rng.integers(-2, 3, (count, 2))
    images = np.zeros((count, SIDE, SIDE), np.uint8)
    for i in range(count):
        glyph = templates[face[i]][labels[i]]
        h = int(height[i])
        w = int(np.clip(round(glyph.width * h / glyph.height * stretch[i]), 3, 20))
        small = glyph.resize((w, h), Image.BILINEAR)
        # one affine map from the 28x28 output back into the glyph: offset, rotation and slant
        # around the centres (Pillow's AFFINE takes the output-to-input direction)
        cos, sin, s = np.cos(angle[i]), np.sin(angle[i]), shear[i]
        a, b, d, e = cos + s * sin, -sin + s * cos, sin, cos
        x0, y0 = SIDE / 2 + shift[i, 0], SIDE / 2 + shift[i, 1]
        coeffs = (a, b, w / 2 - a * x0 - b * y0, d, e, h / 2 - d * x0 - e * y0)
        images[i] = np.asarray(small.transform((SIDE, SIDE), Image.AFFINE, coeffs, Image.BILINEAR))
    noise = rng.normal(0.0, 6.0, images.shape)
    images = np.clip(images + noise * (images > 0) + np.abs(noise) * 0.5, 0, 255).astype(np.uint8)
    return images, labels


def generate(out: str | Path, train: int = 60000, test: int = 10000, seed: int = 0) -> Path:
    """Write the four MNIST IDX files into a new folder `out`, atomically (a hidden sibling
    folder renamed into place: `out` is either absent or complete)."""

    def render(tmp: Path) -> None:
        for split_seed, (split, count) in enumerate((("train", train), ("test", test))):
            images, labels = render_digits(count, seed * 2 + split_seed)
            images_file, labels_file = FILES[split]
            write_idx(tmp / images_file, images)
            write_idx(tmp / labels_file, labels)

    return build_folder(out, render)


def ensure_builtin(cache_dir: str | Path, train: int = 60000, test: int = 10000, seed: int = 0) -> Path:
    """The built-in digits for these counts, seed and this machine's fonts; rendered on first use."""
    name = f"mnist-builtin-v1-train{train}-test{test}-seed{seed}-fonts{font_set_id(system_fonts())}"
    path = Path(cache_dir).expanduser() / name
    return ensure_folder(
        path,
        path / FILES["test"][1],  # the last file written
        lambda: generate(path, train, test, seed),
        f"rendering {train + test:,} built-in MNIST-format digits",
    )


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m segperf.data.mnist.digits", description=__doc__.splitlines()[0])
    parser.add_argument("out", type=Path, help="folder to create (must not exist or be empty)")
    parser.add_argument("--train", type=int, default=60000)
    parser.add_argument("--test", type=int, default=10000)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args(argv)
    start = time.perf_counter()
    out = generate(args.out, args.train, args.test, args.seed)
    print(f"wrote {args.train:,} + {args.test:,} digits to {out} in {time.perf_counter() - start:.1f} s")


if __name__ == "__main__":
    main()
