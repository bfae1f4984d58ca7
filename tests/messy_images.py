"""A messy photo folder, made on the spot: the files a real library holds (many writers, modes
and containers) and the damaged ones that pass a header check and fail only when decoded.

    good, bad = write_messy_folder(root / "cat", size=(40, 32))

`good` maps a short name to a file every decode must turn into an RGB image (progressive, CMYK,
grayscale and EXIF-rotated JPEGs; palette, transparent, 16-bit, 1-bit, animated PNGs; animated
GIF; multi-page, 16-bit, float and CMYK TIFFs; WebP; BMP; a TIFF that makes PIL warn), `bad` a
name to a file and the kind of problem segperf must report for it ("undecodable": only a full
decode finds it). The damage is
done by bytes surgery on files PIL wrote: a JPEG with an impossible Huffman table, a PNG whose
IDAT zlib stream is broken (CRCs recomputed, so only the decoder sees it), a TIFF whose strip
data is cut (TIFF has no end marker), a JPEG cut in the middle of its scan data, a PNG with a
wrong header CRC, a PNG and a GIF whose headers declare 100,000 x 100,000 and 65,535 x 65,535
pixels, and two TIFFs that make libtiff print to the process's stderr as it fails (an LZW strip
whose byte count runs past the end of the file: "TIFFFillStrip: Read error on strip 0; got ...
bytes, expected ..."; a fax-compressed strip of garbage: "Fax4Decode: Bad code word at line 0").
(A JPEG cut mid-scan with its end marker put back is not here: libjpeg decodes it, grey below
the cut, as every viewer shows it.) Small images, so a test that writes a few folders
stays fast.
"""

from __future__ import annotations

import io
import struct
import zlib
from pathlib import Path

import numpy as np
from PIL import Image


