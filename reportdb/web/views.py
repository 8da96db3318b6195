"""Pictures of tensors for the web API: 2-D regions pooled to a pixel grid, element-wise errors, colour scales, PNG.

A heatmap never holds a whole large tensor: the region is read band by band of rows (each band a window that reads
only the chunks holding it) and each band is pooled at once. Pooling is **max-abs**: a cell keeps the signed value
of largest magnitude among its elements (NaN wins over everything, then ±Inf), so no outlier disappears when a
million elements become one pixel. Errors (absolute, relative, ULP, mismatch mask) are non-negative, so for them
max-abs pooling is max pooling. PNGs are written here with zlib (no imaging library needed).
"""

from __future__ import annotations

import concurrent.futures
import math
import struct
import zlib
from dataclasses import dataclass
from typing import Callable, Iterator

import numpy as np

from ..numeric.metrics import REL_EPS, ulp_dtype
from ..numeric.stats import histogram_edges
from .. import pools

#: Elements read and pooled per band of rows: bounds the memory of a heatmap whatever the tensor's size (two bands at
#: a time: one pooled, the next read). Errors of a comparison take a quarter of it per band (float64, several arrays).
BAND_ELEMENTS = 1 << 21

#: The error views of a comparison heatmap, and those a histogram takes (the mask is 0/1: no histogram).
ERROR_KINDS = ("abs", "rel", "ulp", "mask")


