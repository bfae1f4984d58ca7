"""The IDX file format of MNIST (http://yann.lecun.com/exdb/mnist/), read and written with numpy.

An IDX file is a 4-byte magic number — two zero bytes, a type code (0x08 = unsigned byte), the
number of dimensions — then one big-endian int32 per dimension, then the values, row-major and
big-endian. MNIST ships four of them (images are 3-D uint8 [N, 28, 28], labels 1-D uint8 [N]),
often gzipped; both forms are read, the gzip one recognised by its own magic bytes.
"""

from __future__ import annotations

import gzip
import zlib
from pathlib import Path

import numpy as np

from segperf.errors import SegperfError
from segperf.perf.results import write_atomic

# IDX type code -> numpy dtype (big-endian, as the format stores them)
_TYPES = {0x08: ">u1", 0x09: ">i1", 0x0B: ">i2", 0x0C: ">i4", 0x0D: ">f4", 0x0E: ">f8"}
_CODES = {np.dtype(t).newbyteorder("="): code for code, t in _TYPES.items()}
_GZIP_MAGIC = b"\x1f\x8b"


class IdxFormatError(SegperfError, ValueError):
    """A file that is not the IDX array it should be; the message names the file and what is wrong."""


def read_idx(path: str | Path, ndim: int | None = None) -> np.ndarray:
    """The array stored in an IDX file (gzipped or not), in native byte order.

    `ndim` is what the caller expects (3 for images, 1 for labels): a file with another number
    of dimensions, a wrong magic number or a size that does not match its header is refused
    with an IdxFormatError naming the file."""
    path = Path(path)
    try:
        raw = path.read_bytes()
    except OSError as error:
        raise IdxFormatError(f"{path}: unreadable ({error.strerror or error})") from None
    if not raw:
        raise IdxFormatError(f"{path}: empty file (0 bytes)")
    if raw[:2] == _GZIP_MAGIC:
        try:
            raw = gzip.decompress(raw)
        except (EOFError, OSError, zlib.error) as error:
            raise IdxFormatError(f"{path}: a gzip file cut short or corrupt ({error})") from None
    if len(raw) < 4:
        raise IdxFormatError(f"{path}: not an IDX file ({len(raw)} bytes, shorter than the 4-byte magic number)")
    magic = int.from_bytes(raw[:4], "big")
    code, dims = raw[2], raw[3]
    expected = f"0x0000080{ndim}" if ndim else "0x000008NN"
    if raw[:2] != b"\0\0" or code not in _TYPES or dims == 0:
        raise IdxFormatError(
            f"{path}: not an IDX file (magic number 0x{magic:08x}; expected {expected}: two zero bytes, "
            "a type code such as 0x08 for unsigned bytes, the number of dimensions)"
        )
    if ndim is not None and dims != ndim:
        raise IdxFormatError(f"{path}: an IDX file of {dims} dimensions (magic 0x{magic:08x}); expected {ndim}")
    header = 4 + 4 * dims
    shape = tuple(int.from_bytes(raw[4 + 4 * i : 8 + 4 * i], "big") for i in range(dims))
    dtype = np.dtype(_TYPES[code])
    size = int(np.prod(shape)) * dtype.itemsize
    if len(raw) != header + size:
        raise IdxFormatError(
            f"{path}: header says {'x'.join(map(str, shape))} values of {dtype.itemsize} byte(s) ({size:,} bytes), "
            f"but the file holds {len(raw) - header:,} (truncated or not an IDX file)"
        )
    return np.frombuffer(raw, dtype=dtype, offset=header).reshape(shape).astype(dtype.newbyteorder("="))


def write_idx(path: str | Path, array: np.ndarray, compress: bool | None = None) -> Path:
    """Write `array` as an IDX file, atomically (temp file + rename); gzipped when `compress` is
    true, or by default when the name ends in .gz."""
    path = Path(path)
    array = np.asarray(array)
    code = _CODES.get(array.dtype)
    if code is None:
        raise ValueError(f"IDX cannot store {array.dtype}; use one of uint8, int8, int16, int32, float32, float64")
    header = bytes([0, 0, code, array.ndim]) + b"".join(int(d).to_bytes(4, "big") for d in array.shape)
    data = header + array.astype(np.dtype(_TYPES[code]), copy=False).tobytes()
    if compress if compress is not None else path.suffix == ".gz":
        data = gzip.compress(data, compresslevel=6, mtime=0)  # mtime=0: the same bytes every time
    return write_atomic(path, lambda f: f.write(data))
