"""One streamed pass over a tensor (or one device's part of it) against its golden: per-tile and per-shard errors,
and for a device the metric vector (its per-tile SQNR among it, so a device's verdict sees one wrong tile) and the
least-squares fit ``actual = scale * golden + offset``.

The tensor is read window by window (at most :data:`WINDOW_ELEMENTS` elements a side, whole tile rows, in two threads),
never whole: memory stays bounded whatever its size. Per window, ``|actual - golden|`` is reduced to its tiles and
shards with ``reduceat`` (uneven last tiles and shards included); mismatches (``|a - g| > atol + rtol * |g|``, a
non-finite value that differs counting as one, with an infinite error) are counted only in windows whose error passes
``atol``.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Callable

import ml_dtypes
import numpy as np

from ..numeric.blocks import BLOCK_ELEMENTS, flat_blocks, parallel_map, scratch
from ..numeric.metrics import Comparison, PairAccumulator, check_params
from ..numeric.tiles import tile_geometry
from ..dtypes import dtype_name
from ..errors import ComparisonError
from .grids import ShardLayout, TileGrid, matrix_dims

#: At most this many tiles are mapped (two maps of 4 bytes a tile: 128 MiB): a tensor of many tiny matrices has
#: nearly a tile per element.
MAX_TILES = 1 << 24

#: Elements per window a side (two threads, two sides: ~16 MiB of float32 work buffers in all).
WINDOW_ELEMENTS = 1 << 20

#: A window: ``(start, stop)`` per axis of the part, and its place in matrix terms ``(b0, nb, h0, h1, c0, c1)``.
Box = tuple[tuple[tuple[int, int], ...], tuple[int, int, int, int, int, int]]
Reader = Callable[[tuple[slice, ...] | None], np.ndarray]


def windows(shape: tuple[int, ...], tile: tuple[int, int], budget: int | None = None) -> list[Box]:
    """Windows covering a tensor of ``shape`` in C order, each whole tile rows of one or more consecutive matrices (a
    run along the last leading axis), cut into whole tile columns only when one tile row exceeds ``budget``."""
    budget = WINDOW_ELEMENTS if budget is None else budget
    lead, h, w = matrix_dims(shape)
    th, tw = tile
    last = lead[-1] if lead else 1
    outer = math.prod(lead[:-1]) if lead else 1
    found: list[Box] = []
    if h * w <= budget:
        per = min(last, max(1, budget // max(1, h * w)))
        for o in range(outer):
            for s in range(0, last, per):
                found.append(_box(shape, lead, o * last + s, min(per, last - s), 0, h, 0, w))
        return found
    rows = max(th, budget // max(1, w) // th * th)
    cols = w
    if min(th, h) * w > budget:  # one tile row is too large: whole tile columns of it
        rows, cols = th, max(tw, budget // min(th, h) // tw * tw)
    for b in range(outer * last):
        for r0 in range(0, h, rows):
            for c0 in range(0, w, cols):
                found.append(_box(shape, lead, b, 1, r0, min(h, r0 + rows), c0, min(w, c0 + cols)))
    return found


def _box(shape: tuple[int, ...], lead: tuple[int, ...], b0: int, nb: int, h0: int, h1: int, c0: int, c1: int) -> Box:
    place = (b0, nb, h0, h1, c0, c1)
    if len(shape) < 2:
        return (((c0, c1),) if shape else ()), place
    index = [int(i) for i in np.unravel_index(b0, lead)] if lead else []
    axes = [(i, i + 1) for i in index[:-1]] + ([(index[-1], index[-1] + nb)] if lead else [])
    return tuple(axes + [(h0, h1), (c0, c1)]), place


@dataclass
class PartErrors:
    """What one pass found: the tile grids (max abs error, mismatches), the shards' max abs error, mismatches and
    logical elements, the overall max and mismatches, and, when asked, the metric vector and the fit."""

    tile_max: np.ndarray
    tile_mismatches: np.ndarray
    shard_max: np.ndarray | None = None
    shard_mismatches: np.ndarray | None = None
    shard_elements: np.ndarray | None = None
    max_abs_error: float = 0.0
    mismatches: int = 0
    comparison: Comparison | None = None
    fit: tuple[float | None, float | None] = (None, None)


@dataclass
class _State:
    """One thread's running shard sums, fit and accumulator (the tile grids are shared: windows own disjoint tiles)."""

    shard_max: np.ndarray | None
    shard_mm: np.ndarray | None
    shard_elems: np.ndarray | None
    acc: PairAccumulator | None
    max_abs: float = 0.0
    mismatches: int = 0


