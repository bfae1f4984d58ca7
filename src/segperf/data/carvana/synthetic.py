"""A deterministic stand-in for the Kaggle Carvana data set, laid out exactly like the real one.

The real data needs a Kaggle login and a 25 GB download, which a fresh machine or CI cannot do;
the timing study only needs files with the same names, sizes, formats and roughly the same decode
cost. So each view is a cheap "studio photo" of a car-like shape, rendered with the same geometry
into the JPEG and into its GIF mask, and everything is seeded so two runs give identical bytes.
"""

from __future__ import annotations

import argparse
import functools
import hashlib
import math
import sys
import time
from pathlib import Path

import numpy as np
from PIL import Image, ImageChops, ImageDraw, ImageFilter

from segperf.data.folders import build_folder, ensure_folder

VIEWS = 16
_PALETTE = [0, 0, 0, 255, 255, 255]  # index 0 background (black), 1 car (white), as in the real masks
_COLOURS = [(236, 236, 233), (188, 190, 195), (32, 34, 38), (150, 22, 26), (28, 58, 128), (96, 99, 105)]


def car_ids(cars: int, seed: int) -> list[str]:
    """Ids look like Kaggle's (12 hex chars) so code that parses or sorts file names behaves the same."""
    ids: list[str] = []
    i = 0
    while len(ids) < cars:  # a 48-bit collision is astronomically unlikely, but ids must stay unique
        cid = hashlib.sha1(f"{seed}:{i}".encode()).hexdigest()[:12]
        if cid not in ids:
            ids.append(cid)
        i += 1
    return ids


@functools.lru_cache(maxsize=4)
def _studio(width: int, height: int) -> tuple[Image.Image, Image.Image, Image.Image]:
    """Background, its shadowed twin and a noise sheet are the same for every view, so build them once."""
    y = np.linspace(0.0, 1.0, height)[:, None]
    wall = 198 + 34 * y / 0.6  # brighter towards the floor line, like a lit cyclorama
    floor = 232 - 36 * (y - 0.6) / 0.4  # continuous with the wall: a cyclorama has no hard horizon
    lum = np.where(y < 0.6, wall, floor) * (1 - 0.06 * np.abs(np.linspace(-1, 1, width))[None, :] ** 2)
    rgb = np.clip(lum[..., None] * np.array([1.0, 1.0, 1.015]), 0, 255).astype(np.uint8)
    bg = Image.fromarray(rgb, "RGB")
    dark = Image.fromarray((rgb * 0.55).astype(np.uint8), "RGB")
    # Sensor-like noise makes JPEG size and decode cost resemble real photos; offsets vary it per view.
    rng = np.random.default_rng(12345)
    noise = np.clip(128 + rng.normal(0, 2.5, (height + 64, width + 64, 3)), 0, 255).astype(np.uint8)
    return bg, dark, Image.fromarray(noise, "RGB")


_SHAPE = {  # per-car proportions, as fractions of the car's length (or of the image for dx/ground)
    "length": (0.72, 0.84), "width": (0.39, 0.45), "body": (0.17, 0.21), "cabin": (0.11, 0.14),
    "cabin_len": (0.46, 0.58), "cabin_shift": (0.0, 0.07), "wheel": (0.066, 0.078),
    "wheelbase": (0.58, 0.64), "dx": (-0.02, 0.02), "ground": (0.76, 0.8),
}  # fmt: skip


def _car(car_id: str, seed: int) -> dict:
    """Per-car look comes from (seed, id) alone, so any single view can be re-rendered in isolation."""
    rng = np.random.default_rng([seed, int(car_id, 16)])
    base = np.array(_COLOURS[rng.integers(len(_COLOURS))]) + rng.integers(-14, 15) + rng.integers(-4, 5, 3)
    p = {k: rng.uniform(lo, hi) for k, (lo, hi) in _SHAPE.items()}
    return p | {"colour": tuple(int(v) for v in np.clip(base, 0, 255))}