def _pixels(size: tuple[int, int], seed: int) -> np.ndarray:
    """A smooth RGB picture (noise would not compress like a photo): gradients plus a disc."""
    w, h = size
    y, x = np.mgrid[0:h, 0:w]
    rng = np.random.default_rng(seed)
    cx, cy, r = rng.integers(0, w), rng.integers(0, h), max(3, min(w, h) // 3)
    disc = ((x - cx) ** 2 + (y - cy) ** 2) < r * r
    rgb = np.stack([x * 255 // max(w - 1, 1), y * 255 // max(h - 1, 1), np.where(disc, 220, 40)], axis=-1)
    return rgb.astype(np.uint8)


def _encode(image: Image.Image, fmt: str, **options) -> bytes:
    out = io.BytesIO()
    image.save(out, fmt, **options)
    return out.getvalue()


def _png_chunks(data: bytes) -> list[tuple[bytes, bytes]]:
    chunks, at = [], 8
    while at < len(data):
        (length,) = struct.unpack(">I", data[at : at + 4])
        kind = data[at + 4 : at + 8]
        chunks.append((kind, data[at + 8 : at + 8 + length]))
        at += 12 + length
    return chunks


def _png(chunks: list[tuple[bytes, bytes]], good_crc: bool = True) -> bytes:
    out = b"\x89PNG\r\n\x1a\n"
    for kind, body in chunks:
        crc = zlib.crc32(kind + body) if good_crc or kind != b"IHDR" else zlib.crc32(kind + body) ^ 0xFFFF
        out += struct.pack(">I", len(body)) + kind + body + struct.pack(">I", crc & 0xFFFFFFFF)
    return out


def tiff_with_a_tag_larger_than_the_file(image: Image.Image) -> bytes:
    """A TIFF that decodes, but whose description tag claims a million bytes: PIL warns "Tag data
    larger than file" (a real library's files do this; the warning must not reach the console)."""
    tiff = bytearray(_encode(image, "TIFF", description="a scanner's note " * 4))
    (ifd,) = struct.unpack("<I", tiff[4:8])
    (entries,) = struct.unpack("<H", tiff[ifd : ifd + 2])
    for at in range(ifd + 2, ifd + 2 + 12 * entries, 12):
        if struct.unpack("<H", tiff[at : at + 2])[0] == 270:  # ImageDescription: its count
            tiff[at + 4 : at + 8] = struct.pack("<I", 10**6)
    return bytes(tiff)


def _strip_tags(tiff: bytes) -> tuple[int, int, int]:
    """(offset of strip 0, its byte count, where that count is stored) of a one-strip TIFF PIL wrote."""
    (ifd,) = struct.unpack("<I", tiff[4:8])
    (entries,) = struct.unpack("<H", tiff[ifd : ifd + 2])
    tags = {}
    for at in range(ifd + 2, ifd + 2 + 12 * entries, 12):
        tag, kind, count = struct.unpack("<HHI", tiff[at : at + 8])
        tags[tag] = (kind, count, at + 8)
    values = []
    for tag in (273, 279):  # StripOffsets, StripByteCounts: one LONG (or SHORT) each, in the entry
        kind, count, at = tags[tag]
        assert count == 1, "one strip"
        values.append((struct.unpack("<I" if kind == 4 else "<H", tiff[at : at + (4 if kind == 4 else 2)])[0], at))
    (offset, _), (length, length_at) = values
    return offset, length, length_at


def tiff_with_a_strip_past_the_end(image: Image.Image) -> bytes:
    """An LZW TIFF whose strip claims 5,000 bytes more than the file has: libtiff prints "TIFFFillStrip:
    Read error on strip 0; got N bytes, expected M." to stderr, PIL raises "decoder error -2"."""
    tiff = bytearray(_encode(image, "TIFF", compression="tiff_lzw"))
    _, length, at = _strip_tags(tiff)
    tiff[at : at + 4] = struct.pack("<I", length + 5000)
    return bytes(tiff)


def fax_tiff_with_a_garbage_strip(image: Image.Image) -> bytes:
    """A CCITT group 4 TIFF whose strip is 0x01 bytes: libtiff prints "Fax4Decode: Bad code word at
    line 0 of strip 0 (x 0)." to stderr as the decode fails."""
    tiff = bytearray(_encode(image.convert("1"), "TIFF", compression="group4"))
    offset, length, _ = _strip_tags(tiff)
    tiff[offset : offset + length] = b"\x01" * length
    return bytes(tiff)


def good_files(size: tuple[int, int], seed: int = 0) -> dict[str, tuple[str, bytes]]:
    """name -> (suffix, bytes) of files that decode (each into RGB at the model's size)."""
    rgb = Image.fromarray(_pixels(size, seed))
    grey = rgb.convert("L")
    exif = Image.Exif()
    exif[0x0112] = 6  # orientation: rotate 90 degrees to show upright
    frames = [Image.fromarray(_pixels(size, seed + i)) for i in range(3)]
    deep = Image.fromarray(np.asarray(grey, dtype=np.uint16) * 257)  # mode I;16
    rgba = rgb.copy()
    rgba.putalpha(Image.fromarray((np.arange(size[0] * size[1]) % 256).reshape(size[1], size[0]).astype(np.uint8)))
    palette = rgb.convert("P", palette=Image.ADAPTIVE, colors=16)
    palette.info["transparency"] = 0
    return {
        "progressive": (".jpg", _encode(rgb, "JPEG", progressive=True, quality=90)),
        "cmyk": (".jpg", _encode(rgb.convert("CMYK"), "JPEG")),
        "grey": (".jpeg", _encode(grey, "JPEG")),
        "exif_rotated": (".jpg", _encode(rgb, "JPEG", exif=exif)),
        "palette_transparent": (".png", _encode(palette, "PNG", transparency=0)),
        "grey_alpha": (".png", _encode(rgba.convert("LA"), "PNG")),
        "rgba": (".png", _encode(rgba, "PNG")),
        "sixteen_bit": (".png", _encode(deep, "PNG")),
        "one_bit": (".png", _encode(grey.convert("1"), "PNG")),
        "apng": (".png", _encode(frames[0], "PNG", save_all=True, append_images=frames[1:], duration=100)),
        "animated": (".gif", _encode(frames[0], "GIF", save_all=True, append_images=frames[1:], duration=100)),
        "multipage": (".tif", _encode(frames[0], "TIFF", save_all=True, append_images=frames[1:])),
        "tiff16": (".tiff", _encode(deep, "TIFF")),
        "float": (".tif", _encode(Image.fromarray(np.asarray(grey, dtype=np.float32) / 255.0), "TIFF")),
        "cmyk_tiff": (".tif", _encode(rgb.convert("CMYK"), "TIFF", compression="tiff_lzw")),
        "webp": (".webp", _encode(rgb, "WEBP")),
        "bmp": (".bmp", _encode(rgb, "BMP")),
        "tiff_warns": (".tif", tiff_with_a_tag_larger_than_the_file(rgb)),
    }


def bad_files(size: tuple[int, int], seed: int = 0) -> dict[str, tuple[str, bytes, str]]:
    """name -> (suffix, bytes, the kind of problem: "undecodable" = only a full decode finds it,
    "too large" = its header declares too many pixels, "truncated" = no end marker)."""
    big = (max(size[0], 64), max(size[1], 48))  # enough scan data to cut in the middle
    rgb = Image.fromarray(_pixels(big, seed + 7))
    jpeg = _encode(rgb, "JPEG", quality=95)
    scan = jpeg.index(b"\xff\xda")  # start of scan: cut halfway through what follows
    cut_scan = jpeg[: scan + (len(jpeg) - scan) // 2]
    # a Huffman table whose code counts add up to more codes than there are: libjpeg refuses the scan
    dht = jpeg.index(b"\xff\xc4")
    bad_table = jpeg[: dht + 5] + bytes([255] * 16) + jpeg[dht + 21 :]
    png = _png_chunks(_encode(rgb, "PNG"))
    idat = next(body for kind, body in png if kind == b"IDAT")
    # a zlib stream whose deflate data is garbage from the middle on, inside valid chunks and CRCs
    broken = idat[: len(idat) // 3] + bytes((b ^ 0x5A) for b in idat[len(idat) // 3 : -4]) + idat[-4:]
    zlib_broken = _png([(k, broken if k == b"IDAT" else b) for k, b in png])
    wrong_crc = _png(png, good_crc=False)  # on the header chunk: PIL checks those CRCs as it opens
    ihdr = next(body for kind, body in png if kind == b"IHDR")
    huge_png = _png([(k, struct.pack(">II", 100_000, 100_000) + ihdr[8:] if k == b"IHDR" else b) for k, b in png])
    gif = bytearray(_encode(rgb.convert("P"), "GIF"))
    gif[6:10] = struct.pack("<HH", 65535, 65535)  # the logical screen
    at = gif.index(b"\x2c")  # the image descriptor: its size too
    gif[at + 5 : at + 9] = struct.pack("<HH", 65535, 65535)
    tiff = _encode(rgb, "TIFF")  # uncompressed strips after the header: cut into them
    return {
        "bad_huffman_table": (".jpg", bad_table, "undecodable"),
        "zlib_broken": (".png", zlib_broken, "undecodable"),
        "wrong_crc": (".png", wrong_crc, "corrupt"),
        "huge_png": (".png", huge_png, "too large"),
        "huge_gif": (".gif", bytes(gif), "too large"),
        "cut_tiff": (".tif", tiff[: len(tiff) * 2 // 3], "undecodable"),
        "cut_in_scan": (".jpg", cut_scan, "truncated"),
        "tiff_read_error": (".tif", tiff_with_a_strip_past_the_end(rgb), "undecodable"),
        "fax_bad_code": (".tif", fax_tiff_with_a_garbage_strip(rgb), "undecodable"),
    }


def write_messy_folder(
    folder: Path, size: tuple[int, int] = (40, 32), seed: int = 0, bad: bool = True
) -> tuple[dict[str, Path], dict[str, tuple[Path, str]]]:
    """Every good file (and with `bad` every damaged one) written into `folder`: (good name ->
    path, bad name -> (path, kind))."""
    folder.mkdir(parents=True, exist_ok=True)
    good: dict[str, Path] = {}
    for name, (suffix, data) in good_files(size, seed).items():
        (path := folder / f"{name}{suffix}").write_bytes(data)
        good[name] = path
    broken: dict[str, tuple[Path, str]] = {}
    for name, (suffix, data, kind) in (bad_files(size, seed) if bad else {}).items():
        (path := folder / f"{name}{suffix}").write_bytes(data)
        broken[name] = (path, kind)
    return good, broken