@dataclass(frozen=True)
class Region:
    """A 2-D region of a tensor's view: rows ``y0..y1`` and columns ``x0..x1`` of the last two axes, the leading axes
    fixed at ``lead``; ``cy`` x ``cx`` source elements per cell. ``ndim`` is the tensor's (a 1-D tensor is a 1 x N
    view, a 0-d one 1 x 1)."""

    ndim: int
    lead: tuple[int, ...]
    shape2d: tuple[int, int]
    y0: int
    y1: int
    x0: int
    x1: int
    cy: int
    cx: int

    @property
    def elements(self) -> int:
        """The source elements the region covers."""
        return (self.y1 - self.y0) * (self.x1 - self.x0)

    def window(self, y0: int, y1: int) -> tuple[int | slice, ...]:
        """The tensor window (numpy basic indexing) of the region's rows ``y0..y1``."""
        cols = slice(self.x0, self.x1)
        if self.ndim == 0:
            return ()
        if self.ndim == 1:
            return (cols,)
        return (*self.lead, slice(y0, y1), cols)

    def bands(self, elements: int | None = None) -> Iterator[tuple[int, int]]:
        """Row ranges of about ``elements`` (default :data:`BAND_ELEMENTS`) elements each, whole cells high, covering
        the region in order."""
        rows = max(self.cy, ((elements or BAND_ELEMENTS) // max(1, self.x1 - self.x0)) // self.cy * self.cy)
        for y in range(self.y0, self.y1, rows):
            yield y, min(self.y1, y + rows)


def region(shape: tuple[int, ...], lead: tuple[int, ...] | None, ys: slice, xs: slice, width: int, height: int) -> Region:
    """Plan the region ``ys`` x ``xs`` (slices without step, numpy's clipping) of the view of a tensor of ``shape``
    with leading indices ``lead`` (default all 0), pooled to at most ``width`` x ``height`` cells.

    Raises ValueError, saying what was wrong, for leading indices of the wrong number or out of range, a step, or
    an empty region."""
    ndim = len(shape)
    h, w = (shape[-2], shape[-1]) if ndim >= 2 else (1, shape[0] if ndim == 1 else 1)
    n_lead = max(0, ndim - 2)
    given = tuple(lead or ())
    if len(given) > n_lead:
        raise ValueError(f"index has {len(given)} leading indices; a tensor of shape {list(shape)} has {n_lead}")
    lead = given + (0,) * (n_lead - len(given))
    for axis, (i, n) in enumerate(zip(lead, shape)):
        if not -n <= i < n:
            raise ValueError(f"leading index {i} is out of range for axis {axis} of size {n} (shape {list(shape)})")
    lead = tuple(i % n for i, n in zip(lead, shape))
    if ys.step not in (None, 1) or xs.step not in (None, 1):
        raise ValueError("y and x are ranges a:b without a step (the grid pools them)")
    y0, y1, _ = ys.indices(h)
    x0, x1, _ = xs.indices(w)
    if y1 <= y0 or x1 <= x0:
        raise ValueError(f"the region y={y0}:{y1}, x={x0}:{x1} of a {h} x {w} view is empty")
    cy, cx = -(-(y1 - y0) // height), -(-(x1 - x0) // width)
    return Region(ndim, lead, (h, w), y0, y1, x0, x1, cy, cx)


def as_float(values: np.ndarray) -> np.ndarray:
    """Values as a float array numpy reduces quickly: float32 for floats of 4 bytes or fewer (bfloat16, float8: exact),
    float64 for float64 and for integers and bools (exact up to 2**53)."""
    if values.dtype.kind in "biu" or values.dtype.itemsize > 4:
        return values.astype(np.float64, copy=False)
    return values.astype(np.float32, copy=False)


#: Elements pooled at a time within a band: its max and min passes find them in the CPU cache.
_SLAB_ELEMENTS = 1 << 19


def _reduce(values: np.ndarray, cy: int, cx: int, ufunc: np.ufunc) -> np.ndarray:
    """``ufunc`` (np.maximum or np.minimum) over blocks of ``cy`` x ``cx``, the last ones partial: rows first (one
    element-wise pass over whole rows, the fast direction), then columns on the ``cy`` times smaller result (a few
    strided passes for narrow blocks, a reduction of the last axis for wide ones)."""
    rows = values
    if cy > 1:
        full = values.shape[0] // cy * cy
        parts = []
        if full:
            parts.append(ufunc.reduce(values[:full].reshape(-1, cy, values.shape[1]), axis=1))
        if full < values.shape[0]:
            parts.append(ufunc.reduce(values[full:], axis=0, keepdims=True))
        rows = np.concatenate(parts, axis=0) if len(parts) > 1 else parts[0]
    if cx == 1:
        return rows if rows is not values else values.copy()
    full = rows.shape[1] // cx * cx
    if cx < 16:
        out = rows[:, 0:full:cx].copy()
        for k in range(1, cx):
            ufunc(out, rows[:, k:full:cx], out=out)
    else:
        out = ufunc.reduce(rows[:, :full].reshape(rows.shape[0], -1, cx), axis=2)
    if full < rows.shape[1]:
        out = np.concatenate([out, ufunc.reduce(rows[:, full:], axis=1, keepdims=True)], axis=1)
    return out


def maxabs_pool(values: np.ndarray, cy: int, cx: int, *, signed: bool = True) -> np.ndarray:
    """Pool a 2-D float32 or float64 array by blocks of ``cy`` x ``cx`` (the last ones partial), each cell the signed
    value of largest magnitude (ties: the positive one); NaN anywhere in a block makes its cell NaN. ``signed=False``
    (values known to be >= 0) takes the maximum only.

    Signed pooling is a max and a min pass over the values as they are (numpy's SIMD loops, which propagate NaN),
    then the one of larger magnitude per cell; 10x faster than one max over integer keys made of the bits, which
    costs four element-wise passes before its reduction. Works on slabs of a few rows of blocks, while they are in
    the CPU cache."""
    if cy == 1 and cx == 1:
        return values.copy()
    if not signed:
        return _reduce(values, cy, cx, np.maximum)
    step = max(cy, _SLAB_ELEMENTS // max(1, values.shape[1]) // cy * cy)
    parts = []
    for y in range(0, values.shape[0], step):
        slab = values[y : y + step]
        high, low = _reduce(slab, cy, cx, np.maximum), _reduce(slab, cy, cx, np.minimum)
        parts.append(np.where(-low > high, low, high))
    return np.concatenate(parts, axis=0) if len(parts) > 1 else parts[0]


def pool_region(
    area: Region, read: Callable[[int, int], np.ndarray], *, signed: bool = True, elements: int | None = None
) -> np.ndarray:
    """The pooled grid of ``area``: ``read(y0, y1)`` gives the region's rows ``y0..y1`` as a 2-D float array, band by
    band (of about ``elements`` elements, default :data:`BAND_ELEMENTS`). The next band is read in a helper thread while this one pools (the store's reads and checks and numpy's
    loops release the GIL, so the two overlap on two cores), so at most two bands are held at a time."""
    bands = list(area.bands(elements))
    if len(bands) == 1:
        return maxabs_pool(read(*bands[0]), area.cy, area.cx, signed=signed)
    helper = pools.pool("web-bands", 8)
    parts = []
    pending = helper.submit(read, *bands[0])
    try:
        for following in [*bands[1:], None]:
            values = pending.result()
            if following is not None:
                pending = helper.submit(read, *following)
            parts.append(maxabs_pool(values, area.cy, area.cx, signed=signed))
            del values
    finally:
        if not pending.cancel():
            concurrent.futures.wait([pending])  # a read still running when pooling failed: let it end before returning
    return np.concatenate(parts, axis=0)


# --- errors of actual against golden ---------------------------------------------------------------------------------


def _ordered(rounded: np.ndarray) -> np.ndarray:
    """Float bit patterns mapped to integers in the same order as the floats (+0 and -0 both 0): negative patterns
    become ``INT_MIN - bits``, computed branch-free as ``(bits ^ (sign & INT_MAX)) - sign``."""
    int_dtype = np.dtype(f"<i{rounded.dtype.itemsize}")
    bits = rounded.view(int_dtype)
    sign = bits >> (8 * int_dtype.itemsize - 1)  # 0, or -1 for negative patterns
    ordered = np.bitwise_and(sign, np.iinfo(int_dtype).max)
    ordered ^= bits
    ordered -= sign
    return ordered


def _ulp_distance(actual: np.ndarray, golden: np.ndarray) -> np.ndarray:
    """|ordered(actual) - ordered(golden)| (both rounded to one float dtype) exactly, then as float64. 8-byte
    patterns subtract in wrapping uint64 (the distance is below 2**64, the difference may not fit an int64)."""
    oa, og = _ordered(actual), _ordered(golden)
    if oa.dtype.itemsize < 8:
        dist = oa.astype(np.int64)
        dist -= og
        return np.abs(dist, out=dist).astype(np.float64)
    wrapped = oa.view(np.uint64) - og.view(np.uint64)
    below = oa < og
    wrapped[below] = -wrapped[below]  # two's complement: 2**64 - d
    return wrapped.astype(np.float64)


def errors(actual: np.ndarray, golden: np.ndarray, kind: str, *, rtol: float, atol: float) -> np.ndarray:
    """The element-wise error of ``actual`` against ``golden`` (same shape) as float64, ``kind`` one of
    :data:`ERROR_KINDS`: ``abs`` = |a - g|; ``rel`` = |a - g| / max(|g|, eps); ``ulp`` = representable values between
    them in the coarser float dtype; ``mask`` = 1 where |a - g| > atol + rtol * |g| (numpy's isclose), else 0.
    Non-finite positions: NaN against NaN and an infinity against the same one are 0, any other mismatch is +Inf
    (1 in the mask), as ``reportdb.compare`` counts them. Computed in place in as few passes as numpy allows, with
    the non-finite positions sorted out only when a side's sum says there are some (a 16M-element histogram reads
    its errors twice)."""
    a = actual.astype(np.float64)
    g = golden.astype(np.float64)
    dtype = ulp_dtype(actual.dtype, golden.dtype) if kind == "ulp" else None
    with np.errstate(invalid="ignore", over="ignore"):
        rounded = (actual.astype(dtype, copy=False), golden.astype(dtype, copy=False)) if dtype is not None else ()
        if rounded:
            err = _ulp_distance(*rounded)
        else:
            err = np.subtract(a, g)
            np.abs(err, out=err)
        if kind == "rel":
            floor = np.abs(g)
            err /= np.maximum(floor, REL_EPS, out=floor)
        elif kind == "mask":
            tol = np.abs(g)
            tol *= rtol
            tol += atol
            err = np.greater(err, tol).astype(np.float64)
        if math.isfinite(float(a.sum())) and math.isfinite(float(g.sum())) and all(np.isfinite(r).all() for r in rounded):
            return err  # a finite sum proves every term finite (an overflowing one only takes the long way below)
        finite = np.isfinite(a) & np.isfinite(g)
        for side in rounded:  # a value that overflows the coarser dtype has no ULP distance
            finite &= np.isfinite(side)
        same = (np.isnan(a) & np.isnan(g)) | ((a == g) & ~finite)
    bad_value = 1.0 if kind == "mask" else math.inf
    return np.where(finite, err, np.where(same, 0.0, bad_value))


def error_histogram(
    bands: Callable[[], Iterator[np.ndarray]], bins: int
) -> dict[str, object]:
    """The histogram of errors given band by band (``bands()`` called twice: the range, then the counts), over
    ``bins`` bins spanning the finite errors (the edges rule of stored histograms); non-finite errors are counted
    apart."""
    lo, hi, nonfinite = math.inf, -math.inf, 0
    for err in bands():
        finite = err[np.isfinite(err)]
        nonfinite += err.size - finite.size
        if finite.size:
            lo, hi = min(lo, float(finite.min())), max(hi, float(finite.max()))
    if hi < lo:
        return {"edges": [], "counts": [], "nonfinite": nonfinite}
    edges = np.asarray(histogram_edges(lo, hi, bins))
    counts = np.zeros(len(edges) - 1, np.int64)
    for err in bands():
        counts += np.histogram(err[np.isfinite(err)], bins=edges)[0]
    return {"edges": edges.tolist(), "counts": counts.tolist(), "nonfinite": nonfinite}


# --- colour scales and PNG ---------------------------------------------------------------------------------------------

#: Anchor colours of the scales (viridis for values of one sign and for errors; blue-white-red around 0 for signed
#: values; dark grey / red for the mismatch mask), interpolated to 256 entries.
_ANCHORS = {
    "sequential": [(68, 1, 84), (72, 40, 120), (62, 74, 137), (49, 104, 142), (38, 130, 142), (31, 158, 137),
                   (53, 183, 121), (109, 205, 89), (180, 222, 44), (253, 231, 37)],
    "diverging": [(5, 48, 97), (33, 102, 172), (67, 147, 195), (146, 197, 222), (209, 229, 240), (247, 247, 247),
                  (253, 219, 199), (244, 165, 130), (214, 96, 77), (178, 24, 43), (103, 0, 31)],
    "mask": [(48, 48, 48), (230, 30, 30)],
}

#: Colours of non-finite cells, the same in every scale.
NONFINITE = {"nan": (255, 0, 255), "inf": (255, 255, 255), "-inf": (0, 0, 0)}


def _lut(anchors: list[tuple[int, int, int]]) -> np.ndarray:
    points = np.asarray(anchors, np.float64)
    at = np.linspace(0.0, 1.0, len(points))
    t = np.linspace(0.0, 1.0, 256)
    return np.stack([np.interp(t, at, points[:, c]) for c in range(3)], axis=1).round().astype(np.uint8)


LUTS = {name: _lut(anchors) for name, anchors in _ANCHORS.items()}


@dataclass(frozen=True)
class Scale:
    """How grid values map to colours: ``name`` (a key of :data:`LUTS`) from ``low`` (entry 0) to ``high`` (255)."""

    name: str
    low: float
    high: float

    def to_json(self) -> dict[str, object]:
        return {"name": self.name, "min": self.low, "max": self.high}


def scale_for(grid: np.ndarray, error: str | None) -> Scale:
    """The scale of a grid: the mask's own; errors sequential from 0; values of both signs diverging around 0 (so
    the sign reads at a glance), others sequential over their range."""
    if error == "mask":
        return Scale("mask", 0.0, 1.0)
    finite = grid[np.isfinite(grid)]
    low, high = (float(finite.min()), float(finite.max())) if finite.size else (0.0, 0.0)
    if error is not None:
        return Scale("sequential", 0.0, high)
    if low < 0 < high:
        limit = max(-low, high)
        return Scale("diverging", -limit, limit)
    return Scale("sequential", low, high)


#: Each scale's 256 colours and then the non-finite ones (NaN, +Inf, -Inf at 256, 257, 258), one 3-byte item per
#: colour, so colouring a grid is a single gather.
_PALETTES = {
    name: np.concatenate([lut, np.array([NONFINITE[k] for k in ("nan", "inf", "-inf")], np.uint8)]).view("V3").reshape(-1)
    for name, lut in LUTS.items()
}


def colour(grid: np.ndarray, scale: Scale) -> np.ndarray:
    """The grid as an RGB image (rows x cols x 3, uint8) on ``scale``; non-finite cells in :data:`NONFINITE`."""
    span = scale.high - scale.low
    values = grid.astype(np.float64, copy=False)
    with np.errstate(invalid="ignore", over="ignore"):
        t = (values - scale.low) / span * 255.0 + 0.5 if span > 0 else np.full(grid.shape, 0.5 * 255.0 + 0.5)
        np.clip(t, 0.0, 255.0, out=t)
        idx = t.astype(np.uint16)  # NaN casts to some number here: set below with the infinities
    if not np.isfinite(values).all():
        idx[np.isnan(values)] = 256
        idx[np.isposinf(values)] = 257
        idx[np.isneginf(values)] = 258
    return _PALETTES[scale.name][idx].view(np.uint8).reshape(*grid.shape, 3)


def _chunk(kind: bytes, data: bytes) -> bytes:
    return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data) & 0xFFFFFFFF)


#: Raw PNG bytes from which the image data is deflated in two halves at once (pigz's way: one zlib stream).
_SPLIT_DEFLATE = 1 << 20


def _deflate(data: memoryview) -> bytes:
    """``data`` as one zlib stream at level 1. A large one is deflated in two halves in two threads (zlib releases the
    GIL): the first half ends with a sync flush (byte-aligned, not final), the second is the final block, and the
    stream's adler32 is that of the whole, as any inflater expects."""
    if len(data) < _SPLIT_DEFLATE:
        return zlib.compress(data, 1)
    half = len(data) // 2

    def part(piece: memoryview, last: bool) -> bytes:
        packer = zlib.compressobj(1, zlib.DEFLATED, -15)
        return packer.compress(piece) + packer.flush(zlib.Z_FINISH if last else zlib.Z_SYNC_FLUSH)

    first = pools.pool("web-bands", 8).submit(part, data[:half], False)
    second = part(data[half:], True)
    return b"\x78\x01" + first.result() + second + struct.pack(">I", zlib.adler32(data))


def png(rgb: np.ndarray) -> bytes:
    """An 8-bit RGB PNG of an image (rows x cols x 3, uint8): each row filter 0, zlib level 1 (a 1024 x 1024 heatmap:
    ~20-40 ms, against 60-280 ms at the default level 6, for a file larger by a few percent)."""
    rows, cols, _ = rgb.shape
    raw = np.empty((rows, 1 + cols * 3), np.uint8)
    raw[:, 0] = 0
    raw[:, 1:] = rgb.reshape(rows, cols * 3)
    header = struct.pack(">IIBBBBB", cols, rows, 8, 2, 0, 0, 0)
    idat = _deflate(raw.reshape(-1).data)
    return b"\x89PNG\r\n\x1a\n" + _chunk(b"IHDR", header) + _chunk(b"IDAT", idat) + _chunk(b"IEND", b"")