def _trap(x0: float, x1: float, y0: float, x2: float, x3: float, y1: float) -> list[tuple]:
    return [(x0, y0), (x1, y0), (x3, y1), (x2, y1)]


def render_view(car_id: str, view: int, width: int, height: int, seed: int) -> tuple[Image.Image, Image.Image]:
    """One view of one car; the mask is drawn from the very same shapes, so it is exact by construction."""
    p = _car(car_id, seed)
    col = p["colour"]
    th = math.radians((view - 1) * 22.5)  # view 01 = side; the car's nose turns towards the camera
    c, s, ac, as_ = math.cos(th), math.sin(th), abs(math.cos(th)), abs(math.sin(th))
    L = p["length"] * min(width / 1918, height / 1280) * 1918
    T, r, tall = p["width"] * L, p["wheel"] * L, 1 + 0.2 * as_  # front/back views look taller
    cx, yg = width / 2 + p["dx"] * width, p["ground"] * height
    A = L * ac + T * as_  # apparent length of the footprint on screen
    car, mask = Image.new("RGB", (width, height)), Image.new("P", (width, height), 0)
    mask.putpalette(_PALETTE)
    dc, dm = ImageDraw.Draw(car), ImageDraw.Draw(mask)

    def part(kind: str, xy, colour: tuple, in_mask: bool = True) -> None:
        """Car layer gets every part in painter's order; the mask only the outer shapes (their union)."""
        for draw, fill in ((dc, colour), (dm, 1)) if in_mask else ((dc, colour),):
            if kind == "ellipse":
                draw.ellipse(xy, fill=fill)
            elif kind == "poly":
                draw.polygon(xy, fill=fill)
            else:
                draw.rounded_rectangle(xy[:4], radius=max(0.0, xy[4]), fill=fill)

    wheels, rx = [], r * ac + 0.35 * r * as_  # a wheel seen edge-on is a thin ellipse
    for along in (p["wheelbase"] * L / 2, -p["wheelbase"] * L / 2):
        for lat in (0.42 * T, -0.42 * T):
            x, depth = cx + along * c - lat * s, lat * c + 0.35 * along * s  # >0: faces the camera
            wheels.append((depth, (x - rx, yg - 2 * r, x + rx, yg)))
    for _, box in (w for w in wheels if w[0] < 0):  # far wheels peek out from behind the body
        part("ellipse", box, (26, 26, 28))
    top, bot = yg - p["body"] * L * tall, yg - 0.45 * r
    rad = min(0.35 * (bot - top), 0.2 * A)
    part("rrect", (cx - A / 2, top, cx + A / 2, bot, rad), tuple(int(v * 0.82) for v in col))
    part("rrect", (cx - A / 2 + 2, top, cx + A / 2 - 2, top + 0.45 * (bot - top), rad), col, False)
    ch, m = p["cabin"] * L * tall, 0.14 * p["cabin"] * L * tall
    lc, cc = p["cabin_len"] * L * ac + 0.8 * T * as_, cx - p["cabin_shift"] * L * c
    front, rear = ch * (1.1 * ac + 0.25 * as_), ch * (0.6 * ac + 0.25 * as_)  # raked windscreen
    sl, sr = (rear, front) if c >= 0 else (front, rear)
    xl, xr = cc - lc / 2, cc + lc / 2
    part("poly", _trap(xl, xr, top + 1, xl + sl, xr - sr, top - ch), col)
    win = _trap(xl + m + 0.86 * sl, xr - m - 0.86 * sr, top - m, xl + sl + 0.3 * m, xr - sr - 0.3 * m, top - ch + m)
    part("poly", win, (42, 50, 60), False)
    if ac > 0.3:  # B-pillar splits the side windows
        part("rrect", (cc - 0.02 * L * ac, top - ch, cc + 0.02 * L * ac, top, 0), col, False)
    if as_ > 0.2:  # head- or tail-lamps on whichever end faces the camera
        end, lamp = (1, (235, 232, 210)) if s > 0 else (-1, (190, 20, 20))
        hw, y, lh = 0.07 * T * as_, top + 0.3 * (bot - top), 0.12 * (bot - top)
        for k in (1, -1):
            x = cx + end * 0.47 * L * c - k * 0.36 * T * s
            part("rrect", (x - hw, y, x + hw, y + lh, hw * 0.3), lamp, False)
    for _, (x0, y0, x1, y1) in (w for w in wheels if w[0] >= 0):
        part("ellipse", (x0, y0, x1, y1), (26, 26, 28))
        dx, dy = 0.2 * (x1 - x0), 0.2 * (y1 - y0)
        part("ellipse", (x0 + dx, y0 + dy, x1 - dx, y1 - dy), (150, 152, 156), False)  # rim

    bg, dark, noise = _studio(width, height)
    f = 8  # the floor shadow is soft, so draw and blur it small and scale it up: cheap at full size
    sh = Image.new("L", (max(1, width // f), max(1, height // f)), 0)
    hw, hh = (A / 2 * 1.08 + r) / f, (0.08 * (L * as_ + T * ac) + 0.35 * r) / f
    ImageDraw.Draw(sh).ellipse((cx / f - hw, yg / f - hh, cx / f + hw, yg / f + hh), fill=190)
    sh = sh.filter(ImageFilter.GaussianBlur(max(0.5, r / f * 0.7))).resize((width, height), Image.BILINEAR)
    img = Image.composite(dark, bg, sh)
    img.paste(car, mask=mask.convert("L"))
    rng = np.random.default_rng([seed, int(car_id, 16), view])
    ox, oy = (int(v) for v in rng.integers(0, 64, 2))
    img = ImageChops.add(img, noise.crop((ox, oy, ox + width, oy + height)), scale=1.0, offset=-128)
    return img, mask


def generate(
    out: str | Path,
    cars: int = 10,
    seed: int = 0,
    width: int = 1918,
    height: int = 1280,
    jpeg_quality: int = 90,
    progress: bool = False,
) -> Path:
    """Render into a hidden sibling folder and rename it into place, so `out` is either absent or complete."""

    def render(tmp: Path) -> None:
        (tmp / "train").mkdir()
        (tmp / "train_masks").mkdir()
        for i, cid in enumerate(car_ids(cars, seed)):
            for view in range(1, VIEWS + 1):
                img, mask = render_view(cid, view, width, height, seed)
                img.save(tmp / "train" / f"{cid}_{view:02d}.jpg", "JPEG", quality=jpeg_quality)
                mask.save(tmp / "train_masks" / f"{cid}_{view:02d}_mask.gif", "GIF")
            if progress:
                print(f"\r  car {i + 1}/{cars}", end="" if i + 1 < cars else "\n", file=sys.stderr, flush=True)

    return build_folder(out, render)


def ensure_synthetic(
    cache_dir: str | Path, cars: int = 10, seed: int = 0, width: int = 1918, height: int = 1280
) -> Path:
    """Pay the rendering cost once per parameter set; the name encodes every parameter so caches never mix."""
    path = Path(cache_dir).expanduser() / f"carvana-synthetic-v1-cars{cars}-seed{seed}-{width}x{height}"
    return ensure_folder(
        path,
        path / "train",
        lambda: generate(path, cars=cars, seed=seed, width=width, height=height),
        f"generating {cars * VIEWS} synthetic Carvana images",
    )


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(prog="python -m segperf.data.carvana.synthetic", description=__doc__.splitlines()[0])
    ap.add_argument("out", type=Path, help="folder to create (must not exist or be empty)")
    ap.add_argument("--cars", type=int, default=10)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--width", type=int, default=1918)
    ap.add_argument("--height", type=int, default=1280)
    ap.add_argument("--quality", type=int, default=90, help="JPEG quality")
    a = ap.parse_args(argv)
    t0 = time.perf_counter()
    out = generate(a.out, a.cars, a.seed, a.width, a.height, a.quality, progress=True)
    n = a.cars * VIEWS
    print(f"wrote {n} images + {n} masks to {out} in {time.perf_counter() - t0:.1f} s")


if __name__ == "__main__":
    main()