def _work_dtype(a: np.dtype, g: np.dtype) -> np.dtype:
    """float32 when both sides fit it exactly (bfloat16, float16, float32, float8, small ints), else float64."""
    small = {np.dtype(np.float32), np.dtype(np.float16), np.dtype(ml_dtypes.bfloat16)}
    def fits(d: np.dtype) -> bool:
        return d in small or d.kind in "iub" and d.itemsize <= 2 or "float8" in d.name or "float4" in d.name
    return np.dtype(np.float32) if fits(a) and fits(g) else np.dtype(np.float64)


def scan(
    read_a: Reader, read_g: Reader, shape: tuple[int, ...], dtypes: tuple[np.dtype, np.dtype], tile: tuple[int, int],
    shards: ShardLayout | None, *, rtol: float, atol: float, pcc: float | None,
) -> PartErrors:
    """Stream ``read_a`` against ``read_g`` (both of ``shape``) window by window; ``pcc`` set: also the metric vector
    (with that PCC threshold) and the fit, for a device's summary."""
    check_params(rtol, atol, 0.99 if pcc is None else pcc, 0.02)
    grid = TileGrid(shape, tile)
    lead, h, w = matrix_dims(shape)
    gshape = grid.grid_shape
    if math.prod(gshape) > MAX_TILES:
        raise ComparisonError(f"a tensor of shape {list(shape)} has {math.prod(gshape)} tiles of {list(tile)}; at most "
                              f"{MAX_TILES} are mapped: locate one device's shard, or a part of it stored alone")
    tile_max = np.zeros(gshape, dtype=np.float32)
    tile_mm = np.zeros(gshape, dtype=np.int32)
    tm_flat, tmm_flat = tile_max.reshape(-1, gshape[-1]), tile_mm.reshape(-1, gshape[-1])
    work = _work_dtype(*dtypes)
    block = max(1, min(math.prod(shape), BLOCK_ELEMENTS))
    boxes = windows(shape, tile) if math.prod(shape) else []
    geometry = tile_geometry(shape, tile) if pcc is not None else None  # the device's verdict judges its tiles too

    def state() -> _State:
        n = shards.shards if shards is not None else 0
        acc = PairAccumulator(dtypes[0], dtypes[1], rtol, atol, block, geometry) if pcc is not None else None
        if shards is None:
            return _State(None, None, None, acc)
        return _State(np.zeros(n), np.zeros(n, np.int64), np.zeros(n, np.int64), acc)

    def run(part: list[Box]) -> _State:
        st = state()
        for axes, place in part:
            window = tuple(slice(a, b) for a, b in axes) or None
            a_raw, g_raw = read_a(window), read_g(window)
            b0, nb, h0, h1, c0, c1 = place
            shape3 = (nb * (h1 - h0), c1 - c0)
            with np.errstate(invalid="ignore", over="ignore"):
                _window(st, a_raw.reshape(shape3), g_raw.reshape(shape3), place, work, tile, grid, tm_flat, tmm_flat,
                        shards, rtol, atol)
                if st.acc is not None:
                    _accumulate(st.acc, a_raw, g_raw, place, (h, w), block)
        return st

    halves = [boxes[: len(boxes) // 2], boxes[len(boxes) // 2 :]] if len(boxes) >= 2 else [boxes]  # may be empty
    total, *rest = parallel_map(run, halves)
    for other in rest:
        total.max_abs = max(total.max_abs, other.max_abs)
        total.mismatches += other.mismatches
        if total.acc is not None and other.acc is not None:
            total.acc.merge(other.acc)
        if total.shard_max is not None and other.shard_max is not None:
            np.maximum(total.shard_max, other.shard_max, out=total.shard_max)
            total.shard_mm += other.shard_mm  # type: ignore[operator]
            total.shard_elems += other.shard_elems  # type: ignore[operator]
    out = PartErrors(tile_max, tile_mm, total.shard_max, total.shard_mm, total.shard_elems, total.max_abs,
                     total.mismatches)
    if total.acc is not None:
        assert pcc is not None
        with np.errstate(over="ignore", invalid="ignore"):
            metrics = total.acc.summary(math.prod(shape), pcc, 0.02)
        out.comparison = Comparison(
            shape_a=shape, shape_b=shape, dtype_a=dtype_name(dtypes[0]), dtype_b=dtype_name(dtypes[1]), rtol=float(rtol),
            atol=float(atol), pcc_threshold=float(pcc), fit_tol=0.02, **metrics,
        )
        out.fit = _line(total.acc)
    return out


def _accumulate(
    acc: PairAccumulator, a_raw: np.ndarray, g_raw: np.ndarray, place: tuple[int, int, int, int, int, int],
    hw: tuple[int, int], block: int,
) -> None:
    """Fold one window into the device's metric vector, each block at its flat position in the part so the tile
    energies (``numeric/tiles.py``) land in the right tiles: whole rows are one contiguous run from the window's
    first element; a window of whole tile columns (a tile row too long for one window) is one run per row."""
    b0, _, h0, h1, c0, c1 = place
    h, w = hw
    if c1 - c0 == w:
        runs = [(a_raw.reshape(-1), g_raw.reshape(-1), (b0 * h + h0) * w)]
    else:
        a2, g2 = a_raw.reshape(h1 - h0, c1 - c0), g_raw.reshape(h1 - h0, c1 - c0)
        runs = [(a2[r], g2[r], (b0 * h + h0 + r) * w + c0) for r in range(h1 - h0)]
    for a_run, g_run, first in runs:
        for k, (ba, bg) in enumerate(zip(flat_blocks(a_run, block), flat_blocks(g_run, block))):
            acc.add(ba, bg, first + k * block)


def _line(acc: PairAccumulator) -> tuple[float | None, float | None]:
    """``(scale, offset)`` of the least-squares line ``actual = scale * golden + offset`` over the jointly finite
    positions, from the comparison's own moments (golden: its ``b`` side); None when the golden is constant there (or
    nothing finite was seen)."""
    moments = acc.joint
    sxx, sxy = moments.b.m2, moments.cab
    if moments.n < 2 or not sxx > 0 or not math.isfinite(sxx) or not math.isfinite(sxy):
        return None, None
    scale = sxy / sxx
    return scale, moments.a.mean - scale * moments.b.mean


def _as_work(x: np.ndarray, work: np.dtype, name: str) -> np.ndarray:
    """``x`` (2-D) in the work dtype, in a per-thread scratch buffer unless it already is (bfloat16 widened by its
    bits: the top half of a float32's, exactly, at half the cost of ml_dtypes' cast)."""
    if x.dtype == work:
        return x
    buf = scratch(name, x.size, work)[: x.size].reshape(x.shape)
    if work == np.float32 and x.dtype.kind == "V" and x.dtype.name == "bfloat16":
        np.left_shift(x.view(np.uint16), 16, out=buf.view(np.uint32), dtype=np.uint32)
    else:
        np.copyto(buf, x, casting="unsafe")
    return buf


def _per_tile(
    ufunc: np.ufunc, x: np.ndarray, tile: tuple[int, int], row_starts: np.ndarray, col_starts: np.ndarray,
    even: bool, dtype: type | None = None,
) -> np.ndarray:
    """``ufunc`` (maximum or add) reduced over each tile of the window ``x``. Where every tile is whole (``even``) the
    rows of a tile row are reduced first, element-wise along whole rows (vectorised, one pass), then the tile columns
    of the 32x smaller result; else by ``reduceat`` at the tile starts, which steps tile by tile."""
    th, tw = tile
    if even:
        rows, cols = x.shape
        part = ufunc.reduce(x.reshape(rows // th, th, cols), axis=1, dtype=dtype)
        return ufunc.reduce(part.reshape(rows // th, cols // tw, tw), axis=2, dtype=None if dtype is None else np.int32)
    inner = ufunc.reduceat(x, col_starts, axis=1, dtype=dtype)
    return ufunc.reduceat(inner, row_starts, axis=0)


def _window(
    st: _State, a_raw: np.ndarray, g_raw: np.ndarray, place: tuple[int, int, int, int, int, int], work: np.dtype,
    tile: tuple[int, int], grid: TileGrid, tm_flat: np.ndarray, tmm_flat: np.ndarray, shards: ShardLayout | None,
    rtol: float, atol: float,
) -> None:
    """Fold one window (2-D: its matrices' rows stacked) into the tile grids and the thread's state."""
    b0, nb, h0, h1, c0, c1 = place
    th, tw = tile
    g = _as_work(g_raw, work, "locate_g")
    err = scratch("locate_err", g.size, work)[: g.size].reshape(g.shape)
    np.subtract(a_raw, g, out=err, dtype=work)  # the actual side cast a buffer at a time inside the loop: no pass
    np.abs(err, out=err)
    # tiles: rows of each matrix in the window in groups of th, columns in groups of tw (the last ones partial)
    hh = h1 - h0
    row_starts = (np.arange(nb)[:, None] * hh + np.arange(0, hh, th)[None, :]).reshape(-1)
    col_starts = np.arange(0, c1 - c0, tw)
    even = hh % th == 0 and (c1 - c0) % tw == 0
    r0 = b0 * grid.grid_shape[-2] + h0 // th
    rows = slice(r0, r0 + row_starts.size)
    cols = slice(c0 // tw, c0 // tw + col_starts.size)
    block = _per_tile(np.maximum, err, tile, row_starts, col_starts, even)
    top = float(block.max()) if block.size else 0.0
    bad: np.ndarray | None = None
    if not math.isfinite(top):  # NaN/Inf somewhere: equal specials are no error, differing ones an infinite one
        same = (a_raw == g) | (np.isnan(a_raw) & np.isnan(g))
        bad = ~same & ~np.isfinite(err)
        err[same & ~np.isfinite(err)] = 0
        err[bad] = np.inf
        block = _per_tile(np.maximum, err, tile, row_starts, col_starts, even)
        top = float(block.max())
    tm_flat[rows, cols] = block
    st.max_abs = max(st.max_abs, top)
    mask, where = _mismatches(err, g, bad, rtol, atol, work) if top > atol else (None, None)
    if mask is not None:
        st.mismatches += int(np.count_nonzero(mask))
        counts = mask.view(np.uint8) if th < 256 else mask  # a tile row's th counts fit a byte
        tmm_flat[rows, cols] = _per_tile(np.add, counts, tile, row_starts, col_starts, even,
                                         np.uint8 if th < 256 and even else np.int32)
    elif where is not None:
        st.mismatches += int(where.size)
        r, c = np.divmod(where, c1 - c0)
        tile_rows = (r // hh) * (-(-hh // th)) + (r % hh) // th
        np.add.at(tmm_flat[rows, cols], (tile_rows, c // tw), 1)
    if shards is not None:
        _shard_window(st, shards, err, mask, where, place)


def _mismatches(
    err: np.ndarray, g: np.ndarray, bad: np.ndarray | None, rtol: float, atol: float, work: np.dtype
) -> tuple[np.ndarray | None, np.ndarray | None]:
    """Where ``err > atol + rtol * |g|`` (or a non-finite value differs): a mask, or when they are few the flat
    positions. Only elements past ``atol`` can mismatch, and rounding noise rarely passes it: when those are few the
    full test runs on them alone."""
    over = np.greater(err, atol, out=scratch("locate_over", err.size, np.bool_)[: err.size].reshape(err.shape))
    count = int(np.count_nonzero(over))
    if count * 8 > err.size:  # dense: the whole window at once
        tol = scratch("locate_tol", err.size, work)[: err.size].reshape(err.shape)
        np.abs(g, out=tol)
        tol *= rtol
        tol += atol
        mask = np.greater(err, tol, out=over)
        if bad is not None:
            mask |= bad
        return mask, None
    where = np.flatnonzero(over) if count else np.zeros(0, dtype=np.intp)
    keep = err.reshape(-1)[where] > atol + rtol * np.abs(g.reshape(-1)[where])
    if bad is not None:
        keep |= bad.reshape(-1)[where]
    return None, where[keep]


def _shard_window(
    st: _State, shards: ShardLayout, err: np.ndarray, mask: np.ndarray | None, where: np.ndarray | None,
    place: tuple[int, int, int, int, int, int],
) -> None:
    """Fold one window's errors into its shards: columns grouped by column shard, rows by row key; mismatches from
    their mask or their positions."""
    assert st.shard_max is not None and st.shard_mm is not None and st.shard_elems is not None
    b0, nb, h0, h1, c0, c1 = place
    sw = shards.shard_width
    col_shard = np.arange(c0, c1) // sw
    cstarts = np.flatnonzero(np.diff(col_shard, prepend=-1))
    keys = shards.row_keys(b0, nb, h0, h1)
    rstarts = np.flatnonzero(np.diff(keys, prepend=-1))
    ids = keys[rstarts][:, None] * shards.col_shards + col_shard[cstarts][None, :]
    if ids.size and (ids.min() < 0 or ids.max() >= shards.shards):
        raise AssertionError(f"shard ids {int(ids.min())}..{int(ids.max())} outside 0..{shards.shards}")
    block = np.maximum.reduceat(np.maximum.reduceat(err, cstarts, axis=1), rstarts, axis=0)
    np.maximum.at(st.shard_max, ids, block)
    nrows = np.diff(np.append(rstarts, keys.size))
    ncols = np.diff(np.append(cstarts, col_shard.size))
    np.add.at(st.shard_elems, ids, nrows[:, None] * ncols[None, :])
    if mask is not None:
        counts = np.add.reduceat(np.add.reduceat(mask, cstarts, axis=1, dtype=np.int64), rstarts, axis=0)
        np.add.at(st.shard_mm, ids, counts)
    elif where is not None and where.size:
        r, c = np.divmod(where, c1 - c0)
        np.add.at(st.shard_mm, keys[r] * shards.col_shards + col_shard[c], 1)
