"""From the bytes of one device buffer to its logical array: element types, tile order, padding.

``BufferLayout`` says how a buffer is laid out (spec §11): legacy files give the padded N-D shape
and its padding; v5 and ``.tensorbin`` give the logical shape and alignment, from which the
physical 2-D shape and the block placement follow. ``decode`` turns raw bytes into the logical
array with reshape/transpose views and one or two vectorized copies, never per-element Python.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import ml_dtypes
import numpy as np

from ..errors import FormatError
from . import blockfloat

#: Tile shapes ttnn allows (spec §11.2).
TILE_SHAPES = frozenset(
    {(32, 32), (16, 32), (32, 16), (16, 16), (8, 32), (4, 32), (2, 32), (1, 32), (8, 16), (4, 16), (2, 16), (1, 16)}
)
LEGACY_TILE = (32, 32)
_BLOCK_CHUNK = 1 << 17  # block-float datums decoded per slice

#: Host element type of each plain DataType (block floats are packed tiles, see blockfloat).
ELEMENT_DTYPES: dict[str, str] = {
    "BFLOAT16": "u2",
    "FLOAT32": "f4",
    "UINT32": "u4",
    "INT32": "i4",
    "UINT16": "u2",
    "UINT8": "u1",
}


@dataclass(frozen=True)
class BufferLayout:
    """How one device buffer holds its tensor.

    ``physical`` is the 2-D (rows, cols) array the buffer stores, tile-ordered when ``tile`` is set.
    Legacy buffers crop ``padded`` by ``crop``; the others place each logical matrix at a row stride
    of ``block_rows`` (spec §11.1 step 3), or, for LOGICAL-mode shards, place ``shard`` blocks at the
    physical ``shard_stride`` (step 4).
    """

    dtype: str
    tile: tuple[int, int] | None
    transpose: bool
    logical: tuple[int, ...]
    padded: tuple[int, ...]
    physical: tuple[int, int]
    block_rows: int = 0
    crop: tuple[tuple[int, int], ...] | None = None
    shard: tuple[int, int] | None = None
    shard_stride: tuple[int, int] | None = None

    @property
    def nbytes(self) -> int:
        """Bytes the buffer must hold."""
        rows, cols = self.physical
        if blockfloat.is_block_float(self.dtype):
            assert self.tile is not None
            return rows * cols // (self.tile[0] * self.tile[1]) * blockfloat.tile_nbytes(self.dtype, self.tile)
        return rows * cols * np.dtype(ELEMENT_DTYPES[self.dtype]).itemsize

    @property
    def element_size(self) -> int:
        """Size of one host element: a u32 word for block floats (legacy counts are in these)."""
        return 4 if blockfloat.is_block_float(self.dtype) else np.dtype(ELEMENT_DTYPES[self.dtype]).itemsize


def check_tile(tile: tuple[int, int], transpose: bool) -> None:
    """Raise FormatError unless ``tile`` is a ttnn tile shape (and can be transposed if asked)."""
    if tuple(tile) not in TILE_SHAPES:
        raise FormatError(f"tile shape {list(tile)} is not one ttnn supports")
    if transpose and tile[0] not in (16, 32):
        raise FormatError(f"tile shape {list(tile)} cannot be transposed")


def _check_dtype(dtype: str, tile: tuple[int, int] | None) -> None:
    if blockfloat.is_block_float(dtype):
        if tile is None:
            raise FormatError(f"{dtype} data must be in TILE layout")
    elif dtype not in ELEMENT_DTYPES:
        raise FormatError(f"no element type for DataType {dtype}")


def _round_up(value: int, multiple: int) -> int:
    return -(-value // multiple) * multiple if multiple > 1 else value


def legacy_layout(dtype: str, tile: tuple[int, int] | None, dims: tuple[int, ...], crop: tuple[tuple[int, int], ...]) -> BufferLayout:
    """Layout of a legacy (v0-v4) buffer: the padded tensor ``dims``, logical part ``crop`` (front, back)."""
    _check_dtype(dtype, tile)
    rows = math.prod(dims[:-1])
    cols = dims[-1]
    if tile is not None and (rows % tile[0] or cols % tile[1]):
        raise FormatError(f"TILE tensor of padded shape {list(dims)} is not a whole number of tiles")
    logical = tuple(d - f - b for d, (f, b) in zip(dims, crop))
    if any(v < 0 for v in logical):
        raise FormatError(f"padding {list(crop)} exceeds the padded shape {list(dims)}")
    return BufferLayout(dtype, tile, False, logical, tuple(dims), (rows, cols), crop=crop)


def physical_shape(logical: tuple[int, ...], alignment: tuple[int, ...]) -> tuple[int, int]:
    """The 2-D physical shape of an interleaved tensor from its logical shape and alignment (§11.1.1)."""
    width, height = 1, 1
    for i in range(1, max(len(logical), len(alignment)) + 1):
        current = width if i == 1 else height
        if i <= len(logical):
            current *= logical[-i]
        if i <= len(alignment):
            current = _round_up(current, alignment[-i])
        if i == 1:
            width = current
        else:
            height = current
    return height, width


def padded_shape(logical: tuple[int, ...], alignment: tuple[int, ...]) -> tuple[int, ...]:
    """The padded shape ttnn reports (§11.1.5); its rank may exceed the logical rank."""
    rank = max(len(logical), len(alignment), 1)
    dims = [1] * (rank - len(logical)) + list(logical)
    align = [1] * (rank - len(alignment)) + list(alignment)
    padded = list(dims)
    accumulated = 1
    for i in range(rank - 1, -1, -1):
        if i >= rank - 2:
            padded[i] = _round_up(dims[i], align[i])
        elif align[i] > 1 and accumulated % align[i]:
            padded[i] = _round_up(dims[i], -(-align[i] // accumulated))
        if i < rank - 1:
            accumulated *= max(padded[i], 1)
    return tuple(padded)


def spec_layout(
    dtype: str,
    tile: tuple[int, int] | None,
    transpose: bool,
    logical: tuple[int, ...],
    alignment: tuple[int, ...],
    logical_shard: tuple[tuple[int, int], tuple[int, int] | None] | None = None,
) -> BufferLayout:
    """Layout of a v5 / ``.tensorbin`` buffer from its TensorSpec.

    ``logical_shard`` = (shard shape, physical shard shape or None) for LOGICAL-mode sharded specs.
    """
    _check_dtype(dtype, tile)
    if tile is not None:
        check_tile(tile, transpose)
    if not alignment:
        alignment = tile if tile is not None else (1,)
    if any(a <= 0 for a in alignment):
        raise FormatError(f"alignment {list(alignment)} has a non-positive entry")
    padded = padded_shape(logical, alignment)
    if logical_shard is None:
        rows, cols = physical_shape(logical, alignment)
        layout = BufferLayout(dtype, tile, transpose, logical, padded, (rows, cols), block_rows=padded[-2] if len(padded) >= 2 else 1)
    else:
        layout = _logical_shard_layout(dtype, tile, transpose, logical, alignment, padded, *logical_shard)
    if tile is not None and (layout.physical[0] % tile[0] or layout.physical[1] % tile[1]):
        raise FormatError(f"physical shape {list(layout.physical)} is not a whole number of {list(tile)} tiles")
    return layout


def _logical_shard_layout(
    dtype: str,
    tile: tuple[int, int] | None,
    transpose: bool,
    logical: tuple[int, ...],
    alignment: tuple[int, ...],
    padded: tuple[int, ...],
    shard: tuple[int, int],
    physical_shard: tuple[int, int] | None,
) -> BufferLayout:
    """LOGICAL-mode sharding (§11.1.4): shard blocks of the logical 2-D matrix at physical shard strides."""
    align_h = alignment[-2] if len(alignment) >= 2 else 1
    align_w = alignment[-1]
    if shard[0] <= 0 or shard[1] <= 0:
        raise FormatError(f"shard shape {list(shard)} is empty")
    stride = physical_shard or (_round_up(shard[0], align_h), _round_up(shard[1], align_w))
    if stride[0] < shard[0] or stride[1] < shard[1]:
        raise FormatError(f"physical shard {list(stride)} is smaller than the shard {list(shard)}")
    rows2d = math.prod(logical[:-1]) if logical else 1
    cols2d = logical[-1] if logical else 1

    def extent(size: int, block: int, step: int, align: int) -> int:
        full, rest = divmod(size, block)
        return full * step + _round_up(rest, align)

    physical = (extent(rows2d, shard[0], stride[0], align_h), extent(cols2d, shard[1], stride[1], align_w))
    return BufferLayout(dtype, tile, transpose, logical, padded, physical, shard=shard, shard_stride=stride)


def tile_view(flat: np.ndarray, rows: int, cols: int, tile: tuple[int, int], transpose: bool) -> np.ndarray:
    """A 6-D view of tile-ordered data whose axes, read in order, are (rows, cols) of the 2-D array.

    Axes are (tile row, face row, row in face, tile col, face col, col in face); reshaping a copy
    to (rows, cols) gives the row-major array.
    """
    th, tw = tile
    fh, fw = min(th, 16), 16
    nfr, nfc = th // fh, tw // fw
    if not transpose:
        v = flat.reshape(rows // th, cols // tw, nfr, nfc, fh, fw)
        return v.transpose(0, 2, 4, 1, 3, 5)
    if nfr > 1 and nfc > 1:  # face order is transposed too
        v = flat.reshape(rows // th, cols // tw, nfc, nfr, fw, fh)
        return v.transpose(0, 3, 5, 1, 2, 4)
    v = flat.reshape(rows // th, cols // tw, nfr, nfc, fw, fh)
    return v.transpose(0, 2, 5, 1, 3, 4)


def untilize(
    flat: np.ndarray, rows: int, cols: int, tile: tuple[int, int], transpose: bool, out: np.ndarray | None = None
) -> np.ndarray:
    """The row-major (rows, cols) array of tile-ordered ``flat``, written to ``out`` or a new array."""
    if out is None:
        out = np.empty((rows, cols), dtype=flat.dtype)
    th, tw = tile
    fh = min(th, 16)
    target = out.reshape(rows // th, th // fh, fh, cols // tw, tw // 16, 16)
    np.copyto(target, tile_view(flat, rows, cols, tile, transpose))
    return out


def tilize(array2d: np.ndarray, tile: tuple[int, int], transpose: bool = False) -> np.ndarray:
    """Inverse of ``untilize``: the flat tile-ordered elements of a 2-D array (used by generators)."""
    rows, cols = array2d.shape
    th, tw = tile
    fh = min(th, 16)
    flat = np.empty(rows * cols, dtype=array2d.dtype)
    view = tile_view(flat, rows, cols, tile, transpose)
    np.copyto(view, array2d.reshape(rows // th, th // fh, fh, cols // tw, tw // 16, 16))
    return flat


def _to_logical(array2d: np.ndarray, layout: BufferLayout) -> np.ndarray:
    """A view (or, for LOGICAL shards, a gather) of the logical tensor inside the physical 2-D array."""
    if layout.crop is not None:
        nd = array2d.reshape(layout.padded)
        return nd[tuple(slice(f, d - b) for d, (f, b) in zip(layout.padded, layout.crop))]
    logical = layout.logical
    rows = logical[-2] if len(logical) >= 2 else 1
    cols = logical[-1] if logical else 1
    if layout.shard is not None:
        assert layout.shard_stride is not None
        rows2d = math.prod(logical[:-1]) if logical else 1
        r = np.arange(rows2d)
        c = np.arange(cols)
        r = r // layout.shard[0] * layout.shard_stride[0] + r % layout.shard[0]
        c = c // layout.shard[1] * layout.shard_stride[1] + c % layout.shard[1]
        return array2d[np.ix_(r, c)].reshape(logical)
    blocks = math.prod(logical[:-2])
    stride = layout.block_rows
    used = array2d[: blocks * stride].reshape(blocks, stride, layout.physical[1])
    return used[:, :rows, :cols].reshape(logical)


def _check_placement(layout: BufferLayout) -> None:
    """Raise FormatError unless the logical tensor fits where the layout puts it."""
    if layout.crop is not None or layout.shard is not None:
        return
    logical = layout.logical
    rows = logical[-2] if len(logical) >= 2 else 1
    cols = logical[-1] if logical else 1
    blocks = math.prod(logical[:-2])
    if rows > layout.block_rows or cols > layout.physical[1] or blocks * layout.block_rows > layout.physical[0]:
        raise FormatError(
            f"logical shape {list(logical)} does not fit the physical shape {list(layout.physical)}"
        )


def _block_float_2d(raw: np.ndarray, dtype: str, rows: int, cols: int, tile: tuple[int, int], transpose: bool) -> np.ndarray:
    """Decode and untilize block-float tiles a few tile rows at a time, so the decoded tiles are
    still in cache when they are moved to their rows (bfloat16 bit patterns, uint16)."""
    out = np.empty((rows, cols), dtype=np.uint16)
    th, tw = tile
    row_bytes = cols // tw * blockfloat.tile_nbytes(dtype, tile)
    step = max(1, _BLOCK_CHUNK // max(1, cols * th))
    for r0 in range(0, rows // th, step):
        r1 = min(rows // th, r0 + step)
        flat = blockfloat.decode(raw[r0 * row_bytes : r1 * row_bytes], dtype, tile)
        untilize(flat, (r1 - r0) * th, cols, tile, transpose, out=out[r0 * th : r1 * th])
    return out


def decode(raw: np.ndarray, layout: BufferLayout, byte_order: str) -> np.ndarray:
    """The logical array of one buffer, from its raw bytes (uint8, exactly ``layout.nbytes`` long).

    bfloat16 and block floats come out as ``ml_dtypes.bfloat16``, other types as their numpy type;
    the result is little-endian, C-contiguous and owns its memory.
    """
    if raw.size != layout.nbytes:
        raise FormatError(f"buffer holds {raw.size} bytes, its spec needs {layout.nbytes}")
    _check_placement(layout)
    rows, cols = layout.physical
    if blockfloat.is_block_float(layout.dtype):
        assert layout.tile is not None
        if byte_order == "big":  # packed u32 words: bring their bytes back to little-endian order
            raw = raw.reshape(-1, 4)[:, ::-1].reshape(-1)
        array2d = _block_float_2d(raw, layout.dtype, rows, cols, layout.tile, layout.transpose)
    else:
        flat = raw.view(np.dtype(ELEMENT_DTYPES[layout.dtype]).newbyteorder("<" if byte_order == "little" else ">"))
        if layout.tile is not None:
            array2d = untilize(flat, rows, cols, layout.tile, layout.transpose)
        else:
            array2d = flat.reshape(rows, cols)  # still a view of the file's bytes
    out = _to_logical(array2d, layout)
    owned = layout.tile is not None and out.size == array2d.size  # the whole untilized copy
    target = np.dtype(ELEMENT_DTYPES.get(layout.dtype, "u2")).newbyteorder("<")
    if out.dtype != target:
        out = out.astype(target, order="C")
    elif not (owned and out.flags.c_contiguous):
        out = np.array(out, order="C", copy=True)
    if layout.dtype in ("BFLOAT16", "BFLOAT8_B", "BFLOAT4_B"):
        out = out.view(ml_dtypes.bfloat16)
    return out
